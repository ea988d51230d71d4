#!/usr/bin/env python3
"""The scale goals (docs/BENCHMARKS.md, "The goals side by side"), measured in one run.

Builds the four benchmarks of the release preset (or takes BUILD_DIR), runs the rows of the goal
table one after the other, and prints each row's figure, its goal and the ratio that decides it,
with the machine's load before and after. Ratios are what to compare across machines: the two
sides of each ratio run in the same process, a few seconds apart.

Usage: scripts/goal_bench.py [--build-dir build/release] [--no-build] [--repetitions N]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGETS = ["charge_bench", "hook_bench", "scale_bench", "admission_queue_bench"]


def load():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def run(binary, bench_filter, repetitions, extra=()):
    """The benchmark's runs by name: {name: [run dicts]} (iterations only, no aggregates)."""
    args = [binary, "--benchmark_filter=" + bench_filter, "--benchmark_format=json",
            "--benchmark_repetitions=%d" % repetitions, *extra]
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    runs = {}
    for b in json.loads(out)["benchmarks"]:
        if b.get("run_type", "iteration") != "iteration":
            continue
        if "error_occurred" in b and b["error_occurred"]:
            sys.exit("goal_bench: %s failed: %s" % (b["name"], b.get("error_message")))
        runs.setdefault(b["run_name"], []).append(b)
    if not runs:
        sys.exit("goal_bench: no benchmark of %s matched %r" % (binary, bench_filter))
    return runs


def median(runs, field):
    return statistics.median(float(r[field]) for r in runs)


def one(runs, prefix):
    names = [n for n in runs if n.startswith(prefix)]
    if len(names) != 1:
        sys.exit("goal_bench: expected one run named %s*, got %s" % (prefix, names))
    return runs[names[0]]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--build-dir", default=os.path.join(ROOT, "build", "release"))
    p.add_argument("--no-build", action="store_true", help="use the binaries as they are")
    p.add_argument("--repetitions", type=int, default=5)
    a = p.parse_args()
    if a.repetitions < 1:
        sys.exit("goal_bench: --repetitions must be at least 1")
    if not a.no_build:
        if not os.path.isdir(a.build_dir):
            subprocess.run(["cmake", "--preset", "release"], cwd=ROOT, check=True,
                           stdout=subprocess.DEVNULL)
        subprocess.run(["cmake", "--build", a.build_dir, "--target", *TARGETS], check=True,
                       stdout=subprocess.DEVNULL)
    bench = lambda name: os.path.join(a.build_dir, "bench", name)
    for t in TARGETS:
        if not os.access(bench(t), os.X_OK):
            sys.exit("goal_bench: %s is not built (%s)" % (t, bench(t)))

    before = load()
    rows = []
    reps = a.repetitions

    # Row 1: the charge pair, one thread, depth 4, against the 4-level mutex tree.
    r = run(bench("charge_bench"), r"^Pair/(memcg|MutexTree)/real_time/threads:1$", reps)
    pair = median(one(r, "Pair/memcg/"), "real_time")
    tree = median(one(r, "Pair/MutexTree/"), "real_time")
    rows.append(("charge + uncharge pair, 1 thread, depth 4", "<= 5.7 ns", "%.2f ns (CPU %.2f ns)" % (
        pair, median(one(r, "Pair/memcg/"), "cpu_time")), pair <= 5.7))
    rows.append(("  against the 4-level mutex tree", ">= 2x", "%.2fx (tree %.2f ns)" % (
        tree / pair, tree), tree / pair >= 2.0))

    # Row 2: the whole-program hook against glibc malloc, map of strings, one thread.
    r = run(bench("hook_bench"),
            r"^BM_MapOfStrings_(Malloc|HookAttached)/threads:1$", reps)
    hook = median(one(r, "BM_MapOfStrings_HookAttached/"), "real_time")
    malloc = median(one(r, "BM_MapOfStrings_Malloc/"), "real_time")
    rows.append(("new/delete hook / glibc malloc, map of strings", "<= 1.10x",
                 "%.3fx" % (hook / malloc), hook / malloc <= 1.10))

    # Row 3: render_prometheus() with 10 000 groups at the defaults.
    r = run(bench("scale_bench"), r"^BM_Render/10000$", reps)
    runs = one(r, "BM_Render/10000")
    ms = median(runs, "real_time")
    peak = max(float(x["peak_MB"]) for x in runs)
    rows.append(("render_prometheus(), 10 000 groups, defaults", "<= 20 ms, <= 16 MB",
                 "%.1f ms (CPU %.1f ms), %.1f MB peak" % (ms, median(runs, "cpu_time"), peak),
                 ms <= 20 and peak <= 16))

    # Row 4: the admission queue, 10 against 10 000 backlogged groups (with a starved one too).
    r = run(bench("admission_queue_bench"),
            r"^BM_AdmissionQueue/groups:(10|10000)/starved:(0|1)/", max(1, reps // 2))
    for starved in (0, 1):
        small = median(one(r, "BM_AdmissionQueue/groups:10/starved:%d/" % starved),
                       "admissions/s")
        large = median(one(r, "BM_AdmissionQueue/groups:10000/starved:%d/" % starved),
                       "admissions/s")
        rows.append(("admission queue, admissions/s at 10 / at 10 000 groups" +
                     (", one starved" if starved else ""), "<= 2x",
                     "%.2fx (%.0f/s against %.0f/s)" % (small / large, small, large),
                     small / large <= 2.0))
    # Context for row 4, not a goal: the same admissions without any queue (one thread,
    # reserve and release round-robin). Its own ratio is what touching 10 000 groups' counters
    # costs whatever the queue does.
    r = run(bench("admission_queue_bench"), r"^BM_ReserveRoundRobin/groups:(10|10000)/",
            max(1, reps // 2))
    small = median(one(r, "BM_ReserveRoundRobin/groups:10/"), "admissions/s")
    large = median(one(r, "BM_ReserveRoundRobin/groups:10000/"), "admissions/s")
    rows.append(("  the floor without a queue, 10 / 10 000 groups", "(context)",
                 "%.2fx (%.0f/s against %.0f/s)" % (small / large, small, large), None))

    after = load()
    width = max(len(r[0]) for r in rows)
    print("goal_bench: load average %s before, %s after; %d repetitions, medians" % (
        before, after, reps))
    for what, goal, got, ok in rows:
        verdict = "" if ok is None else "met" if ok else "NOT met"
        print("%-*s  goal %-18s  %-40s  %s" % (width, what, goal, got, verdict))
    return 0


if __name__ == "__main__":
    sys.exit(main())
