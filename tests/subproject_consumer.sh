#!/usr/bin/env bash
# Builds and runs tests/consumer/subproject twice, with memcg pulled in by add_subdirectory and
# by FetchContent (FETCHCONTENT_SOURCE_DIR_MEMCG points at this tree: no network), and no memcg
# settings either way; then checks that the consumer's install holds nothing of memcg.
# Usage: subproject_consumer.sh <source-dir> [work-dir]   (uses ccache when it is installed)
set -euo pipefail
src=$(cd "$1" && pwd)
work=${2:-$(mktemp -d)}
[[ -n ${2:-} ]] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work"
launcher=()
if command -v ccache >/dev/null; then
  # Both builds place memcg in _deps/memcg-build: the second compiles from the cache.
  launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)
  export CCACHE_BASEDIR=${CCACHE_BASEDIR:-$work}
fi
# No build type: the quickest build (no optimisation, no debug information); what is checked here
# is the CMake wiring, not the code.
for mode in add_subdirectory fetchcontent; do
  b=$work/$mode
  cmake -S "$src/tests/consumer/subproject" -B "$b" -G Ninja -DCMAKE_BUILD_TYPE= \
    -DMEMCG_CONSUME=$mode -DMEMCG_SOURCE="$src" -DFETCHCONTENT_SOURCE_DIR_MEMCG="$src" \
    -DFETCHCONTENT_FULLY_DISCONNECTED=ON "${launcher[@]}" >"$work/$mode.log" ||
    { cat "$work/$mode.log" >&2; exit 1; }
  grep 'subproject consumer:' "$work/$mode.log" || true
  cmake --build "$b" --target consumer -j "${JOBS:-2}" >/dev/null
  "$b/consumer" >/dev/null
  cmake --install "$b" --prefix "$work/$mode-prefix" >/dev/null
  if [[ -n $(find "$work/$mode-prefix" -type f 2>/dev/null) ]]; then
    echo "subproject_consumer: $mode: the consumer's install holds memcg files" >&2
    exit 1
  fi
  echo "subproject_consumer: $mode: built and ran"
done
