#!/usr/bin/env bash
# The Python, Rust and Go packages used by projects outside the tree, exactly as their READMEs
# say, against an install prefix of this build (the runtime, development and python components):
#   Python  a venv of Debian's python3 (--system-site-packages: its setuptools), the package
#           installed with `pip install --no-build-isolation` from a copy of bindings/python,
#           the README's service run outside the tree, the library found by its SONAME, and
#           where the build has the HTTP endpoint, the README's endpoint sample on the installed
#           libmemcg_http;
#   Rust    a crate depending on bindings/rust/memcg by path, memcg-sys finding the library
#           through `pkg-config --libs memcg-c` (no MEMCG_LIB_DIR);
#   Go      a module requiring example.org/memcg with a `replace` to bindings/go, cgo finding
#           the library through `#cgo pkg-config: memcg-c`.
# Each consumer drains and checks that memory.current is 0. A language whose toolchain is not
# installed is skipped with a message; exit 77 when none could run.
# Usage: bindings_consumer.sh <build-dir> <source-dir>
set -euo pipefail
build=$(cd "$1" && pwd)
src=$(cd "$2" && pwd)
apps=$src/tests/bindings_consumer
# Under the build tree and kept between runs, so that cargo and go reuse what they compiled.
work=$build/bindings-consumer
prefix=$work/prefix
rm -rf "$prefix" "$work/python"
mkdir -p "$work"
for component in runtime development python; do
  cmake --install "$build" --prefix "$prefix" --component $component >/dev/null
done
pcdir=$(dirname "$(find "$prefix" -name memcg-c.pc | head -n1)")
libdir=$(dirname "$pcdir")
[[ -L $libdir/libmemcg.so ]] || { echo "bindings_consumer: no libmemcg.so link in $libdir" >&2; exit 1; }
export PKG_CONFIG_PATH=$pcdir LD_LIBRARY_PATH=$libdir
unset MEMCG_LIBRARY MEMCG_LIB_DIR MEMCG_LIB_NAME CGO_CFLAGS CGO_LDFLAGS
ran=0

# ---- Python ----
py=/usr/bin/python3
if [[ -x $py ]] && $py -c 'import venv, setuptools' 2>/dev/null; then
  $py -m venv --system-site-packages "$work/python/venv"
  cp -r "$src/bindings/python" "$work/python/src"  # pip writes build/ and *.egg-info beside it
  "$work/python/venv/bin/pip" install --no-build-isolation --no-index --no-deps -q \
    "$work/python/src"
  sed -n '/^```python$/,/^```$/p' "$src/bindings/python/README.md" | sed '1d;$d' \
    >"$work/python/service.py"
  out=$(cd "$work/python" && "$work/python/venv/bin/python" -c \
    'import memcg, runpy, sys; print("from", memcg.__file__); runpy.run_path(sys.argv[1])' \
    service.py)
  grep -q "from $work/python/venv/lib/python3[.0-9]*/site-packages/memcg/__init__.py" <<<"$out" ||
    { echo "bindings_consumer: memcg imported from elsewhere: $out" >&2; exit 1; }
  grep -q "service: ok" <<<"$out" || { echo "bindings_consumer: python: $out" >&2; exit 1; }
  echo "bindings_consumer: python: pip-installed package ran the README's service"
  # The HTTP endpoint, where the build has it: the README's endpoint sample (fenced ```py),
  # with libmemcg_http.so.<SOVERSION> found beside the installed libmemcg.
  if compgen -G "$libdir/libmemcg_http.so.*" >/dev/null; then
    PKG_CONFIG_PATH=$pcdir pkg-config --exists memcg-c-http ||
      { echo "bindings_consumer: memcg-c-http.pc is not installed in $pcdir" >&2; exit 1; }
    sed -n '/^```py$/,/^```$/p' "$src/bindings/python/README.md" | sed '1d;$d' \
      >"$work/python/endpoint.py"
    out=$(cd "$work/python" && env -u MEMCG_HTTP_LIBRARY "$work/python/venv/bin/python" endpoint.py)
    grep -q "endpoint: ok" <<<"$out" || { echo "bindings_consumer: python endpoint: $out" >&2; exit 1; }
    echo "bindings_consumer: python: the README's endpoint sample ran on the installed libmemcg_http"
  fi
  ran=$((ran + 1))
else
  echo "bindings_consumer: python skipped: /usr/bin/python3 with venv and setuptools" \
       "(python3-venv, python3-setuptools) is not installed"
fi

# The python component under a prefix: where CPython looks for a prefix's packages (its user
# site, with PYTHONUSERBASE naming the prefix).
out=$(cd "$work" && PYTHONUSERBASE=$prefix python3 -c 'import memcg; print(memcg.__file__)')
[[ $out == "$prefix"/lib/python3.*/site-packages/memcg/__init__.py ]] ||
  { echo "bindings_consumer: the python component is not where CPython looks: $out" >&2; exit 1; }

# ---- Rust ----
if command -v cargo >/dev/null; then
  mkdir -p "$work/rust"
  sed "s#@MEMCG_SOURCE_DIR@#$src#" "$apps/rust/Cargo.toml.in" >"$work/rust/Cargo.toml"
  rm -rf "$work/rust/src" && cp -r "$apps/rust/src" "$work/rust/src"
  out=$(cd "$work/rust" && CARGO_TARGET_DIR=$work/rust-target cargo run --offline -q)
  grep -q "consumer: ok" <<<"$out" || { echo "bindings_consumer: rust: $out" >&2; exit 1; }
  echo "bindings_consumer: rust: $out"
  ran=$((ran + 1))
else
  echo "bindings_consumer: rust skipped: cargo is not installed"
fi

# ---- Go ----
if command -v go >/dev/null; then
  mkdir -p "$work/go"
  sed "s#@MEMCG_SOURCE_DIR@#$src#" "$apps/go/go.mod.in" >"$work/go/go.mod"
  cp "$apps/go/main.go" "$work/go/main.go"
  out=$(cd "$work/go" && CGO_ENABLED=1 GOPROXY=off GOFLAGS= GOTOOLCHAIN=local \
        GOCACHE=$work/go-cache GOPATH=$work/go-path go run .)
  grep -q "consumer: ok" <<<"$out" || { echo "bindings_consumer: go: $out" >&2; exit 1; }
  echo "bindings_consumer: go: $out"
  ran=$((ran + 1))
else
  echo "bindings_consumer: go skipped: go is not installed"
fi

((ran > 0)) || exit 77
echo "bindings_consumer: $ran packages used from outside the tree"
