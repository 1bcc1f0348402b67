"""The repository imports one way (DESIGN, "Layout").

Across packages: ``compcoll`` and ``compcoll_bench`` -> ``collectives`` -> ``compressors``.
Inside ``collectives``, every import of every module (function-level and TYPE_CHECKING ones
included) points to its own floor or one below. In the whole repository no modules import
each other in a circle, and neither do the subpackages and top modules of one package
(``collectives.algorithms`` with ``collectives.interleave``, say)."""

from __future__ import annotations

import ast
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
ROOT = REPO / "collectives"
#: Every package of the repository, where its sources are, and its place in the one-way order:
#: a package imports only packages of a lower rank.
PACKAGES: dict[str, tuple[Path, int]] = {
    "compressors": (REPO / "compressors", 0),
    "collectives": (ROOT, 1),
    "compcoll": (REPO / "compcoll", 2),
    "compcoll_bench": (REPO / "bench" / "compcoll_bench", 2),
}

#: The floor of each module, by name prefix (the longest prefix that matches decides).
FLOORS: dict[str, int] = {
    # plain data and settings
    "config": 0, "errors": 0, "files": 0, "abort": 0, "version": 0, "costparams": 0,
    "agreement": 0, "moved": 0,
    # transport, buffers and what is written directly on them
    "transport": 1, "buffers": 1, "resultpool": 1, "device": 1, "ops": 1, "topology": 1,
    "validation": 1,
    # the algorithms, their registry and the machinery they run on
    "algorithms": 2, "progress": 2, "interleave": 2, "exchange": 2,
    # the cost model (fit, prediction by the registered formulas) and auto's crossover table
    "costmodel": 3, "tuning": 3,
    # sparse and compressed schemes
    "sparse": 4, "compressed": 4,
    # the public API, the by-name pricing of schemes, the tuner that times the API
    "api": 5, "core": 5, "pricing": 5, "tuner": 5,
    # policies, and the session that holds one for the torch front doors
    "policy": 6, "session": 6, "session_state": 6,
    # integration
    "ddp": 7, "fsdp": 7, "backend": 7, "torchwork": 7, "_autoload": 7, "lightning": 7,
    # optimizers that average what they send themselves (over the API and the policy specs)
    "optim": 7,
    # the package's own __init__: the public names, the session's among them
    "": 7,
}


def _collectives_edges() -> dict[str, set[str]]:
    """:func:`_repository`'s imports among the modules of ``collectives``, named relative to
    it ("" is its ``__init__``)."""
    def local(name: str) -> str:
        return name.removeprefix("collectives").removeprefix(".")

    def inside(name: str) -> bool:
        return name.split(".")[0] == "collectives"

    return {local(m): {local(t) for t in ts if inside(t)}
            for m, ts in _repository()[1].items() if inside(m)}


def _floor(module: str) -> int:
    for n in range(module.count(".") + 1, -1, -1):
        prefix = ".".join(module.split(".")[:n])
        if prefix in FLOORS:
            return FLOORS[prefix]
    raise AssertionError(f"collectives.{module} has no floor in FLOORS")


def _circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on: set[str] = set()
    out: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on.add(v)
        for w in sorted(edges[v]):
            if w not in index:
                visit(w)
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
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(edges):
        if v not in index:
            visit(v)
    return out


def test_the_imports_form_no_circle() -> None:
    edges = _collectives_edges()
    circles = _circles(edges)
    assert not circles, "modules that import each other in a circle:\n" + "\n".join(
        ", ".join(f"collectives.{m}" for m in c) + "\n  " + "\n  ".join(
            f"{a} -> {b}" for a in c for b in sorted(edges[a]) if b in c)
        for c in circles)


def test_no_module_imports_one_on_a_higher_floor() -> None:
    edges = _collectives_edges()
    upward = [f"collectives.{a} (floor {_floor(a)}) imports collectives.{b} (floor {_floor(b)})"
              for a in sorted(edges) for b in sorted(edges[a]) if _floor(b) > _floor(a)]
    assert not upward, "\n".join(upward)


