#!/usr/bin/env bash
# Installs the built library (static or shared) into a scratch prefix, then builds and runs a
# consumer project against it twice: through find_package(memcg) and through pkg-config, and
# a C program through memcg-c.pc. The find_package consumer requires every optional component
# installed (COMPONENTS); components.sh checks that the others, and names that are no component,
# fail find_package with their reason.
# Usage: install_consumer.sh <build-dir> <source-dir>
set -euo pipefail
build=$1
src=$2
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cmake --install "$build" --prefix "$work/prefix" >/dev/null
components=$("$src/tests/consumer/components.sh" list "$work/prefix")
echo "install_consumer: installed components: ${components:-none}"
cmake -S "$src/tests/consumer" -B "$work/build" -G Ninja -DCMAKE_PREFIX_PATH="$work/prefix" \
  "-DMEMCG_CONSUMER_COMPONENTS=$components" >/dev/null
cmake --build "$work/build" >/dev/null
"$src/tests/consumer/components.sh" check "$work/prefix" "$src" "$work/components"
"$work/build/consumer"
# The optional component, when it was built and installed (jemalloc found, no sanitizer).
if [[ -x "$work/build/consumer_jemalloc" ]]; then
  "$work/build/consumer_jemalloc"
  echo "install_consumer: memcg::jemalloc consumer ran"
fi
if [[ -x "$work/build/consumer_http" ]]; then "$work/build/consumer_http"; fi
if [[ -x "$work/build/consumer_prometheus_cpp" ]]; then "$work/build/consumer_prometheus_cpp"; fi
if [[ -x "$work/build/consumer_rocksdb" ]]; then
  "$work/build/consumer_rocksdb"
  echo "install_consumer: memcg::rocksdb consumer ran"
fi
if [[ -x "$work/build/consumer_sqlite" ]]; then
  "$work/build/consumer_sqlite"
  echo "install_consumer: memcg::sqlite consumer ran"
fi
libdir=$(find "$work/prefix" -name memcg.pc -printf '%h\n' | head -n1)
PKG_CONFIG_PATH="$libdir" g++ -o "$work/consumer_pc" "$src/tests/consumer/main.cpp" \
  $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs memcg)
# A shared build: pkg-config gives no run path, the loader is told where the library is.
LD_LIBRARY_PATH="$(dirname "$libdir")" "$work/consumer_pc"
# The C API through its own pkg-config file, from a C11 program (no C++ flags).
PKG_CONFIG_PATH="$libdir" gcc -std=c11 -Wall -Wextra -Werror -pedantic -o "$work/consumer_c" \
  "$src/tests/consumer/main.c" $(PKG_CONFIG_PATH="$libdir" pkg-config --cflags --libs memcg-c)
LD_LIBRARY_PATH="$(dirname "$libdir")" "$work/consumer_c"
echo "install_consumer: find_package, pkg-config and C (memcg-c.pc) consumers ran"
