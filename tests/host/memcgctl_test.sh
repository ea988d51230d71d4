#!/bin/sh
# memcgctl host and memcgctl snapshot on fixture trees (kernel formats, under a temp directory):
# the printed chain and root settings, and a snapshot that `memcgctl validate` accepts and
# `memcgctl run` reproduces. Usage: memcgctl_test.sh MEMCGCTL
set -eu
bin=$1
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail() { echo "FAIL: $*"; exit 1; }

cg() {  # DIR MAX HIGH CURRENT [MIN LOW OOMGROUP]
  mkdir -p "$1"
  echo "$2" >"$1/memory.max"; echo "$3" >"$1/memory.high"; echo "$4" >"$1/memory.current"
  echo "${5:-0}" >"$1/memory.min"; echo "${6:-0}" >"$1/memory.low"; echo "${7:-0}" >"$1/memory.oom.group"
  echo "cpu memory pids" >"$1/cgroup.controllers"
  printf 'some avg10=1.50 avg60=0.20 avg300=0.05 total=12345\nfull avg10=0.00 avg60=0.00 avg300=0.00 total=0\n' >"$1/memory.pressure"
}

# ---- memcgctl host: /svc (8G) / app, usage 1G ----
mkdir -p "$t/proc/self" "$t/sys/fs/cgroup"
echo "0::/svc/app" >"$t/proc/self/cgroup"
echo "41 31 0:38 / /sys/fs/cgroup rw,relatime shared:9 - cgroup2 cgroup2 rw,nsdelegate" >"$t/proc/self/mountinfo"
printf 'Name:\tx\nVmRSS:\t    2048 kB\n' >"$t/proc/self/status"
echo "cpu memory" >"$t/sys/fs/cgroup/cgroup.controllers"
cg "$t/sys/fs/cgroup/svc" 8589934592 max 1073741824
cg "$t/sys/fs/cgroup/svc/app" max max 1073741824
out=$("$bin" host --root "$t")
echo "$out"
echo "$out" | grep -q '^cgroup v2 /svc/app$' || fail "no cgroup line"
echo "$out" | grep -q '^limit 8589934592$' || fail "limit"
echo "$out" | grep -q '^1 .*/svc .*8589934592 .*<- binds$' || fail "binding level"
echo "$out" | grep -q '^rss 2097152$' || fail "rss"
echo "$out" | grep -q 'some avg10=1.50' || fail "pressure"
# 8G - max(32M, 5%) - 1G unaccounted
echo "$out" | grep -q '^root memory.max 7086696039 memory.high max (headroom 429496729, unaccounted 1073741824)$' \
  || fail "root settings"
echo "garbage" >"$t/sys/fs/cgroup/svc/memory.max"
if "$bin" host --root "$t" 2>"$t/err"; then fail "malformed memory.max accepted"; fi
grep -q 'svc/memory.max: malformed value' "$t/err" || fail "error message: $(cat "$t/err")"

# ---- memcgctl snapshot: a tree with knobs and usage at several depths ----
s="$t/snap/tenants"
cg "$s" 1073741824 805306368 314572800          # 300M in all
cg "$s/a" max max 209715200 104857600 0 1       # 200M, min 100M, oom.group
cg "$s/a/q1" 134217728 max 83886080             # 80M
cg "$s/b" 67108864 max 62914560 0 33554432      # 60M, low 32M, max 64M
mkdir -p "$s/b/no-memory"                       # a child without the memory controller
"$bin" snapshot "$s" >"$t/snap.yaml"
cat "$t/snap.yaml"
"$bin" validate "$t/snap.yaml" || fail "validate refused the snapshot"
grep -q '"tenants/a": { memory.min: 104857600, memory.low: 0 }' "$t/snap.yaml" || fail "a's knobs"
grep -q 'group: "tenants/a/q1"' "$t/snap.yaml" || fail "q1 member"
if grep -q 'no-memory' "$t/snap.yaml"; then fail "a directory without the controller became a group"; fi
# Own usage: tenants 300M - 200M - 60M = 40M; a 200M - 80M = 120M; q1 80M; b 60M.
for v in 41943040 125829120 83886080 62914560; do
  grep -q "size: $v, bulk: true" "$t/snap.yaml" || fail "charge of $v"
