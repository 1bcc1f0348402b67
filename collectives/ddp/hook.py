"""The DDP communication hook: compress, allreduce in the background, decompress in place."""

# No ``from __future__ import annotations``: DDP checks the hook's annotations at
# registration and needs the real dist.GradBucket and torch.futures.Future[torch.Tensor].
import time
from functools import partial
from typing import Any

import numpy as np
import torch
import torch.distributed as dist

from compressors.arrays import torch_raw
from compressors.dtypes import lookup

from .. import api, core, ops
from ..compressed.compression import Compression
from ..costparams import several_per_host
from ..topology import topology
from . import fastpath
from . import groups as grouping
from .state import CompressionState
from .worker import Job


def compression_hook(state: CompressionState, bucket: dist.GradBucket
                     ) -> torch.futures.Future[torch.Tensor]:
    """Average the bucket's gradients over the process group, compressed per the policy.

    Contract (PyTorch's ``hook(state, bucket) -> torch.futures.Future[torch.Tensor]``): the
    future's value is the bucket's own flat tensor, overwritten in place with the average of
    every rank's gradients. With the ``none`` compressor the result equals DDP without a hook
    up to the order of the additions: bit for bit on 2 ranks and in warm-up steps (the
    engine's own allreduce over the bucket's own buffer, as DDP); on more ranks, where fused
    copies, another engine or our algorithms add in another order, within
    (p - 1) * eps * sum_r |g_r / p| of DDP per element.
    Parameters of the bucket that the policy gives the same compressor are fused into one
    buffer and one collective; each collective is
    started here, in the order DDP calls the hooks (the same on every rank), and completed on
    the state's background thread, which sets the future, so communication overlaps the rest
    of the backward pass. On an NCCL group (messages match in posting order, not by tag) the
    background thread also starts them, one after another. NaN and Inf travel through
    compression and reach the optimizer. The state must be bound to the model
    (``state.bind(model)``): the first call raises RuntimeError otherwise, before any message.

    Example::

        >>> import collectives.ddp as cddp
        >>> model = torch.nn.parallel.DistributedDataParallel(net)
        >>> state = cddp.CompressionState(policy="uniform:bits=8", start_step=10).bind(model)
        >>> model.register_comm_hook(state, cddp.compression_hook)
    """
    state.require_bound()  # on every rank that forgot, before any message
    t0 = time.perf_counter()
    index = bucket.index()
    if index == 0:
        state.begin_step()  # DDP starts bucket 0 first; the previous step has fully finished
    step, buf = state.current, bucket.buffer()
    comm = state.communicator()
    record: dict[str, Any] = {"step": step, "bucket": index, "numel": int(buf.numel()),
                              "start": t0}
    after = _norm_observer(state, step, index) if state.policy.wants_norm(step) else None
    warm = step < state.start_step
    groups = [] if warm else _groups(state, bucket, buf, index, step)
    # A bucket sent whole as none goes through the engine's allreduce, as DDP sends it, unless
    # ``plain`` names another, or an adaptive policy measured ours clearly faster (a slow
    # link's latency); its "auto" pick is otherwise for none groups beside compressed ones.
    engine = state.plain_algorithm() == comm.engine and (
        warm or state.policy.engine_first() is not False)
    fast = fastpath.serves(comm) and (
        engine if warm else fastpath.spec_of(groups, state.feedback, engine))
    if fast in fastpath.HALF and state.hierarchy == "two_level" and _several_per_host(state):
        fast = None  # the engine's allreduce is flat: ours reduces inside hosts first
    if fast:
        spec = "none" if warm else fast
        if spec == "none":
            buf.mul_(1.0 / comm.size)  # as below: DDP's average, bit for bit
        if not warm:
            record["groups"] = [(g.name, g.spec, [m for m, _ in g.members]) for g in groups]
        state.timeline.append(record)
        check = state.validate_once(f"bucket{index}", spec, int(buf.numel()))
        post = partial(fastpath.start, comm, buf, spec, record, check, after)
        if comm.matches_by_tag or not state.busy():
            return post()
        # In posting order (NCCL) the worker's collectives still to come go first, on every
        # rank: the allreduce is posted from the worker behind them.
        fut_: torch.futures.Future[torch.Tensor] = torch.futures.Future()
        stats = {"scheme": f"engine {spec}", "bytes_sent": fastpath.wire_bytes(comm, buf, spec)}
        state.submit(Job(fut_, buf, [(None, buf, post, stats)], record))
        return fut_
    parts: list[tuple[Any, Any, Any, dict]] = []
    # Divide first, as DDP does: the sum of averages cannot overflow fp16/bf16, and with the
    # engine's own allreduce over the same buffer the "none" path is DDP's average bit for bit
    # (DDP multiplies by the reciprocal, so we do too: x * (1/3) and x / 3 round differently).
    buf.mul_(1.0 / comm.size)
    if warm:  # warm-up: plain average, no compression
        plain = partial(api.iallreduce, buf, op="sum", comm=comm, out=buf,
                        algorithm=state.plain_algorithm(), timeout=state.deadline)
        parts.append((None, buf, plain() if comm.matches_by_tag else plain, {}))
    else:
        # Inputs first, span groups last (they zero the others' ranges once copied out);
        # collectives in the groups' order, a span group first (it writes its whole span).
        views = {id(g): g.view(buf) for g in sorted(groups, key=lambda g: bool(g.holes))}
        for g in groups:
            x = views[id(g)]
            st: dict[str, Any] = {}
            start = partial(_start, state, comm, g, x, step, st)
            # Where messages match only in posting order (NCCL), the worker starts each
            # collective when the previous one is done: nothing may interleave with it.
            parts.append((g, x, start() if comm.matches_by_tag else start, st))
        record["groups"] = [(g.name, g.spec, [m for m, _ in g.members]) for g in groups]
    record["launched"] = time.perf_counter()
    state.timeline.append(record)
    fut: torch.futures.Future[torch.Tensor] = torch.futures.Future()
    state.submit(Job(fut, buf, parts, record, after))
    return fut


