#!/usr/bin/env python3
"""Markdown table of charge_bench medians, with ratios computed within the same run.

Usage: charge_table.py RESULT.json   (from --benchmark_out=RESULT.json --benchmark_out_format=json
                                      --benchmark_repetitions=3)

Columns: wall ns per pair (all threads together), CPU ns per pair (per thread), throughput, and
the throughput ratio against the reference row of the same thread count (Pair/memcg, or the
first row of the family). Then the headline ratios of docs/BENCHMARKS-charge.md.
"""
import json
import re
import sys


def main(path):
    with open(path) as f:
        data = json.load(f)
    rows = {}
    order = []
    for b in data["benchmarks"]:
        if b.get("aggregate_name") != "median":
            continue
        name = b["run_name"]
        scale = {"ns": 1.0, "us": 1e3, "ms": 1e6}[b["time_unit"]]
        rows[name] = {
            "real": b["real_time"] * scale,
            "cpu": b["cpu_time"] * scale,
            "ips": b.get("items_per_second"),
            "threads": b.get("threads", 1),
        }
        order.append(name)

    def family(name):
        return name.split("/")[0]

    def ref_of(name):
        t = rows[name]["threads"]
        if family(name) == "Pair":
            return f"Pair/memcg/real_time/threads:{t}"
        for n in order:
            if family(n) == family(name) and rows[n]["threads"] == t:
                return n
        return name

    print("| benchmark | threads | wall ns/pair | CPU ns/pair | Mpairs/s | ratio |")
    print("| --- | --- | --- | --- | --- | --- |")
    for n in order:
        r = rows[n]
        ref = rows.get(ref_of(n))
        ratio = ""
        if r["ips"] and ref and ref["ips"]:
            ratio = f"{r['ips'] / ref['ips']:.2f}"
        mps = f"{r['ips'] / 1e6:.1f}" if r["ips"] else ""
        short = re.sub(r"/real_time|/threads:\d+|/iterations:\d+", "", n)
        print(f"| `{short}` | {r['threads']} | {r['real']:.1f} | {r['cpu']:.1f} | {mps} | {ratio} |")

    def ips(n):
        return rows[n]["ips"] if n in rows else float("nan")

    p = "Pair/memcg/real_time/threads:"
    print()
    print(f"- memcg 2 threads / 1 thread: {ips(p + '2') / ips(p + '1'):.2f}x")
    print(f"- memcg / PackedAtomic, 2 threads: "
          f"{ips(p + '2') / ips('Pair/PackedAtomic/real_time/threads:2'):.1f}x")
    print(f"- memcg / PackedAtomic, 1 thread: "
          f"{ips(p + '1') / ips('Pair/PackedAtomic/real_time/threads:1'):.1f}x")
    print(f"- memcg / MutexTree, 2 threads: "
          f"{ips(p + '2') / ips('Pair/MutexTree/real_time/threads:2'):.1f}x")
    ns = "Pair/memcg_no_stat/real_time/threads:1"
    if ns in rows:
        print(f"- cost of the statistic in a 1-thread pair (CPU time): "
              f"{rows[p + '1']['cpu'] - rows[ns]['cpu']:+.2f} ns")
    rs = "Pair/memcg_rstat_per_charge/real_time/threads:1"
    if rs in rows:
        print(f"- statistic cached in the stock slot / through rstat per charge: "
              f"{ips(p + '1') / ips(rs):.1f}x")
    ud = "Pair/memcg_uncharge_direct/real_time/threads:1"
    if ud in rows:
        print(f"- uncharge (refill) / uncharge_direct, 1 thread: {ips(p + '1') / ips(ud):.1f}x")


if __name__ == "__main__":
    main(sys.argv[1])