done
"$bin" run "$t/snap.yaml" >"$t/run.txt" || { cat "$t/run.txt"; fail "run"; }
cat "$t/run.txt"
# The run holds the usage the kernel showed, at every level.
for l in 'tenants memory.current 314572800' 'tenants/a memory.current 209715200' \
         'tenants/a/q1 memory.current 83886080' 'tenants/b memory.current 62914560'; do
  grep -q "^$l\$" "$t/run.txt" || fail "run: $l"
done
# ---- memcgctl snapshot of a cgroup v2 root: no memory.current or limits, usage from memory.stat ----
r="$t/root"
mkdir -p "$r"
echo "cpuset cpu io memory pids" >"$r/cgroup.controllers"
printf 'anon 104857600\nfile 52428800\nkernel 20971520\nkernel_stack 1048576\nsock 1048576\nshmem 0\n' >"$r/memory.stat"
cg "$r/system.slice" max max 62914560            # 60M
cg "$r/user.slice" max max 41943040              # 40M
# A name a scenario cannot hold (systemd's escape of '-'): skipped, its 10M in user.slice's own.
cg "$r/user.slice/"'app-x\x2dy.scope' max max 10485760
"$bin" snapshot "$r" >"$t/root.yaml" || fail "the root refused"
cat "$t/root.yaml"
"$bin" validate "$t/root.yaml" || fail "validate refused the root's snapshot"
grep -q 'is a cgroup v2 root: no limits, and its usage (179306496 bytes) is from memory.stat' "$t/root.yaml" ||
  fail "the root's usage and its source"
# Own usage of the root: 171M - 60M - 40M = 71M.
grep -q 'size: 74448896, bulk: true' "$t/root.yaml" || fail "the root's own charge"
grep -q '"root/system.slice"' "$t/root.yaml" || fail "the root's children"
grep -qF '# 1 cgroup(s) skipped, their names not valid in a scenario' "$t/root.yaml" ||
  fail "the skipped group's notice"
grep -qxF '#   root/user.slice/app-x\x2dy.scope' "$t/root.yaml" || fail "the skipped group's path"
if grep -v '^#' "$t/root.yaml" | grep -qF 'x2dy'; then fail "the skipped group became a group"; fi
grep -q 'size: 41943040, bulk: true' "$t/root.yaml" || fail "user.slice's own charge (with the skipped 10M)"
"$bin" run "$t/root.yaml" >"$t/root-run.txt" || { cat "$t/root-run.txt"; fail "run of the root"; }
# Without a usable total in memory.stat: the sum of the children, said so.
printf 'anon 1\n' >"$r/memory.stat"
"$bin" snapshot "$r" >"$t/root2.yaml" || fail "the root refused (children's sum)"
grep -q "usage (104857600 bytes) is from the sum of its children" "$t/root2.yaml" || fail "children's sum"
# No memory.stat at all (kernels before the root had one): accepted, the children's sum, said so.
rm "$r/memory.stat"
"$bin" snapshot "$r" >"$t/root3.yaml" || fail "the root without memory.stat refused"
grep -q "usage (104857600 bytes) is from the sum of its children's memory.current (it has no" \
  "$t/root3.yaml" || fail "children's sum without memory.stat"
"$bin" validate "$t/root3.yaml" || fail "validate refused a root's snapshot without memory.stat"
printf 'anon 1\n' >"$r/memory.stat"
# A directory with memory.stat but without "memory" in cgroup.controllers is no root.
echo "cpu pids" >"$r/cgroup.controllers"
if "$bin" snapshot "$r" 2>"$t/err"; then fail "a root without the memory controller accepted"; fi
if "$bin" snapshot "$t/proc" 2>"$t/err"; then fail "a non-cgroup accepted"; fi
grep -q 'not a cgroup v2 group' "$t/err" || fail "snapshot error message"
echo "memcgctl host/snapshot: ok"
