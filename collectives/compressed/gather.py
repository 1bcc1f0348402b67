"""The allgather scheme: any compressor, payloads of any size; every rank decodes all p
payloads and sums them in fp32 in rank order (so all ranks hold the same bits)."""

from __future__ import annotations

import numpy as np

from ..algorithms.common import Steps
from ..exchange import allgatherv
from .common import Ctx, wire


def run(ctx: Ctx) -> Steps:
    xc = ctx.compensate(ctx.x)
    payload = ctx.compress(xc, ctx.name)
    if ctx.fb is not None:
        ctx.fb.update(ctx.name, xc, payload)
    pieces = yield from allgatherv(ctx.comm, ctx.tag, wire(payload))
    total = np.zeros(payload.numel, ctx.acc)
    for data in pieces:
        total += ctx.decode_bytes(data)
    ctx.result = total