def test_the_parser_sees_function_level_and_package_imports() -> None:
    edges = _collectives_edges()
    assert "algorithms.ring" in edges["algorithms"]  # from . import ring
    assert "tuning" in edges["api"] and "api" in edges["tuner"]
    assert "transport.mpi" in edges["transport"]  # imported inside as_communicator


def _repository() -> tuple[dict[str, Path], dict[str, set[str]]]:
    """Every module of every package by its full dotted name, and what each imports (from the
    repository's packages only; ``from a import b`` resolved to the submodule b where b is one)."""
    mods: dict[str, Path] = {}
    for top, (root, _) in PACKAGES.items():
        for f in root.rglob("*.py"):
            parts = [top, *f.relative_to(root).with_suffix("").parts]
            mods[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = f
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        package = m.split(".") if f.name == "__init__.py" else m.split(".")[:-1]
        for node in ast.walk(ast.parse(f.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                base = (package[:len(package) - (node.level - 1)] if node.level else [])
                name = ".".join(base + (node.module.split(".") if node.module else []))
                targets = [f"{name}.{a.name}" if f"{name}.{a.name}" in mods else name
                           for a in node.names]
            elif isinstance(node, ast.Import):
                for alias in node.names:
                    name = alias.name
                    while name and name not in mods:
                        name = name.rpartition(".")[0]
                    targets.append(name)
            edges[m].update(t for t in targets if t in mods and t != m)
    return mods, edges


def _grouped(edges: dict[str, set[str]], depth: int) -> dict[str, set[str]]:
    """The import graph of the modules' first ``depth`` name parts (a package's subpackages and
    top modules at depth 2), inside each package only."""
    def key(m: str) -> str:
        return ".".join(m.split(".")[:depth])
    out: dict[str, set[str]] = {key(m): set() for m in edges}
    for a, bs in edges.items():
        out[key(a)].update(key(b) for b in bs
                           if key(b) != key(a) and b.split(".")[0] == a.split(".")[0])
    return out


def _describe(circles: list[list[str]], edges: dict[str, set[str]]) -> str:
    return "\n".join(", ".join(c) + "\n  " + "\n  ".join(
        f"{a} -> {b}" for a in c for b in sorted(edges[a]) if b in c) for c in circles)


def test_no_modules_of_the_repository_import_each_other_in_a_circle() -> None:
    _, edges = _repository()
    circles = _circles(edges)
    assert not circles, "modules that import each other in a circle:\n" + _describe(circles, edges)


def test_no_subpackages_or_top_modules_of_a_package_import_each_other_in_a_circle() -> None:
    grouped = _grouped(_repository()[1], 2)
    circles = _circles(grouped)
    assert not circles, "parts of a package in a circle:\n" + _describe(circles, grouped)


def test_the_packages_import_one_way() -> None:
    _, edges = _repository()
    against = sorted(f"{a} imports {b}" for a, bs in edges.items() for b in bs
                     if PACKAGES[b.split(".")[0]][1] >= PACKAGES[a.split(".")[0]][1]
                     and b.split(".")[0] != a.split(".")[0])
    assert not against, "imports against the order compcoll, compcoll_bench -> collectives " \
        "-> compressors:\n" + "\n".join(against)


def test_the_repository_scan_sees_every_package_and_import_form() -> None:
    mods, edges = _repository()
    assert {m.split(".")[0] for m in mods} == set(PACKAGES)
    assert "compressors.providers" in edges["collectives.compressed.routing"]
    assert "compcoll_bench.registry" in edges["compcoll_bench.commands.tune"]
    grouped = _grouped(edges, 2)
    assert "collectives.transport" in grouped["collectives.interleave"]
    # a planted circle is found
    planted = {k: set(v) for k, v in grouped.items()}
    planted["collectives.transport"].add("collectives.interleave")
    assert _circles(planted)
