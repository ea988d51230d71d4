#!/usr/bin/env bash
# `memcgctl top --once` against the kv_cache example serving its controller (--serve 0: a free
# port, printed on its first line). Checks that every tenant's row is there with values, and
# that /metrics and a file are served too.
# Usage: top_example_test.sh <memcgctl> <example_kv_cache>
set -euo pipefail
memcgctl=$1
example=$2
work=$(mktemp -d)
pid=
cleanup() {
  if [[ -n "$pid" ]]; then kill "$pid" 2>/dev/null || true; wait "$pid" 2>/dev/null || true; fi
  rm -rf "$work"
}
trap cleanup EXIT

: >"$work/out"  # exists before the background shell opens it
"$example" --serve 0 --seconds 60 >>"$work/out" 2>&1 &
pid=$!
url=
for _ in $(seq 1 100); do
  url=$(sed -n 's/^serving on \(http:[^ ]*\)$/\1/p' "$work/out")
  [[ -n "$url" ]] && break
  sleep 0.1
done
[[ -n "$url" ]] || { echo "the example did not start serving:"; cat "$work/out"; exit 1; }
sleep 0.5  # let the workload fill the caches

"$memcgctl" top --once --url "$url" >"$work/top"
cat "$work/top"
for path in / tenants tenants/alpha tenants/beta tenants/gamma; do
  line=$(awk -v p="$path" '$1 == p' "$work/top")
  [[ -n "$line" ]] || { echo "no row for $path"; exit 1; }
  # 14 columns (the live page's); CURRENT and PEAK are sizes such as 1.5M or 512B.
  read -r -a f <<<"$line"
  [[ ${#f[@]} -eq 14 ]] || { echo "row for $path has ${#f[@]} columns"; exit 1; }
  [[ ${f[1]} =~ ^[0-9.]+[BKMGTPE]$ && ${f[3]} =~ ^[0-9.]+[BKMGTPE]$ ]] ||
    { echo "bad sizes in: $line"; exit 1; }
done
# alpha has memory.max 3 MiB: its %MAX is a number, and the tenants' limit made max events.
alpha=$(awk '$1 == "tenants/alpha"' "$work/top")
read -r -a f <<<"$alpha"
[[ ${f[2]} =~ ^[0-9]+\.[0-9]$ ]] || { echo "no %MAX for alpha: $alpha"; exit 1; }
tenants=$(awk '$1 == "tenants"' "$work/top")
read -r -a f <<<"$tenants"
[[ ${f[9]} -gt 0 ]] || { echo "no max events on tenants: $tenants"; exit 1; }

# The same process answers the other endpoints.
# (Into files first: grep -q closing the pipe early would fail curl under pipefail.)
if command -v curl >/dev/null 2>&1; then
  curl -sf "$url/metrics" >"$work/metrics"
  grep -q '^memcg_memory_current_bytes{group="tenants/alpha"} ' "$work/metrics" ||
    { echo "no alpha in /metrics"; exit 1; }
  curl -sf "$url/v1/groups/tenants/alpha/memory.max" >"$work/max"
  grep -qx 3145728 "$work/max" || { echo "alpha's memory.max: $(cat "$work/max")"; exit 1; }
fi
# Interrupted, the example stops serving, checks what it demonstrates and exits 0.
kill -INT "$pid"
status=0
wait "$pid" || status=$?
pid=
[[ $status -eq 0 ]] || { echo "the example exited $status:"; cat "$work/out"; exit 1; }
echo "top_example: ok"
