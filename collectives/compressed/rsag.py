"""Compressed reduce-scatter + allgather for quantized, non-summable payloads.

Rank j owns chunk j. Every rank compresses each chunk for its owner (alltoallv); the owner
decodes the p contributions, sums them in fp32 in rank order, adds its own second-level error
feedback, recompresses, and the compressed chunks are allgathered and decoded by everyone
(the scheme of 1-bit Adam, CGX and ZeRO++). Each rank sends ~2(p-1)/p payloads whatever p is.

Large tensors are cut into segments that run interleaved (``collectives.interleave``): while
one segment is encoded, summed or decoded, the others' messages are on the wire. Segments
share the tensor's residuals, so the fused error-feedback kernel (or no feedback) is needed.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .. import costmodel
from ..algorithms.common import Steps, partition
from ..config import defaults
from ..costparams import CostParams
from ..exchange import allgather_direct, allgatherv, alltoallv
from ..interleave import concurrently
from .common import Ctx, wire_sizes

#: At most this many segments in flight. On 4 ranks over 1 Gbit/s links (64 MB, no feedback,
#: allgather straight from the owners), 8 segments took 8-bit in 232 ms and 4-bit in 116 ms,
#: 4 segments 250 and 121 ms, 2 segments 262 and 135 ms, 16 segments 235 and 125 ms: more
#: segments add messages and codec calls, fewer overlap less.
MAX_SEGMENTS = 8


def run(ctx: Ctx) -> Steps:
    n, p, r = int(np.prod(ctx.x.shape)), ctx.comm.size, ctx.comm.rank
    count = segment_count(n, p, ctx.fb is None or ctx.fused(ctx.x), ctx.comm.matches_by_tag)
    if count == 1:
        yield from _segment(ctx, ctx.x, 0, n, ctx.tag, "", 0, None)
        return
    # Segments run interleaved on tags of their own; every rank takes the same tags, in the
    # same order, before the first message goes out.
    cuts = partition(n, count)
    tags = [ctx.tag] + [ctx.next_tag() for _ in cuts[1:]]
    flat = ctx.x.reshape(-1)
    starts = np.cumsum([0] + [b - a for a, b in owned_ranges(n, p, r, count)]).tolist()
    yield from concurrently([
        _segment(ctx, flat[a:b], a, n, tag, f"/s{s}", starts[s], starts[-1])
        for s, ((a, b), tag) in enumerate(zip(cuts, tags, strict=True))])


def segment_count(n: int, p: int, shared_residual: bool, by_tag: bool = True) -> int:
    """Pipelined segments of a call of n float32 elements on p ranks: one per
    ``compressed_segment_bytes`` of input (the smallest segment), up to MAX_SEGMENTS. One
    unless segments can share the tensor's residual (the fused error-feedback kernel, or no
    feedback) and the transport matches messages by tag (``by_tag``; NCCL does not, and
    interleaved segments would cross)."""
    per = defaults.compressed_segment_bytes
    if per <= 0 or p == 1 or not shared_residual or not by_tag:
        return 1
    return max(1, min(MAX_SEGMENTS, n * 4 // per))


def owned_ranges(n: int, p: int, r: int, count: int) -> list[tuple[int, int]]:
    """The element ranges rank r owns (one per segment), in the order its owner-side residual
    stores them."""
    out = []
    for a, b in partition(n, count):
        lo, hi = partition(b - a, p)[r]
        out.append((a + lo, a + hi))
    return out


def _segment(ctx: Ctx, x: Any, base: int, total: int, tag: int, label: str, owner_base: int,
             owner_total: int | None) -> Steps:
    """The scheme on elements [base, base + x.size) of the tensor, on its own tag."""
    p, r = ctx.comm.size, ctx.comm.rank
    blocks = partition(int(np.prod(x.shape)), p)
    payloads = ctx.compress_compensated(x, ctx.name, blocks,
                                        [f"{ctx.name}{label}/{j}" for j in range(p)],
                                        base=base, total=total)
    shapes = [(b - a,) for a, b in blocks]
    got = yield from alltoallv(ctx.comm, tag, [ctx.wire(pl) for pl in payloads],
                               wire_sizes(ctx.comp, shapes, payloads[0].dtype))
    lo, hi = blocks[r]
    owned = ctx.buffer(f"owned{label}", hi - lo)
    for j, data in enumerate(got):  # rank order: the same sum however the messages arrived
        own = payloads[r] if j == r else None
        if j == 0:
            ctx.decode_bytes_into(data, owned, own)
        else:
            ctx.decode_bytes_add(data, owned, own)
    # second-level feedback lives with the chunk's owner
    summed, = ctx.compress_compensated(owned, f"{ctx.name}@owner", [(0, hi - lo)],
                                       [f"{ctx.name}{label}/sum{r}"], base=owner_base,
                                       total=owner_total)
    sizes = wire_sizes(ctx.comp, shapes, summed.dtype)

    def place(j: int, data: Any) -> None:
        a, b = blocks[j]
        ctx.decode_bytes_into(data, ctx.out[base + a:base + b], summed if j == r else None)

    if owner_total is not None and sizes is not None:  # a segment: decode each chunk on arrival
        yield from allgather_direct(ctx.comm, tag, ctx.wire(summed), sizes, place)
        return
    pieces = yield from allgatherv(ctx.comm, tag, ctx.wire(summed), sizes)
    for j, data in enumerate(pieces):
        place(j, data)


def price(load: costmodel.SchemeLoad, c: CostParams) -> tuple[float, float]:
    """2(p-1) alpha + 2(p-1)/p B beta; the owner decodes p blocks of n/p, adds them
    ((p-1)/p nV gamma) and re-encodes one; everyone decodes the gathered n."""
    p, comp, decomp = load.p, load.encode_s, load.decode_s
    return (2 * (p - 1) * c.alpha + 2 * (p - 1) / p * load.payload_bytes * c.beta,
            comp + comp / p + 2 * decomp + (p - 1) / p * load.n_bytes * c.gamma)


def wire_bytes(p: int, payload_bytes: int, entries: int, entry_bytes: int) -> float:
    """p-1 chunks out, p-1 chunks gathered: 2(p-1)/p of the payload."""
    return 2 * (p - 1) / p * payload_bytes
