"""The ``compcoll`` parser for the command-line reference (``docs/cli.md``).

``parser()`` is ``compcoll_bench.cli.build_parser()`` (every command with its options), with
its texts made safe for reStructuredText, which sphinx-argparse parses them as: the help
strings are plain terminal text, so ``*``, ``|``, backquotes and backslashes are escaped, and
each command's ``example: ...`` epilog becomes a literal block.
"""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterator

from compcoll_bench.cli import build_parser

_SPECIAL = re.compile(r"([\\*`|])|(?<=\w)(_)(?!\w)")
_EXAMPLE = "example: "


def escape(text: str | None) -> str | None:
    """Plain text as reStructuredText that reads the same (inline markup escaped)."""
    if not text:
        return text
    return _SPECIAL.sub(lambda m: "\\" + (m.group(1) or m.group(2)), text)


def _epilog(text: str | None) -> str | None:
    if text and text.startswith(_EXAMPLE):
        return "Example::\n\n    " + text[len(_EXAMPLE):]
    return escape(text)


def parsers(root: argparse.ArgumentParser) -> Iterator[argparse.ArgumentParser]:
    """``root`` and every parser below it."""
    yield root
    for action in root._actions:
        if isinstance(action, argparse._SubParsersAction):
            for sub in dict.fromkeys(action.choices.values()):
                yield from parsers(sub)


def parser() -> argparse.ArgumentParser:
    """The full ``compcoll`` parser, its texts escaped; the top level's epilog (a list of the
    commands and examples, which the page gives in its own words) left out."""
    root = build_parser()
    for p in parsers(root):
        p.description = escape(p.description)
        p.epilog = None if p is root else _epilog(p.epilog)
        for action in p._actions:
            if action.help not in (None, argparse.SUPPRESS):
                action.help = escape(action.help)
            if isinstance(action, argparse._SubParsersAction):
                for choice in action._choices_actions:
                    choice.help = escape(choice.help)
    return root
