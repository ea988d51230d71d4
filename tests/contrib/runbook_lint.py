"""Every alert of contrib/prometheus/memcg-rules.yml has its runbook in docs/operations.md, and
the runbooks keep their rules:
- each alert's runbook_url is built from the external label memcg_runbook_base and ends in the
  anchor of a "### <Alert>" paragraph of docs/operations.md;
- each such paragraph ends with an action ("**Do:** ...");
- the document shows how to change a limit on a running process (a curl POST with the bearer
  token) and says how many OOM reports are kept and how to keep more;
- counts in the alerts' text are printed as integers (no `humanize` of a count).

usage: runbook_lint.py RULES_YML OPERATIONS_MD (exits 0 when every rule holds)"""
import re
import sys


def main():
    with open(sys.argv[1]) as f:
        rules = f.read()
    with open(sys.argv[2]) as f:
        doc = f.read()
    bad = []
    alerts = re.findall(r"^\s*- alert: (\w+)\s*$", rules, re.M)
    if len(alerts) < 10:
        bad.append("only %d alerts found in %s" % (len(alerts), sys.argv[1]))
    sections = {}
    for m in re.finditer(r"^### (\S+)\n(.*?)(?=^#{2,3} |\Z)", doc, re.M | re.S):
        sections[m.group(1)] = m.group(2).strip()
    for a in alerts:
        block = re.search(r"- alert: %s\n(.*?)(?=\n      - alert:|\Z)" % a, rules, re.S).group(1)
        url = re.search(r'runbook_url: "(.*)"', block)
        want = "{{ $externalLabels.memcg_runbook_base }}/operations.md#" + a.lower()
        if not url or url.group(1) != want:
            bad.append("%s: runbook_url is %r, not %r" % (a, url and url.group(1), want))
        if a not in sections:
            bad.append("%s: no '### %s' paragraph in %s" % (a, a, sys.argv[2]))
            continue
        last = sections[a].split("\n\n")[-1]
        if "**Do:**" not in last:
            bad.append("%s: its runbook does not end with an action (**Do:**)" % a)
        for line in re.findall(r"summary: (.*)", block):
            if re.search(r"\$value \| humanize \}\}", line):
                bad.append("%s: a count printed with humanize (fractions): %s" % (a, line))
    if not re.search(r"curl .*-X POST .*Authorization: Bearer", doc):
        bad.append("no curl POST with a bearer token (changing a limit on a running process)")
    if "set_capacity" not in doc or "reports" not in doc:
        bad.append("the document does not say how many OOM reports are kept and how to keep more")
    for b in bad:
        print("FAILED: " + b)
    print("ok: %d alerts, each with its runbook" % len(alerts) if not bad else
          "%d failures" % len(bad))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
