#!/usr/bin/env python3
"""The Python sample of docs/c-api.md runs as written: it loads the shared library by its SONAME,
which must be the one the build made, from the loader's path (LD_LIBRARY_PATH here, the system's
library directory once libmemcg<SOVERSION> is installed). Also checks that the file the build
made carries that SONAME (a symlink named after it, as the install has).
Usage: docs_ctypes_test.py DOCS.md LIBRARY_FILE SONAME. Prints "c_api_docs_ctypes: ok"."""
import os
import re
import subprocess
import sys

docs, library, soname = sys.argv[1:4]
text = open(docs, encoding="utf-8").read()
section = text.split("## Python", 1)[1]
sample = re.search(r"```python\n(.*?)```", section, re.S).group(1)
loads = re.findall(r'CDLL\("([^"]+)"\)', sample)
if loads != [soname]:
    sys.exit("c_api_docs_ctypes: the sample loads %r, the library's SONAME is %s" % (loads, soname))
libdir = os.path.dirname(os.path.abspath(library))
if not os.path.exists(os.path.join(libdir, soname)):
    sys.exit("c_api_docs_ctypes: no %s beside %s" % (soname, library))
# The sample, then what it made: a charge that did not succeed would have failed its assert.
check = sample + """
lib.memcg_uncharge.argtypes = [P, ctypes.c_uint64]
lib.memcg_uncharge(tenant, 1 << 20)
lib.memcg_group_release.argtypes = [P]
lib.memcg_group_release(tenant)
lib.memcg_controller_destroy.argtypes = [P]
assert lib.memcg_controller_destroy(ctl) == 0
print("sample ran")
"""
env = dict(os.environ, LD_LIBRARY_PATH=libdir)
out = subprocess.run([sys.executable, "-c", check], env=env, capture_output=True, text=True,
                     timeout=50)
if out.returncode != 0 or "sample ran" not in out.stdout:
    sys.exit("c_api_docs_ctypes: the sample failed:\n" + out.stdout + out.stderr)
# Without the library on the path the same load fails: the test does not pass by accident on a
# machine that has some libmemcg installed elsewhere.
env.pop("LD_LIBRARY_PATH")
probe = subprocess.run([sys.executable, "-c", 'import ctypes; ctypes.CDLL("%s")' % soname],
                       env=env, capture_output=True, text=True, timeout=50)
print("c_api_docs_ctypes: without LD_LIBRARY_PATH the load %s"
      % ("works (a system copy is installed)" if probe.returncode == 0 else "fails, as expected"))
print("c_api_docs_ctypes: ok")
