#!/usr/bin/env python3
"""memcgctl's prediction of the query service ranks the policies as the service measured them
(docs/BENCHMARKS-policy.md): learned-peak admission with the admission-aware victim order
(`all`) kills far fewer well-behaved queries than `today`, growth that waits 200 ms (`wait200`)
serves far fewer queries per second, `all` completes not far fewer than `today` (lanes that put
a query back when its 5 ms admission try times out, as the service's front-end does), and every
runaway is stopped under every policy.

The fronts that do not put queries back (`block`: each tenant's workers waiting up to 2 s in
its admission; `queue`: memcgctl's admission queue), with the tenants' result caches, summed
over seeds 1-4:
`all` kills far fewer well-behaved queries than `today` and stops every runaway. When the
library's waiting admission takes what reclaim can give (probed with a small scenario: an
admission next to a full unprotected cache), `all` also completes at least as many queries per
second as `today` while every tenant runs; before, the caches throttle it (printed, not
asserted).

  prediction_test.py MEMCGCTL SOURCE_DIR SCRATCH_DIR
"""
from concurrent.futures import ThreadPoolExecutor
import json
import os
import subprocess
import sys

ctl, src, scratch = sys.argv[1:4]
sys.path.insert(0, os.path.join(src, "examples"))
import query_service_gen as gen  # noqa: E402

os.makedirs(scratch, exist_ok=True)
failures = []
seeds = (1, 2, 3)
for seed in seeds:
    got = {}
    for policy in ("today", "wait200", "all"):
        text = gen.scenario(policy, seed=seed)  # 30 queries per lane, as documented
        path = os.path.join(scratch, f"qs-{policy}-{seed}.yaml")
        with open(path, "w") as f:
            f.write(text)
        run = subprocess.run([ctl, "run", path, "--json"], capture_output=True, text=True,
                             timeout=240)
        if run.returncode != 0:
            failures.append(f"seed {seed} {policy}: memcgctl exited {run.returncode}: "
                            f"{run.stderr[-500:]}")
            continue
        c = gen.prediction(text, json.loads(run.stdout))
        got[policy] = c
        print(f"seed {seed} {policy}: {c['killed_runaway']} runaway / {c['killed_good']} "
              f"well-behaved kills, {c['queries']} queries in {c['seconds']:.3f} s "
              f"({c['qps']:.0f} q/s, {c['done_qps']:.0f} completed), {c['put_back']} put back, "
              f"runaways {c['runaways']} (limited {c['limited']}, "
              f"unstopped {c['unstopped']})")
        if c["unstopped"] or c["killed_runaway"] + c["limited"] != c["runaways"]:
            failures.append(f"seed {seed} {policy}: a runaway was not stopped: {c}")
        if c["queries"] < 150:
            failures.append(f"seed {seed} {policy}: only {c['queries']} queries ran: {c}")
    if len(got) != 3:
        continue
    today, wait200, everything = got["today"], got["wait200"], got["all"]
    # Measured: all ~0.002x today's well-behaved kills (in a fixed time); predicted per virtual
    # second and in count (the same queries run under each policy).
    if not (today["killed_good"] >= 10 and
            everything["killed_good"] * 5 <= today["killed_good"] and
            everything["good_kills_per_s"] * 5 <= today["good_kills_per_s"]):
        failures.append(f"seed {seed}: all does not kill far fewer well-behaved queries than "
                        f"today: {everything['killed_good']} vs {today['killed_good']}")
    # Measured, with the service's admission front-end (5 ms tries, a query put back when not
    # admitted; the scenario's lanes try for 5 ms and take their next query): wait200 0.15-0.17x
    # today's finished queries/s, all 0.85-0.88x finished and 0.98-1.00x completed.
    if not wait200["qps"] * 2 <= today["qps"]:
        failures.append(f"seed {seed}: wait200 serves {wait200['qps']:.0f} q/s, not well below "
                        f"today's {today['qps']:.0f}")
    if not everything["done_qps"] >= 0.8 * today["done_qps"]:
        failures.append(f"seed {seed}: all completes {everything['done_qps']:.0f} q/s, below 0.8x "
                        f"today's {today['done_qps']:.0f}")
    # Measured: wait200 0.014-0.023x today's well-behaved kills per second.
    if not wait200["good_kills_per_s"] < today["good_kills_per_s"]:
        failures.append(f"seed {seed}: wait200 kills well-behaved queries at "
                        f"{wait200['good_kills_per_s']:.1f}/s, not below today's "
                        f"{today['good_kills_per_s']:.1f}/s")

# Does a waiting admission take what reclaim can give at once? Fixed growth factor 2: the
# admission expects 32M beside a 40M cache under a 64M limit, which fits only by reclaiming it.
PROBE = """
groups:
  g: { memory.max: 64M, memory.admit.growth: 2 }
steps:
  - cache: { name: c, group: g, grow: 40M }
  - member: { name: q, group: g }
  - reserve: { member: q, size: 16M, wait: 0ms, expect: ok }
"""
probe = os.path.join(scratch, "admission-reclaims.yaml")
with open(probe, "w") as f:
    f.write(PROBE)
