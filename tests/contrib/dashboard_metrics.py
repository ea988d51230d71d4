"""Every metric name the Grafana dashboard and the rule file of contrib/prometheus use exists in
a real exposition of the example service (a renamed family fails here, not on a user's
dashboard), and every recorded series they use is recorded by the rule file.

usage: dashboard_metrics.py EXAMPLE_BINARY DASHBOARD_JSON RULES_YML"""
import json
import sys
import time

from service import ExampleService, families, names_used, recorded


def exprs(node):
    """Every PromQL text of a dashboard: panel targets and template variable queries."""
    if isinstance(node, dict):
        for k, v in node.items():
            if k in ("expr", "definition") and isinstance(v, str):
                yield v
            elif k == "query" and isinstance(v, str):
                yield v
            else:
                yield from exprs(v)
    elif isinstance(node, list):
        for v in node:
            yield from exprs(v)


def main():
    binary, dashboard_path, rules_path = sys.argv[1:4]
    with open(dashboard_path) as f:
        dashboard = json.load(f)
    with open(rules_path) as f:
        rules_text = f.read()
    svc = ExampleService(binary, seconds=30)
    try:
        time.sleep(2)  # a few OOM kills and waits: every family carries samples
        exposition = svc.get("/metrics")
    finally:
        svc.stop()
    have = families(exposition)
    records = recorded(rules_text)
    print("exposition: %d families; rule file records %d series" % (len(have), len(records)))
    if len(have) < 20:
        print("FAILED: the exposition looks cut:\n" + exposition[:2000])
        return 1
    failures = 0
    for source, texts in (("dashboard", list(exprs(dashboard))),
                          ("rules", [l for l in rules_text.splitlines()
                                     if not l.lstrip().startswith("#")])):
        used = set()
        for t in texts:
            used |= names_used(t)
        plain = sorted(n for n in used if ":" not in n)
        rec = sorted(n for n in used if ":" in n)
        print("%s uses %d families and %d recorded series" % (source, len(plain), len(rec)))
        if source == "dashboard" and len(plain) < 10:
            print("FAILED: the dashboard's queries name only %s" % plain)
            failures += 1
        for n in plain:
            if n not in have:
                print("FAILED: %s uses %s, which the example's /metrics does not have"
                      % (source, n))
                failures += 1
        for n in rec:
            if n not in records:
                print("FAILED: %s uses %s, which %s does not record" % (source, n, rules_path))
                failures += 1
    print("ok" if failures == 0 else "%d failures" % failures)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
