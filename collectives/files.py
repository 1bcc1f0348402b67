"""Small files compcoll keeps between runs (the policy's measurements, crossover tables).

Such a file is a cache: whatever it holds is checked before it is used, and a bad one is
ignored with a warning naming it and why (:func:`ignored`), never trusted and never raised to
the caller. :func:`read_small` reads only a regular file of at most ``LIMIT`` bytes (a named
pipe in its place would block the reader; a huge file would be read, parsed and broadcast),
and :func:`load_json` parses JSON of at most ``DEPTH`` levels of nesting (deeper input would
exhaust the parser's recursion). The typed readers :func:`number` and :func:`integer` take a
field only as what the writer wrote: a bool or a number's text is not a number.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import tempfile
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

try:
    import fcntl
except ImportError:  # (not on Windows: updates there are not locked)
    fcntl = None  # type: ignore[assignment]

import numpy as np

#: Bytes a kept file may hold (the policy's table of a model of a few thousand layers).
LIMIT = 4 << 20
#: Levels of nesting a kept file's JSON may have (the formats use four).
DEPTH = 16

_STRING = re.compile(rb'"(?:[^"\\]|\\.)*"', re.DOTALL)


def write_atomic(path: Path, data: bytes, what: str) -> None:
    """Write ``data`` to ``path`` through a temporary file renamed over it, so that a reader
    never sees half a file; a failure is a warning naming ``what`` and why."""
    if len(data) > LIMIT:  # it would be refused when read
        warnings.warn(f"{what} {path} not written ({len(data)} bytes, more than the "
                      f"{LIMIT} such a file may hold)", stacklevel=3)
        return
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile("wb", dir=path.parent, prefix=path.name,
                                         suffix=".tmp", delete=False) as f:
            tmp = f.name
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except OSError as exc:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)
        warnings.warn(f"{what} {path} not written ({exc})", stacklevel=3)


@contextmanager
def locked(path: Path) -> Iterator[None]:
    """Hold an exclusive lock for updating ``path`` (``flock`` on ``<path>.lock`` next to it)
    while the block runs: writers that read, merge and write the file one after another lose
    no update. Where no lock can be taken (no ``fcntl``, a directory that cannot be written)
    the block runs unlocked; its write then warns as it would."""
    fd = None
    if fcntl is not None:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path.with_name(path.name + ".lock"), os.O_RDWR | os.O_CREAT, 0o644)
            fcntl.flock(fd, fcntl.LOCK_EX)
        except OSError:
            if fd is not None:
                os.close(fd)
            fd = None
    try:
        yield
    finally:
        if fd is not None:
            fcntl.flock(fd, fcntl.LOCK_UN)  # (closing releases it too)
            os.close(fd)


def ignored(what: str, path: Path, why: object, then: str) -> None:
    """Warn that the file ``path`` (a ``what``) is not used, ``why``, and what happens
    instead (``then``)."""
    warnings.warn(f"{what} {path} ignored ({why}); {then}", stacklevel=3)


def read_small(path: Path, limit: int | None = None) -> bytes | None:
    """The bytes of ``path``, None when there is no such file; ValueError (saying why) when it
    is not a regular file, is empty, holds more than ``limit`` bytes (default ``LIMIT``) or
    cannot be read."""
    limit = LIMIT if limit is None else limit
    try:
        if not stat.S_ISREG(os.stat(path).st_mode):  # refused before it is opened
            raise ValueError("not a regular file")
        # Non-blocking: a FIFO swapped in after the check opens at once and fstat refuses it.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) |
                     getattr(os, "O_BINARY", 0))
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise ValueError(f"cannot be opened: {exc.strerror or exc}") from exc
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise ValueError("not a regular file")
        chunks, n = [], 0
        while n <= limit:
            chunk = os.read(fd, limit + 1 - n)
            if not chunk:
                break
            chunks.append(chunk)
            n += len(chunk)
    except OSError as exc:
        raise ValueError(f"cannot be read: {exc.strerror or exc}") from exc
    finally:
        os.close(fd)
    if n > limit:
        raise ValueError(f"larger than the {limit} bytes such a file may hold")
    if n == 0:
        raise ValueError("empty")
    return b"".join(chunks)


def depth(data: bytes) -> int:
    """The deepest nesting of arrays and objects in JSON text (strings skipped)."""
    bare = np.frombuffer(_STRING.sub(b"", data), dtype=np.uint8)
    steps = np.isin(bare, (ord("["), ord("{"))).astype(np.int64) - \
        np.isin(bare, (ord("]"), ord("}")))
    return int(np.cumsum(steps).max(initial=0))


def _constant(name: str) -> float:
    raise ValueError(f"{name} is not a number a measurement can have")


def load_json(data: bytes) -> Any:
    """The JSON value in ``data``; ValueError (saying why) for anything that is not UTF-8
    JSON of at most ``DEPTH`` levels, or holds NaN or Infinity. The same bytes give the same
    answer on every rank: the depth is counted before the (recursive) parser runs."""
    if depth(data) > DEPTH:
        raise ValueError(f"nested deeper than {DEPTH} levels")
    try:
        return json.loads(data.decode("utf-8"), parse_constant=_constant)
    except UnicodeDecodeError as exc:
        raise ValueError(f"not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except (RecursionError, OverflowError, ValueError) as exc:  # JSONDecodeError included
        raise ValueError(f"not valid JSON: {exc}") from None


def number(value: Any, what: str) -> float:
    """``value`` as a float if it is a finite JSON number (an int or a float, never a bool or
    a string); else ValueError naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{what} is {_kind(value)}, not a number")
    try:
        out = float(value)
    except OverflowError:
        raise ValueError(f"{what} is an integer too large for a float") from None
    if not math.isfinite(out):
        raise ValueError(f"{what} is not finite")
    return out


def integer(value: Any, what: str) -> int:
    """``value`` if it is a JSON integer (never a bool, a float or a string); else ValueError
    naming ``what``."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{what} is {_kind(value)}, not an integer")
    return value


def _kind(value: Any) -> str:
    if isinstance(value, bool):
        return "a bool"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, int | float):
        return "a float" if isinstance(value, float) else "an integer"
    return {list: "a list", dict: "an object", type(None): "null"}.get(type(value), "foreign")
