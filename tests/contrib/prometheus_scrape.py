"""A real Prometheus (Debian's `prometheus`) scrapes the example service and evaluates the rule
file of contrib/prometheus: every rule group must have been evaluated with every rule healthy
(no lastError), on series that came from the scrape. The served example throttles its adhoc
tenant on memory.high: its throttle time must be exported and MemcgHighBreached pending or
firing on svc/adhoc (on no other group). Everything listens on 127.0.0.1 only;
the whole test is bounded (about 60 s) and stops both processes by their pids at the end.

Given the dashboard too, every query of its panels and annotations is then evaluated by that
Prometheus (its variables as "all", $__rate_interval as 1m): none may be an error.

usage: prometheus_scrape.py PROMETHEUS_BINARY EXAMPLE_BINARY RULES_YML [DASHBOARD_JSON]"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request

from service import EXIT_SKIP, ExampleService, recorded

BUDGET_S = 60


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def api(port, path):
    with urllib.request.urlopen("http://127.0.0.1:%d%s" % (port, path), timeout=5) as r:
        doc = json.load(r)
    if doc.get("status") != "success":
        raise RuntimeError("%s: %s" % (path, doc))
    return doc["data"]


def dashboard_exprs(path):
    """The PromQL of every panel target and annotation of a Grafana dashboard, with its
    variables replaced as Grafana would with "All" selected."""
    with open(path) as f:
        d = json.load(f)
    out = [t["expr"] for p in d["panels"] for t in p.get("targets", []) if t.get("expr")]
    out += [a["expr"] for a in d.get("annotations", {}).get("list", []) if a.get("expr")]
    subst = []
    for e in out:
        for var in ("$job", "$instance", "$group"):
            e = e.replace('"%s"' % var, '".*"')
        subst.append(e.replace("$__rate_interval", "1m"))
    return subst


def stop(proc):
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def main():
    prometheus, example, rules = sys.argv[1:4]
    dashboard = sys.argv[4] if len(sys.argv) > 4 else None
    if not prometheus or not os.access(prometheus, os.X_OK):
        print("prometheus is not installed (Debian package 'prometheus'): skipped")
        return EXIT_SKIP
    start = time.monotonic()
    rules = os.path.abspath(rules)
    with open(rules) as f:
        records = recorded(f.read())
    tmp = tempfile.mkdtemp(prefix="memcg_prometheus_")
    svc = prom = None
    log = open(os.path.join(tmp, "prometheus.log"), "w+")
    try:
        svc = ExampleService(example, seconds=BUDGET_S)
        port = free_port()
        config = os.path.join(tmp, "prometheus.yml")
        with open(config, "w") as f:
            f.write("global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n"
                    "rule_files:\n  - %s\n"
                    "scrape_configs:\n  - job_name: memcg\n    static_configs:\n"
                    "      - targets: ['127.0.0.1:%d']\n" % (json.dumps(rules), svc.port))
        prom = subprocess.Popen(
            [prometheus, "--config.file=" + config, "--web.listen-address=127.0.0.1:%d" % port,
             "--storage.tsdb.path=" + os.path.join(tmp, "data"), "--log.level=warn"],
            stdout=log, stderr=subprocess.STDOUT)
        # Done when every group was evaluated at least twice after samples arrived (a rate
        # needs two), every rule healthy, and every recorded series has data from the scrape.
        last = "prometheus did not answer"
        while time.monotonic() - start < BUDGET_S - 5:
            time.sleep(1)
            if prom.poll() is not None:
                last = "prometheus exited with %d" % prom.returncode
                break
            try:
                groups = api(port, "/api/v1/rules")["groups"]
                targets = api(port, "/api/v1/targets")["activeTargets"]
            except (OSError, RuntimeError) as e:
                last = "prometheus: %s" % e
                continue
            if not targets or any(t["health"] != "up" for t in targets):
                last = "target not up: %s" % [(t.get("health"), t.get("lastError"))
                                              for t in targets]
                continue
            bad = [(g["name"], r["name"], r.get("health"), r.get("lastError"))
                   for g in groups for r in g["rules"]
                   if r.get("health") != "ok" or r.get("lastError")]
            if bad:
                last = "unhealthy rules: %s" % bad
                if any(b[2] == "err" for b in bad):
                    break  # an evaluation error does not heal
                continue
            if len(groups) < 2 or any(g["lastEvaluation"].startswith("0001") for g in groups):
                last = "rule groups not evaluated yet: %s" % [g["name"] for g in groups]
                continue
            empty = [n for n in sorted(records)
                     if n != "memcg_group:memory_wait_seconds:p99_5m"  # NaN without waits
                     and not api(port, "/api/v1/query?query=" + urllib.parse.quote(n))["result"]]
            if empty:
                last = "recorded series without data yet: %s" % empty
                continue
            throttled = api(port, "/api/v1/query?query=" + urllib.parse.quote(
                'memcg_memory_high_throttled_seconds_total{group="svc/adhoc"} > 0'))["result"]
            if not throttled:
                last = "svc/adhoc not throttled on memory.high yet"
                continue
            high = [a["labels"].get("group") for a in api(port, "/api/v1/alerts")["alerts"]
                    if a["labels"].get("alertname") == "MemcgHighBreached"
                    and a.get("state") in ("pending", "firing")]
            if high != ["svc/adhoc"]:
                last = "MemcgHighBreached pending or firing on %s, not on svc/adhoc alone" % high
                continue
            if dashboard:
                failed = []
                for e in dashboard_exprs(dashboard):
                    try:
                        api(port, "/api/v1/query?query=" + urllib.parse.quote(e))
                    except (OSError, RuntimeError) as err:
                        failed.append("%s: %s" % (e, err))
                if failed:
                    print("FAILED: dashboard queries Prometheus refuses:\n  " +
                          "\n  ".join(failed))
                    return 1
                print("ok: every dashboard query evaluates (%d)" % len(dashboard_exprs(dashboard)))
            n_rules = sum(len(g["rules"]) for g in groups)
            print("ok: %d rule groups, %d rules evaluated healthy on the example's series "
                  "(%.1f s)" % (len(groups), n_rules, time.monotonic() - start))
            for g in groups:
                print("  %s: last evaluation %s, %d rules" % (g["name"], g["lastEvaluation"],
                                                            len(g["rules"])))
            return 0
        print("FAILED: " + last)
        log.seek(0)
        print("prometheus log:\n" + log.read()[-4000:])
        return 1
    finally:
        if prom is not None:
            stop(prom)
        if svc is not None:
            svc.stop()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
