#!/usr/bin/env bash
# Puts glibc malloc, memcg::hook, plain jemalloc and memcg::jemalloc side by side on the
# map-of-strings and new/delete workloads. jemalloc and glibc malloc cannot both be the malloc of
# one program, so two programs run in alternation: hook_bench (glibc malloc, memcg::hook) and
# jemalloc_bench (jemalloc, memcg::jemalloc), ROUNDS times each, each run with random
# interleaving of its variants. Prints medians over all runs and ratios to plain jemalloc (its own
# operator new, as a program without memcg has it), and for jemalloc_bench's variants the ratio
# paired within each run (median of the run's repetitions over the baseline's in the same run:
# a slow spell of the shared machine moves both), as median and range over the runs.
# Usage: bench/jemalloc_compare.sh <build-dir> [rounds] [min-time-seconds]
set -euo pipefail
build=$1
rounds=${2:-3}
min_time=${3:-0.2}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
filter_hook='^BM_(MapOfStrings|NewDelete)_(Malloc|HookAttached)/'
filter_je='^BM_(MapOfStrings|NewDelete)_'
for r in $(seq "$rounds"); do
  "$build/bench/hook_bench" --benchmark_filter="$filter_hook" --benchmark_min_time="$min_time" \
    --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true \
    --benchmark_format=json >"$work/hook.$r.json" 2>/dev/null
  "$build/bench/jemalloc_bench" --benchmark_filter="$filter_je" --benchmark_min_time="$min_time" \
    --benchmark_repetitions=3 --benchmark_enable_random_interleaving=true \
    --benchmark_format=json >"$work/je.$r.json" 2>/dev/null
done
"$build/bench/jemalloc_bench" --benchmark_filter='Footprint' --benchmark_format=json \
  >"$work/footprint.json" 2>/dev/null
python3 - "$work" <<'PY'
import json, glob, statistics, sys, collections
work = sys.argv[1]
cpu = collections.defaultdict(list)
paired = collections.defaultdict(list)  # run_name -> per-run ratio to the baseline
for f in sorted(glob.glob(work + "/hook.*.json") + glob.glob(work + "/je.*.json")):
    run = collections.defaultdict(list)
    for b in json.load(open(f))["benchmarks"]:
        if b.get("run_type") != "iteration":
            continue
        t = b["cpu_time"] / (1000.0 if "MapOf" in b["run_name"] else 1.0)
        cpu[b["run_name"]].append(t)
        run[b["run_name"]].append(t)
    for k, v in run.items():
        base_k = k.replace("_" + k.split("_")[2].split("/")[0] + "/", "_JemallocOwnNew/")
        if run.get(base_k):
            paired[k].append(statistics.median(v) / statistics.median(run[base_k]))
names = [("glibc malloc", "Malloc"), ("memcg::hook (attached)", "HookAttached"),
         ("plain jemalloc (its own operator new)", "JemallocOwnNew"),
         ("jemalloc, automatic arena, memcg::jemalloc's operator new", "Jemalloc"),
         ("jemalloc, own arena, no hooks", "JemallocArena"),
         ("memcg::jemalloc (ScopedArenaAttach), kNeverFail", "MemcgArena"),
         ("memcg::jemalloc (ScopedArenaAttach), kRefuse", "MemcgArenaRefuse"),
         ("memcg::jemalloc, one tenant per thread", "MemcgArenaPerThread"),
         ("memcg::jemalloc, one tenant, nr_arenas = 2", "MemcgSpread")]
for work_name, unit in (("MapOfStrings", "µs per map, CPU time per thread"),
                        ("NewDelete", "ns per 32 pairs, CPU time per thread")):
    print(f"\n{work_name} ({unit}; median of all runs; ratio to plain jemalloc)\n")
    print("| variant | threads:1 | ratio | paired (range) | threads:2 | ratio | paired (range) |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    base = {}
    for t in (1, 2):
        k = f"BM_{work_name}_JemallocOwnNew/threads:{t}"
        base[t] = statistics.median(cpu[k]) if cpu.get(k) else None
    for label, v in names:
        row = [label]
        for t in (1, 2):
            k = f"BM_{work_name}_{v}/threads:{t}"
            if cpu.get(k):
                m = statistics.median(cpu[k])
                row += [f"{m:.1f}", f"{m / base[t]:.3f}" if base[t] else "-"]
                pr = paired.get(k)
                row += [f"{statistics.median(pr):.3f} ({min(pr):.3f}-{max(pr):.3f})" if pr else "-"]
            else:
                row += ["-", "-", "-"]
        print("| " + " | ".join(row) + " |")
fp = [b for b in json.load(open(work + "/footprint.json"))["benchmarks"]][0]
print("\nFootprint: map of 200 000 keys, 40-byte values, in one memcg::jemalloc arena\n")
print("| requested (MiB) | memory.current (MiB) | RSS growth (MiB) | current / requested | current / RSS |")
print("| --- | --- | --- | --- | --- |")
print(f"| {fp['requested_MiB']:.1f} | {fp['current_MiB']:.1f} | {fp['rss_MiB']:.1f} | "
      f"{fp['current_over_requested']:.3f} | {fp['current_over_rss']:.3f} |")
PY
