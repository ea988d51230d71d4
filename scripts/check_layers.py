#!/usr/bin/env python3
"""Fails when a file of the library includes a header of a higher layer.

The layer order is written once, in LAYERS below (docs/ARCHITECTURE.md describes each layer).
A file belongs to the layer of its folder: include/memcg/<layer>/... and src/<layer>/...
(a layer's internal/ subfolder is the same layer). A file may include headers of its own layer
and of the layers below it; the optional components at the top may not include each other.
The umbrella header <memcg/memcg.hpp> is above every core layer and is the only header at the
top of include/memcg/. Examples (examples/*.cpp) include no internal/ header.

Inside core/ the same rule holds between its concern folders (include/memcg/core/<concern>/ and
src/core/<concern>/), in the order CORE_CONCERNS, except for the edges listed in CORE_ALLOWED,
each with the reason it is the design. The private headers of src/core are included as
"core/<concern>/x.hpp" (or "x.hpp" beside the source) and only from src/core.

Usage: scripts/check_layers.py [repository root]; exit status 1 lists the violations.
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
    ["hook", "jemalloc", "prometheus_cpp", "http", "host", "sqlite"],  # optional components (own targets)
    ["rocksdb"],   # optional; its arena mode (memcg::rocksdb_arena) builds on memcg::jemalloc
]
RANK = {name: rank for rank, names in enumerate(LAYERS) for name in names}

# Inside core/, bottom up (docs/ARCHITECTURE.md, "Inside core").
CORE_CONCERNS = [
    "tree",       # groups, the controller, its registry, file nodes, lifetime checks
    "signal",     # PSI, memory.events notifications, delivery gates, the timer thread
    "charge",     # the charge path: page counters' callers, stocks, object layer, attach, limits
    "reclaim",    # reclaim, vmpressure (reclaim's own signal), the cache governor
    "wait",       # charges that wait for memory
    "oom",        # the OOM killer, its handlers, log, reports, preemption, member lists
    "admission",  # admission of expected peaks, reservations, the admission queue
]
CORE_RANK = {name: rank for rank, name in enumerate(CORE_CONCERNS)}
# Edges up the order that are the design: (source: a concern or a file, included header, why).
CORE_ALLOWED = [
    ("src/core/tree/controller.cpp", "*",
     "the controller creates and tears down every concern's state (the composition root)"),
    ("src/core/tree/group.cpp", "*",
     "a group's last reference frees the per-group state of every concern"),
    ("src/core/tree/lifetime_check.cpp", "*",
     "checked lifetimes count the handles of every concern"),
    ("charge", "memcg/core/reclaim/reclaim.hpp",
     "a charge over a limit reclaims by reclaim's rules (retries, smallest batch, depth)"),
    ("charge", "memcg/core/wait/internal/charge_wait_hooks.hpp",
     "uncharges, limit changes and forced charges wake or account the charges that wait"),
    ("signal", "memcg/core/charge/attach.hpp",
     "PSI counts a stalled thread as a task of the group it is attached to"),
]


def core_concern(parts):
    """Concern of a path split at '/' below include/memcg/core or src/core (or memcg/core and
    core/ as included); None for a file directly in core/."""
    return parts[0] if len(parts) > 1 else None


def core_edge_allowed(rel, own, inc, used):
    for i, (source, target, _why) in enumerate(CORE_ALLOWED):
        if (source == rel or source == own) and (target == "*" or target == inc):
            used.add(i)
            return True
    return False
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
    used_allowed = set()
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
        own_concern = None
        if own == "core":
            below = parts[3:] if parts[0] == "include" else parts[2:]
            own_concern = core_concern(below)
            if own_concern not in CORE_RANK:
                errors.append(f"{rel}: a core file outside a concern folder "
                              f"(scripts/check_layers.py CORE_CONCERNS)")
                continue
        for n, inc in incs:
            inc_parts = inc.split("/")
            target_concern = None
            if inc_parts[0] == "core" and inc.endswith(".hpp"):  # a private header of src/core
                if own != "core" or parts[0] != "src":
                    errors.append(f"{rel}:{n}: includes \"{inc}\", a private header of src/core")
                    continue
                target_concern = core_concern(inc_parts[1:])
            elif inc_parts[0] == "memcg" and len(inc_parts) > 2 and inc_parts[1] == "core":
                target_concern = core_concern(inc_parts[2:])
                if own == "core" and target_concern not in CORE_RANK:
                    errors.append(f"{rel}:{n}: includes <{inc}>, not in a core concern folder")
                    continue
            if own == "core" and target_concern is not None:
                if target_concern not in CORE_RANK:
                    errors.append(f"{rel}:{n}: includes \"{inc}\", not in a core concern folder")
                elif (CORE_RANK[target_concern] > CORE_RANK[own_concern]
                      and not core_edge_allowed(rel, own_concern, inc, used_allowed)):
                    errors.append(f"{rel}:{n}: core/{own_concern} includes <{inc}> of "
                                  f"core/{target_concern} (higher; scripts/check_layers.py "
                                  f"CORE_ALLOWED lists the edges that are the design)")
                if inc_parts[0] == "core":
                    continue
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
    # An allowed edge that nothing takes any more is removed from the list, not kept as a hole.
    for i, (source, target, _why) in enumerate(CORE_ALLOWED):
        if i not in used_allowed:
            errors.append(f"scripts/check_layers.py: CORE_ALLOWED edge {source} -> {target} "
                          f"is not used; remove it")
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
