"""The import graph of the project's packages: no new circles.

Every ``import`` counts, module level or inside a function (a lazy import still ties two modules together).
Circles that exist today are listed below as the baseline that issue 20 works down; a test fails when a
circle appears that is not inside one of them, or when a package starts to depend on one it did not.
Run ``python -m tests.unit.test_import_graph`` to print the graph's circles and package edges.
"""

from __future__ import annotations

import ast
import os
from collections import defaultdict

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = ("proto", "shim", "gpud", "jit", "woolyhv")

# package -> the packages it may import (today's edges; proto and jit import no other package of ours)
ALLOWED_PACKAGE_EDGES = {
    "proto": set(),
    "jit": {"proto"},  # proto.settings, proto.sizes: the leaf
    "shim": {"proto", "woolyhv"},
    "gpud": {"proto", "jit", "woolyhv"},
    "woolyhv": {"proto", "shim", "gpud", "jit"},
}
# Module circles that exist today (each later circle must lie inside one of these).
BASELINE_CIRCLES = [
    {"shim.dedup", "shim.driver"},
    {
        "shim.torch.device",
        "shim.torch.dispatch",
        "shim.torch.factories",
        "shim.torch.serialization",
        "shim.torch.tensor",
        "shim.torch.transfer",
    },
    {
        "gpud.aten",
        "gpud.hypervisor",
        "gpud.hypervisor.core",
        "gpud.hypervisor.dedup",
        "gpud.hypervisor.metrics",
        "gpud.hypervisor.scheduler",
        "gpud.hypervisor.sleep",
        "gpud.hypervisor.tenants",
        "gpud.hypervisor.torch_dedup",
        "gpud.server",
        "gpud.session",
    },
    {
        "jit.lower.core",
        "jit.lower.module",
        "jit.lower.narrow_floats",
        "jit.lower.ops_atomic",
        "jit.lower.ops_bits",
        "jit.lower.ops_cmp",
        "jit.lower.ops_ctrl",
        "jit.lower.ops_cvt",
        "jit.lower.ops_float",
        "jit.lower.ops_int",
        "jit.lower.ops_mbarrier",
        "jit.lower.ops_mem",
        "jit.lower.ops_video",
    },
    {"jit.compiler", "jit.runtime"},
]


def modules() -> dict[str, str]:
    found = {}
    for pkg in PACKAGES:
        for folder, _, files in os.walk(os.path.join(ROOT, pkg)):
            for f in files:
                if f.endswith(".py"):
                    path = os.path.join(folder, f)
                    name = os.path.relpath(path, ROOT)[:-3].replace(os.sep, ".")
                    found[name.removesuffix(".__init__")] = path
    return found


def imports(path: str, mod: str, known: dict[str, str]) -> set[str]:
    """The project modules ``mod`` imports (a parent package it lives in does not count: Python imports it first)."""
    tree = ast.parse(open(path, encoding="utf-8").read())
    package = mod.split(".") if path.endswith("__init__.py") else mod.split(".")[:-1]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out.update(a.name for a in node.names)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[: len(package) - (node.level - 1)]
                name = ".".join(base + ([node.module] if node.module else []))
            else:
                name = node.module or ""
            out.add(name)
            out.update(f"{name}.{a.name}" for a in node.names)
    return {o for o in out if o in known and o != mod and not mod.startswith(o + ".")}


def graph() -> dict[str, set[str]]:
    known = modules()
    return {m: imports(p, m, known) for m, p in known.items()}


def circles(g: dict[str, set[str]]) -> list[set[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[set[str]] = []
    counter = 0
    for root in g:
        if root in index:
            continue
        work = [(root, iter(sorted(g[root])))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on.add(root)
        while work:
            v, it = work[-1]
            w = next(it, None)
            if w is not None:
                if w not in index:
                    index[w] = low[w] = counter
                    counter += 1
                    stack.append(w)
                    on.add(w)
                    work.append((w, iter(sorted(g[w]))))
                elif w in on:
                    low[v] = min(low[v], index[w])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[v])
            if low[v] == index[v]:
                comp = set()
                while True:
                    w = stack.pop()
                    on.discard(w)
                    comp.add(w)
                    if w == v:
                        break
                if len(comp) > 1:
                    out.append(comp)
    return out


def package_edges(g: dict[str, set[str]]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for m, deps in g.items():
        for d in deps:
            a, b = m.split(".")[0], d.split(".")[0]
            if a != b:
                edges[a].add(b)
    return edges


def test_no_new_circles() -> None:
    new = [sorted(c) for c in circles(graph()) if not any(c <= base for base in BASELINE_CIRCLES)]
    assert not new, f"new import circles: {new}"


def test_no_new_package_dependencies() -> None:
    for pkg, deps in package_edges(graph()).items():
        extra = deps - ALLOWED_PACKAGE_EDGES.get(pkg, set())
        assert not extra, f"{pkg} now imports {sorted(extra)}"


# What shim/, gpud/ and jit/ may take from woolyhv/: the pool's client library and the CLI gpud's __main__ runs.
# Settings, host identity and sizes are proto's (NOTE [settings] in proto/settings.py), not the CLI package's.
ALLOWED_FROM_CLI = {
    "shim.runtime": {"woolyhv.pool.client"},
    "gpud.poolnode": {"woolyhv.pool.placement"},
    "gpud.__main__": {"woolyhv.cli"},
}


def test_the_cli_package_is_not_a_basement() -> None:
    for mod, deps in graph().items():
        if mod.split(".")[0] in ("shim", "gpud", "jit", "proto"):
            used = {d for d in deps if d.split(".")[0] == "woolyhv"}
            extra = used - ALLOWED_FROM_CLI.get(mod, set())
            assert not extra, f"{mod} imports {sorted(extra)} from the CLI package"


def test_the_checker_finds_a_circle() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [{"a", "b", "c"}]


if __name__ == "__main__":
    g = graph()
    for c in circles(g):
        print(len(c), sorted(c))
    for pkg, deps in sorted(package_edges(g).items()):
        print(pkg, "->", sorted(deps))
