"""Read the library's docstrings as the plain text they are written as, not as reStructuredText.

The docstrings are written to read well in ``help()``: ``|x|`` is a magnitude, and a line
ending in a colon may introduce an aligned table (a name, spaces, its meaning). In
reStructuredText the first is a substitution reference and the second a block quote that
breaks on its wrapped lines. After napoleon has turned the Google-style sections into
fields, this handler

* escapes every ``|`` outside inline literals and literal blocks, and
* makes a paragraph that ends in one colon and is followed, after a blank line, by an
  indented block introduce that block as a literal block (``::``), so tables keep their
  alignment.

Everything else (inline literals, ``Example::`` blocks, lists, fields) is left as written.
"""

from __future__ import annotations

import re
from typing import Any

from sphinx.application import Sphinx

_LITERAL = re.compile(r"``.*?``")


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip())


def _escape_bars(line: str) -> str:
    """``|`` escaped outside ``inline literals``."""
    out, last = [], 0
    for m in _LITERAL.finditer(line):
        out.append(line[last:m.start()].replace("|", r"\|"))
        out.append(m.group(0))
        last = m.end()
    out.append(line[last:].replace("|", r"\|"))
    return "".join(out)


def _opens_block(lines: list[str], i: int) -> bool:
    """Line i ends a paragraph with one colon, and an indented block follows a blank line."""
    line = lines[i].rstrip()
    if not line.endswith(":") or line.endswith("::") or line.lstrip().startswith(":"):
        return False
    if i + 2 >= len(lines) or lines[i + 1].strip():
        return False
    return bool(lines[i + 2].strip()) and _indent(lines[i + 2]) > _indent(lines[i])


def normalize(lines: list[str]) -> None:
    """Rewrite ``lines`` (one docstring, as autodoc hands it over) in place."""
    literal_from: int | None = None  # indentation of the line that opened a literal block
    for i, line in enumerate(lines):
        if literal_from is not None:
            if not line.strip() or _indent(line) > literal_from:
                continue
            literal_from = None
        if _opens_block(lines, i):
            lines[i] = line.rstrip() + ":"
        if lines[i].rstrip().endswith("::"):
            literal_from = _indent(lines[i])
        lines[i] = _escape_bars(lines[i])


def _process(app: Sphinx, what: str, name: str, obj: Any, options: Any,
             lines: list[str]) -> None:
    normalize(lines)


def setup(app: Sphinx) -> dict[str, Any]:
    # After napoleon (priority 500): Google-style "Args:" sections are fields by then.
    app.connect("autodoc-process-docstring", _process, priority=600)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
