#!/usr/bin/env python3
"""A reservation's grow + shrink pair (4 KiB, group at depth 3) from C, Rust, Go and Python
against the same libmemcg.so, in one run: each program runs ROUNDS times, interleaved, and the
medians of ns per pair are printed with their ratio to C.

Go-cgo and Py-ctypes are the same pair through cgo or ctypes calls alone, without the packages'
bookkeeping (handle pins, status mapping), to split the cost.

Usage: bench/bindings_bench.py BUILD_DIR [ROUNDS]   (BUILD_DIR: a Release build with the target
bindings_pair built: `cmake --build build/release --target bindings_pair`). Builds the Rust
example and the Go command in BUILD_DIR/bindings-bench (release / default go build)."""
import os
import re
import statistics
import subprocess
import sys
import time

root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
build = os.path.abspath(sys.argv[1])
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 5
work = os.path.join(build, "bindings-bench")
# The Go package finds the library through pkg-config (#cgo pkg-config: memcg-c): a memcg-c.pc
# for this build tree.
os.makedirs(work + "/pkgconfig", exist_ok=True)
with open(work + "/pkgconfig/memcg-c.pc", "w") as pc:
    pc.write("Name: memcg-c\nDescription: memcg C API (build tree)\nVersion: 0\n"
             "Libs: -L%s -lmemcg\nCflags: -I%s/include\n" % (build, root))
env = dict(os.environ, LD_LIBRARY_PATH=build, MEMCG_LIB_DIR=build,
           PKG_CONFIG_PATH=work + "/pkgconfig",
           MEMCG_LIBRARY=os.path.join(build, "libmemcg.so"), CARGO_TARGET_DIR=work + "/rust",
           GOPROXY="off",
           GOFLAGS="", GOCACHE=work + "/go-cache", GOPATH=work + "/go-path",
           PYTHONPATH=root + "/bindings/python")

subprocess.run(["cargo", "build", "--offline", "--release", "-q", "--example", "pair_bench",
                "--manifest-path", root + "/bindings/rust/Cargo.toml"], env=env, check=True)
subprocess.run(["go", "build", "-o", work + "/pairbench", "./cmd/pairbench"],
               cwd=root + "/bindings/go", env=env, check=True)
PY = r"""
import sys, time, memcg
n = int(sys.argv[1])
with memcg.Controller() as ctl:
    ctl.create_group("a"); ctl.create_group("a/b")
    with ctl.create_group("a/b/c") as leaf, memcg.Reservation(leaf) as r:
        grow, shrink = r.grow, r.shrink
        start = time.perf_counter_ns()
        for _ in range(n):
            grow(4096)
            shrink(4096)
        print("ns_per_pair %.2f" % ((time.perf_counter_ns() - start) / n))
"""
PY_RAW = r"""
import ctypes, sys, time, memcg
n = int(sys.argv[1])
lib = memcg.load()  # the package's declarations; calls straight into the library
P = ctypes.c_void_p
ctl, leaf, r = P(), P(), P()
assert lib.memcg_controller_create(None, ctypes.byref(ctl)) == 0
for path in (b"a", b"a/b"):
    assert lib.memcg_group_create(ctl, path, None) == 0
assert lib.memcg_group_create(ctl, b"a/b/c", ctypes.byref(leaf)) == 0
assert lib.memcg_reservation_create(leaf, None, 0, -1, ctypes.byref(r)) == 0
grow, shrink = lib.memcg_reservation_grow, lib.memcg_reservation_shrink
start = time.perf_counter_ns()
for _ in range(n):
    grow(r, 4096)
    shrink(r, 4096)
print("ns_per_pair %.2f" % ((time.perf_counter_ns() - start) / n))
lib.memcg_reservation_destroy(r); lib.memcg_group_release(leaf)
assert lib.memcg_controller_destroy(ctl) == 0
"""
programs = {
    "C": ([os.path.join(build, "bench", "bindings_pair")], 5_000_000, []),
    "Rust": ([work + "/rust/release/examples/pair_bench"], 5_000_000, []),
    "Go": ([work + "/pairbench"], 2_000_000, []),
    "Go-cgo": ([work + "/pairbench"], 2_000_000, ["raw"]),
    "Python": ([sys.executable, "-c", PY], 200_000, []),
    "Py-ctypes": ([sys.executable, "-c", PY_RAW], 200_000, []),
}
results = {name: [] for name in programs}
for _ in range(rounds):
    for name, (cmd, n, extra) in programs.items():
        out = subprocess.run(cmd + [str(n)] + extra, env=env, check=True, capture_output=True,
                             text=True).stdout
        results[name].append(float(re.search(r"ns_per_pair ([0-9.]+)", out).group(1)))
c = statistics.median(results["C"])
print("%-9s %10s %10s %8s  %s" % ("", "ns/pair", "-C (ns)", "ratio", "all rounds"))
for name, values in results.items():
    m = statistics.median(values)
    print("%-9s %10.2f %10.2f %8.2f  %s" % (name, m, m - c, m / c,
                                              " ".join("%.1f" % v for v in values)))
