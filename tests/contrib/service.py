"""The example service for the tests of contrib/prometheus: example_query_service --serve 0 on
127.0.0.1, its port read from its first line, stopped (SIGTERM, then SIGKILL) by its pid alone."""
import os
import re
import select
import signal
import subprocess
import time
import urllib.request

EXIT_SKIP = 77  # CTest's SKIP_RETURN_CODE for these tests


class ExampleService:
    def __init__(self, binary, seconds):
        self.proc = subprocess.Popen(
            [binary, "--serve", "0", "--seconds", str(seconds), "--workers", "4"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
        self.port = 0
        deadline = time.monotonic() + 15
        line = b""
        while time.monotonic() < deadline and not line.endswith(b"\n"):
            ready, _, _ = select.select([self.proc.stdout], [], [], 0.5)
            if ready:
                chunk = os.read(self.proc.stdout.fileno(), 1)
                if not chunk:
                    break
                line += chunk
        m = re.match(rb"serving on http://127\.0\.0\.1:(\d+)", line)
        if not m:
            self.stop()
            raise RuntimeError("the example did not say where it serves: %r" % line)
        self.port = int(m.group(1))

    def get(self, path, timeout=10):
        with urllib.request.urlopen("http://127.0.0.1:%d%s" % (self.port, path),
                                    timeout=timeout) as r:
            return r.read().decode("utf-8")

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc.stdout.close()


def families(exposition):
    """The metric names a text exposition defines: every # TYPE'd family, with a histogram's
    _bucket, _sum and _count series."""
    names = set()
    for line in exposition.splitlines():
        m = re.match(r"# TYPE (\S+) (\S+)", line)
        if m:
            names.add(m.group(1))
            if m.group(2) in ("histogram", "summary"):
                names.update(m.group(1) + s for s in ("_bucket", "_sum", "_count"))
    return names


def recorded(rules_text):
    """The names the rule file records."""
    return set(re.findall(r"^\s*-\s*record:\s*(\S+)\s*$", rules_text, re.M))


def names_used(expr):
    """The memcg metric names (and recorded series, with ':') an expression uses. Label values
    and matchers ("..."), template variables and comments are left out."""
    expr = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    expr = re.sub(r"#.*", "", expr)
    return set(re.findall(r"(?<![\w:$])memcg[_:][a-zA-Z0-9_:]*", expr))
