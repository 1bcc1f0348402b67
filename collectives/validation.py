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

import zlib

import numpy as np

from .errors import MismatchError
from .transport.base import Communicator

#: int64 values every validation message holds.
WIDTH = 16

#: Code of each validated call path (0 is never used: a zeroed message is not a path).
PATHS: dict[str, int] = {
    "allreduce": 1,
    "compressed allreduce": 2,
    "reduce_scatter": 3,
    "allgather": 4,
    "broadcast": 5,
    "sparse_allreduce": 6,
    "barrier": 7,
}
_NAMES = {code: name for name, code in PATHS.items()}


def digest(text: str) -> int:
    """A 31-bit fingerprint of a string (names, specs) that every process computes alike."""
    return zlib.crc32(text.encode()) & 0x7FFFFFFF


def agree(comm: Communicator, path: str, fields: dict[str, int], timeout: float | None,
          shared: dict[str, int] | None = None) -> np.ndarray:
    """Check every rank passed the same ``fields`` to the same ``path``; gather ``shared``.

    ``shared`` values may differ between ranks (a size each rank contributes): they travel in
    the same message and are returned, not compared. Returns the gathered table, one row per
    rank, the columns being ``fields`` then ``shared`` in order.
    """
    shared = shared or {}
    values = [PATHS[path], len(fields) + len(shared), *fields.values(), *shared.values()]
    if len(values) > WIDTH:
        raise ValueError(f"{path}: {len(values)} validation values exceed the {WIDTH} slots")
    vec = np.zeros(WIDTH, np.int64)
    vec[:len(values)] = [int(v) for v in values]
    table = comm.allgather_ints(vec, collective=f"{path} (validation)", timeout=timeout)
    codes = table[:, 0]
    if (codes != codes[0]).any():
        calls = ", ".join(f"rank {r}: {_NAMES.get(int(c), f'another call (code {int(c)})')}"
                          for r, c in enumerate(codes))
        raise MismatchError(
            f"{path}: ranks are in different calls ({calls}); every rank must make the same "
            "call, with the same compressor or none"
        )
    if (table[:, 1] != table[0, 1]).any():
        raise MismatchError(f"{path}: ranks validated {table[:, 1].tolist()} fields; every "
                            "rank must run the same version of compcoll")
    for j, name in enumerate(fields):
        column = table[:, 2 + j]
        if (column != column[0]).any():
            values_by_rank = ", ".join(f"rank {r}: {v}" for r, v in enumerate(column.tolist()))
            raise MismatchError(
                f"{path}: ranks disagree on {name} ({values_by_rank}); every rank must pass "
                f"the same {name}"
            )
    return table[:, 2:2 + len(fields) + len(shared)]
