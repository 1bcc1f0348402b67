"""A compressed reduce-scatter for FSDP2 (``torch.distributed.fsdp.fully_shard``).

FSDP2 reduce-scatters each parameter group's gradients: the input is the flat concatenation
of every rank's shard (chunk j belongs to rank j), the output this rank's shard. With
:class:`CompressedReduceScatter` every rank compresses chunk j for its owner (with error
feedback), the payloads cross in one all-to-all, and the owner decodes the p contributions
and sums them in fp32 in rank order (the same code on every rank, whatever order the
messages arrive in), then applies FSDP's reduction: ``SUM``, ``AVG`` (divides by p) or
``PREMUL_SUM(f)`` (multiplies by f); other reductions are refused. FSDP divides before or
after the collective itself where it wants to (fp16), so those factors need nothing here.

* Inputs of fewer than ``min_numel`` elements (default 16384) and dtypes other than float32
  and bfloat16 go through torch.distributed's reduce-scatter on the group, exact.
* Error feedback (on by default) keeps what the payloads missed and adds it to the next
  call's input, one residual per input (element count, dtype) and instance name, in the
  instance's :class:`collectives.Session` (the compressor, the residuals, ``min_numel`` and
  the step counts; ``session.state_dict()`` saves them, and :func:`compress_reduce_scatter`
  gives every module's instance one shared session). FSDP2 does
  not say which parameter group a call belongs to, and its input buffers are allocated
  afresh for every call (on the CPU at a new address nearly every step, so an address is no
  key: it would grow a residual per step); but a module's reduce-scatter runs once per
  backward, for its one parameter group. So give every ``fully_shard`` module an instance of
  its own (:func:`compress_reduce_scatter` does): each residual then belongs to one group.
  One instance shared by several modules is right while their inputs differ in size;
  modules with inputs of the same size would share a residual (each gets the error the other
  left), which ``error_feedback=False`` avoids. The 8-bit default quantizes with stochastic
  rounding (unbiased) and trains without feedback too.
* On several hosts of the same size with more than one rank each (``hierarchy="auto"``, or
  ``"two_level"``; ``collectives.topology``) the call is two-level: a ring reduce-scatter
  inside the host in float32 leaves local rank i with its host's sum of the chunks of every
  rank of local index i, and the compressed reduce-scatter above runs across hosts on those
  H chunks, among the ranks of local index i. Only compressed chunks cross hosts, L times
  fewer bytes over each host's uplink than the flat call (L ranks per host), and each rank
  codes 1/L of what it codes flat. The residual is the cross-host step's
  (``f"{name}@cross"``). ``calls["two_level"]`` counts these calls.
* ``async_op=True`` returns a completed ``Work``: FSDP2 calls the reduce-scatter with
  ``async_op=False`` on its reduce-scatter stream and waits for it there, so the collective
  always runs to the end inside the call.
* Tensors on an accelerator are staged through host memory (the transport is the group's
  host engine, gloo); the result is copied back into the output.
* Before an instance's first call on a group, the ranks compare its compressor spec and
  ``min_numel`` (one small allgather): ranks that disagree would send payloads of different
  sizes, or take different paths, and fail in the engine or wait until the timeout, so
  every rank raises ``MismatchError`` naming the setting and each rank's value instead.
* A ``Work`` this returns (the exact path with ``async_op=True``) raises from ``wait()``
  when the collective failed, a dead peer for instance (:mod:`collectives.torchwork`).

Compressed and exact calls keep count in ``calls`` (``compressed``, ``plain``).

Example::

    >>> from torch.distributed.fsdp import fully_shard
    >>> from collectives.fsdp import compress_reduce_scatter
    >>> for layer in model.layers:
    ...     fully_shard(layer)
    >>> fully_shard(model)
    >>> comms = compress_reduce_scatter(model, "uniform:bits=8")  # one per FSDP module
    >>> # or by hand: module.set_custom_reduce_scatter(CompressedReduceScatter(...))
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from torch.distributed.fsdp._fully_shard._fsdp_api import ReduceScatter

from compressors.dtypes import lookup

from . import torchwork
from .algorithms import ring
from .algorithms.common import Job
from .compressed import hierarchical, resolve_compressor
from .compressed.checks import HIERARCHIES, check_feedback
from .compressed.common import Ctx, wire_sizes
from .compressed.compression import Compression
from .config import MIN_NUMEL, defaults
from .errors import MismatchError
from .exchange import alltoallv
from .progress import Handle
from .session import Session
from .topology import topology
from .torchwork import group_deadline
from .transport import as_communicator
from .validation import agree, digest

__all__ = ["CompressedReduceScatter", "compress_reduce_scatter"]

_COMPRESSED_DTYPES = (torch.float32, torch.bfloat16)
#: the compressor, error_feedback, min_numel and hierarchy arguments left as they are
_DEFAULTS = ("uniform:bits=8", True, MIN_NUMEL, "auto")


class CompressedReduceScatter(ReduceScatter):
    """FSDP2's reduce-scatter with each rank's chunks compressed for their owners (see the
    module doc). With the ``none`` compressor the result equals the exact reduce-scatter up
    to summation order."""

    def __init__(self, compressor: Any = "uniform:bits=8", *, error_feedback: bool = True,
                 min_numel: int = MIN_NUMEL, timeout: float | None = None,
                 name: str = "fsdp", hierarchy: str = "auto",
                 session: Session | None = None) -> None:
        session = _session(session, (compressor, error_feedback, min_numel, hierarchy),
                           "CompressedReduceScatter")
        #: the compressor, residual store, min_numel and hierarchy (``collectives.session``;
        #: one session may serve every module of a model, see compress_reduce_scatter)
        self.session = session
        self.compressor = session.compressor(session.spec)
        if self.compressor.capabilities.allreduce_steps:
            raise ValueError(f"{self.compressor.name} needs collective steps of its own "
                             "(an allreduce), not a reduce-scatter; use a quantizer, a "
                             "sparsifier or a half-precision compressor")
        self.feedback = session.feedback(session.spec)
        check_feedback(self.feedback, self.compressor)
        self.timeout = timeout
        self._deadline = timeout  # this call's: timeout, else the group's (see __call__)
        self.calls = {"compressed": 0, "plain": 0, "two_level": 0}
        self._agreed: dict[int, Any] = {}  # id -> communicator whose ranks have agreed
        self.name = name  # names the residuals and seeds the stochastic rounding

    @property
    def min_numel(self) -> int:
        return self.session.min_numel

    @property
    def hierarchy(self) -> str:
        return self.session.hierarchy

    def allocate(self, size: Sequence[int | torch.SymInt], *, dtype: torch.dtype,
                 device: torch.device) -> torch.Tensor:
        """A fresh buffer, as FSDP's default (its output becomes the sharded gradient)."""
        return torch.empty(tuple(size), dtype=dtype, device=device)

    def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                 group: dist.ProcessGroup, op: Any, async_op: bool = False) -> Any:
        """Reduce-scatter ``input_tensor`` (p chunks) into ``output_tensor`` (this rank's)."""
        p = group.size()
        # each wait lasts as long as the group's own (what FSDP itself would wait)
        self._deadline = self.timeout if self.timeout is not None else group_deadline(group)
        scale = _scale(op, p)
        n = input_tensor.numel()
        if n != output_tensor.numel() * p:
            raise ValueError(f"reduce-scatter input of {n} elements for an output of "
                             f"{output_tensor.numel()} on {p} ranks (needs p times as many)")
        if p > 1:
            self._agree(group)
        if input_tensor.dtype not in _COMPRESSED_DTYPES or not self.session.compresses(n) \
                or not (input_tensor.is_contiguous() and output_tensor.is_contiguous()) \
                or p == 1:
            self.calls["plain"] += 1
            return _plain(output_tensor, input_tensor, group, op, scale, async_op)
        self.calls["compressed"] += 1
        comm = as_communicator(group)
        # set-up collectives (topology, sub-communicators) on the first call, before messages
        lv = hierarchical.levels(comm, self.hierarchy, self.compressor, self._deadline)
        host = input_tensor.detach().reshape(-1).cpu()
        name = self._name(input_tensor)
        step = self.session.next_step(name)
        if lv is not None and lv.intra is not None and lv.cross is not None:
            self.calls["two_level"] += 1
            ctx, steps = self._two_level(comm, lv, host.float().numpy(), name, step)
        else:
            x = host if host.dtype == torch.bfloat16 else host.numpy()  # the compressor's view
            ctx = self._call(name, step).ctx(
                comm, comm.next_tag(), x, lookup(str(input_tensor.dtype).removeprefix("torch.")))
            ctx.out = ctx.buffer("owned", n // p)
            steps = reduce_scatter(ctx)

        def finish() -> None:
            if scale != 1.0:  # applied to the fp32 sum: one rounding, on n/p elements
                ctx.out *= np.float32(scale)
            output_tensor.reshape(-1).copy_(torch.from_numpy(ctx.out))

        Handle(steps, finish, "compressed reduce-scatter (FSDP)", self._deadline).wait()
        return _done() if async_op else None

    def _two_level(self, comm: Any, lv: Any, x: np.ndarray, name: str, step: int
                   ) -> tuple[Ctx, Any]:
        """The context of the cross-host step and the call's steps (see the module doc)."""
        topo = topology(comm, timeout=self._deadline)
        hosts, m = lv.n_hosts, x.size // comm.size
        # block k inside the host: the chunks of the ranks of local index k, in the rank
        # order of their cross-host communicator
        owners = [sorted(h[k] for h in topo.hosts) for k in range(lv.local_size)]
        work = x.reshape(comm.size, m)[np.concatenate(owners)].reshape(-1)  # a copy
        blocks = [(k * hosts * m, (k + 1) * hosts * m) for k in range(lv.local_size)]
        lo, hi = blocks[lv.local_rank]
        f32 = lookup("float32")
        tag = comm.next_tag()
        inside = Job(lv.intra, work, f32, "sum", tag, max(1, defaults.segment_bytes // 4),
                     "two-level reduce-scatter (FSDP)")
        ctx = self._call(f"{name}@cross", step).ctx(lv.cross, tag, work[lo:hi], f32)
        ctx.out = ctx.buffer("owned", m)

        def steps() -> Any:
            yield from ring.reduce_scatter(inside, blocks)
            yield from reduce_scatter(ctx)
        return ctx, steps()

    def _call(self, name: str, step: int) -> Compression:
        """The compression of one shard's call (its residual kept under ``name``)."""
        return Compression(self.compressor, feedback=self.feedback, name=name, step=step)

    def _spec(self) -> str:
        """The compressor with its parameters, as text (``uniform:bits=8,...``)."""
        opts = ",".join(f"{k}={v}" for k, v in sorted(self.compressor.params.items()))
        return f"{self.compressor.name}:{opts}" if opts else self.compressor.name

    def _agree(self, group: Any) -> None:
        """Once per group, before its first message: every rank has the same compressor
        spec, ``min_numel`` and ``hierarchy``, else MismatchError on every rank (see the
        module doc)."""
        comm = as_communicator(group)
        if self._agreed.get(id(comm)) is comm:
            return
        spec = self._spec()
        table = agree(comm, "settings", {}, self._deadline,
                      shared={"compressor": digest(spec), "min_numel": self.min_numel,
                              "hierarchy": HIERARCHIES.index(self.hierarchy)})
        if (table[:, 0] != table[0, 0]).any():
            raise _mismatch("compressor", _texts(comm, spec, self._deadline))
        if (table[:, 1] != table[0, 1]).any():
            raise _mismatch("min_numel", [int(v) for v in table[:, 1]])
        if (table[:, 2] != table[0, 2]).any():
            raise _mismatch("hierarchy", [HIERARCHIES[int(v)] for v in table[:, 2]])
        self._agreed[id(comm)] = comm

    def _name(self, t: torch.Tensor) -> str:
        """The residual (and compressor) name of an input: the same on every rank and in
        every run of the same program (stochastic rounding is seeded from it)."""
        return f"{self.name}/rs{t.numel()}:{str(t.dtype).removeprefix('torch.')}"


def compress_reduce_scatter(module: torch.nn.Module, compressor: Any = "uniform:bits=8", *,
                            error_feedback: bool = True, min_numel: int = MIN_NUMEL,
                            timeout: float | None = None, hierarchy: str = "auto",
                            session: Session | None = None) -> list[CompressedReduceScatter]:
    """Give every ``fully_shard`` module in ``module`` (itself included) a
    :class:`CompressedReduceScatter` of its own, each named by its module's path, so each
    residual belongs to one parameter group; all of them share one :class:`Session` (the one
    given, else one made of the other arguments), whose ``state_dict()`` saves every
    module's residuals and steps. Returns them in ``module.named_modules()`` order. Call it
    on every rank alike."""
    from torch.distributed.fsdp import FSDPModule

    session = _session(session, (compressor, error_feedback, min_numel, hierarchy),
                       "compress_reduce_scatter")
    out = []
    for path, m in module.named_modules():
        if isinstance(m, FSDPModule):
            comm = CompressedReduceScatter(timeout=timeout, name=f"fsdp:{path or '.'}",
                                           session=session)
            m.set_custom_reduce_scatter(comm)
            out.append(comm)
    if not out:
        raise ValueError("no fully_shard module in the model: call fully_shard first")
    return out


def _session(session: Session | None, settings: tuple[Any, bool, int, str], who: str
             ) -> Session:
    """The session given, else one of ``settings`` (compressor, error_feedback, min_numel,
    hierarchy), which may not be given beside a session."""
    if session is None:
        compressor, error_feedback, min_numel, hierarchy = settings
        return Session(resolve_compressor(compressor), error_feedback=error_feedback,
                       min_numel=min_numel, hierarchy=hierarchy)
    if settings != _DEFAULTS:
        raise TypeError(f"{who}: give the compressor, error_feedback, min_numel and "
                        f"hierarchy to the Session, not beside it")
    return session


def reduce_scatter(ctx: Ctx) -> Any:
    """Steps of a compressed reduce-scatter of ``ctx.x`` (p equal chunks): chunk j compressed
    for rank j with the residual ``ctx.name``, exchanged, and this rank's decoded
    contributions summed into ``ctx.out`` in rank order (the first half of
    ``compressed.rsag``)."""
    p, r = ctx.comm.size, ctx.comm.rank
    m = int(np.prod(ctx.x.shape)) // p
    blocks = [(j * m, (j + 1) * m) for j in range(p)]
    payloads = ctx.compress_compensated(ctx.x, ctx.name, blocks,
                                        [f"{ctx.name}/{j}" for j in range(p)])
    got = yield from alltoallv(ctx.comm, ctx.tag, [ctx.wire(pl) for pl in payloads],
                               wire_sizes(ctx.comp, [(m,)] * p, payloads[0].dtype))
    for j, data in enumerate(got):  # rank order: the same sum however the messages arrived
        own = payloads[r] if j == r else None
        if j == 0:
            ctx.decode_bytes_into(data, ctx.out, own)
        else:
            ctx.decode_bytes_add(data, ctx.out, own)


def _mismatch(setting: str, values: list[Any]) -> MismatchError:
    by_rank = ", ".join(f"rank {r}: {v!r}" for r, v in enumerate(values))
    return MismatchError(f"compressed reduce-scatter (FSDP): ranks disagree on the {setting} "
                         f"({by_rank}); build CompressedReduceScatter (or call "
                         f"compress_reduce_scatter) with the same {setting} on every rank")


def _texts(comm: Any, text: str, timeout: float | None) -> list[str]:
    """Every rank's ``text`` (short), in rank order."""
    data = np.frombuffer(text.encode(), np.uint8)
    sizes = comm.allgather_ints(np.array([data.size]), collective="share texts",
                                timeout=timeout)[:, 0]
    buf = np.zeros(-(-int(sizes.max()) // 8) * 8, np.uint8)
    buf[:data.size] = data
    table = comm.allgather_ints(buf.view(np.int64), collective="share texts", timeout=timeout)
    rows = np.ascontiguousarray(table).view(np.uint8).reshape(len(sizes), -1)
    return [bytes(row[:int(n)]).decode() for row, n in zip(rows, sizes, strict=True)]


def _scale(op: Any, p: int) -> float:
    """The factor FSDP's reduction applies to the sum."""
    if op == dist.ReduceOp.SUM:
        return 1.0
    if op == dist.ReduceOp.AVG:
        return 1.0 / p
    factor = getattr(op, "factor", None)
    if op == dist.ReduceOp.PREMUL_SUM and factor is not None:
        return float(factor)
    raise ValueError(f"the compressed reduce-scatter sums: it takes ReduceOp SUM, AVG or "
                     f"PREMUL_SUM(factor), got {op!r}")


#: torch.distributed's tensor reduce-scatter (``reduce_scatter_single`` where this torch has it;
#: ``reduce_scatter_tensor``, its older name, is deprecated there)
_REDUCE_SCATTER = getattr(dist, "reduce_scatter_single", dist.reduce_scatter_tensor)


def _plain(out: torch.Tensor, x: torch.Tensor, group: Any, op: Any, scale: float,
           async_op: bool) -> Any:
    """The exact reduce-scatter on the group: a sum, then the factor (gloo has no AVG and no
    PREMUL_SUM)."""
    if not x.is_floating_point():
        return _REDUCE_SCATTER(out, x, op=op, group=group, async_op=async_op)
    work = _REDUCE_SCATTER(out, x.contiguous(), op=dist.ReduceOp.SUM, group=group,
                           async_op=True)
    if async_op and scale == 1.0:
        return work
    if not async_op:
        work.wait()
        if scale != 1.0:
            out.mul_(scale)
        return None
    return torchwork.then(work, lambda: out.mul_(scale))


def _done() -> Any:
    return torchwork.done(None)
