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

  python3 examples/query_service_gen.py [--policy P] [--seed N] [--queries N]
                                        [--front retry|block|queue] [--caches] > FILE
  memcgctl run FILE --json | python3 examples/query_service_gen.py --summarize FILE

The second form prints the prediction: kills of runaway and of well-behaved queries, runaways
stopped at etl's limit (never-fits), waits not served (growth waits that timed out), queries put
back (admission tries that timed out), queries whose whole admission deadline passed (timed
out), queries and the virtual time they took (queries/s counts finished and killed queries, as
the service's finished rate does; completed q/s those that finished), and the completed queries
per tenant.

Fronts (how the workers take queries; the same queries, drawn with the same seed, in each):
`retry` (the default, the service's front-end as above: a put-back query is not retried: the
lane's next listed query, drawn as any other, so possibly the same tenant's, takes its place,
where the service retries it, within its 2 s deadline, after another tenant's); `block` (each
tenant's own workers, etl 6, dash 5 and adhoc 5, each waiting up to 2 s in its tenant's
admission: `reserve: { size: ESTIMATE, wait: 2s }`, a query that times out is lost); `queue`
(memcgctl's admission queue, docs/scenarios.md: 16 workers shared by the tenants, tries without
waiting, weights etl 400, dash 300, adhoc 300 as their share of the queries, a deadline of 2 s
over all of a query's tries). `--caches`: each tenant keeps a result cache (an LRU cache of 96M
for etl and adhoc, 128M for dash beside its 84M cache: reclaimable, protected only by the
group's memory.min and memory.low) that each finished well-behaved query fills with its result
(1-4 MiB, drawn from a stream of its own), so that memory sits at the budget.

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
TENANTS = ("svc/etl", "svc/dash", "svc/adhoc")
FRONTS = ("retry", "block", "queue")
DEADLINE_S = 2      # a query's whole admission deadline (kAdmitTimeout)
BLOCK_WORKERS = {"svc/etl": 6, "svc/dash": 5, "svc/adhoc": 5}  # 16, as the queries' mix
# Each tenant's result cache: an LRU cache of at most this much (dash's beside its 84M cache).
CACHE_CAPACITY = {"svc/etl": "96M", "svc/dash": "128M", "svc/adhoc": "96M"}
WEIGHTS = {"svc/etl": 400, "svc/dash": 300, "svc/adhoc": 300}  # admit_weight, as the mix
POLICIES = {  # policy: (memory.oom.order, memory.admit.growth, growth that waits 200 ms)
    "today": ("kernel", "1", False),
    "excess": ("excess", "1", False),
    "wait200": ("kernel", "1", True),
    "admit": ("kernel", "auto", False),
    "all": ("auto", "auto", False),
}


def cache_name(tenant):
    return tenant.split("/")[1] + "-results"


def lane_name(tenant, k):
    return f"{tenant.split('/')[1]}{k}"


def size(b):
    """Bytes as the scenario's size grammar, in whole KiB (the reservation rounds to units)."""
    k = (b + 1023) // 1024
    return f"{k // 1024}M" if k % 1024 == 0 else f"{k}K"


def draw(rng):
    """One query's shape, drawn as query_service.cpp draws it: (tenant, shape, estimate, final)."""
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
    return tenant, shape, est, max(final, est)


def work(m, shape, est, final, wait200, fill=None):
    """A query's steps after its admission: growth every 2 ms, then (`fill`: a `cache` step)
    its result put into its tenant's result cache once it finished."""
    steps = []
    if shape == "runaway":
        # 4M every step until killed or refused at etl's limit; a growth that finds no victim
        # (nomem) is asked again at the next step, as the service's runaway does.
        grow = f"grow: {size(CHUNK)}" + (", wait: 200ms, on_timeout: grow" if wait200 else "")
        for _ in range(RUNAWAY_GROWS):
            steps += [f"tick: {STEP_MS}ms",
                      f"reserve: {{ member: {m}, {grow}, ends_on: [ killed, never-fits ] }}"]
        return steps
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
    if fill and shape == "well-behaved":
        steps.append(fill)
    return steps


def query(rng, w, wait200):
    """One query of worker w for the `retry` front: its shape and its steps."""
    tenant, shape, est, final = draw(rng)
    m = f"w{w}"
    # Admission, one try of the service's front-end: reserve_for(estimate, 5 ms). A try that
    # times out ends the iteration (the query is put back) and the lane takes its next query;
    # never-fits ends it too (the query fails).
    steps = [f"reserve: {{ member: {m}, size: {size(est)}, wait: {TRY_MS}ms, oom: pieces, "
             f"ends_on: refused }}"]
    return tenant, shape, steps + work(m, shape, est, final, wait200)


def prediction(text, doc):
    """What a run of the scenario `text` predicts, from memcgctl's JSON report `doc`: the
    service's counters (query_service.cpp) per query shape, and the virtual time it took."""
    front = (re.search(r"--front (\w+)", text.split("\n", 1)[0]) or [None, "retry"])[1]
    shapes = {}  # per query (a lane's iteration member, w3#7, or a queue's item, q#12)
    tenants = {}
    for q, tenant, shape in re.findall(r"# (\w+#\d+) (\S+) (\S+)$", text, re.M):
        shapes[q], tenants[q] = shape, tenant
    steps = {}  # per query: its reserve steps' results
    ends = {}  # per query: the virtual time its last step ended
    admitted = {}  # per queue item: its admission's status
    killed = set()
    elapsed = 0
    for s in doc["steps"]:
        r = s.get("result", {})
        killed.update(r.get("killed", []))
        if s["kind"] in ("parallel", "queue") and not s.get("lane"):
            elapsed = max(elapsed, r.get("elapsed_ns", 0))
            for item in r.get("items", []):
                admitted[item["member"]] = item["status"]
        if s.get("lane"):
            ends[s["lane"]] = max(ends.get(s["lane"], 0), s["time_ns"])
            if s["kind"] == "reserve":
                steps.setdefault(s["lane"], []).append(r)
    c = dict.fromkeys(("done", "killed_runaway", "killed_good", "runaways", "limited",
                       "unstopped", "never_fits", "put_back", "timed_out", "failed",
                       "waits_not_served"), 0)
    c["front"] = front
    c["done_by_tenant"] = dict.fromkeys(TENANTS, 0)
    done_at = []  # (end, tenant) of every query that finished
    for q, shape in shapes.items():
        rs = steps.get(q, [])
        if q in admitted:  # a queue's item: admitted by the queue, grown by its steps
            admission, grows = admitted[q], rs
        else:  # a lane's query: its first reserve step is its admission
            admission, grows = (rs[0]["status"] if rs else "none"), rs[1:]
        c["waits_not_served"] += sum(1 for r in grows if r.get("waited") == "timed-out")
        last = grows[-1]["status"] if grows else admission
        if admission == "never-fits":
            c["never_fits"] += 1
            continue
        if admission == "timed-out":
            # retry: a front-end try that timed out, the query put back; block and queue: the
            # query's whole admission deadline passed
            c["put_back" if front == "retry" else "timed_out"] += 1
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
            c["done_by_tenant"][tenants[q]] += 1
            done_at.append((ends.get(q, 0), tenants[q]))
    c["queries"] = c["done"] + c["killed_runaway"] + c["killed_good"]  # as the service counts
    c["seconds"] = elapsed / 1e9
    c["qps"] = c["queries"] / c["seconds"] if elapsed else 0.0
    c["done_qps"] = c["done"] / c["seconds"] if elapsed else 0.0  # completed, as the service's
    c["good_kills_per_s"] = c["killed_good"] / c["seconds"] if elapsed else 0.0
    # A service always has queries of every tenant; a list of queries ends with the slowest
    # tenant's alone. The steady rate counts the queries that finished while every tenant still
    # had queries finishing: up to the first tenant's last completion.
    last = {}
    for t_end, tenant in done_at:
        last[tenant] = max(last.get(tenant, 0), t_end)
    steady = min(last.values()) if len(last) == len(TENANTS) else 0
    c["steady_seconds"] = steady / 1e9
    c["steady_done"] = sum(1 for t_end, _ in done_at if t_end <= steady)
    c["steady_qps"] = c["steady_done"] / c["steady_seconds"] if steady else 0.0
    c["steady_by_tenant"] = {t: sum(1 for e, u in done_at if u == t and e <= steady)
                             for t in TENANTS}
    return c


def summarize(path):
    c = prediction(open(path).read(), json.load(sys.stdin))
    by_tenant = ", ".join(f"{t.split('/')[1]} {n}" for t, n in c["done_by_tenant"].items())
    steady = ", ".join(f"{t.split('/')[1]} {n}" for t, n in c["steady_by_tenant"].items())
    print(f"predicted ({c['front']}): {c['killed_runaway']} runaway / {c['killed_good']} "
          f"well-behaved kills ({c['good_kills_per_s']:.1f} well-behaved kills per virtual s), "
          f"runaways {c['runaways']} (limited {c['limited']}, unstopped {c['unstopped']}), "
          f"{c['waits_not_served']} waits not served, never-fits {c['never_fits']}, "
          f"put back {c['put_back']}, timed out {c['timed_out']}, failed {c['failed']}, "
          f"{c['queries']} queries in {c['seconds']:.3f} s virtual ({c['qps']:.0f} q/s, "
          f"{c['done_qps']:.0f} completed: {by_tenant}); while every tenant ran: "
          f"{c['steady_done']} completed in {c['steady_seconds']:.3f} s "
          f"({c['steady_qps']:.0f} q/s: {steady})")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--summarize", metavar="FILE")
    ap.add_argument("--policy", default="all", choices=sorted(POLICIES))
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--queries", type=int, default=QUERIES, help="queries per worker (1-40: the file stays within memcgctl's 1 MiB)")
    ap.add_argument("--front", default="retry", choices=FRONTS,
                    help="how workers take queries: retry (5 ms tries, put back), block (each "
                         "tenant's workers wait up to 2 s in its admission), queue (memcgctl's "
                         "admission queue)")
    ap.add_argument("--caches", action="store_true",
                    help="each tenant keeps a result cache that finished queries fill (1-4 MiB)")
    a = ap.parse_args()
    if a.summarize:
        summarize(a.summarize)
        return
    if not 1 <= a.queries <= 40:
        ap.error("--queries is from 1 to 40")
    sys.stdout.write(scenario(a.policy, a.seed, a.queries, a.front, a.caches))


def drawn(seed, queries):
    """The queries of a run, worker by worker (WORKERS lists of `queries`), each with its shape
    and the size of its result (1-4 MiB, from a stream of its own: the shapes are the same with
    and without caches)."""
    lanes = []
    for w in range(WORKERS):
        rng = random.Random(seed * 1000003 + w)
        results = random.Random(seed * 1000003 + w + 7777777)
        lanes.append([draw(rng) + (MIB + int(results.random() * 3 * MIB),)
                      for _ in range(queries)])
    return lanes


def scenario(policy, seed=1, queries=QUERIES, front="retry", caches=False):
    """The scenario's text for `policy` (a key of POLICIES), `front` (one of FRONTS), with or
    without the tenants' result caches."""
    order, growth, wait200 = POLICIES[policy]
    knobs = f"memory.oom.order: {order}, memory.admit.growth: {growth}"
    flags = (f" --queries {queries}" if queries != QUERIES else "") + \
        (f" --front {front}" if front != "retry" else "") + (" --caches" if caches else "")
    out = [f"# Generated by examples/query_service_gen.py --policy {policy} --seed {seed}"
           + flags,
           f"name: query service, policy {policy}"
           + (f", front {front}" if front != "retry" else "") + (", result caches" if caches else ""),
           "config: { batch: 1, unwind: 4ms }",
           "groups:",
           f"  svc: {{ memory.max: 512M, {knobs} }}",
           f"  svc/etl: {{ memory.max: 320M, {knobs} }}",
           f"  svc/dash: {{ memory.max: 256M, memory.min: 128M, {knobs} }}",
           f"  svc/adhoc: {{ memory.max: 256M, memory.low: 32M, {knobs} }}",
           "steps:",
           "  - cache: { name: dash-cache, group: svc/dash, grow: 84M }"]
    if caches:
        # Each tenant's result cache: reclaimable, protected only by its group's min and low.
        for t in TENANTS:
            out.append(f"  - cache: {{ name: {cache_name(t)}, group: {t}, grow: 0, "
                       f"capacity: {CACHE_CAPACITY[t]}, oom: never }}")

    def fill(tenant, result):
        return f"cache: {{ name: {cache_name(tenant)}, grow: {size(result)} }}" if caches else None

    lanes = drawn(seed, queries)
    if front == "retry":
        # A lane is a worker thread; each iteration one query, a new member of the query's tenant
        # (`group`), its shape drawn from the worker's own seeded stream, as in the service.
        for w in range(WORKERS):
            out.append(f"  - member: {{ name: w{w}, group: svc }}")
        out.append("  - parallel:")
        for w, lane in enumerate(lanes):
            out += [f"      w{w}:", "        new_member: true", "        iterations:"]
            for i, (tenant, shape, est, final, result) in enumerate(lane, 1):
                m = f"w{w}"
                steps = [f"reserve: {{ member: {m}, size: {size(est)}, wait: {TRY_MS}ms, "
                         f"oom: pieces, ends_on: refused }}"]
                steps += work(m, shape, est, final, wait200, fill(tenant, result))
                out.append(f"          # w{w}#{i} {tenant} {shape}")
                out.append(f"          - {{ group: {tenant}, steps: [ {', '.join(steps)} ] }}")
    else:
        # The same queries, taken in turn from the workers' lists.
        every = [lane[i] for i in range(queries) for lane in lanes]
        if front == "block":
            # Each tenant's own workers, each waiting up to 2 s in its tenant's admission.
            mine = {t: [q for q in every if q[0] == t] for t in TENANTS}
            for t in TENANTS:
                for k in range(BLOCK_WORKERS[t]):
                    out.append(f"  - member: {{ name: {lane_name(t, k)}, group: {t} }}")
            out.append("  - parallel:")
            for t in TENANTS:
                n = BLOCK_WORKERS[t]
                for k in range(n):
                    m = lane_name(t, k)
                    out += [f"      {m}:", "        new_member: true", "        iterations:"]
                    for i, (tenant, shape, est, final, result) in enumerate(mine[t][k::n], 1):
                        steps = [f"reserve: {{ member: {m}, size: {size(est)}, "
                                 f"wait: {DEADLINE_S}s, oom: pieces, ends_on: refused }}"]
                        steps += work(m, shape, est, final, wait200, fill(tenant, result))
                        out.append(f"          # {m}#{i} {tenant} {shape}")
                        out.append(f"          - [ {', '.join(steps)} ]")
        else:
            # memcgctl's admission queue: 16 workers shared by the tenants, weighted as their
            # share of the queries, each item's admission deadline 2 s over all its tries.
            out.append("  - member: { name: q, group: svc }")
            weights = ", ".join(f"{t}: {{ admit_weight: {w} }}" for t, w in WEIGHTS.items())
            out += ["  - queue:",
                    "      member: q",
                    f"      workers: {WORKERS}",
                    "      oom: pieces",
                    f"      deadline: {DEADLINE_S}s",
                    f"      tenants: {{ {weights} }}",
                    "      items:"]
            for i, (tenant, shape, est, final, result) in enumerate(every, 1):
                steps = work("q", shape, est, final, wait200, fill(tenant, result))
                out.append(f"        # q#{i} {tenant} {shape}")
                out.append(f"        - {{ group: {tenant}, size: {size(est)}, "
                           f"steps: [ {', '.join(steps)} ] }}")
    out += ["  - expect: { group: svc, file: memory.peak, le: 512M }",
            "  - cache: { name: dash-cache, drop: true }"]
    if caches:
        out += [f"  - cache: {{ name: {cache_name(t)}, drop: true }}" for t in TENANTS]
    out += ["  - expect: { group: svc, file: memory.current, eq: 0 }",
            "  - print: { group: svc, file: memory.events }"]
    return "\n".join(out) + "\n"


if __name__ == "__main__":
    main()
