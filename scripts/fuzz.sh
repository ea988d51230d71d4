#!/usr/bin/env bash
# Builds the libFuzzer targets with clang++-19 in build/fuzz and runs each for a bounded time.
#
#   scripts/fuzz.sh [seconds-per-target]     (default 20)
#
# Target fuzz/X_fuzz.cpp starts from the committed seed corpus fuzz/corpus/X/; inputs it finds
# are kept in build/fuzz/corpus/X/ (not committed), so later runs resume from them. A finding
# leaves a crash-*/leak-*/timeout-* file in build/fuzz/artifacts/ and makes the script fail.
set -euo pipefail

seconds=${1:-20}
root=$(cd "$(dirname "$0")/.." && pwd)
build=$root/build/fuzz
cxx=${CXX_FUZZ:-clang++-19}
jobs=${JOBS:-2}

cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
  -DCMAKE_CXX_COMPILER="$cxx" -DMEMCG_BUILD_FUZZ=ON -DMEMCG_BUILD_TESTS=OFF \
  -DMEMCG_BUILD_BENCH=OFF -DMEMCG_BUILD_TOOLS=OFF -DMEMCG_BUILD_EXAMPLES=OFF >/dev/null

mkdir -p "$build/artifacts"
status=0
for src in "$root"/fuzz/*_fuzz.cpp; do
  target=$(basename "$src" .cpp)
  name=${target%_fuzz}
  cmake --build "$build" -j "$jobs" --target "$target"
  mkdir -p "$build/corpus/$name"
  seeds=()
  [ -d "$root/fuzz/corpus/$name" ] && seeds=("$root/fuzz/corpus/$name")
  echo "== $target: ${seconds}s"
  # symbolizer for readable reports, when llvm-19 is installed
  if [ -x /usr/lib/llvm-19/bin/llvm-symbolizer ]; then
    export ASAN_SYMBOLIZER_PATH=/usr/lib/llvm-19/bin/llvm-symbolizer
  fi
  if ! UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 \
    "$build/fuzz/$target" "$build/corpus/$name" "${seeds[@]}" \
      -max_total_time="$seconds" -timeout=10 -rss_limit_mb=2048 \
      -artifact_prefix="$build/artifacts/$target-" -print_final_stats=1; then
    echo "!! $target found a problem; see $build/artifacts/" >&2
    status=1
  fi
done
exit $status
