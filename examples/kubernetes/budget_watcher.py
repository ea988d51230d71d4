#!/usr/bin/env python3
"""Sets a memcg process's budget to its pod's desired memory limit (docs/kubernetes.md).

Runs beside the application (a container of the same pod). Every PERIOD seconds it reads the pod
from the API server (plain HTTPS with the service account's token and CA: no client library),
compares the container's desired memory limit (spec) with the applied one (status), and:
  - desired below applied (a decrease the kubelet defers until usage is under it): sets the
    budget to the desired limit, `memcgctl remote TARGET budget BYTES`;
  - desired equal to applied, and a budget it set: clears it (`budget clear`), so that
    memcg::host alone follows the kernel's memory.max again;
  - desired above applied: nothing (the kubelet applies an increase at once).
It never kills: a budget that fails is reported and left to an operator (`budget BYTES --force`).

Environment: POD_NAME, POD_NAMESPACE (downward API), WATCH_CONTAINER (the application's
container), MEMCG_TARGET (http://127.0.0.1:9180 or unix:PATH), MEMCG_TOKEN_FILE, MEMCGCTL
(default "memcgctl"), PERIOD (seconds, default 2).
Options: --once (one pass, for cron-like use and tests), --pod-json FILE (read the pod from a file
instead of the API server, for tests), --self-test (checks the quantity parser).
"""
import json
import os
import re
import ssl
import subprocess
import sys
import time
import urllib.request

SA = "/var/run/secrets/kubernetes.io/serviceaccount"
SUFFIXES = {"": 1, "k": 10**3, "M": 10**6, "G": 10**9, "T": 10**12, "P": 10**15, "E": 10**18,
            "Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}


def quantity_bytes(q):
    """A Kubernetes memory quantity ("6Gi", "512M", "1.5Gi", "1e9", "6442450944") in bytes."""
    m = re.fullmatch(r"\s*([0-9]+(?:\.[0-9]*)?)(?:[eE]([0-9]+))?([kMGTPE]i?)?\s*", str(q))
    if not m:
        raise ValueError("not a memory quantity: %r" % q)
    number, exponent, suffix = m.group(1), m.group(2), m.group(3) or ""
    if suffix not in SUFFIXES:
        raise ValueError("unknown suffix in %r" % q)
    value = float(number) if "." in number else int(number)
    if exponent:
        value *= 10 ** int(exponent)
    return int(value * SUFFIXES[suffix])


def read_pod(pod_json):
    if pod_json:
        with open(pod_json, encoding="utf-8") as f:
            return json.load(f)
    host = os.environ["KUBERNETES_SERVICE_HOST"]
    port = os.environ.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host:
        host = "[%s]" % host
    url = "https://%s:%s/api/v1/namespaces/%s/pods/%s" % (
        host, port, os.environ["POD_NAMESPACE"], os.environ["POD_NAME"])
    with open(os.path.join(SA, "token"), encoding="utf-8") as f:
        token = f.read().strip()  # re-read each time: projected tokens rotate
    ctx = ssl.create_default_context(cafile=os.path.join(SA, "ca.crt"))
    req = urllib.request.Request(url, headers={"Authorization": "Bearer " + token,
                                               "Accept": "application/json"})
    with urllib.request.urlopen(req, context=ctx, timeout=10) as r:
        return json.load(r)


def limits(pod, container):
    """(desired, applied) memory limits of `container` in bytes; None where not set."""
    desired = applied = None
    for c in pod.get("spec", {}).get("containers", []):
        if c.get("name") == container:
            q = c.get("resources", {}).get("limits", {}).get("memory")
            desired = quantity_bytes(q) if q else None
    for c in pod.get("status", {}).get("containerStatuses", []):
        if c.get("name") == container:
            q = c.get("resources", {}).get("limits", {}).get("memory")
            applied = quantity_bytes(q) if q else None
    return desired, applied


def memcgctl(*args):
    cmd = [os.environ.get("MEMCGCTL", "memcgctl"), "remote",
           os.environ.get("MEMCG_TARGET", "http://127.0.0.1:9180"), "--json"]
    token = os.environ.get("MEMCG_TOKEN_FILE")
    if token:
        cmd += ["--token-file", token]
    r = subprocess.run(cmd + list(args), capture_output=True, text=True, timeout=30)
    if r.returncode != 0:
        raise RuntimeError("%s: %s" % (" ".join(args), (r.stderr or r.stdout).strip()))
    return json.loads(r.stdout) if r.stdout.strip() else {}


def one_pass(container, pod_json, log):
    desired, applied = limits(read_pod(pod_json), container)
    if desired is None or applied is None:
        log("no memory limit in the spec or the status of %s yet" % container)
        return
    budget = memcgctl("budget")
    state, target = budget.get("state"), budget.get("target_bytes")
    if desired < applied:
        if state in ("reaching", "reached") and target == desired:
            return  # being done, or done: the kubelet applies it on its next sync
        if state == "reaching":  # another target: replace it
            memcgctl("budget", "clear")
        b = memcgctl("budget", str(desired))
        log("decrease %d -> %d: budget set (%s)" % (applied, desired, b.get("state")))
    elif state != "none" and desired >= applied and target == applied:
        memcgctl("budget", "clear")
        log("limit %d applied: budget cleared, memcg::host follows memory.max" % applied)
    if state == "failed":
        log("budget failed: %s (an operator may force it)" % budget.get("error"))


def main(argv):
    if "--self-test" in argv:
        assert quantity_bytes("6Gi") == 6 << 30
        assert quantity_bytes("512M") == 512 * 10**6
        assert quantity_bytes("1.5Gi") == 3 << 29
        assert quantity_bytes("1e9") == 10**9
        assert quantity_bytes("6442450944") == 6 << 30
        for bad in ("", "6GB", "-1Gi", "Gi"):
            try:
                quantity_bytes(bad)
            except ValueError:
                continue
            raise AssertionError("accepted %r" % bad)
        print("budget_watcher self-test: ok")
        return 0
    pod_json = argv[argv.index("--pod-json") + 1] if "--pod-json" in argv else None
    container = os.environ.get("WATCH_CONTAINER", "app")
    period = float(os.environ.get("PERIOD", "2"))

    def log(msg):
        print(time.strftime("%H:%M:%S"), msg, flush=True)

    while True:
        try:
            one_pass(container, pod_json, log)
        except Exception as e:  # the API server or the process may be briefly away
            log("pass failed: %s" % e)
            if "--once" in argv:
                return 1
        if "--once" in argv:
            return 0
        time.sleep(period)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
