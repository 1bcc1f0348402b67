"""The library reaches into another object's private attributes in four places only.

A private attribute (``_name``, not ``__dunder__``) reached on anything but ``self``, ``cls``
or an imported module is counted, by attribute (``x._name``) or by string
(``getattr(x, "_name")``, ``hasattr``, ``setattr``, ``delattr``); the owner should say what the
caller needs with a public method or property instead. The four kept have no public route in
torch.
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("collectives", "compressors", "compcoll")
#: the builtins that reach an attribute named by a string
BY_NAME = ("getattr", "hasattr", "setattr", "delattr")

#: (file, expression) -> why it stays (a string reach is written as ``obj._name``)
ALLOWED = {
    ("collectives/transport/torch_dist.py", "backend._allgather_base"):
        "an inner gloo backend is no registered ProcessGroup: dist.all_gather_into_tensor "
        "cannot take it, and ProcessGroupGloo binds only the private call",
    ("collectives/transport/torch_dist.py", "backend._reduce_scatter_base"):
        "as above, for dist.reduce_scatter_tensor",
    ("collectives/torchwork.py", "group._get_backend"):
        "a ProcessGroup says its timeout through none of its public methods: only its "
        "backend's options hold it",
    ("collectives/torchwork.py", "options._timeout"):
        "torch 2.13 reads a backend's timeout through no public name (set_timeout only "
        "writes it, get_backend_config names the backend alone): the group's deadline",
}


def reached(node: ast.AST) -> tuple[ast.expr, str] | None:
    """(object, private name) where ``node`` reaches a private attribute, else None."""
    if isinstance(node, ast.Attribute):
        obj, name = node.value, node.attr
    elif (isinstance(node, ast.Call) and isinstance(node.func, ast.Name)
          and node.func.id in BY_NAME and len(node.args) >= 2
          and isinstance(node.args[1], ast.Constant) and isinstance(node.args[1].value, str)):
        obj, name = node.args[0], node.args[1].value
    else:
        return None
    return (obj, name) if name.startswith("_") and not name.startswith("__") else None


def reaches_in(source: str) -> list[tuple[int, str]]:
    """(line, ``obj._name``) for each private reach in ``source``."""
    tree = ast.parse(source)
    modules = {(a.asname or a.name).split(".")[0] for n in ast.walk(tree)
               if isinstance(n, ast.Import | ast.ImportFrom) for a in n.names}
    hits = []
    for n in ast.walk(tree):
        found = reached(n)
        if found is None:
            continue
        obj, name = found
        if isinstance(obj, ast.Name) and (obj.id in ("self", "cls") or obj.id in modules):
            continue
        hits.append((n.lineno, f"{ast.unparse(obj)}.{name}"))
    return hits


def reaches() -> list[tuple[str, int, str]]:
    return [(path.relative_to(ROOT).as_posix(), line, expr)
            for package in PACKAGES for path in sorted((ROOT / package).rglob("*.py"))
            for line, expr in reaches_in(path.read_text())]


def test_string_reaches_are_counted():
    source = ('import os\n'
              'wait = getattr(getattr(inner, "options", None), "_timeout", None)\n'
              'if hasattr(model, "_orig_mod"): setattr(x, "_y", 1)\n'
              'getattr(self, "_z"); getattr(os, "_exit"); getattr(x, "__dict__")\n'
              'getattr(x, name); x._w\n')
    assert sorted(reaches_in(source)) == [
        (2, "getattr(inner, 'options', None)._timeout"), (3, "model._orig_mod"), (3, "x._y"),
        (5, "x._w")]


def test_private_attributes_are_reached_only_where_no_public_route_exists():
    hits = reaches()
    new = [f"{file}:{line}: {expr}" for file, line, expr in hits
           if (file, expr) not in ALLOWED]
    assert not new, ("private attributes reached on another object (give the owner a "
                     "public method or property): " + "; ".join(new))
    kinds = {(file, expr) for file, _, expr in hits}
    assert kinds <= set(ALLOWED) and len(kinds) <= 4, f"more than 4 private reaches: {hits}"
