#!/usr/bin/env bash
# The shared build, its install components and its Debian packages, as a user gets them:
#   1. configures memcg shared (MEMCG_SHARED=ON, prefix /usr), builds the libraries only and
#      installs them (memcgctl's rule is optional), then memcgctl; checks the SONAME and that
#      only the memcg namespace is exported;
#   2. `cmake --install --component X` for runtime, development and tools: each installs its
#      part alone; install_consumer.sh then runs its find_package and pkg-config consumers on it;
#   3. cpack -G DEB: libmemcg<SOVERSION>, libmemcg-dev, memcg-tools, python3-memcg with their
#      Depends;
#   4. extracts the packages (dpkg-deb -x, nothing goes into the system) and builds and runs the
#      find_package consumer against the extracted tree (every packaged component required,
#      tests/consumer/components.sh), the extracted memcgctl --version, and the Python package's
#      service example (bindings/python/README.md) from the extracted tree alone.
# With MEMCG_PACKAGE_ALL=1 (CI), the same Release build then compiles the examples and the
# benchmarks too: the -O3 compile of every shipped program, done once.
# Usage: package_check.sh <source-dir> [work-dir]   (uses ccache when it is installed)
set -euo pipefail
src=$(cd "$1" && pwd)
work=${2:-$(mktemp -d)}
[[ -n ${2:-} ]] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work"
work=$(cd "$work" && pwd)  # absolute: the steps below run from other folders
build=$work/build
fail() { echo "package_check: $*" >&2; exit 1; }
launcher=()
command -v ccache >/dev/null && launcher=(-DCMAKE_CXX_COMPILER_LAUNCHER=ccache)

# A Release build (-O3), as a distribution builds the packages.
all=OFF
[[ ${MEMCG_PACKAGE_ALL:-0} == 1 ]] && all=ON
cmake -S "$src" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DMEMCG_SHARED=ON \
  -DCMAKE_INSTALL_PREFIX=/usr -DMEMCG_BUILD_TESTS=OFF -DMEMCG_BUILD_BENCH=$all \
  -DMEMCG_BUILD_EXAMPLES=$all -DMEMCG_BUILD_TOOLS=ON "${launcher[@]}" >/dev/null
cmake --build "$build" --target memcg_libraries -j "${JOBS:-2}" >/dev/null
# Installing after building only the libraries: everything but memcgctl, and no error.
rm -f "$build/tools/memcgctl/memcgctl"
DESTDIR=$work/libs-only cmake --install "$build" >/dev/null
[[ -e $work/libs-only/usr/include/memcg/memcg.hpp && ! -e $work/libs-only/usr/bin/memcgctl ]] ||
  fail "install after building the libraries only"
cmake --build "$build" --target memcgctl -j "${JOBS:-2}" >/dev/null
if [[ $all == ON ]]; then
  cmake --build "$build" -j "${JOBS:-2}" >"$work/build-all.log" ||
    { tail -n 40 "$work/build-all.log" >&2; fail "the Release build of the examples and benchmarks"; }
  echo "package_check: examples and benchmarks compiled at -O3"
fi
version=$(sed -n 's/^#define MEMCG_VERSION_STRING "\(.*\)"/\1/p' "$build/include/memcg/base/version.hpp")
soversion=$(objdump -p "$build/libmemcg.so" | awk '/SONAME/ {print $2}')
[[ $soversion == libmemcg.so.${version%.*} ]] || fail "SONAME $soversion for version $version"
# Exported: the memcg namespace (and operator new/delete of memcg::hook) and the C API's
# memcg_* functions, nothing else.
for lib in $(find "$build" -name 'libmemcg*.so' -not -path '*/CMakeFiles/*'); do
  others=$(nm -D --defined-only "$lib" | c++filt | cut -d' ' -f3- |
           grep -v -E '(^|for |to )memcg::|^operator (new|delete)|^memcg_' || true)
  [[ -z $others ]] || fail "$(basename "$lib") exports symbols outside memcg: $(head -3 <<<"$others")"
done
# The C API (memcg/c/memcg.h) is exported by libmemcg.so, with C names.
nm -D --defined-only "$build/libmemcg.so" | grep ' T memcg_charge$' >/dev/null ||
  fail "libmemcg.so does not export the C API (memcg_charge)"

# ---- components, each alone ----
for c in runtime development tools python; do
  DESTDIR=$work/comp-$c cmake --install "$build" --component $c >/dev/null
done
files() { (cd "$work/comp-$1" && find . -type f -o -type l | sort); }
files runtime | grep -v -E '\.so\.[0-9.]+$' >/dev/null && fail "runtime holds more than shared objects"
files runtime | grep 'libmemcg\.so\.' >/dev/null || fail "runtime has no libmemcg.so.*"
files development | grep 'include/memcg/memcg.hpp' >/dev/null || fail "development has no headers"
files development | grep 'include/memcg/base/version.hpp' >/dev/null || fail "development has no version.hpp"
files development | grep 'include/memcg/c/memcg.h' >/dev/null || fail "development has no C header"
files development | grep 'pkgconfig/memcg-c.pc' >/dev/null || fail "development has no memcg-c.pc"
# The HTTP endpoint's C API (memcg/c/http.h) where memcg::http is built.
if [[ -n $(find "$build/src/http" -name 'libmemcg_http.*' 2>/dev/null) ]]; then
  files runtime | grep 'libmemcg_http\.so\.' >/dev/null || fail "runtime has no libmemcg_http.so.*"
  files development | grep 'pkgconfig/memcg-c-http.pc' >/dev/null ||
    fail "development has no memcg-c-http.pc"
