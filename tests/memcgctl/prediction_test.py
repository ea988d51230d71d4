#!/usr/bin/env python3
"""memcgctl's prediction of the query service ranks the policies as the service measured them
(docs/BENCHMARKS-policy.md): learned-peak admission with the admission-aware victim order
(`all`) kills far fewer well-behaved queries than `today`, growth that waits 200 ms (`wait200`)
serves far fewer queries per second, and every runaway is stopped under every policy.

  prediction_test.py MEMCGCTL SOURCE_DIR SCRATCH_DIR
"""
import json
import os
import subprocess
import sys

ctl, src, scratch = sys.argv[1:4]
sys.path.insert(0, os.path.join(src, "examples"))
import query_service_gen as gen  # noqa: E402

os.makedirs(scratch, exist_ok=True)
failures = []
seeds = (1, 2)
for seed in seeds:
    got = {}
    for policy in ("today", "wait200", "all"):
        text = gen.scenario(policy, seed=seed, queries=20)
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
              f"({c['qps']:.0f} q/s), runaways {c['runaways']} (limited {c['limited']}, "
              f"unstopped {c['unstopped']})")
        if c["unstopped"] or c["killed_runaway"] + c["limited"] != c["runaways"]:
            failures.append(f"seed {seed} {policy}: a runaway was not stopped: {c}")
        if c["queries"] < 200:
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
    # Measured: wait200 ~0.15x today's queries/s. all: 0.42-0.59x of today's completed queries/s
    # with workers blocking in their admission, as the scenario's lanes do (0.56-0.77x predicted
    # at 30 queries per lane, 0.97-0.99x at 20); 0.98-1.00x with the service's admission
    # front-end, which scenarios do not model. Blocking lanes still cost all some throughput.
    if not wait200["qps"] * 2 <= today["qps"]:
        failures.append(f"seed {seed}: wait200 serves {wait200['qps']:.0f} q/s, not well below "
                        f"today's {today['qps']:.0f}")
    if not everything["qps"] < today["qps"]:
        failures.append(f"seed {seed}: all serves {everything['qps']:.0f} q/s, not below "
                        f"today's {today['qps']:.0f}")
    # Measured: wait200 ~0.12x today's well-behaved kills in a fixed time.
    if not wait200["good_kills_per_s"] < today["good_kills_per_s"]:
        failures.append(f"seed {seed}: wait200 kills well-behaved queries at "
                        f"{wait200['good_kills_per_s']:.1f}/s, not below today's "
                        f"{today['good_kills_per_s']:.1f}/s")
for f in failures:
    print("FAIL:", f, file=sys.stderr)
sys.exit(1 if failures else 0)
