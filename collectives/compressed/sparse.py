"""The sparse scheme: sparse payloads (top-k, threshold) go through a sparse allreduce.

A non-sparse compressor's decoded tensor is sent by its non-zeros. With global top-k the
result keeps k entries and what this rank contributed outside them returns to its error
feedback (it was not sent after all)."""

from __future__ import annotations

import numpy as np

from compressors import kernels
from compressors.arrays import to_f32

from .. import costmodel
from ..algorithms.common import Steps
from ..costparams import CostParams
from ..exchange import allgather_ints
from ..sparse import ALGORITHMS, PARTS, choose, modeled
from ..sparse import predict as sparse_predict
from ..sparse.common import SparseJob
from ..sparse.merge import coalesce, index_dtype, to_dense
from .common import Ctx


def run(ctx: Ctx) -> Steps:
    fused = ctx.fb is not None and ctx.fused(ctx.x)
    if fused:  # the residual is updated as if everything compressed was sent
        payload, = ctx.compress_compensated(ctx.x, ctx.name)
    else:
        xc = ctx.compensate(ctx.x)
        payload = ctx.compress(xc, ctx.name)
    n = payload.numel
    caps = ctx.comp.capabilities
    # (indices, values) payloads of sparse compressors (top-k, threshold) as they are; any
    # other payload (its buffers may have the same names, chunktopk's codes) by its decoding
    if caps.sparse and "indices" in payload.buffers:
        vals = payload.buffers["values"]
        idx, val = payload.buffers["indices"], to_f32(vals, payload.dtype)
    else:
        dense = ctx.decode(payload)
        idx = np.flatnonzero(dense)
        val = dense[idx]
    idx, val = coalesce(idx, val, n, ctx.acc)
    algo, k = ctx.sparse_algorithm, ctx.k
    if algo == "auto" or (algo == "gtopk" and k is None):
        if caps.sparse and caps.same_size_on_all_ranks and "indices" in payload.buffers:
            nnz = np.array([idx.size])  # the layout fixes it: the same on every rank
        else:
            nnz = yield from allgather_ints(ctx.comm, ctx.tag, np.array([idx.size]))
        k = int(nnz.max()) if k is None else k
        if algo == "auto":
            algo = choose(ctx.comm, n, k, ctx.acc.itemsize)
    vb = ctx.acc.itemsize
    job = SparseJob(ctx.comm, ctx.tag, idx, val, n, ctx.acc, k,
                    costmodel.sparse_dense_threshold(index_dtype(n).itemsize, vb))
    if algo in PARTS:  # the result goes straight to dense, never built as one set
        parts = yield from PARTS[algo](job)
        if ctx.fb is not None and not fused:
            ctx.feedback_update(ctx.name, xc, payload)
        to_dense(parts, ctx.out, ctx.acc)
        return
    ridx, rval = yield from ALGORITHMS[algo].run(job)
    if fused and algo == "gtopk":  # what did not survive the global selection stays
        keep = np.isin(idx, ridx, assume_unique=True)
        ctx.fb.residuals[ctx.name][idx[~keep]] = val[~keep]
    elif ctx.fb is not None and not fused:
        if algo == "gtopk":  # only what survived the global selection was sent
            sent = np.zeros(n, ctx.acc)
            keep = np.isin(idx, ridx, assume_unique=True)
            sent[idx[keep]] = val[keep]
            ctx.fb.update_sent(ctx.name, xc, sent)
        else:
            ctx.feedback_update(ctx.name, xc, payload)
    kernels.scatter_dense(ctx.out, ridx, rval)



def price(load: costmodel.SchemeLoad, c: CostParams) -> tuple[float, float]:
    """The cheapest exact sparse allreduce of the payload's k entries (4-byte indices)."""
    return (min(sparse_predict(a, load.p, load.numel, load.sparse_k, c, 4,
                                       load.value_bytes) for a in modeled()),
            load.encode_s + load.decode_s)


def wire_bytes(p: int, payload_bytes: int, entries: int, entry_bytes: int) -> float:
    """Split-allgather: (p-1)/p of its own entries plus (p-1)/p of the union, at most p times
    its own entries."""
    return (p - 1) / p * entries * entry_bytes * (1 + p)