fi
files development | grep 'share/memcg/prometheus/memcg-rules.yml' >/dev/null ||
  fail "development has no Prometheus rules"
files development | grep -E 'bin/|\.so\.[0-9]' >/dev/null && fail "development holds runtime files or tools"
[[ $(files tools) == "./usr/bin/memcgctl" ]] || fail "tools holds $(files tools)"
files python | grep -q 'usr/lib/python3/dist-packages/memcg/__init__.py$' || fail "python has no memcg package"
files python | grep -v -E '/memcg/([a-z_]+\.py|py\.typed)$' >/dev/null && fail "python holds $(files python)"
"$src/tests/install_consumer.sh" "$build" "$src"

# ---- Debian packages ----
(cd "$build" && cpack -G DEB -B "$work/debs" >/dev/null)
debs=("$work"/debs/*.deb)
((${#debs[@]} == 4)) || fail "expected 4 packages, got: ${debs[*]##*/}"
libpkg=libmemcg${version%.*}
depends() { dpkg-deb -f "$work/debs/$1"_*.deb Depends; }
depends "$libpkg" | grep 'libstdc++6' >/dev/null || fail "$libpkg Depends: $(depends "$libpkg")"
depends libmemcg-dev | grep "$libpkg (= $version)" >/dev/null || fail "libmemcg-dev Depends: $(depends libmemcg-dev)"
depends memcg-tools | grep "$libpkg (= $version)" >/dev/null || fail "memcg-tools Depends: $(depends memcg-tools)"
depends memcg-tools | grep 'libyaml-cpp' >/dev/null || fail "memcg-tools Depends: $(depends memcg-tools)"
depends python3-memcg | grep "$libpkg (= $version)" >/dev/null || fail "python3-memcg Depends: $(depends python3-memcg)"
if [[ -n $(find "$build/src/jemalloc" -name '*.so' 2>/dev/null) ]]; then
  depends "$libpkg" | grep libjemalloc2 >/dev/null || fail "$libpkg Depends: $(depends "$libpkg")"
  depends libmemcg-dev | grep libjemalloc-dev >/dev/null || fail "libmemcg-dev Depends: $(depends libmemcg-dev)"
fi
for d in "${debs[@]}"; do
  echo "package_check: $(dpkg-deb -f "$d" Package) $(dpkg-deb -f "$d" Version): $(dpkg-deb -f "$d" Depends)"
  dpkg-deb -x "$d" "$work/root"
done
root=$work/root
libdir=$(dirname "$(find "$root" -name 'libmemcg.so.*.*.*' | head -n1)")
# Every optional component the packages hold, required as a user would (find_package COMPONENTS).
components=$("$src/tests/consumer/components.sh" list "$root/usr")
cmake -S "$src/tests/consumer" -B "$work/consumer" -G Ninja -DCMAKE_PREFIX_PATH="$root/usr" \
  "-DMEMCG_CONSUMER_COMPONENTS=$components" >/dev/null
cmake --build "$work/consumer" >/dev/null
LD_LIBRARY_PATH=$libdir "$work/consumer/consumer"
"$src/tests/consumer/components.sh" check "$root/usr" "$src" "$work/components-deb"
if [[ -x $work/consumer/consumer_rocksdb ]]; then LD_LIBRARY_PATH=$libdir "$work/consumer/consumer_rocksdb"; fi
[[ $(LD_LIBRARY_PATH=$libdir "$root/usr/bin/memcgctl" --version) == "memcgctl $version" ]] ||
  fail "memcgctl --version"
# The Python package from the extracted tree alone: its README's service, the library found by
# its SONAME (no MEMCG_LIBRARY), run outside the source tree.
pydir=$root/usr/lib/python3/dist-packages
sed -n '/^```python$/,/^```$/p' "$src/bindings/python/README.md" | sed '1d;$d' >"$work/service.py"
out=$(cd "$work" && env -u MEMCG_LIBRARY PYTHONPATH="$pydir" LD_LIBRARY_PATH="$libdir" python3 -s -c \
  'import memcg, runpy, sys; print("from", memcg.__file__); runpy.run_path(sys.argv[1])' \
  "$work/service.py") || fail "the Python service example failed from the packages: $out"
grep -q "from $pydir/memcg/__init__.py" <<<"$out" || fail "memcg imported from elsewhere: $out"
grep -q "service: ok" <<<"$out" || fail "the Python service example: $out"
echo "package_check: python3-memcg's service example ran from the extracted packages"
echo "package_check: shared build, components and packages all checked (memcg $version)"
