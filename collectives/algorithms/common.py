"""What every algorithm shares: the per-call job, block partitions and pipeline segments.

An algorithm is a generator over a ``Job``: it posts nonblocking sends/receives through the
job's Communicator and yields the list of requests it must see complete before going on. The
scheduler in ``collectives.progress`` drives it, blocking (``wait``) or not (``test``), with a
deadline on every wait.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from compressors.dtypes import DType

from ..ops import combine
from ..transport.base import Communicator, Request, Steps


@dataclass
class Job:
    """One collective call: the working buffer (reduced in place) and how to reduce it."""

    comm: Communicator
    work: np.ndarray  # 1-D, C-contiguous, dtype.raw; holds the input and ends with the result
    dtype: DType
    op: str
    tag: int
    segment: int  # pipeline segment, in elements (>= 1)
    collective: str = "allreduce"
    root: int = 0
    blocks: list[tuple[int, int]] = field(default_factory=list)

    def combine(self, dst: np.ndarray, src: np.ndarray) -> None:
        combine(dst, src, self.dtype, self.op)

    def scratch(self, n: int) -> np.ndarray:
        return np.empty(n, dtype=self.dtype.raw)

    def isend(self, buf: np.ndarray, peer: int, what: str) -> Request:
        return self.comm.isend(buf, peer, self.tag, what)

    def irecv(self, buf: np.ndarray, peer: int, what: str) -> Request:
        return self.comm.irecv(buf, peer, self.tag, what)


def partition(n: int, parts: int) -> list[tuple[int, int]]:
    """Split range(n) into ``parts`` contiguous blocks whose sizes differ by at most one."""
    base, extra = divmod(n, parts)
    out, lo = [], 0
    for i in range(parts):
        hi = lo + base + (1 if i < extra else 0)
        out.append((lo, hi))
        lo = hi
    return out


def blocks_from_counts(counts: list[int]) -> list[tuple[int, int]]:
    """Blocks laid end to end with the given sizes."""
    out, lo = [], 0
    for c in counts:
        out.append((lo, lo + int(c)))
        lo += int(c)
    return out


def segments(lo: int, hi: int, seg: int) -> list[tuple[int, int]]:
    """Pipeline segments of [lo, hi); empty for an empty range (no zero-byte messages)."""
    return [(a, min(a + seg, hi)) for a in range(lo, hi, seg)]


def chained(*parts: Steps) -> Steps:
    """Several step generators one after another, as one."""
    for g in parts:
        yield from g


def pof2_below(p: int) -> int:
    """Largest power of two <= p."""
    return 1 << (p.bit_length() - 1)
