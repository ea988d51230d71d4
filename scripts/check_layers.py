#!/usr/bin/env python3
"""Fails when a file of the library includes a header of a higher layer.

The layer order is written once, in LAYERS below (docs/ARCHITECTURE.md describes each layer).
A file belongs to the layer of its folder: include/memcg/<layer>/... and src/<layer>/...
(a layer's internal/ subfolder is the same layer). A file may include headers of its own layer
and of the layers below it; the optional components at the top may not include each other.
The umbrella header <memcg/memcg.hpp> is above every core layer and is the only header at the
top of include/memcg/. Examples (examples/*.cpp) include no internal/ header. Usage: scripts/check_layers.py [repository root]; exit status 1 lists the violations.
"""
import pathlib
import re
import sys

# Bottom up. Layers on one line share a rank: neither may include the other.
LAYERS = [
    ["base"],      # clock, errors, events, no-fail scopes; internal: CPU ids, rseq, locks, int128
    ["counter"],   # the hierarchical page counter, effective protection
    ["percpu"],    # per-CPU statistics (rstat, stat kinds) and the per-CPU unit stock
    ["core"],      # tree, charge path, object layer, attach, reclaim, OOM, limits, pressure, notify
    ["files"],     # cgroup-v2 files, their grammars, the Prometheus text exposition
    ["alloc"],     # STL allocator, pmr resource, LRU cache
    ["c"],         # the C API (memcg/c/memcg.h) over the layers below, in the core library
    ["hook", "jemalloc", "prometheus_cpp", "http", "host"],  # optional components (own targets)
    ["rocksdb"],   # optional; its arena mode (memcg::rocksdb_arena) builds on memcg::jemalloc
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}
UMBRELLA_RANK = RANK["alloc"]  # memcg.hpp: the core library's whole public API

INCLUDE = re.compile(r'^\s*#\s*include\s*[<"]([^>"]+)[>"]')


def layer_of_header(path):
    """Layer of an include path as written (memcg/<layer>/...), or None for non-memcg headers."""
    parts = path.split("/")
    if parts[0] != "memcg" or len(parts) < 2:
        return None
    if len(parts) == 2:
        return "umbrella" if parts[1] == "memcg.hpp" else "flat"
    return parts[1]


def main():
    root = pathlib.Path(sys.argv[1] if len(sys.argv) > 1 else ".").resolve()
    errors = []
    checked = 0
    files = []
    for base in ("include/memcg", "src"):
        files += [p for p in (root / base).rglob("*") if p.suffix in (".hpp", ".cpp", ".h")]
    for f in sorted(files):
        rel = f.relative_to(root).as_posix()
        parts = rel.split("/")
        if parts[0] == "include":
            own = layer_of_header("/".join(parts[1:]))
        else:
            own = parts[1] if len(parts) > 2 else "flat"
        lines = f.read_text(encoding="utf-8").splitlines()
        incs = [(n, m.group(1)) for n, line in enumerate(lines, 1) if (m := INCLUDE.match(line))]
        checked += 1
        if own == "flat":
            errors.append(f"{rel}: a file outside a layer folder (include/memcg/<layer>/, src/<layer>/)")
            continue
        if own != "umbrella" and own not in RANK:
            errors.append(f"{rel}: folder '{own}' is not a layer (scripts/check_layers.py LAYERS)")
            continue
        rank = UMBRELLA_RANK if own == "umbrella" else RANK[own]
        for n, inc in incs:
            if inc.startswith("memcg/") or inc.endswith(".hpp"):
                if not inc.startswith("memcg/"):
                    continue  # a header next to the source, in its own folder
                target = layer_of_header(inc)
                if target == "umbrella" or target not in RANK:
                    errors.append(f"{rel}:{n}: includes <{inc}>, not a layer header")
                elif RANK[target] > rank or (RANK[target] == rank and target != own
                                             and own != "umbrella"):
                    errors.append(f"{rel}:{n}: layer '{own}' includes <{inc}> of layer "
                                  f"'{target}' (higher, or a sibling)")
    # Examples are what users copy: they include public headers only, never an internal/ one.
    for f in sorted((root / "examples").glob("*.cpp")):
        rel = f.relative_to(root).as_posix()
        checked += 1
        for n, line in enumerate(f.read_text(encoding="utf-8").splitlines(), 1):
            m = INCLUDE.match(line)
            if m and m.group(1).startswith("memcg/") and "/internal/" in m.group(1):
                errors.append(f"{rel}:{n}: an example includes <{m.group(1)}>, an internal header")
    for e in errors:
        print(e)
    print(f"check_layers: {checked} files, {len(errors)} violation(s)")
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
