"""Compressed reduce-scatter + allgather for quantized, non-summable payloads.

Rank j owns chunk j. Every rank compresses each chunk for its owner (alltoallv); the owner
decodes the p contributions, sums them in fp32 in rank order, adds its own second-level error
feedback, recompresses, and the compressed chunks are allgathered and decoded by everyone
(the scheme of 1-bit Adam, CGX and ZeRO++). Each rank sends ~2(p-1)/p payloads whatever p is.
"""

from __future__ import annotations

from ..algorithms.common import Steps, partition
from ..exchange import allgatherv, alltoallv
from .common import Ctx, wire


def run(ctx: Ctx) -> Steps:
    p, r = ctx.comm.size, ctx.comm.rank
    xc = ctx.compensate(ctx.x)
    flat = xc.reshape(-1)
    blocks = partition(int(flat.shape[0]), p)
    payloads = [ctx.compress(flat[a:b], f"{ctx.name}/{j}") for j, (a, b) in enumerate(blocks)]
    if ctx.fb is not None:
        sent = ctx.buffer("sent", int(flat.shape[0]))
        for pl, (a, b) in zip(payloads, blocks, strict=True):
            ctx.decode_into(pl, sent[a:b])
        ctx.fb.update_sent(ctx.name, xc, sent)
    got = yield from alltoallv(ctx.comm, ctx.tag, [wire(pl) for pl in payloads])
    lo, hi = blocks[r]
    owned, scratch = ctx.buffer("owned", hi - lo), ctx.buffer("scratch", hi - lo)
    for j, data in enumerate(got):  # rank order: the same sum however the messages arrived
        ctx.decode_bytes_into(data, owned if j == 0 else scratch)
        if j:
            owned += scratch
    owner_key = f"{ctx.name}@owner"  # second-level feedback lives with the chunk's owner
    owned_c = ctx.compensate(owned, owner_key)
    summed = ctx.compress(owned_c, f"{ctx.name}/sum{r}")
    ctx.feedback_update(owner_key, owned_c, summed)
    pieces = yield from allgatherv(ctx.comm, ctx.tag, wire(summed))
    for data, (a, b) in zip(pieces, blocks, strict=True):
        ctx.decode_bytes_into(data, ctx.out[a:b])
