"""Tables read from the library's registries when the site is built, so they cannot drift.

``.. compressor-table::`` lists every registered compressor (``compressors.available()``)
with its parameters and their defaults, its declared capabilities and the first paragraph
of its class docstring.
"""

from __future__ import annotations

import re
from typing import Any

from docutils import nodes
from sphinx.application import Sphinx
from sphinx.util.docutils import SphinxDirective

_LITERAL = re.compile(r"``(.+?)``")


def _yes(flag: bool) -> str:
    return "yes" if flag else "no"


def _summary(obj: Any) -> str:
    doc = (type(obj).__doc__ or "").strip()
    return doc.split("\n\n")[0].replace("\n", " ")


def _inline(text: str) -> list[nodes.Node]:
    """Text with its ``literals`` as literal nodes (docstrings are plain text otherwise)."""
    parts = _LITERAL.split(text)  # text, literal, text, ...
    return [nodes.literal(part, part) if i % 2 else nodes.Text(part)
            for i, part in enumerate(parts) if part]


def _entry(content: list[nodes.Node]) -> nodes.entry:
    return nodes.entry("", nodes.paragraph("", "", *content))


def _table(header: list[str], widths: list[int],
           rows: list[list[list[nodes.Node]]]) -> nodes.table:
    group = nodes.tgroup(cols=len(header))
    group += [nodes.colspec(colwidth=w) for w in widths]
    group += nodes.thead("", nodes.row("", *(_entry([nodes.Text(h)]) for h in header)))
    group += nodes.tbody("", *(nodes.row("", *(_entry(c) for c in row)) for row in rows))
    return nodes.table("", group)


class CompressorTable(SphinxDirective):
    """Every registered compressor: name, defaults, capabilities, summary."""

    def run(self) -> list[nodes.Node]:
        import compressors

        header = ["name", "parameters (defaults)", "summable", "sparse", "same size",
                  "shared seed", "allreduce steps", "what it sends"]
        widths = [10, 24, 9, 7, 7, 7, 9, 40]
        rows = []
        for name in compressors.available():
            comp = compressors.get(name)
            caps = comp.capabilities
            params = ", ".join(f"``{k}={v!r}``" for k, v in comp.params.items()) or "-"
            cells = [f"``{name}``", params, _yes(caps.summable), _yes(caps.sparse),
                     _yes(caps.same_size_on_all_ranks), _yes(caps.needs_shared_seed),
                     ", ".join(caps.allreduce_steps) or "-", _summary(comp)]
            rows.append([_inline(cell) for cell in cells])
        return [_table(header, widths, rows)]


def setup(app: Sphinx) -> dict[str, Any]:
    app.add_directive("compressor-table", CompressorTable)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
