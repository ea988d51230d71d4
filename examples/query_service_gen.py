#!/usr/bin/env python3
"""Writes examples/query_service.yaml: examples/query_service.cpp as a memcgctl scenario.

The same tenants, limits and cache; 16 worker lanes, each running queries one after another
(`iterations` with `new_member`: each query a new member with a shape of its own). A query is
what the service's run_query does, on the library's Reservation API: one try of the service's
admission front-end, `reserve: { size: ESTIMATE, wait: 5ms, oom: pieces, ends_on: refused }`
(Reservation::reserve_for for kAdmitTry, so learned-peak admission and never-fits apply; a try
that times out ends the iteration: the query is put back and the lane takes its next query, so a
lane does not sit in one tenant's admission), then growing every 2 ms by a tenth of its growth
(`reserve: { grow: ... }`, Reservation::grow) to its estimate plus 0-50 %, and released when the
query ends (the member exits). As in the service, each query draws its own tenant (etl 40 %,
dash 30 %, adhoc 30 %), estimate (etl 16-64M, others 8-32M) and growth; 5 % of etl's queries are
runaways (4M every step until stopped), 0.5 % of etl's ask for 400M (more than etl's 320M: never
fits). The draws use a fixed seed, so a file is one sample of the service's distribution.

  python3 examples/query_service_gen.py [--policy P] [--seed N] [--queries N] > FILE
  memcgctl run FILE --json | python3 examples/query_service_gen.py --summarize FILE

The second form prints the prediction: kills of runaway and of well-behaved queries, runaways
stopped at etl's limit (never-fits), waits not served (growth waits that timed out), queries put
back (admission tries that timed out), queries and the virtual time they took (queries/s counts
finished and killed queries, as the service's finished rate does; completed q/s those that
finished). A put-back query is not retried: the lane's next listed query (drawn as any other,
so possibly the same tenant's) takes its place, where the service retries it, within its 2 s
deadline, after another tenant's.

Policies (as the service's --policy): `today` (memory.oom.order: kernel, memory.admit.growth: 1,
growth by grow()), `excess` (memory.oom.order: excess, growth 1, grow()), `wait200` (kernel
order, growth 1, growth by grow_for(chunk, 200ms), then grow() when it timed out), `admit`
(kernel order, learned-peak admission: memory.admit.growth auto, grow()), `all` (the library's
defaults: memory.oom.order auto, memory.admit.growth auto, grow()). Unwinding: every member
takes 4 ms (two of the service's steps) to give its memory back after a kill.
"""
import argparse
import json
import random
import re
import sys

WORKERS = 16
QUERIES = 30        # queries per worker
STEP_MS = 2         # the service's kStepTime
TRY_MS = 5          # one admission try of the service's front-end (kAdmitTry)
STEPS = 10          # steps of work of a well-behaved query (kSteps)
CHUNK = 4 << 20     # a runaway's growth step (kChunk)
MIB = 1 << 20
RUNAWAY_GROWS = 120  # a runaway's growth steps written: past etl's 320M after at most 76
POLICIES = {  # policy: (memory.oom.order, memory.admit.growth, growth that waits 200 ms)
    "today": ("kernel", "1", False),
    "excess": ("excess", "1", False),
    "wait200": ("kernel", "1", True),
    "admit": ("kernel", "auto", False),
    "all": ("auto", "auto", False),
}


def size(b):
    """Bytes as the scenario's size grammar, in whole KiB (the reservation rounds to units)."""
    k = (b + 1023) // 1024
    return f"{k // 1024}M" if k % 1024 == 0 else f"{k}K"


