#!/usr/bin/env python3
"""The C API (memcg/c/memcg.h) from Python through ctypes, with nothing but the standard library:
a small tenant tree, charges, memory.stat, and an OOM kill delivered to a Python callback.
Usage: c_api_ctypes_test.py LIBRARY.so. Prints "c_api_python: ok" and exits 0 on success."""
import ctypes
import errno
import sys

lib = ctypes.CDLL(sys.argv[1])
P = ctypes.c_void_p
lib.memcg_version.restype = ctypes.c_uint
lib.memcg_version_string.restype = ctypes.c_char_p
lib.memcg_errno_name.restype = ctypes.c_char_p
lib.memcg_errno_name.argtypes = [ctypes.c_int]
lib.memcg_controller_create.argtypes = [P, ctypes.POINTER(P)]
lib.memcg_controller_destroy.argtypes = [P]
lib.memcg_group_create.argtypes = [P, ctypes.c_char_p, ctypes.POINTER(P)]
lib.memcg_group_release.argtypes = [P]
lib.memcg_group_remove.argtypes = [P, ctypes.c_char_p]
lib.memcg_group_read.argtypes = [P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                                 ctypes.POINTER(ctypes.c_size_t)]
lib.memcg_group_write.argtypes = [P, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                                  ctypes.c_int]
lib.memcg_charge.argtypes = [P, ctypes.c_uint64, ctypes.c_uint]
lib.memcg_charge.restype = ctypes.c_int
lib.memcg_uncharge.argtypes = [P, ctypes.c_uint64]
KILL_FN = ctypes.CFUNCTYPE(None, P, ctypes.c_int, P)
lib.memcg_member_create.argtypes = [P, ctypes.c_char_p, ctypes.c_int, KILL_FN, P,
                                    ctypes.POINTER(P)]
lib.memcg_member_charge.argtypes = [P, ctypes.c_uint64, ctypes.c_uint]
lib.memcg_member_charge.restype = ctypes.c_int
lib.memcg_member_destroy.argtypes = [P]
lib.memcg_member_killed.argtypes = [P]

CHARGE_OK, CHARGE_NOMEM, CHARGE_INVALID = 0, 2, 3


def check(cond, what):
    if not cond:
        print("c_api_python: FAILED:", what)
        sys.exit(1)


def ok(code, what):
    check(code == 0, "%s: %s" % (what, lib.memcg_errno_name(code).decode()))


def read(group, name):
    size = ctypes.c_size_t()
    check(lib.memcg_group_read(group, name.encode(), None, 0, ctypes.byref(size))
          == errno.ERANGE, "size query of " + name)
    buf = ctypes.create_string_buffer(size.value + 1)
    ok(lib.memcg_group_read(group, name.encode(), buf, len(buf), None), "read " + name)
    return buf.value.decode()


def write(group, name, text):
    data = text.encode()
    return lib.memcg_group_write(group, name.encode(), data, len(data), 0)


version = lib.memcg_version()
check(version // 10000 == 0 and lib.memcg_version_string().decode().count(".") == 2, "version")

ctl = P()
ok(lib.memcg_controller_create(None, ctypes.byref(ctl)), "controller")
tenants = {}
ok(lib.memcg_group_create(ctl, b"tenants", None), "tenants")
for name, limit in (("a", "1M"), ("b", "512K")):
    g = P()
    ok(lib.memcg_group_create(ctl, ("tenants/" + name).encode(), ctypes.byref(g)), name)
    ok(write(g, "memory.max", limit), "memory.max of " + name)
    tenants[name] = g
check(lib.memcg_group_create(ctl, b"tenants/a", None) == errno.EEXIST, "EEXIST")
check(write(tenants["a"], "memory.max", "lots") == errno.EINVAL, "bad memory.max")
check(read(tenants["a"], "memory.max") == "1048576\n", "memory.max unchanged")

# Charges: a tenant's own limit holds; the parent sees the sum.
check(lib.memcg_charge(tenants["a"], 300 << 10, 1) == CHARGE_OK, "charge a")
check(lib.memcg_charge(tenants["b"], 100 << 10, 1) == CHARGE_OK, "charge b")
check(lib.memcg_charge(tenants["b"], 1 << 20, 1) == CHARGE_NOMEM, "b over its max")
check(lib.memcg_charge(None, 1, 1) == CHARGE_INVALID, "NULL group")
stat = dict(line.split(" ", 1) for line in read(tenants["a"], "memory.stat").splitlines())
check(int(stat["anon"]) >= 300 << 10, "memory.stat anon of a: " + stat.get("anon", "?"))
parent = P()
lib.memcg_group_lookup.argtypes = [P, ctypes.c_char_p, ctypes.POINTER(P)]
ok(lib.memcg_group_lookup(ctl, b"tenants", ctypes.byref(parent)), "lookup tenants")
pstat = dict(line.split(" ", 1) for line in read(parent, "memory.stat").splitlines())
check(int(pstat["anon"]) >= 400 << 10, "memory.stat anon of tenants: " + pstat["anon"])
print("c_api_python: tenants anon=%d a=%d" % (int(pstat["anon"]), int(stat["anon"])))

# A kill callback in Python: the member holding most of b is killed by another's charge, and
# the callback destroys it (which uncharges it).
kills = []
member = P()


@KILL_FN
def on_kill(m, reason, user):
    kills.append(reason)
    lib.memcg_member_destroy(m)


other = P()
ok(lib.memcg_member_create(tenants["b"], b"query-1", 500, on_kill, None, ctypes.byref(member)),
   "member")
ok(lib.memcg_member_create(tenants["b"], b"query-2", 0, KILL_FN(), None, ctypes.byref(other)),
   "member 2")
check(lib.memcg_member_charge(member, 384 << 10, 1) == CHARGE_OK, "member charge")
for _ in range(4):
    check(lib.memcg_member_charge(other, 32 << 10, 1) == CHARGE_OK, "other's charge")
check(kills == [0], "one OOM kill, reason oom_kill: %r" % kills)
events = dict(line.split(" ", 1) for line in read(tenants["b"], "memory.events").splitlines())
check(int(events["oom_kill"]) == 1, "memory.events oom_kill")
print("c_api_python: killed=%d oom_kill=%s" % (len(kills), events["oom_kill"].strip()))
lib.memcg_member_destroy(other)

lib.memcg_uncharge(tenants["a"], 300 << 10)
lib.memcg_uncharge(tenants["b"], 100 << 10)
check(lib.memcg_controller_destroy(ctl) == errno.EBUSY, "EBUSY with groups held")
for g in list(tenants.values()) + [parent]:
    lib.memcg_group_release(g)
ok(lib.memcg_controller_destroy(ctl), "destroy")
print("c_api_python: ok")
