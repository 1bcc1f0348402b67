"""Compressed reduce-scatter + allgather for quantized, non-summable payloads.

Rank j owns chunk j. Every rank compresses each chunk for its owner (alltoallv); the owner
decodes the p contributions, sums them in fp32 in rank order, adds its own second-level error
feedback, recompresses, and the compressed chunks are allgathered and decoded by everyone
(the scheme of 1-bit Adam, CGX and ZeRO++). Each rank sends ~2(p-1)/p payloads whatever p is.
"""

from __future__ import annotations

import numpy as np

from ..algorithms.common import Steps, partition
from ..exchange import allgatherv, alltoallv
from .common import Ctx, wire, wire_sizes


def run(ctx: Ctx) -> Steps:
    p, r = ctx.comm.size, ctx.comm.rank
    blocks = partition(int(np.prod(ctx.x.shape)), p)
    payloads = ctx.compress_compensated(ctx.x, ctx.name, blocks,
                                        [f"{ctx.name}/{j}" for j in range(p)])
    shapes = [(b - a,) for a, b in blocks]
    got = yield from alltoallv(ctx.comm, ctx.tag, [wire(pl) for pl in payloads],
                               wire_sizes(ctx.comp, shapes, payloads[0].dtype))
    lo, hi = blocks[r]
    owned = ctx.buffer("owned", hi - lo)
    for j, data in enumerate(got):  # rank order: the same sum however the messages arrived
        if j == 0:
            ctx.decode_bytes_into(data, owned)
        else:
            ctx.decode_bytes_add(data, owned)
    # second-level feedback lives with the chunk's owner
    summed, = ctx.compress_compensated(owned, f"{ctx.name}@owner", [(0, hi - lo)],
                                       [f"{ctx.name}/sum{r}"])
    pieces = yield from allgatherv(ctx.comm, ctx.tag, wire(summed),
                                   wire_sizes(ctx.comp, shapes, summed.dtype))
    for data, (a, b) in zip(pieces, blocks, strict=True):
        ctx.decode_bytes_into(data, ctx.out[a:b])
