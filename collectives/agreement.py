"""The validation message's layout and its check, on plain arrays (no communicator).

Every validated call gathers the same ``WIDTH`` int64 values from every rank::

    [path code, number of fields, field 0, field 1, ..., 0 padding]

The transport's barrier sends this message too (``Communicator.barrier``), so a rank in a
barrier while another validates a collective makes both raise ``MismatchError`` instead of
misreading each other. ``collectives.validation`` gathers it for every validated call.
"""

from __future__ import annotations

import zlib

import numpy as np

from .errors import MismatchError

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
    "settings": 8,
    "refused": 9,  # a rank whose own arguments were refused before it could validate them
    "DDP hook settings": 10,
    "DiLoCo settings": 11,
    "OneBitAdam settings": 12,
}
_NAMES = {code: name for name, code in PATHS.items()}
_NAMES[PATHS["refused"]] = "a call that refused its own arguments (see that rank's error)"


class Worded(int):
    """A validated field's integer value that keeps the words it stands for (``text``): a
    fingerprint travels in the message, and a mismatch names what each rank passed."""

    text: str

    def __new__(cls, value: int, text: str) -> Worded:
        out = super().__new__(cls, value)
        out.text = text
        return out


def digest(text: str) -> Worded:
    """A 31-bit fingerprint of a string (names, specs) that every process computes alike,
    keeping ``text`` for the error message of a mismatch."""
    return Worded(zlib.crc32(text.encode()) & 0x7FFFFFFF, text)


def words(value: int) -> str:
    """What a field's value says: its text, quoted, when it is a fingerprint, else the
    number."""
    text = getattr(value, "text", None)
    return str(int(value)) if text is None else repr(text)


def differing(table: np.ndarray, fields: dict[str, int]) -> list[int]:
    """The positions of the ``fields`` whose column differs between ranks, when every rank is
    on the same path with as many values (else []: ``check`` names the calls). Every rank
    holds the same table, so every rank finds the same positions."""
    if (table[:, 0] != table[0, 0]).any() or (table[:, 1] != table[0, 1]).any():
        return []
    return [j for j in range(len(fields)) if (table[:, 2 + j] != table[0, 2 + j]).any()]


def disagreement(path: str, names: list[str], by_rank: list[list[str]]) -> MismatchError:
    """The error naming each differing field and every rank's value in words (``by_rank[r]``:
    rank r's words for ``names``, in order)."""
    parts = []
    for j, name in enumerate(names):
        values = ", ".join(f"rank {r}: {row[j]}" for r, row in enumerate(by_rank))
        parts.append(f"{name} ({values})")
    return MismatchError(f"{path}: ranks disagree on {'; and on '.join(parts)}; every rank must "
                         f"pass the same {' and '.join(names)}")


def message(path: str, fields: dict[str, int],
            shared: dict[str, int] | None = None) -> np.ndarray:
    """This rank's validation message for ``path``: its code, the number of values, then
    ``fields`` and ``shared`` in order, zero-padded to ``WIDTH``."""
    shared = shared or {}
    values = [PATHS[path], len(fields) + len(shared), *fields.values(), *shared.values()]
    if len(values) > WIDTH:
        raise ValueError(f"{path}: {len(values)} validation values exceed the {WIDTH} slots")
    vec = np.zeros(WIDTH, np.int64)
    vec[:len(values)] = [int(v) for v in values]
    return vec


def check(table: np.ndarray, path: str, fields: dict[str, int],
          shared: dict[str, int] | None = None) -> np.ndarray:
    """Check the gathered messages (one row per rank): every rank on the same ``path`` with
    the same ``fields`` (MismatchError naming what differs); returns the table's values, the
    columns being ``fields`` then ``shared`` in order."""
    shared = shared or {}
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


