#!/usr/bin/env python3
"""Checks that dependencies in the C++ tree point one way (tools -> core -> sdk; plugins -> sdk)
and that core's folders form no import cycle.

A folder of core/src depends on another when one of its files includes, directly or through
other headers, a header that the other folder implements. A public header kiln/X.h is
implemented by the folder of the source file named X.cc, or as HEADER_OWNERS says. Headers
nobody implements (interfaces such as kiln/device_context.h) belong to no folder. Files directly
in core/src are each their own unit.

Usage: tools/check_layers.py [--graph] [REPO]   exit 0 when clean, 1 with the violations.
"""
import os
import re
import sys

INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"', re.M)

# Public headers whose implementation is not in a source file of the same name. Headers in
# neither (kiln/object.h, kiln/device_context.h, kiln/kiln.h, ...) are interfaces or
# header-only and belong to no folder.
HEADER_OWNERS = {
    "kiln/evaluator.h": "eval",
    "kiln/testing.h": "testing",
    "kiln/rpc/session.h": "rpc",
    "kiln/plugin_discovery.h": "plugin",
    "kiln/profiling/metrics.h": "profiling",
    "kiln/config_error.h": "config",
}


def read(path):
    with open(path, encoding="utf-8", errors="replace") as f:
        return f.read()


def main(argv):
    show_graph = "--graph" in argv
    args = [a for a in argv if not a.startswith("--")]
    repo = os.path.abspath(args[0] if args else os.path.join(os.path.dirname(__file__), ".."))
    core_src = os.path.join(repo, "core", "src")
    core_inc = os.path.join(repo, "core", "include")
    problems = []

    # 1. core and sdk never reach into plugins/, tools/ or tests/; plugins never into core/.
    rules = [("core", ("plugins/", "tools/", "tests/")), ("sdk", ("plugins/", "core/", "tools/")),
             ("plugins", ("core/", "tools/"))]
    for top, forbidden in rules:
        for root, _, files in os.walk(os.path.join(repo, top)):
            for name in files:
                if not name.endswith((".h", ".hpp", ".cc", ".c", ".cpp")):
                    continue
                path = os.path.join(root, name)
                for inc in INCLUDE.findall(read(path)):
                    if inc.startswith(forbidden) or "/plugins/" in inc:
                        problems.append(f"{os.path.relpath(path, repo)} includes \"{inc}\"")

    # 2. Folder graph of core/src.
    sources = {}  # path relative to core/src -> text
    for root, _, files in os.walk(core_src):
        for name in files:
            if name.endswith((".h", ".cc")):
                full = os.path.join(root, name)
                sources[os.path.relpath(full, core_src)] = read(full)

    def unit_of(rel):
        return rel.split("/")[0] if "/" in rel else rel.rsplit(".", 1)[0]

    def resolve(inc):
        if os.path.isfile(os.path.join(core_src, inc)):
            return ("src", inc)
        if os.path.isfile(os.path.join(core_inc, inc)):
            return ("inc", inc)
        return None

    # public header -> unit: the folder of the source file of the same name, else the table.
    stems = {}
    for rel in sources:
        if rel.endswith(".cc"):
            stems.setdefault(os.path.basename(rel)[:-3], []).append(rel)
    owner = {}
    for root, _, files in os.walk(core_inc):
        for name in files:
            inc = os.path.relpath(os.path.join(root, name), core_inc)
            impl = stems.get(name.rsplit(".", 1)[0], [])
            if len(impl) == 1:
                owner[inc] = unit_of(impl[0])
            elif inc in HEADER_OWNERS:
                owner[inc] = HEADER_OWNERS[inc]

    reach_cache = {}

    def reach(kind, inc, stack=()):
        """Units implementing the headers `inc` includes, transitively (and its own)."""
        key = (kind, inc)
        if key in reach_cache:
            return reach_cache[key]
        if key in stack:
            return set()
        path = os.path.join(core_src if kind == "src" else core_inc, inc)
        units = set()
        if kind == "inc" and inc in owner:
            units.add(owner[inc])
        if kind == "src":
            units.add(unit_of(inc))
        for sub in INCLUDE.findall(read(path)):
            r = resolve(sub)
            if r:
                units |= reach(*r, stack=stack + (key,))
        reach_cache[key] = units
        return units

    graph = {}
    why = {}
    for rel, text in sources.items():
        u = unit_of(rel)
        graph.setdefault(u, set())
        for inc in INCLUDE.findall(text):
            r = resolve(inc)
            if not r:
                continue
            for v in reach(*r):
                if v != u and v not in graph[u]:
                    graph[u].add(v)
                    why[(u, v)] = f"{rel} includes \"{inc}\""

    # Strongly connected components (Tarjan).
    index, low, on, stack, sccs = {}, {}, set(), [], []
    counter = [0]

    def connect(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                connect(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            sccs.append(sorted(comp))

    sys.setrecursionlimit(10000)
    for v in sorted(graph):
        if v not in index:
            connect(v)
    for comp in sccs:
        if len(comp) > 1:
            edges = [f"  {u} -> {v}: {why[(u, v)]}" for u in comp for v in sorted(graph[u])
                     if v in comp]
            problems.append("import cycle between core folders " + ", ".join(comp) + ":\n" +
                            "\n".join(edges))

    if show_graph:
        for u in sorted(graph):
            print(f"{u} -> {', '.join(sorted(graph[u])) or '(nothing)'}")
    for p in problems:
        print(f"check_layers: {p}")
    if problems:
        return 1
    print(f"check_layers: {len(graph)} core units, no cycle; core, sdk and plugins include only "
          "what they may")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
