#!/usr/bin/env bash
# The uncharge slow path with waiters elsewhere, side by side: BM_WaitUnchargeSlowWithWaiter
# /0 (no waiter), /1 (a waiter on another group of the controller), /2 (a waiter in another
# controller) and /3 (a waiter on the uncharging group's parent, for contrast), ROUNDS rounds of
# one process each, the order of the cases rotated between rounds and interleaved within one.
# Prints, per case, the median real and CPU time over the rounds, and the median over the rounds
# of each round's ratio to /0 (the machine's noise moves whole rounds; a ratio within one round
# cancels most of it).
# Usage: bench/charge_wait_rounds.sh <build-dir> [rounds] [min-time-seconds]
set -euo pipefail
build=$1
rounds=${2:-15}
min_time=${3:-0.2}
order=('[0123]' '[1230]' '[2301]' '[3012]')
for r in $(seq "$rounds"); do
  "$build/bench/charge_wait_bench" \
    --benchmark_filter="BM_WaitUnchargeSlowWithWaiter/${order[$((r % 4))]}\$" \
    --benchmark_min_time="$min_time" --benchmark_enable_random_interleaving=true \
    --benchmark_format=csv 2>/dev/null | grep '^"BM' | sed "s/^/$r,/"
done | python3 -c '
import csv, statistics as st, sys
d = {}
for r in csv.reader(sys.stdin):
    d.setdefault(int(r[0]), {})[r[1].split("/")[-1]] = (float(r[3]), float(r[4]))
print("case  real_ns  cpu_ns  real/0  cpu/0   (medians over %d rounds)" % len(d))
for c in "0123":
    rows = [v for v in d.values() if c in v and "0" in v]
    med = lambda i: st.median(v[c][i] for v in rows)
    rat = lambda i: st.median(v[c][i] / v["0"][i] for v in rows)
    print("/%s  %8.1f %7.1f  %6.3f  %6.3f" % (c, med(0), med(1), rat(0), rat(1)))
'
