"""Argument checks the commands share: number types for argparse, output paths, specs.

Each check runs before any rank starts or any time is measured, and says what would work.
The ``type=`` functions raise ``argparse.ArgumentTypeError`` (argparse prints them as usage
errors); the others raise :class:`compcoll_bench.registry.UsageError`.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from ..registry import UsageError


def _number(kind: type, low: float, strict: bool, what: str) -> Callable[[str], float]:
    def parse(text: str) -> float:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if value != value or value < low or (strict and value == low):  # NaN fails too
            bound = f"> {low:g}" if strict else f">= {low:g}"
            raise argparse.ArgumentTypeError(f"must be {bound}, got {text}")
        return value
    parse.__name__ = what  # argparse names the type in its messages
    return parse


positive_int = _number(int, 1, False, "an integer >= 1")
count_int = _number(int, 0, False, "an integer >= 0")
positive_float = _number(float, 0.0, True, "a number > 0")
nonneg_float = _number(float, 0.0, False, "a number >= 0")


def _unwritable(path: str) -> str | None:
    """Why ``path`` could not be written at the end of a run (None: it could): its directory
    must exist and be writable, and the path must not be a directory."""
    target = Path(path)
    folder = target.parent if str(target.parent) else Path(".")
    if target.is_dir():
        return f"{path}: is a directory; give a file name in it"
    if not folder.is_dir():
        return f"{path}: directory {folder} does not exist; create it first or write elsewhere"
    if not os.access(folder, os.W_OK | os.X_OK) or (target.exists()
                                                     and not os.access(target, os.W_OK)):
        return f"{path}: not writable here; choose a path you can write"
    return None


def unwritable_folder(folder: Path) -> str | None:
    """Why files could not be written into ``folder``, created with its missing parents
    (None: they could)."""
    existing = folder
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{folder} cannot be created: {existing} is not a directory"
    if not os.access(existing, os.W_OK | os.X_OK):
        return f"{folder} cannot be {'written' if existing == folder else 'created'} here"
    return None


def output_path(path: str | None, option: str, stdout: bool = False) -> None:
    """Refuse an output path that could not be written at the end of the run (see
    :func:`output_file`; ``-`` is standard output where ``stdout``)."""
    if path is None or (stdout and path == "-"):
        return
    problem = _unwritable(path)
    if problem:
        raise UsageError(f"{option} {problem}")


def output_file(text: str) -> str:
    """An argparse ``type=`` for an output file: refused while the arguments are parsed,
    before anything runs, when its directory is missing or not writable or it is a
    directory."""
    problem = _unwritable(text)
    if problem:
        raise argparse.ArgumentTypeError(problem)
    return text


def output_file_or_stdout(text: str) -> str:
    """:func:`output_file`, or ``-`` for standard output."""
    return text if text == "-" else output_file(text)


def names(text: str, option: str, known: Iterable[str]) -> list[str]:
    """The comma-separated names in ``text``: at least one, each among ``known``."""
    choices = list(known)
    got = [t.strip() for t in text.split(",") if t.strip()]
    if not got:
        raise UsageError(f"{option} {text!r} names nothing; choose from {', '.join(choices)}")
    unknown = [n for n in got if n not in choices]
    if unknown:
        raise UsageError(f"{option}: unknown {', '.join(map(repr, unknown))}; choose from "
                         f"{', '.join(choices)}")
    return got


def compressor(spec: str, option: str = "--compressor") -> None:
    """Refuse a compressor spec the registry cannot build (unknown name, bad parameter)."""
    import compressors  # here: ``compcoll doctor`` runs without the extension

    try:
        compressors.get(spec)
    except (ValueError, TypeError) as exc:
        raise UsageError(f"{option} {spec}: {exc}") from None


def scheme(text: str, option: str = "--scheme") -> None:
    """Refuse a compressed-allreduce scheme that does not exist."""
    from collectives.compressed import SCHEMES

    if text != "auto" and text not in SCHEMES:
        raise UsageError(f"{option} {text!r} is not a scheme; choose from auto, "
                         f"{', '.join(SCHEMES)}")
