"""example_query_service --serve 0 without --seconds keeps serving until it is interrupted: still
answering /metrics well past its unserved run time (3 s), then SIGINT ends it, cleanly and
promptly. Bounded (about 20 s); stops the example by its pid alone.

usage: serve_until_interrupted.py EXAMPLE_BINARY"""
import os
import re
import select
import signal
import subprocess
import sys
import time
import urllib.request

STILL_SERVING_AFTER_S = 6  # twice the unserved run's 3 s


def main():
    binary = sys.argv[1]
    proc = subprocess.Popen([binary, "--serve", "0", "--workers", "4"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    try:
        line = b""
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and not line.endswith(b"\n"):
            ready, _, _ = select.select([proc.stdout], [], [], 0.5)
            if ready:
                chunk = os.read(proc.stdout.fileno(), 1)
                if not chunk:
                    break
                line += chunk
        m = re.match(rb"serving on http://127\.0\.0\.1:(\d+)", line)
        if not m:
            print("FAILED: the example did not say where it serves: %r" % line)
            return 1
        url = "http://127.0.0.1:%d/metrics" % int(m.group(1))
        time.sleep(STILL_SERVING_AFTER_S)
        if proc.poll() is not None:
            print("FAILED: the example exited with %d after %d s, uninterrupted"
                  % (proc.returncode, STILL_SERVING_AFTER_S))
            return 1
        with urllib.request.urlopen(url, timeout=10) as r:
            if b"memcg_memory_current_bytes" not in r.read():
                print("FAILED: /metrics without memcg_memory_current_bytes")
                return 1
        proc.send_signal(signal.SIGINT)
        try:
            code = proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            print("FAILED: the example did not end within 15 s of SIGINT")
            return 1
        out = proc.stdout.read().decode("utf-8", "replace")
        if code != 0 or "query_service: ok" not in out:
            print("FAILED: exit %d after SIGINT:\n%s" % (code, out))
            return 1
        print("ok: served for %d s until SIGINT, then ended cleanly" % STILL_SERVING_AFTER_S)
        return 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()


if __name__ == "__main__":
    sys.exit(main())
