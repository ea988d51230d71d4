#!/usr/bin/env bash
# find_package(memcg ... COMPONENTS ...) against an installed tree.
#   components.sh list <prefix>                    the optional components the tree defines
#   components.sh check <prefix> <src> <work-dir>  configures tests/consumer/components:
#     1. every installed component REQUIRED: found, memcg_<c>_FOUND TRUE;
#     2. each known component not installed, REQUIRED: find_package fails and names it;
#     3. a name that is no component, REQUIRED: fails, "not a memcg component";
#     4. the same name and the missing ones OPTIONAL: found, their memcg_<c>_FOUND FALSE.
set -euo pipefail
known=(rocksdb rocksdb_arena jemalloc http hook host prometheus_cpp sqlite)
fail() { echo "components: $*" >&2; exit 1; }

installed() {
  local prefix=$1 c found=()
  local dir
  dir=$(find "$prefix" -name memcgConfig.cmake -printf '%h\n' | head -n1)
  [[ -n $dir ]] || fail "no memcgConfig.cmake under $prefix"
  for c in "${known[@]}"; do
    # An exported target file declares add_library(memcg::<c> ...).
    if grep -q -E "add_library\\(memcg::$c( |\\))" "$dir"/memcg*Targets.cmake; then found+=("$c"); fi
  done
  local IFS=';'
  echo "${found[*]}"
}

case ${1:-} in
  list) installed "$2" ;;
  check)
    prefix=$2 src=$3 work=$4
    mkdir -p "$work"
    have=$(installed "$prefix")
    missing=()
    for c in "${known[@]}"; do [[ ";$have;" == *";$c;"* ]] || missing+=("$c"); done
    configure() {  # <name> <cmake -D...>...; prints the output, returns cmake's status
      local name=$1; shift
      cmake -S "$src/tests/consumer/components" -B "$work/$name" -G Ninja \
        -DCMAKE_PREFIX_PATH="$prefix" "$@" 2>&1
    }
    out=$(configure all "-DREQUIRED_COMPONENTS=$have" "-DEXPECT_FOUND=$have") ||
      fail "requiring the installed components ($have) failed: $out"
    grep -q "memcg components checked" <<<"$out" || fail "no check ran: $out"
    for c in "${missing[@]}"; do
      if out=$(configure "no-$c" "-DREQUIRED_COMPONENTS=$c"); then
        fail "requiring $c, which is not installed, succeeded"
      fi
      grep -q -E "^ *$c: " <<<"$out" || fail "requiring $c failed without naming it: $out"
      echo "components: $c not installed, find_package says: $(grep -E "^ *$c: " <<<"$out" | head -n1 | sed 's/^ *//')"
    done
    if out=$(configure bogus "-DREQUIRED_COMPONENTS=nosuch"); then
      fail "requiring a component that does not exist succeeded"
    fi
    grep -q "nosuch: not a memcg component" <<<"$out" || fail "unknown component message: $out"
    optional="nosuch${missing[*]:+;}$(IFS=';'; echo "${missing[*]}")"
    out=$(configure optional "-DOPTIONAL_COMPONENTS=$optional" "-DEXPECT_MISSING=$optional") ||
      fail "optional components that are missing failed find_package: $out"
    echo "components: required [$have] found; missing [${missing[*]}] and an unknown name refused"
    ;;
  *) fail "usage: components.sh list <prefix> | check <prefix> <src> <work-dir>" ;;
esac
