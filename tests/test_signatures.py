"""No function in ``collectives/`` or ``compressors/`` takes more than 8 parameters: what
travels together is one value (``collectives.Compression``, ``collectives.Session``, a
sparse algorithm's spec "gtopk:k=N"), not loose words passed on one by one.

Counted: every named parameter and ``*args`` (``self``/``cls`` not). Not counted: a
``**keywords`` catch-all, which is keyword sugar turned into one value in one place (as
``allreduce``'s compressor keywords become a ``Compression`` in ``Compression.of``), and the
wrappers of the C++ kernels (``compressors/kernels.py``), which mirror the kernels' own
signatures.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LIMIT = 8
EXEMPT = {"compressors/kernels.py"}


def _counts() -> dict[str, int]:
    out = {}
    for package in ("collectives", "compressors"):
        for path in sorted((ROOT / package).rglob("*.py")):
            rel = path.relative_to(ROOT).as_posix()
            if rel in EXEMPT:
                continue
            for node in ast.walk(ast.parse(path.read_text(), rel)):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    a = node.args
                    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
                    if names and names[0] in ("self", "cls"):
                        names = names[1:]
                    out[f"{rel}:{node.lineno} {node.name}"] = len(names) + (a.vararg is not None)
    return out


def test_no_function_takes_more_than_eight_parameters() -> None:
    counts = _counts()
    over = {where: n for where, n in counts.items() if n > LIMIT}
    assert not over, f"functions over {LIMIT} parameters: {over}"


def test_the_scan_sees_the_library() -> None:
    counts = _counts()
    assert len(counts) > 1000  # every module, nested functions and methods included
    assert any(w.startswith("collectives/api.py") and w.endswith(" allreduce") for w in counts)
    assert max(counts.values()) == LIMIT  # the widest signatures sit at the bound