run = subprocess.run([ctl, "run", probe], capture_output=True, text=True, timeout=60)
if run.returncode not in (0, 1):
    failures.append(f"the admission probe exited {run.returncode}: {run.stderr[-500:]}")
reclaims = run.returncode == 0
print(f"a waiting admission {'reclaims' if reclaims else 'does not reclaim'} for its room")


def predict(front, policy, seed):
    text = gen.scenario(policy, seed=seed, front=front, caches=True)
    path = os.path.join(scratch, f"qs-{front}-caches-{policy}-{seed}.yaml")
    with open(path, "w") as f:
        f.write(text)
    run = subprocess.run([ctl, "run", path, "--json"], capture_output=True, text=True,
                         timeout=240)
    if run.returncode != 0:
        return f"memcgctl exited {run.returncode}: {run.stderr[-500:]}"
    return gen.prediction(text, json.loads(run.stdout))


# One scenario holds about 300 completions while every tenant runs, so one seed's ratio moves
# by 10-30 % per tenant between seeds: the fronts are judged on the sum over FRONT_SEEDS.
FRONT_SEEDS = (1, 2, 3, 4)
runs = [(front, policy, seed) for front in ("block", "queue") for policy in ("today", "all")
        for seed in FRONT_SEEDS]
with ThreadPoolExecutor(max_workers=2) as pool:
    results = dict(zip(runs, pool.map(lambda fps: predict(*fps), runs)))
for front in ("block", "queue"):
    got = {}
    for policy in ("today", "all"):
        total = {"killed_good": 0, "done": 0, "steady_done": 0, "steady_seconds": 0.0,
                 "steady_by_tenant": {t: 0 for t in gen.TENANTS}}
        for seed in FRONT_SEEDS:
            c = results[(front, policy, seed)]
            if isinstance(c, str):
                failures.append(f"{front} caches {policy} seed {seed}: {c}")
                total = None
                break
            print(f"{front} caches {policy} seed {seed}: {c['killed_runaway']} runaway / "
                  f"{c['killed_good']} well-behaved kills, {c['done']} completed, "
                  f"{c['timed_out']} timed out, {c['seconds']:.3f} s; while every tenant ran "
                  f"{c['steady_done']} completed in {c['steady_seconds']:.3f} s "
                  f"({c['steady_qps']:.0f} q/s: {c['steady_by_tenant']})")
            if c["unstopped"] or c["killed_runaway"] + c["limited"] != c["runaways"]:
                failures.append(f"{front} caches {policy} seed {seed}: a runaway was not "
                                f"stopped: {c}")
            for k in ("killed_good", "done", "steady_done", "steady_seconds"):
                total[k] += c[k]
            for t in gen.TENANTS:
                total["steady_by_tenant"][t] += c["steady_by_tenant"][t]
        if total is not None:
            got[policy] = total
    if len(got) != 2:
        continue
    today, everything = got["today"], got["all"]
    if not (today["killed_good"] >= 10 and everything["killed_good"] * 5 <= today["killed_good"]):
        failures.append(f"{front} caches: all does not kill far fewer well-behaved queries than "
                        f"today: {everything['killed_good']} vs {today['killed_good']}")

    def rate(c, n):
        return n / c["steady_seconds"] if c["steady_seconds"] else 0.0

    ratio = (rate(everything, everything["steady_done"]) / rate(today, today["steady_done"])
             if today["steady_done"] else 0.0)
    per_1000 = 1000 * everything["killed_good"] / max(everything["done"], 1)
    shares = {t: rate(everything, everything["steady_by_tenant"][t]) /
              rate(today, today["steady_by_tenant"][t])
              for t in gen.TENANTS if today["steady_by_tenant"][t]}
    print(f"{front} caches, seeds {FRONT_SEEDS}: all completes {ratio:.2f}x today's queries/s "
          f"while every tenant runs (per tenant {', '.join(f'{t} {x:.2f}x' for t, x in shares.items())}), "
          f"{per_1000:.1f} well-behaved kills per 1000 completed, "
          f"{today['killed_good'] / max(everything['killed_good'], 1):.1f}x fewer than today")
    if not reclaims:
        continue
    # The targets, once admission reclaims: a service whose workers block per tenant at
    # 0.95x or more of the previous policy's queries/s with at most 25 well-behaved kills per
    # 1000; with the admission queue 1.0x or more and every tenant at 0.9x or more of its own
    # rate. Kills: the direction (5x fewer, above); the service measures 100x fewer and more,
    # the scenario's smaller queries-per-run about 8x (docs/BENCHMARKS-policy.md).
    floor = {"block": 0.95, "queue": 1.0}[front]
    if ratio < floor:
        failures.append(f"{front} caches: all completes {ratio:.2f}x today's queries/s, below "
                        f"{floor}x, although admission reclaims")
    if front == "block" and per_1000 > 25:
        failures.append(f"block caches: all kills {per_1000:.1f} well-behaved queries per 1000")
    if front == "queue":
        for t, x in shares.items():
            if x < 0.9:
                failures.append(f"queue caches: {t} completes {x:.2f}x its rate under today")

for f in failures:
    print("FAIL:", f, file=sys.stderr)
sys.exit(1 if failures else 0)
