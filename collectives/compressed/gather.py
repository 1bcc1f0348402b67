"""The allgather scheme: any compressor, payloads of any size; every rank decodes all p
payloads and sums them in fp32 in rank order (so all ranks hold the same bits)."""

from __future__ import annotations

from .. import costmodel
from ..algorithms.common import Steps
from ..costparams import CostParams
from ..exchange import allgatherv
from .common import Ctx, wire_sizes


def run(ctx: Ctx) -> Steps:
    payload, = ctx.compress_compensated(ctx.x, ctx.name)
    sizes = wire_sizes(ctx.comp, [payload.shape] * ctx.comm.size, payload.dtype)
    pieces = yield from allgatherv(ctx.comm, ctx.tag, ctx.wire(payload), sizes)
    for j, data in enumerate(pieces):  # rank order on every rank: the same bits everywhere
        own = payload if j == ctx.comm.rank else None
        if j == 0:
            ctx.decode_bytes_into(data, ctx.out, own)
        else:
            ctx.decode_bytes_add(data, ctx.out, own)


def price(load: costmodel.SchemeLoad, c: CostParams) -> tuple[float, float]:
    """(p-1) alpha + (p-1) B beta; p decodes of n and (p-1) nV gamma of sums."""
    p = load.p
    return ((p - 1) * (c.alpha + load.payload_bytes * c.beta),
            load.encode_s + p * load.decode_s + (p - 1) * load.n_bytes * c.gamma)


def wire_bytes(p: int, payload_bytes: int, entries: int, entry_bytes: int) -> float:
    """A ring allgather forwards p-1 payloads."""
    return (p - 1) * payload_bytes
