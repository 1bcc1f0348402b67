"""Variable-size exchanges built on point-to-point messages: allgatherv and alltoallv.

Compressed and sparse collectives move payloads whose sizes differ by rank. These helpers are
generators (like the algorithms) so they compose with ``yield from`` and run inside one
``Handle``; everything travels on the calling collective's tag, point to point, so several
such collectives can be in flight without their metadata exchanges crossing (MPI requires
nonblocking *collectives* to be started in the same order everywhere; p2p messages on
distinct tags have no such rule).
"""

from __future__ import annotations

from collections.abc import Callable, Generator

import numpy as np

from compressors.dtypes import BY_NAME

from .algorithms import ring
from .algorithms.common import Job, blocks_from_counts
from .config import defaults
from .interleave import AnyOf
from .transport.base import Communicator, Request

Exchange = Generator[list[Request], None, list[np.ndarray]]
_U8 = BY_NAME["uint8"]

#: With sizes known in advance (``sizes=``), a part of another size travels as a block of the
#: expected size starting with this marker and its true size, then as a message of its own.
#: Payload bytes start with b"CCPL", never with the marker.
ESCAPE = b"CCXS"
_ESC_BYTES = len(ESCAPE) + 8


def _escape_block(expected: int, actual: int) -> np.ndarray:
    if expected < _ESC_BYTES:
        raise ValueError(f"an expected size of {expected} B cannot hold the size marker")
    block = np.zeros(expected, np.uint8)
    block[:_ESC_BYTES] = np.frombuffer(ESCAPE + np.int64(actual).tobytes(), np.uint8)
    return block


def _escaped(block: np.ndarray) -> int | None:
    """The true size announced by an escape block, or None for ordinary data."""
    if block.size < _ESC_BYTES or block[:len(ESCAPE)].tobytes() != ESCAPE:
        return None
    return int(block[len(ESCAPE):_ESC_BYTES].view(np.int64)[0])