def query(rng, w, wait200):
    """One query's shape, drawn as query_service.cpp draws it, and its steps."""
    pick = rng.random()
    tenant = "svc/etl" if pick < 0.4 else "svc/dash" if pick < 0.7 else "svc/adhoc"
    etl = tenant == "svc/etl"
    est = (16 if etl else 8) * MIB + int(rng.random() * (48 if etl else 24) * MIB)
    final = est + int(rng.random() * 0.5 * est)
    kind = rng.random()
    shape = "well-behaved"
    if etl and kind < 0.05:
        shape = "runaway"
    if etl and kind > 0.995:
        est, shape = 400 * MIB, "never-fits"
    final = max(final, est)
    m = f"w{w}"
    # Admission, one try of the service's front-end: reserve_for(estimate, 5 ms). A try that
    # times out ends the iteration (the query is put back) and the lane takes its next query;
    # never-fits ends it too (the query fails).
    steps = [f"reserve: {{ member: {m}, size: {size(est)}, wait: {TRY_MS}ms, oom: pieces, "
             f"ends_on: refused }}"]
    if shape == "runaway":
        # 4M every step until killed or refused at etl's limit; a growth that finds no victim
        # (nomem) is asked again at the next step, as the service's runaway does.
        grow = f"grow: {size(CHUNK)}" + (", wait: 200ms, on_timeout: grow" if wait200 else "")
        for _ in range(RUNAWAY_GROWS):
            steps += [f"tick: {STEP_MS}ms",
                      f"reserve: {{ member: {m}, {grow}, ends_on: [ killed, never-fits ] }}"]
    else:
        step = max(MIB, (final - est) // STEPS)
        grown = est
        for _ in range(STEPS * 4):
            steps.append(f"tick: {STEP_MS}ms")
            if grown >= final:
                break
            add = min(step, final - grown)
            grow = f"grow: {size(add)}" + (", wait: 200ms, on_timeout: grow" if wait200 else "")
            steps.append(f"reserve: {{ member: {m}, {grow}, ends_on: refused }}")
            grown += add
    return tenant, shape, steps


def prediction(text, doc):
    """What a run of the scenario `text` predicts, from memcgctl's JSON report `doc`: the
    service's counters (query_service.cpp) per query shape, and the virtual time it took."""
    shapes = dict(re.findall(r"# (w\d+#\d+) \S+ (\S+)$", text, re.M))
    steps = {}  # per query (a lane's iteration member, w3#7): its reserve steps' results
    killed = set()
    elapsed = 0
    for s in doc["steps"]:
        r = s.get("result", {})
        killed.update(r.get("killed", []))
        if s["kind"] == "parallel" and not s.get("lane"):
            elapsed = max(elapsed, r.get("elapsed_ns", 0))
        if s["kind"] == "reserve" and s.get("lane"):
            steps.setdefault(s["lane"], []).append(r)
    c = dict.fromkeys(("done", "killed_runaway", "killed_good", "runaways", "limited",
                       "unstopped", "never_fits", "put_back", "failed", "waits_not_served"), 0)
    for q, shape in shapes.items():
        rs = steps.get(q, [])
        c["waits_not_served"] += sum(1 for r in rs[1:] if r.get("waited") == "timed-out")
        admission = rs[0]["status"] if rs else "none"
        last = rs[-1]["status"] if rs else "none"
        if admission == "never-fits":
            c["never_fits"] += 1
            continue
        if admission == "timed-out":  # a front-end try that timed out: the query put back
            c["put_back"] += 1
            continue
        if admission not in ("ok", "forced"):
            c["failed"] += 1
            continue
        if shape == "runaway":
            c["runaways"] += 1
        if q in killed:
            c["killed_runaway" if shape == "runaway" else "killed_good"] += 1
        elif shape == "runaway":
            c["limited" if last == "never-fits" else "unstopped"] += 1
        elif last not in ("ok", "forced"):
            c["failed"] += 1
        else:
            c["done"] += 1
    c["queries"] = c["done"] + c["killed_runaway"] + c["killed_good"]  # as the service counts
    c["seconds"] = elapsed / 1e9
    c["qps"] = c["queries"] / c["seconds"] if elapsed else 0.0
    c["done_qps"] = c["done"] / c["seconds"] if elapsed else 0.0  # completed, as the service's
    c["good_kills_per_s"] = c["killed_good"] / c["seconds"] if elapsed else 0.0
    return c


def summarize(path):
    c = prediction(open(path).read(), json.load(sys.stdin))
    print(f"predicted: {c['killed_runaway']} runaway / {c['killed_good']} well-behaved kills "
          f"({c['good_kills_per_s']:.1f} well-behaved kills per virtual s), "
          f"runaways {c['runaways']} (limited {c['limited']}, unstopped {c['unstopped']}), "
          f"{c['waits_not_served']} waits not served, never-fits {c['never_fits']}, "
          f"put back {c['put_back']}, failed {c['failed']}, {c['queries']} queries in "
          f"{c['seconds']:.3f} s virtual ({c['qps']:.0f} q/s, {c['done_qps']:.0f} completed)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--summarize", metavar="FILE")
    ap.add_argument("--policy", default="all", choices=sorted(POLICIES))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--queries", type=int, default=QUERIES, help="queries per worker (1-40: the file stays within memcgctl's 1 MiB)")
    a = ap.parse_args()
    if a.summarize:
        summarize(a.summarize)
        return
    if not 1 <= a.queries <= 40:
        ap.error("--queries is from 1 to 40")
    sys.stdout.write(scenario(a.policy, a.seed, a.queries))


def scenario(policy, seed=1, queries=QUERIES):
    """The scenario's text for `policy` (a key of POLICIES)."""
    order, growth, wait200 = POLICIES[policy]
    knobs = f"memory.oom.order: {order}, memory.admit.growth: {growth}"
    out = [f"# Generated by examples/query_service_gen.py --policy {policy} --seed {seed}"
           + (f" --queries {queries}" if queries != QUERIES else ""),
           f"name: query service, policy {policy}",
           "config: { batch: 1, unwind: 4ms }",
           "groups:",
           f"  svc: {{ memory.max: 512M, {knobs} }}",
           f"  svc/etl: {{ memory.max: 320M, {knobs} }}",
           f"  svc/dash: {{ memory.max: 256M, memory.min: 128M, {knobs} }}",
           f"  svc/adhoc: {{ memory.max: 256M, memory.low: 32M, {knobs} }}",
           "steps:",
           "  - cache: { name: dash-cache, group: svc/dash, grow: 84M }"]
    # A lane is a worker thread; each iteration one query, a new member of the query's tenant
    # (`group`), its shape drawn from the worker's own seeded stream, as in the service.
    lanes = []
    for w in range(WORKERS):
        rng = random.Random(seed * 1000003 + w)
        lanes.append([query(rng, w, wait200) for _ in range(queries)])
    for w in range(WORKERS):
        out.append(f"  - member: {{ name: w{w}, group: svc }}")
    out.append("  - parallel:")
    for w, lane in enumerate(lanes):
        out += [f"      w{w}:", "        new_member: true", "        iterations:"]
        for i, (tenant, shape, steps) in enumerate(lane, 1):
            out.append(f"          # w{w}#{i} {tenant} {shape}")
            out.append(f"          - {{ group: {tenant}, steps: [ {', '.join(steps)} ] }}")
    out += ["  - expect: { group: svc, file: memory.peak, le: 512M }",
            "  - cache: { name: dash-cache, drop: true }",
            "  - expect: { group: svc, file: memory.current, eq: 0 }",
            "  - print: { group: svc, file: memory.events }"]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
