"""Rules the Grafana dashboard of contrib/prometheus keeps (docs/operations.md, "The dashboard's
panels"), checked on its JSON alone:
- every legend names the job and the instance, and every aggregation keeps both (two services'
  svc/etl never merge into one line);
- panels plot rates per second, never increase() over the zoom-dependent $__rate_interval;
- one unit per axis: each series' unit (the panel's, or its override's) fits what its expression
  measures, and the series on one axis share one unit (a second unit goes to the right axis);
- OOM kills are annotated, and the panels of the usage and pressure alerts draw the alerts'
  thresholds (read from the rule file).

usage: dashboard_lint.py DASHBOARD_JSON RULES_YML (exits 0 when every rule holds)"""
import json
import re
import sys

AGG = re.compile(r"\b(sum|min|max|avg|count|stddev|topk|bottomk|quantile)\s*(by|without)?\s*"
                 r"(\(([^()]*)\))?\s*\(")
PER_SECOND = {"ops", "reqps", "Bps", "binBps", "percentunit", "s"}


def kind(expr):
    """What a series measures, from its expression: the units it may be drawn in."""
    e = re.sub(r"\{[^}]*\}", "", expr)
    if "histogram_quantile" in e or ("_seconds_sum" in e and "_seconds_count" in e):
        return "duration", {"s"}
    if "rate(" in e:
        if "_bytes_total" in e:
            return "bytes per second", {"Bps", "binBps"}
        if "_seconds_total" in e:
            return "seconds per second", {"percentunit"}
        return "per second", {"ops", "reqps"}
    if " / " in e:
        return "ratio", {"percentunit"}
    if re.search(r"_bytes\b", e):
        return "bytes", {"bytes", "decbytes"}
    return "count", {"short", "none"}


def threshold_of(rules_text, alert):
    m = re.search(r"- alert: %s\n(.*?)(?=\n      - alert:|\Z)" % alert, rules_text, re.S)
    if not m:
        return None
    t = re.search(r">\s*([0-9]+(?:\.[0-9]+)?)", m.group(1))
    return float(t.group(1)) if t else None


def main():
    with open(sys.argv[1]) as f:
        d = json.load(f)
    with open(sys.argv[2]) as f:
        rules = f.read()
    bad = []
    for p in d["panels"]:
        if p.get("type") == "row":
            continue
        title = p.get("title", "")
        fc = p.get("fieldConfig", {})
        default = fc.get("defaults", {}).get("unit")
        unit_of, right = {}, set()
        for o in fc.get("overrides", []):
            ref = o.get("matcher", {}).get("options")
            for prop in o.get("properties", []):
                if prop.get("id") == "unit":
                    unit_of[ref] = prop["value"]
                if prop.get("id") == "custom.axisPlacement" and prop.get("value") == "right":
                    right.add(ref)
        axes = {}
        for t in p.get("targets", []):
            expr, legend, ref = t.get("expr", ""), t.get("legendFormat", ""), t.get("refId")
            if "{{job}}" not in legend or "{{instance}}" not in legend:
                bad.append("%s: legend %r lacks {{job}} or {{instance}}" % (title, legend))
            for m in AGG.finditer(expr):
                mode, labels = m.group(2), m.group(4)
                keep = set(x.strip() for x in (labels or "").split(","))
                if mode != "without" and not {"job", "instance"} <= keep:
                    bad.append("%s: %r drops job or instance" % (title, m.group(0)))
            if "increase(" in expr:
                bad.append("%s: increase() over the zoom's interval, not a rate" % title)
            unit = unit_of.get(ref, default)
            what, fits = kind(expr)
            if unit not in fits:
                bad.append("%s: %s (%s) drawn in %r, not one of %s" % (title, ref, what, unit,
                                                                     sorted(fits)))
            axes.setdefault("right" if ref in right else "left", set()).add(unit)
        for axis, units in axes.items():
            if len(units) > 1:
                bad.append("%s: the %s axis has %d units %s" % (title, axis, len(units),
                                                               sorted(units)))
    notes = d.get("annotations", {}).get("list", [])
    if not any("memcg_memory_oom_kills_total" in a.get("expr", "") for a in notes):
        bad.append("no OOM-kill annotation")
    for alert, starts in (("MemcgUsageNearMax", "Usage against memory.max"),
                          ("MemcgPressureSome", "PSI some"), ("MemcgPressureFull", "PSI full")):
        want = threshold_of(rules, alert)
        panel = [p for p in d["panels"] if p.get("title", "").startswith(starts)]
        steps = [s.get("value") for p in panel for s in
                 p.get("fieldConfig", {}).get("defaults", {}).get("thresholds", {})
                 .get("steps", [])]
        if want is None or not panel or want not in steps:
            bad.append("%s: the panel %r draws no threshold at the alert's %s"
                       % (alert, starts, want))
    for b in bad:
        print("FAILED: " + b)
    print("ok: the dashboard keeps its rules" if not bad else "%d failures" % len(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