def _several_per_host(state: CompressionState) -> bool:
    """Whether a host holds several ranks (two-level differs from flat only there; the
    topology is found once, collectively, at the first compressed step)."""
    comm = state.communicator()
    return several_per_host(topology(comm, timeout=state.deadline).sizes)


def _groups(state: CompressionState, bucket: dist.GradBucket, buf: torch.Tensor, index: int,
            step: int) -> list[Any]:
    """The bucket's groups under the policy's current plan; an adaptive policy that profiles
    this step sees the layers' gradients first.

    Steps that profile nothing look the plan up by the bucket's parameters, buffer and the
    policy's version alone: no gradient views, no offsets (DDP's buckets keep their layout
    once rebuilt, so this is every step after the first few)."""
    params, policy = bucket.parameters(), state.policy
    profiling = policy.wants_profile(step)  # (never, under a static policy)
    key = (state.version, buf.data_ptr(), int(buf.numel()), tuple(map(id, params)))
    known = state.quick.get(index)
    if not profiling and known is not None and known[0] == key:
        return known[1]
    grads = bucket.gradients()
    groups = state.groups(index, params, grouping.offsets(buf, grads))
    state.quick[index] = (key, groups)
    if profiling:
        for j, (p, g) in enumerate(zip(params, grads, strict=True)):
            lay = state.layer(p, f"bucket{index}/{j}")
            if policy.wants_profile(step, lay.name):
                grad = g.detach()  # numpy has no bfloat16: profiled as float32
                grad = grad.float() if grad.dtype == torch.bfloat16 else grad
                policy.observe(step, lay, grad.cpu().numpy().copy(), index)
    return groups


def _start(state: CompressionState, comm: Any, g: Any, x: Any, step: int, st: dict) -> Any:
    """Start one group's collective; returns its handle."""
    fb, check = state.feedback(g.spec), state.validate_once(g.name, g.spec, g.numel)
    plain = g.spec == "none"  # the identity twin: the engine's own allreduce
    if g.spec in fastpath.HALF:
        # 16 bits keep no residual (as PyTorch's hooks, see ``fastpath``): none is computed,
        # decoded or carried, flat or two-level; one an earlier compressor held back for the
        # group goes out once, added to its input here.
        _send_held(fb, g.name, x)
        fb = None
    if plain and (fb is None or g.name not in fb.residuals):
        return api.iallreduce(x, op="sum", comm=comm, out=x, timeout=state.deadline,
                              algorithm=state.group_algorithm(), validate=check)
    algo = state.group_algorithm() if plain else state.algorithm
    call = Compression(state.compressor(g.spec), feedback=fb,
                       scheme="dense" if plain else state.scheme, name=g.name, step=step,
                       hierarchy=state.hierarchy, stats=st)
    h = core.icompressed_allreduce(comm, x, call, op="sum", out=x, algorithm=algo,
                                   timeout=state.deadline, validate=check)
    if plain and fb is not None:
        fb.residuals.pop(g.name, None)  # a residual moved here went out in full
    return h


def _send_held(fb: Any, name: str, x: Any) -> None:
    """Add the residual held for ``name`` (if any) to the group's input ``x`` and drop it."""
    res = None if fb is None else fb.residuals.pop(name, None)
    if res is not None:
        x.reshape(-1).add_(torch.from_numpy(res.reshape(-1)).to(x.device, x.dtype))


def _norm_observer(state: CompressionState, step: int, index: int) -> Any:
    def observe(buf: Any) -> None:
        # This runs before the bucket's future is set. A device bucket is reduced where it is
        # (no copy to the host); a host bucket by one single-threaded pass of the C++ kernel
        # (double accumulation): not torch or BLAS, whose thread teams would slow every rank
        # sharing the cores, and no float64 copy of the bucket.
        flat = buf.detach().reshape(-1)
        if flat.device.type != "cpu":
            sq = float(torch.linalg.vector_norm(flat, dtype=torch.float64)) ** 2
        else:
            dtype = lookup(str(flat.dtype))
            sq = ops.sum_squares(torch_raw(flat.contiguous()), dtype)
        if np.isfinite(sq):  # a skipped (non-finite) step says nothing about the regime
            state.policy.observe_norm(step, sq, index)
    return observe
