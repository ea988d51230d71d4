#!/usr/bin/env bash
# A long randomized torture run (tests/torture_body.hpp), for use before a release or after a
# change to a locking or lifetime rule; CI runs the same tests for a few seconds only.
#
#   scripts/torture.sh DURATION_SECONDS [PRESET...]      (presets: default asan tsan; default:
#                                                         default)
#
# For each preset: configures it if needed, builds its torture tests (torture_test everywhere,
# hook_torture_test in the default preset, where the global hook exists), then runs them for
# DURATION_SECONDS each, one seed after another, every run MEMCG_TORTURE_SECONDS long (default
# 30, less at the end). Seeds start at MEMCG_TORTURE_SEED (default: the current time) and go up
# by one. A failing run keeps its log in build/<preset>/torture-logs/ and is reported with its
# seed, which reproduces it:  MEMCG_TORTURE_SEED=<seed> build/<preset>/tests/torture_test
# The script stops at the first failure unless KEEP_GOING=1. MEMCG_TORTURE_THREADS and
# MEMCG_TORTURE_SKIP are passed through (see tests/torture_body.hpp). Exit status: 0 when every
# run passed, 1 otherwise, 2 for bad usage.
set -euo pipefail

usage() {
  echo "usage: $0 DURATION_SECONDS [default|asan|tsan ...]" >&2
  exit 2
}
[[ $# -ge 1 && $1 =~ ^[0-9]+$ && $1 -gt 0 ]] || usage
duration=$1
shift
presets=("$@")
[[ ${#presets[@]} -gt 0 ]] || presets=(default)
for p in "${presets[@]}"; do
  case $p in default | asan | tsan) ;; *) usage ;; esac
done

root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
per_run=${MEMCG_TORTURE_SECONDS:-30}
seed=${MEMCG_TORTURE_SEED:-$(date +%s)}
jobs=${JOBS:-2}
failed=()

# The sanitizer options of the test presets (CMakePresets.json).
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
export TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=1:second_deadlock_stack=1}

for preset in "${presets[@]}"; do
  build=build/$preset
  [[ -f $build/CMakeCache.txt ]] || cmake --preset "$preset" >/dev/null
  targets=(torture_test)
  [[ $preset == default ]] && targets+=(hook_torture_test)
  cmake --build "$build" -j "$jobs" --target memcg "${targets[@]}"
  logs=$build/torture-logs
  mkdir -p "$logs"
  for target in "${targets[@]}"; do
    end=$(($(date +%s) + duration))
    runs=0
    while :; do
      left=$((end - $(date +%s)))
      ((left > 0)) || break
      secs=$((left < per_run ? left : per_run))
      log=$logs/$target-seed-$seed.log
      echo "== $preset $target seed=$seed ${secs}s"
      if MEMCG_TORTURE_SEED=$seed MEMCG_TORTURE_SECONDS=$secs "$build/tests/$target" >"$log" 2>&1; then
        rm -f "$log"
      else
        echo "!! $preset $target FAILED with seed=$seed; log: $log" >&2
        grep -E "HANG|Failure|ERROR|runtime error|WARNING: ThreadSanitizer|terminate" "$log" | head -5 >&2 || true
        failed+=("$preset/$target seed=$seed")
        [[ ${KEEP_GOING:-0} == 1 ]] || break 3
      fi
      runs=$((runs + 1))
      seed=$((seed + 1))
    done
    echo "== $preset $target: $runs runs"
  done
done

if [[ ${#failed[@]} -gt 0 ]]; then
  printf 'torture: failed: %s\n' "${failed[@]}" >&2
  exit 1
fi
echo "torture: every run passed"
