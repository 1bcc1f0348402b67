"""The dense scheme: summable payloads (fp16, bf16, random-k with a shared seed, none) are
allreduced as they are by a dense algorithm, then decoded once; PowerSGD's P and Q are its two
summable steps (Vogels et al. 2019)."""

from __future__ import annotations

import numpy as np

from compressors.dtypes import BY_NAME, DType

from .. import costmodel, tuning
from ..algorithms import get as get_algorithm
from ..algorithms.common import Job, Steps
from ..config import defaults
from ..costparams import CostParams
from .common import Ctx, to_acc

# The payload buffer that adds up; the others (random-k's shared key) are equal on all ranks.
SUMMED = "values"


def _logical(buf: np.ndarray) -> DType:
    # bfloat16 travels as its uint16 bit patterns; no compressor sums real uint16 data.
    return BY_NAME["bfloat16"] if buf.dtype == np.uint16 else BY_NAME[buf.dtype.name]


def allreduce_buffer(ctx: Ctx, buf: np.ndarray, dtype: DType) -> Steps:
    """Sum ``buf`` over all ranks in place with the dense algorithm of the call."""
    name = ctx.algorithm
    if name == "auto":
        name = tuning.choose(ctx.comm, buf.nbytes)
    seg = max(1, defaults.segment_bytes // dtype.itemsize)
    job = Job(ctx.comm, buf.reshape(-1), dtype, "sum", ctx.tag, seg, f"compressed[{name}]")
    yield from get_algorithm(name).run(job)


def run(ctx: Ctx) -> Steps:
    if ctx.comp.capabilities.allreduce_steps and ctx.comp.matrix_shape(tuple(ctx.x.shape)):
        yield from _power(ctx)
        return
    payload, = ctx.compress_compensated(ctx.x, ctx.name)
    buf = payload.buffers[SUMMED]
    yield from allreduce_buffer(ctx, buf, _logical(buf))
    ctx.decode_into(payload, ctx.out)


def _power(ctx: Ctx) -> Steps:
    """PowerSGD: P = M Q (allreduce), orthogonalize, Q = M^T P (allreduce), M ~ P Q^T."""
    comp, f32 = ctx.comp, BY_NAME["float32"]
    shape = tuple(ctx.x.shape)
    xc = ctx.compensate(ctx.x)
    with ctx.timed("compress_s"):
        p_mat, pctx = comp.p_step(to_acc(xc, np.dtype(np.float32)), ctx.name, shape, "float32")
        p_mat = np.ascontiguousarray(p_mat, dtype=np.float32)
    yield from allreduce_buffer(ctx, p_mat, f32)
    with ctx.timed("compress_s"):
        q_local = np.ascontiguousarray(comp.q_step(pctx, p_mat), dtype=np.float32)
        q_sum = q_local.copy()
    yield from allreduce_buffer(ctx, q_sum, f32)
    if ctx.fb is not None:  # this rank's own rank-r approximation is what it sent
        ctx.fb.update_sent(ctx.name, xc, (pctx.p @ q_local.T).reshape(-1))
    with ctx.timed("decompress_s"):
        if ctx.out.dtype == np.float32:
            comp.reconstruct(pctx, q_sum, ctx.name, out=ctx.out)
        else:
            ctx.out[...] = to_acc(comp.reconstruct(pctx, q_sum, ctx.name), ctx.acc)


def price(load: costmodel.SchemeLoad, c: CostParams) -> tuple[float, float]:
    """The payload allreduced by the fastest dense algorithm; one encode and one decode."""
    return (costmodel.best_dense(load.p, load.payload_bytes, c, load.segment)[1],
            load.encode_s + load.decode_s)


def wire_bytes(p: int, payload_bytes: int, entries: int, entry_bytes: int) -> float:
    """Ring or Rabenseifner: 2(p-1)/p of the payload."""
    return 2 * (p - 1) / p * payload_bytes
