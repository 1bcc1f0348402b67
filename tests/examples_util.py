"""The ``Example::`` blocks of the public API's docstrings, as code to run."""

from __future__ import annotations

import inspect
import re
from typing import Any

import collectives
import compressors


def example(obj: Any) -> str | None:
    """The code of ``obj``'s docstring example (``>>>`` and ``...`` lines), or None."""
    doc = inspect.getdoc(obj) or ""
    if "Example::" not in doc:
        return None
    block = doc.split("Example::", 1)[1]
    lines = [m.group(1) for m in re.finditer(r"^\s*(?:>>>|\.\.\.) ?(.*)$", block, re.M)]
    return "\n".join(lines) or None


def public(module: Any) -> dict[str, Any]:
    """A module's public functions and classes, errors left out (raised, not called)."""
    out = {}
    for name in module.__all__:
        obj = getattr(module, name)
        if inspect.isclass(obj) and issubclass(obj, BaseException):
            continue
        if inspect.isclass(obj) or inspect.isfunction(obj):
            out[f"{module.__name__}.{name}"] = obj
    return out


def run(code: str) -> None:
    exec(compile(code, "<example>", "exec"), {})  # noqa: S102 - running the docs is the point


PACKAGES = {"collectives": collectives, "compressors": compressors}
