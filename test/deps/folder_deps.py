#!/usr/bin/python3
"""The folder dependency graph of topodra's own code, from its `#include "..."` lines.

Each file belongs to a folder: the top-level directory (common, topology, cdi, proto, cmd) or,
under driver/, driver/<x>. Folder A depends on folder B when a file of A includes a file of B.
The graph must have no cycle: a cycle means neither folder can be understood, built or tested
without the other. Exits 1 naming every cycle with one include line per edge; always prints the
dependency table (the source of the table in the architecture docs).

An edge may be listed in ALLOWED_BACK_EDGES while a known cycle is being taken apart: it is left
out of the cycle search (and marked * in the table). An entry that no longer closes a cycle is an
error too, so the list only shrinks.

Usage: folder_deps.py [--root DIR]
"""

import argparse
import os
import re
import sys

# Production code only: tests may include anything, and nothing includes a test.
SOURCE_ROOTS = ("common", "topology", "cdi", "proto", "driver", "cmd")
SOURCE_SUFFIXES = (".h", ".cc")
INCLUDE = re.compile(r'^\s*#\s*include\s+"([^"]+)"')

# (from, to) -> why it is still there and what removes it.
ALLOWED_BACK_EDGES = {}


def folder_of(path):
    """The folder a repository-relative path belongs to, or None outside our code."""
    parts = path.split("/")
    if parts[0] not in SOURCE_ROOTS or len(parts) < 2:
        return None
    if parts[0] == "driver":
        return "driver/" + parts[1] if len(parts) > 2 else None
    return parts[0]


def edges_of(includes):
    """{(from_folder, to_folder): first (file, included path)} from (file, included path) pairs."""
    edges = {}
    for source, target in includes:
        a, b = folder_of(source), folder_of(target)
        if a is None or b is None or a == b:
            continue
        edges.setdefault((a, b), (source, target))
    return edges


def find_cycles(nodes, edges):
    """One cycle (a list of folders, first == last) per strongly connected component of two or
    more folders, in a stable order."""
    succ = {n: sorted(b for (a, b) in edges if a == n) for n in nodes}
    index, low, on_stack, stack, components = {}, {}, set(), [], []

    def visit(v):  # Tarjan; the graph has a few dozen nodes, recursion is fine.
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in succ[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                components.append(set(component))

    for n in sorted(nodes):
        if n not in index:
            visit(n)

    cycles = []
    for component in components:
        start = min(component)
        # Shortest way back to start inside the component (breadth first).
        parent, frontier = {start: None}, [start]
        found = None
        while frontier and found is None:
            following = []
            for v in frontier:
                for w in succ[v]:
                    if w == start:
                        found = v
                        break
                    if w in component and w not in parent:
                        parent[w] = v
                        following.append(w)
                if found is not None:
                    break
            frontier = following
        cycles.append(_cycle_from(parent, start, found))
    return sorted(cycles)


def _cycle_from(parent, start, last):
    chain = []
    v = last
    while v is not None:
        chain.append(v)
        v = parent[v]
    chain.reverse()  # start, ..., last
    return chain + [start]


def reaches(edges, start, goal):
    """Whether goal can be reached from start along edges."""
    seen, todo = {start}, [start]
    while todo:
        v = todo.pop()
        if v == goal:
            return True
        for (a, b) in edges:
            if a == v and b not in seen:
                seen.add(b)
                todo.append(b)
    return False


def stale_allowances(edges, allowed):
    """Allowed back edges that are gone, or that no longer close a cycle: (edge, why) pairs."""
    out = []
    for (a, b) in sorted(allowed):
        if (a, b) not in edges:
            out.append(((a, b), "no file of it includes the other any more"))
        elif not reaches(edges, b, a):
            out.append(((a, b), f"{b} no longer depends on {a}: no cycle left"))
    return out


def table(nodes, edges):
    """Rows (folder, depends on, used by), folders in dependency order (leaves first)."""
    rows = []
    for n in order(nodes, edges):
        uses = sorted(b for (a, b) in edges if a == n)
        used_by = sorted(a for (a, b) in edges if b == n)
        rows.append((n, uses, used_by))
    return rows


def order(nodes, edges):
    """Folders with everything they use before them, ties by name."""
    placed, result = set(), []
    remaining = sorted(nodes)
    while remaining:
        missing = {n: sum(1 for (a, b) in edges if a == n and b not in placed) for n in remaining}
        ready = [n for n in remaining if missing[n] == 0]
        if not ready:  # a cycle: the folder waiting for the fewest others goes first
            ready = [min(remaining, key=lambda n: (missing[n], n))]
        for n in ready:
            placed.add(n)
            result.append(n)
        remaining = [n for n in remaining if n not in placed]
    return result


def scan(root):
    """(file, included path) pairs of every source file under the source roots."""
    includes = []
    for top in SOURCE_ROOTS:
        for directory, _, files in os.walk(os.path.join(root, top)):
            for name in sorted(files):
                if not name.endswith(SOURCE_SUFFIXES):
                    continue
                path = os.path.join(directory, name)
                rel = os.path.relpath(path, root)
                with open(path, encoding="utf-8", errors="replace") as f:
                    for line in f:
                        m = INCLUDE.match(line)
                        if m:
                            includes.append((rel, m.group(1)))
    return includes


def main(argv):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", default=os.path.join(os.path.dirname(__file__), "..", ".."))
    args = parser.parse_args(argv)
    includes = scan(args.root)
    nodes = {folder_of(f) for f, _ in includes} - {None}
    edges = edges_of(includes)
    nodes |= {n for e in edges for n in e}

    checked = {e: v for e, v in edges.items() if e not in ALLOWED_BACK_EDGES}

    def mark(a, b, shown):
        return shown + ("*" if (a, b) in ALLOWED_BACK_EDGES else "")

    print("| folder | depends on | used by |")
    print("|---|---|---|")
    for n, uses, used_by in table(nodes, edges):
        print(f"| {n} | {', '.join(mark(n, b, b) for b in uses) or '-'} | "
              f"{', '.join(mark(a, n, a) for a in used_by) or '-'} |")
    for (a, b), why in sorted(ALLOWED_BACK_EDGES.items()):
        if (a, b) in edges:
            print(f"\n\\* {a} -> {b}, allowed for now: {why}")

    cycles = find_cycles(nodes, checked)
    for cycle in cycles:
        print("\nfolder dependency cycle: " + " -> ".join(cycle), file=sys.stderr)
        for a, b in zip(cycle, cycle[1:]):
            source, target = edges[(a, b)]
            print(f'  {source}: #include "{target}"', file=sys.stderr)
    stale = stale_allowances(edges, ALLOWED_BACK_EDGES)
    for (a, b), why in stale:
        print(f"\nALLOWED_BACK_EDGES lists {a} -> {b}, but {why}: remove the entry",
              file=sys.stderr)
    return 1 if cycles or stale else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