def _bytes_of(arr: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(arr).reshape(-1).view(np.uint8)


def allgatherv(comm: Communicator, tag: int, data: np.ndarray,
               sizes: list[int] | None = None) -> Exchange:
    """Every rank's ``data`` (raw bytes), in rank order; sizes may differ.

    ``sizes``: the size every rank's data should have (the same list on all ranks). It saves
    the exchange of sizes (p - 1 message rounds); a rank whose data has another size sends a
    marker in its place and the true data in a second allgather (data must not start with
    ``ESCAPE``)."""
    mine = _bytes_of(data)
    if sizes is None:
        table = yield from allgather_ints(comm, tag, np.array([mine.size], dtype=np.int64))
        return (yield from _ring_allgatherv(comm, tag, mine, table[:, 0].tolist()))
    own = mine if mine.size == sizes[comm.rank] else _escape_block(sizes[comm.rank], mine.size)
    out = yield from _engine_allgather(comm, own, sizes)
    if out is None:
        out = yield from _ring_allgatherv(comm, tag, own, list(sizes))
    late = [_escaped(block) for block in out]
    if any(n is not None for n in late):  # NaN/Inf side lists made some payloads longer
        mine_late = mine if late[comm.rank] is not None else mine[:0]
        extra = yield from _ring_allgatherv(comm, tag, mine_late, [n or 0 for n in late])
        out = [x if n is None else e for x, e, n in zip(out, extra, late, strict=True)]
    return out


def allgather_direct(comm: Communicator, tag: int, data: np.ndarray, sizes: list[int],
                     arrived: Callable[[int, np.ndarray], None]) -> Generator[
                         list[Request], None, None]:
    """Every rank's ``data`` (raw bytes, ``sizes`` as in ``allgatherv``) straight from its
    owner, each handed to ``arrived(rank, bytes)`` as soon as it is in (this rank's own first),
    so the caller's work on one overlaps the others' transfer; no forwarding, so no step waits
    on another's. A part of another size follows its marker on the same pair and tag, in a
    second round once the first is in (on NCCL a round completes as a whole, so a part sent
    in it would wait on the peer's receive, posted only when the peer's round is done)."""
    p, r = comm.size, comm.rank
    mine = _bytes_of(data)
    own = mine if mine.size == sizes[r] else _escape_block(sizes[r], mine.size)
    blocks = yield from _engine_allgather(comm, own, sizes)
    if blocks is not None:  # one collective for the round (NCCL), then the late parts
        arrived(r, mine)
        announced: dict[int, np.ndarray] = {}
        for src in range(p):
            if src != r:
                _take(src, blocks[src], arrived, announced)
        yield from _late_round(comm, tag, own, mine, announced, [], arrived)
        return
    waiting: dict[int, tuple[Request, np.ndarray]] = {}
    sends = []
    with comm.grouped():
        for s in range(1, p):  # pair with ranks at increasing distance, both ways at once
            dst, src = (r + s) % p, (r - s) % p
            if sizes[src]:
                buf = np.empty(sizes[src], np.uint8)
                waiting[src] = comm.irecv(buf, src, tag, f"allgather from rank {src}"), buf
            if own.size:
                sends.append(comm.isend(own, dst, tag, f"allgather to rank {dst}"))
    arrived(r, mine)
    for src in range(p):
        if src != r and not sizes[src]:
            arrived(src, np.empty(0, np.uint8))
    announced = {}  # the true parts the markers announced
    while waiting:
        done = [src for src, (req, _) in waiting.items() if req.test()]
        if not done:
            yield [AnyOf([req for req, _ in waiting.values()])]
            continue
        for src in done:
            _take(src, waiting.pop(src)[1], arrived, announced)
    yield from _late_round(comm, tag, own, mine, announced, sends, arrived)


def _engine_allgather(comm: Communicator, own: np.ndarray, sizes: list[int]) -> Generator[
        list[Request], None, list[np.ndarray] | None]:
    """Every rank's block of one size through the engine's own allgather, where the engine's
    messages keep their posting order (NCCL: one collective instead of p - 1 rounds of
    point-to-point messages); None where it does not, or the sizes differ."""
    p, n = comm.size, sizes[0]
    if not comm.orders_pairs or p == 1 or n == 0 or len(set(sizes)) != 1:
        return None
    table = np.empty(p * n, np.uint8)
    req = comm.iallgather_bytes(own, table)
    if req is None:
        return None
    yield [req]
    return [table[j * n:(j + 1) * n] for j in range(p)]


def _take(src: int, buf: np.ndarray, arrived: Callable[[int, np.ndarray], None],
          announced: dict[int, np.ndarray]) -> None:
    """A first-round block from ``src``: its part, handed on, or a marker announcing it."""
    late = _escaped(buf)
    if late is None:
        arrived(src, buf)
    elif late == 0:
        arrived(src, buf[:0])
    else:
        announced[src] = np.empty(late, np.uint8)


def _late_round(comm: Communicator, tag: int, own: np.ndarray, mine: np.ndarray,
                announced: dict[int, np.ndarray], sends: list[Request],
                arrived: Callable[[int, np.ndarray], None]) -> Generator[
                    list[Request], None, None]:
    """The second round of ``allgather_direct``: the parts the markers announced, this
    rank's among them; then every send of both rounds waited on."""
    p, r = comm.size, comm.rank
    if announced or (own is not mine and mine.size):
        with comm.grouped():
            late_reqs = [comm.irecv(buf, src, tag, f"allgather from rank {src}")
                         for src, buf in announced.items()]
            if own is not mine and mine.size:
                sends = sends + [comm.isend(mine, (r + s) % p, tag,
                                            f"allgather to rank {(r + s) % p}")
                                 for s in range(1, p)]
        if late_reqs:
            yield late_reqs
        for src, buf in announced.items():
            arrived(src, buf)
    if sends:
        yield sends


def _ring_allgatherv(comm: Communicator, tag: int, mine: np.ndarray,
                     counts: list[int]) -> Exchange:
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


def alltoallv(comm: Communicator, tag: int, parts: list[np.ndarray],
              sizes: list[int] | None = None) -> Exchange:
    """Send ``parts[j]`` (raw bytes) to rank j; return what each rank sent to this one.

    ``sizes[j]``: the size every rank's part for rank j should have (the same list on all
    ranks), which saves the exchange of sizes; a part of another size is announced by a
    marker and sent as a second message (parts must not start with ``ESCAPE``)."""
    p, r = comm.size, comm.rank
    if len(parts) != p:
        raise ValueError(f"alltoallv needs one part per rank ({p}), got {len(parts)}")
    out_bytes = [_bytes_of(x) for x in parts]
    follow: dict[int, np.ndarray] = {}
    if sizes is None:
        table = yield from allgather_ints(comm, tag, np.array([b.size for b in out_bytes]))
        expect = [int(table[src, r]) for src in range(p)]
    else:
        expect = [int(sizes[r])] * p
        for j, b in enumerate(out_bytes):
            if j != r and b.size != sizes[j]:
                follow[j], out_bytes[j] = b, _escape_block(int(sizes[j]), b.size)
    received: list[np.ndarray] = [np.empty(expect[src], np.uint8) for src in range(p)]
    received[r] = _bytes_of(parts[r]).copy()
    reqs = []
    with comm.grouped():
        for s in range(1, p):  # pair with ranks at increasing distance, both ways at once
            dst, src = (r + s) % p, (r - s) % p
            if received[src].size:
                reqs.append(comm.irecv(received[src], src, tag, f"alltoallv from rank {src}"))
            if out_bytes[dst].size:
                reqs.append(comm.isend(out_bytes[dst], dst, tag, f"alltoallv to rank {dst}"))
    yield reqs
    if sizes is not None:  # a second round: the parts announced by markers in the first
        late = {src: _escaped(received[src]) for src in range(p) if src != r}
        reqs = []
        with comm.grouped():
            for src, n in late.items():
                if n is not None:
                    received[src] = np.empty(n, np.uint8)
                    if n:
                        reqs.append(comm.irecv(received[src], src, tag,
                                               f"alltoallv from rank {src}"))
            for dst, late_part in follow.items():  # same pair and tag: arrives second
                if late_part.size:
                    reqs.append(comm.isend(late_part, dst, tag, f"alltoallv to rank {dst}"))
        if reqs:
            yield reqs
    return received
