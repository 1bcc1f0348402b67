"""The layers of ``collectives`` import one way, bottom to top (DESIGN, "Layout"): every
import of every module, function-level and TYPE_CHECKING ones included, points to its own
floor or one below, and no modules import each other in a circle."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent / "collectives"

#: The floor of each module, by name prefix (the longest prefix that matches decides).
FLOORS: dict[str, int] = {
    # plain data and settings
    "config": 0, "errors": 0, "files": 0, "abort": 0, "version": 0, "costparams": 0,
    "agreement": 0,
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
    "api": 5, "pricing": 5, "tuner": 5, "": 5,
    # policies
    "policy": 6,
    # integration
    "ddp": 7, "fsdp": 7, "backend": 7, "torchwork": 7, "_autoload": 7, "lightning": 7,
    # optimizers that average what they send themselves (over the API and the policy specs)
    "optim": 7,
}


def _modules() -> dict[str, Path]:
    mods = {}
    for f in ROOT.rglob("*.py"):
        parts = list(f.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        mods[".".join(parts)] = f
    return mods


def _edges(mods: dict[str, Path]) -> dict[str, set[str]]:
    """Module -> the modules it imports (``from .. import x`` resolved to the submodule x
    where x is one), names relative to the package ("" is its ``__init__``)."""
    edges: dict[str, set[str]] = {m: set() for m in mods}
    for m, f in mods.items():
        package = m.split(".") if f.name == "__init__.py" else m.split(".")[:-1]
        package = [p for p in package if p]
        for node in ast.walk(ast.parse(f.read_text())):
            targets = []
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package[:len(package) - (node.level - 1)]
                    base += node.module.split(".") if node.module else []
                elif node.module and node.module.split(".")[0] == "collectives":
                    base = node.module.split(".")[1:]
                else:
                    continue
                name = ".".join(base)
                for alias in node.names:
                    sub = f"{name}.{alias.name}" if name else alias.name
                    targets.append(sub if sub in mods else name)
            elif isinstance(node, ast.Import):
                targets = [a.name.split(".", 1)[1] if "." in a.name else ""
                           for a in node.names if a.name.split(".")[0] == "collectives"]
            edges[m].update(t for t in targets if t in mods and t != m)
    return edges


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
    edges = _edges(_modules())
    circles = _circles(edges)
    assert not circles, "modules that import each other in a circle:\n" + "\n".join(
        ", ".join(f"collectives.{m}" for m in c) + "\n  " + "\n  ".join(
            f"{a} -> {b}" for a in c for b in sorted(edges[a]) if b in c)
        for c in circles)


def test_no_module_imports_one_on_a_higher_floor() -> None:
    edges = _edges(_modules())
    upward = [f"collectives.{a} (floor {_floor(a)}) imports collectives.{b} (floor {_floor(b)})"
              for a in sorted(edges) for b in sorted(edges[a]) if _floor(b) > _floor(a)]
    assert not upward, "\n".join(upward)


def test_the_parser_sees_function_level_and_package_imports() -> None:
    edges = _edges(_modules())
    assert "algorithms.ring" in edges["algorithms"]  # from . import ring
    assert "tuning" in edges["api"] and "api" in edges["tuner"]
    assert "transport.mpi" in edges["transport"]  # imported inside as_communicator
