#!/usr/bin/env bash
# The memcgctl command line: exit statuses, `FILE:LINE:COL:` messages for malformed scenarios,
# byte-identical output across runs, a plot that is well-formed XML, --help and --version.
#
#   cli_test.sh MEMCGCTL SOURCE_DIR SCRATCH_DIR
set -uo pipefail
ctl=$1 src=$2 scratch=$3
mkdir -p "$scratch"
failures=0
fail() { echo "FAIL: $*" >&2; failures=$((failures + 1)); }

"$ctl" --version | grep -q '^memcgctl ' || fail "--version"
"$ctl" --help | grep -q 'run' || fail "--help lists run"
"$ctl" >/dev/null 2>&1; [ $? -eq 2 ] || fail "no subcommand: exit 2"

for f in "$src"/tests/memcgctl/malformed/*.yaml; do
  line=$(sed -n '1s/^# error: \([0-9]*\): .*/\1/p' "$f")
  cmds="validate run"
  # Knob files are checked against the library when a run starts; rotations that exhaust the
  # work budget are counted as the run goes.
  grep -q 'no such file in this library\|the run stopped' "$f" && cmds=run
  # validate and run agree: both refuse the file, at the same line, before anything runs.
  for cmd in $cmds; do
    timeout 60 "$ctl" $cmd "$f" >"$scratch/out" 2>"$scratch/err"
    rc=$?
    [ $rc -eq 2 ] || fail "$cmd $(basename "$f"): exit $rc, expected 2"
    grep -q "^$f:$line:[0-9]*: " "$scratch/err" || fail "$cmd $(basename "$f"): no '$f:$line:COL:' in: $(cat "$scratch/err")"
    [ -s "$scratch/out" ] && fail "$cmd $(basename "$f"): malformed scenario printed a report"
  done
done

# Input without end: read no further than the size limit, then refused (line 1: no newline).
for cmd in validate run; do
  timeout 60 "$ctl" $cmd /dev/zero >"$scratch/out" 2>"$scratch/err"
  rc=$?
  [ $rc -eq 2 ] || fail "$cmd /dev/zero: exit $rc, expected 2"
  grep -q "^/dev/zero:1:[0-9]*: the scenario goes on past" "$scratch/err" || fail "$cmd /dev/zero: $(cat "$scratch/err")"
done

for f in "$src"/examples/*.yaml; do
  "$ctl" validate "$f" || fail "validate $(basename "$f")"
done

for f in "$src"/examples/*.yaml; do
  name=$(basename "$f" .yaml)
  "$ctl" run "$f" --plot "$scratch/$name-1.svg" >"$scratch/$name-1.txt"
  rc=$?
  [ $rc -eq 0 ] || fail "run $name: exit $rc"
  "$ctl" run "$f" --plot "$scratch/$name-2.svg" >"$scratch/$name-2.txt"
  cmp -s "$scratch/$name-1.txt" "$scratch/$name-2.txt" || fail "$name: text differs between runs"
  cmp -s "$scratch/$name-1.svg" "$scratch/$name-2.svg" || fail "$name: plot differs between runs"
  "$ctl" run "$f" --json >"$scratch/$name-1.json"
  "$ctl" run "$f" --json >"$scratch/$name-2.json"
  cmp -s "$scratch/$name-1.json" "$scratch/$name-2.json" || fail "$name: JSON differs between runs"
  if command -v xmllint >/dev/null; then
    xmllint --noout "$scratch/$name-1.svg" || fail "$name: plot is not well-formed XML"
  fi
  if command -v python3 >/dev/null; then
    python3 -m json.tool "$scratch/$name-1.json" >/dev/null || fail "$name: --json is not JSON"
  fi
done

# A failing check: exit 1, and the last line counts it.
cat >"$scratch/failing.yaml" <<'YAML'
groups:
  A: {}
steps:
  - expect: { group: A, file: memory.current, eq: 1M }
YAML
"$ctl" run "$scratch/failing.yaml" >"$scratch/out"
rc=$?
[ $rc -eq 1 ] || fail "failing check: exit $rc, expected 1"
[ "$(tail -n1 "$scratch/out")" = "0 passed, 1 failed" ] || fail "failing check: $(cat "$scratch/out")"

# Handles that cannot be opened (watches beyond the descriptor limit: each holds an eventfd)
# are failed steps, and a check on one says so: exit 1, never a crash. Not under UBSan: its
# vptr check probes memory through a pipe, which fails once the descriptors are used up.
if ! grep -qa __ubsan_handle "$ctl"; then
{
  printf 'groups:\n  A: {}\nsteps:\n'
  for i in $(seq 1 40); do printf '  - watch: { name: W%s, group: A }\n' "$i"; done
  printf '  - expect: { watch: W40, eq: 0 }\n'
} >"$scratch/many-watches.yaml"
(ulimit -n 24 && exec "$ctl" run "$scratch/many-watches.yaml") >"$scratch/out" 2>"$scratch/err"
rc=$?
[ $rc -eq 1 ] || fail "watches beyond the fd limit: exit $rc, expected 1 ($(cat "$scratch/err"))"
grep -q 'FAIL watch W40 on A: EMFILE' "$scratch/out" || fail "watch beyond the fd limit: $(tail -n3 "$scratch/out")"
grep -q 'FAIL expect watch W40 eq 0: the handle is not open' "$scratch/out" || fail "check on an unopened watch: $(tail -n3 "$scratch/out")"
fi

[ $failures -eq 0 ] || { echo "$failures failure(s)" >&2; exit 1; }
echo "cli: all passed"
