"""The allgather scheme: any compressor, payloads of any size; every rank decodes all p
payloads and sums them in fp32 in rank order (so all ranks hold the same bits)."""

from __future__ import annotations

from ..algorithms.common import Steps
from ..exchange import allgatherv
from .common import Ctx, wire


def run(ctx: Ctx) -> Steps:
    xc = ctx.compensate(ctx.x)
    payload = ctx.compress(xc, ctx.name)
    ctx.feedback_update(ctx.name, xc, payload)
    pieces = yield from allgatherv(ctx.comm, ctx.tag, wire(payload))
    total, scratch = ctx.out, ctx.buffer("scratch", payload.numel)
    for j, data in enumerate(pieces):  # rank order on every rank: the same bits everywhere
        ctx.decode_bytes_into(data, total if j == 0 else scratch)
        if j:
            total += scratch
