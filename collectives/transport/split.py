"""Sub-communicators: the ranks of a communicator that pass the same color, split once."""

from __future__ import annotations

from ..errors import TransportError
from .base import Communicator


def split_by(comm: Communicator, color: int | None, key: int, *, label: str = "",
             timeout: float | None = None) -> Communicator | None:
    """A sub-communicator of the ranks of ``comm`` that pass the same ``color``, ranked by
    (``key``, rank in ``comm``); None where ``color`` is None.

    Collective: every rank of ``comm`` calls it. One small allgather (each wait bounded by
    ``timeout``) agrees on the groups before the engine splits, so a missing rank is reported
    there instead of blocking the engine's split. The caller keeps what it gets (nothing is
    cached here). Messages on the sub-communicator name their peer by its rank in ``comm``,
    prefixed by ``label``, and a failure on it makes ``comm`` unusable too: its collectives
    are parts of collectives on ``comm``.

    Example::

        >>> import collectives
        >>> from collectives.transport.split import split_by
        >>> c = collectives.as_communicator()
        >>> half = split_by(c, c.rank % 2, c.rank, label="half")
        >>> assert half.size == len(range(c.rank % 2, c.size, 2))
    """
    if color is not None and (int(color) != color or color < 0):
        raise ValueError(f"color must be a non-negative integer or None, got {color!r}")
    comm.check_usable()
    table = comm.allgather_ints([-1 if color is None else int(color), int(key)],
                                collective="split_by", timeout=timeout)
    groups: dict[int, list[int]] = {}
    for r in sorted(range(comm.size), key=lambda r: (int(table[r, 1]), r)):
        if table[r, 0] >= 0:
            groups.setdefault(int(table[r, 0]), []).append(r)
    sub = comm.split_agreed(color, key, [groups[c] for c in sorted(groups)], timeout)
    if color is None or sub is None:
        return None
    ranks = tuple(groups[int(color)])
    if (sub.size, sub.rank) != (len(ranks), ranks.index(comm.rank)):
        raise TransportError(
            f"the {comm.engine} split gave rank {sub.rank} of {sub.size}; the agreed groups "
            f"say rank {ranks.index(comm.rank)} of {len(ranks)}")
    sub.parent, sub.parent_ranks, sub.label = comm, ranks, label
    return sub
