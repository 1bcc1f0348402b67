"""Variable-size exchanges built on point-to-point messages: allgatherv and alltoallv.

Compressed and sparse collectives move payloads whose sizes differ by rank. These helpers are
generators (like the algorithms) so they compose with ``yield from`` and run inside one
``Handle``; everything travels on the calling collective's tag, point to point, so several
such collectives can be in flight without their metadata exchanges crossing (MPI requires
nonblocking *collectives* to be started in the same order everywhere; p2p messages on
distinct tags have no such rule).
"""

from __future__ import annotations

from collections.abc import Generator

import numpy as np

from .algorithms import ring
from .algorithms.common import Job, blocks_from_counts
from .config import defaults
from .dtypes import BY_NAME
from .transport.base import Communicator, Request

Exchange = Generator[list[Request], None, list[np.ndarray]]
_U8 = BY_NAME["uint8"]


def _bytes_of(arr: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(arr).reshape(-1).view(np.uint8)


def allgatherv(comm: Communicator, tag: int, data: np.ndarray) -> Exchange:
    """Every rank's ``data`` (raw bytes), in rank order; sizes may differ."""
    mine = _bytes_of(data)
    sizes = yield from allgather_ints(comm, tag, np.array([mine.size], dtype=np.int64))
    counts = sizes[:, 0].tolist()
    blocks = blocks_from_counts(counts)
    work = np.empty(sum(counts), dtype=np.uint8)
    lo, hi = blocks[comm.rank]
    work[lo:hi] = mine
    job = Job(comm, work, _U8, "sum", tag, defaults.segment_bytes, "allgatherv")
    yield from ring.allgather(job, blocks)
    return [work[a:b] for a, b in blocks]


def allgather_ints(comm: Communicator, tag: int, values: np.ndarray) -> Generator[
        list[Request], None, np.ndarray]:
    """A small int64 vector from every rank, shape [p, len] (ring of p-1 tiny messages)."""
    v = np.ascontiguousarray(values, dtype=np.int64).reshape(-1)
    table = np.empty((comm.size, v.size), dtype=np.int64)
    table[comm.rank] = v
    flat = table.reshape(-1).view(np.uint8)
    width = v.size * 8
    blocks = [(r * width, (r + 1) * width) for r in range(comm.size)]
    job = Job(comm, flat, _U8, "sum", tag, max(width, 1), "allgather of sizes")
    yield from ring.allgather(job, blocks)
    return table


def alltoallv(comm: Communicator, tag: int, parts: list[np.ndarray]) -> Exchange:
    """Send ``parts[j]`` (raw bytes) to rank j; return what each rank sent to this one."""
    p, r = comm.size, comm.rank
    if len(parts) != p:
        raise ValueError(f"alltoallv needs one part per rank ({p}), got {len(parts)}")
    out_bytes = [_bytes_of(x) for x in parts]
    table = yield from allgather_ints(comm, tag, np.array([b.size for b in out_bytes]))
    received: list[np.ndarray] = [np.empty(int(table[src, r]), np.uint8) for src in range(p)]
    received[r] = out_bytes[r].copy()
    reqs = []
    for s in range(1, p):  # pair with ranks at increasing distance, both directions at once
        dst, src = (r + s) % p, (r - s) % p
        if received[src].size:
            reqs.append(comm.irecv(received[src], src, tag, f"alltoallv from rank {src}"))
        if out_bytes[dst].size:
            reqs.append(comm.isend(out_bytes[dst], dst, tag, f"alltoallv to rank {dst}"))
    yield reqs
    return received
