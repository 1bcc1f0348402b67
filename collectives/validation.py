"""Agreement across ranks before a collective runs: one small allgather, one fixed layout.

Every validated call gathers the same ``WIDTH`` int64 values from every rank::

    [path code, number of fields, field 0, field 1, ..., 0 padding]

The path code says which collective (and which path of it) the rank is about to run, so a
rank on another path is reported as such instead of its fields being read as this path's;
the fixed width keeps any two calls' messages the same size. Every rank sees the same table,
so every rank raises ``MismatchError`` (or none does) and nobody is left waiting in a
collective the others abandoned.
"""

from __future__ import annotations

import numbers
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np

from .agreement import PATHS, WIDTH, check, differing, disagreement, message, words
from .agreement import digest as digest  # the fingerprint validated fields use
from .config import shaping
from .errors import MismatchError
from .transport import as_communicator
from .transport.base import Communicator


def agree(comm: Communicator, path: str, fields: dict[str, int], timeout: float | None,
          shared: dict[str, int] | None = None) -> np.ndarray:
    """Check every rank passed the same ``fields`` to the same ``path``; gather ``shared``.

    ``shared`` values may differ between ranks (a size each rank contributes): they travel in
    the same message and are returned, not compared. Returns the gathered table, one row per
    rank, the columns being ``fields`` then ``shared`` in order. A field that differs raises
    MismatchError naming every rank's value in words: a fingerprint (:func:`digest`) is
    compared, and only when it differs do the ranks trade the words it stands for.
    """
    vec = message(path, fields, shared)
    table = comm.allgather_ints(vec, collective=f"{path} (validation)", timeout=timeout)
    try:
        return check(table, path, fields, shared)
    except MismatchError as exc:
        where = differing(table, fields)
        if not where:
            raise
        names, values = list(fields), list(fields.values())
        mine = [words(values[j]) for j in where]
        try:
            by_rank = gather_texts(comm, mine, f"{path} (validation)", timeout)
        except Exception:  # noqa: BLE001 - the mismatch is the error to report
            raise exc from None
        raise disagreement(path, [names[j] for j in where], by_rank) from None


def agree_settings(comm: Communicator, path: str, settings: dict[str, str],
                   timeout: float | None) -> None:
    """Check every rank runs ``path`` with the same ``settings`` (name -> the setting in
    words); MismatchError on every rank naming each setting that differs and every rank's
    value otherwise. One fixed-size message compares their fingerprints."""
    if comm.size > 1:
        agree(comm, path, {name: digest(text) for name, text in settings.items()}, timeout)


def gather_texts(comm: Communicator, texts: list[str], collective: str,
                 timeout: float | None) -> list[list[str]]:
    """Every rank's ``texts`` (each rank passes as many), in rank order."""
    table = gather_bytes(comm, [t.encode() for t in texts], collective, timeout)
    return [[d.decode(errors="replace") for d in row] for row in table]


def gather_bytes(comm: Communicator, data: list[bytes], collective: str,
                 timeout: float | None) -> list[list[bytes]]:
    """Every rank's ``data`` (each rank passes as many strings), in rank order: two gathers,
    the lengths and then the bytes padded to the longest rank's."""
    sizes = comm.allgather_ints(np.array([len(d) for d in data], np.int64),
                                collective=collective, timeout=timeout)
    width = -(-int(sizes.sum(axis=1).max(initial=0)) // 8) * 8 or 8
    buf = np.zeros(width, np.uint8)
    joined = b"".join(data)
    buf[:len(joined)] = np.frombuffer(joined, np.uint8)
    table = comm.allgather_ints(buf.view(np.int64), collective=collective, timeout=timeout)
    out = []
    for r in range(comm.size):
        raw, pos, row = np.ascontiguousarray(table[r]).view(np.uint8).tobytes(), 0, []
        for n in sizes[r].tolist():
            row.append(raw[pos:pos + n])
            pos += n
        out.append(row)
    return out


def open_comm(comm: Any, timeout: float | None, validate: bool | None = None) -> Communicator:
    """The communicator a call runs on (``as_communicator``); on its first call the ranks check
    that their message-shaping settings agree (:func:`settle`), unless the call itself passes
    ``validate=False`` (no agreement message at all, as it asks)."""
    c = as_communicator(comm)
    if validate is not False and not c.cache.settings_agreed:  # (once: not on every call)
        settle(c, shaping(), timeout)
    return c


def settle(comm: Communicator, settings: dict[str, int], timeout: float | None) -> None:
    """Once per communicator, before its first collective: check every rank runs with the same
    ``settings`` (the process-wide values that shape messages, by the variable that sets them);
    MismatchError naming the variable on every rank otherwise, instead of a hang."""
    if comm.cache.settings_agreed or comm.size == 1:
        return
    table = agree(comm, "settings", {}, timeout, shared=settings)
    comm.cache.settings_agreed = True
    for j, name in enumerate(settings):
        column = table[:, j]
        if (column != column[0]).any():
            by_rank = ", ".join(f"rank {r}: {v}" for r, v in enumerate(column.tolist()))
            raise MismatchError(f"ranks run with different {name} ({by_rank}); set it alike "
                                "on every rank (ranks that disagree cut messages differently)")


@contextmanager
def refusing(comm: Communicator, path: str, validate: bool,
             timeout: float | None) -> Iterator[None]:
    """Run a call's local argument checks; if they refuse (TypeError/ValueError) and the call
    validates, tell the other ranks through the validation message they are waiting for, so
    they raise MismatchError at once instead of waiting out the timeout."""
    try:
        yield
    except (TypeError, ValueError):
        if validate and comm.size > 1:
            vec = np.zeros(WIDTH, np.int64)
            vec[0] = PATHS["refused"]
            try:
                comm.allgather_ints(vec, collective=f"{path} (validation)", timeout=timeout)
            except Exception:  # noqa: BLE001 - the caller's own error is the one to raise
                pass
        raise


def check_root(root: Any, size: int) -> int:
    """``root`` as a rank of a communicator of ``size`` ranks: an integer, not a bool, in
    [0, size); else TypeError or ValueError naming it (every rank that passes the same root
    raises alike, before any message)."""
    if isinstance(root, bool) or not isinstance(root, numbers.Integral):
        raise TypeError(f"root must be a rank in [0, {size}) given as an int, got "
                        f"{type(root).__name__} {root!r}")
    if not 0 <= root < size:
        raise ValueError(f"root must be a rank in [0, {size}), got {root}")
    return int(root)


def check_counts(counts: Any, size: int, total: int) -> list[int]:
    """``counts`` as ``size`` block sizes: integers (not bools) >= 0 summing to ``total``;
    else TypeError or ValueError naming the argument and what would do."""
    want = f"counts must hold {size} non-negative sizes summing to {total}"
    if isinstance(counts, (str, bytes)) or not hasattr(counts, "__len__"):
        raise TypeError(f"{want} (a list of ints), got {type(counts).__name__} {counts!r}")
    for i, c in enumerate(counts):
        if isinstance(c, bool) or not isinstance(c, numbers.Integral):
            raise TypeError(f"{want} (a list of ints); counts[{i}] is {type(c).__name__} "
                            f"{c!r}")
    values = [int(c) for c in counts]
    if len(values) != size or sum(values) != total or min(values, default=0) < 0:
        raise ValueError(f"{want}, got {values}")
    return values
