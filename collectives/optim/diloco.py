"""DiLoCo: local steps, and every ``sync_every`` steps an outer step on the ranks' compressed
average pseudo-gradient, exchanged in the background while the next local steps run.

Each rank trains its own copy of the model with the inner optimizer (AdamW, Adam, anything).
Every ``sync_every`` inner steps each rank sends its pseudo-gradient, the global weights less
its local ones, through compcoll's allreduce (compressed, with error feedback kept across
syncs; two-level on hosts of several ranks), and the global weights take an outer step on
the ranks' average: SGD with Nesterov momentum, as in DiLoCo (Douillard et al. 2023).

``overlap=True`` (the default): the exchange runs on a thread of its own while the next
``sync_every`` local steps run, and its outer step lands one interval later, at the next
sync, on every rank at the same step. The local progress made meanwhile is kept: the local
weights become the new global weights plus what this rank did since it sent, and that
progress is what it sends next (an outer step one interval late, nothing lost; compare the
eager and streaming variants of DiLoCo). A failure in the exchange (a peer gone, a deadline
passed) raises from the next :meth:`step` on every rank it reaches. ``overlap=False``: the
exchange and the outer step happen inside the step that makes them. With ``sync_every=1``,
no compressor, ``overlap=False`` and an outer SGD of lr 1 without momentum, this is
synchronous data-parallel SGD with the inner optimizer's step size.

Floating-point buffers (BatchNorm's running statistics) travel with each sync uncompressed
and are averaged; :meth:`global_weights` puts the global ones in place with the weights.

The outer step at its default ``"auto"`` is :func:`~collectives.optim.intervals.outer_for`
the interval: averaging up to 16 steps apart, then Nesterov with a steady gain that grows in
proportion to the interval (immediate move 1). ``sync_every="auto"`` syncs every step,
in the foreground, for the first ``PROBE`` steps (the warm-up, where local models are
furthest apart), timing the syncs and the steps, and then picks the shortest interval the
background exchange hides (``overlap=False``: the least that keeps syncs within 10% of the
time): :func:`~collectives.optim.intervals.sync_every_for` of the slowest rank's step and the
fastest rank's sync. ``compressor="auto"`` sends 8 bits (``uniform:bits=8``) where the cost
model, fitted on this run's links, prices the float32 allreduce of the pseudo-gradient above
the 8-bit one with its coding (timed on this buffer), else float32; a fast link (shared
memory, a fast network) therefore gets float32.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

import compressors

from .. import api, costmodel, moved
from ..session import Session
from ..torchwork import comm_deadline
from ..transport import as_communicator
from ..transport.split import split_by
from ..validation import agree_settings, refusing
from . import diloco_checks as checks
from .background import Background
from .intervals import outer_for, probe_times, sync_every_for, widen

VERSION = 2
#: sync_every="auto": steps synced every step first, timed for the choice of H.
PROBE = 5
#: compressor="auto": what a slow link gets.
AUTO_COMPRESSOR = "uniform:bits=8"


def compressor_for(p: int, n: int, codec_s: float, cost: costmodel.CostParams) -> str:
    """What ``compressor="auto"`` sends a pseudo-gradient of ``n`` float32 values in over
    ``p`` ranks: ``AUTO_COMPRESSOR`` where the cost model's ring prices its payload plus its
    coding twice (``codec_s``: one encode and decode, the slowest rank's; each rank codes its
    own and the sum) below the float32 sync, else "none". One rank: "none".

    >>> from collectives.costparams import CostParams
    >>> gbit = CostParams(50e-6, 8e-9, 1e-10)   # 1 Gbit/s
    >>> shm = CostParams(2e-6, 1e-10, 1e-10)    # shared memory
    >>> compressor_for(4, 1 << 20, 2e-3, gbit), compressor_for(4, 1 << 20, 2e-3, shm)
    ('uniform:bits=8', 'none')
    """
    if p <= 1:
        return "none"
    dense = costmodel.predict("ring", p, 4 * n, cost)
    wire = compressors.get(AUTO_COMPRESSOR).payload_nbytes(n) or n
    return AUTO_COMPRESSOR if costmodel.predict("ring", p, wire, cost) + 2 * codec_s < dense \
        else "none"


@dataclass
class _Sync:
    """A sync sent: its pseudo-gradient (the ranks' average once exchanged), the local
    weights and buffers it was taken from, and the inner step at which it lands."""

    delta: torch.Tensor
    snapshot: torch.Tensor
    buffers: torch.Tensor | None
    buffer_snapshot: torch.Tensor | None
    due: int
    job: Background | None = None  # None: exchanged (or loaded from a checkpoint)


class DiLoCo:
    """Wrap ``optimizer`` (over ``model``'s parameters) with DiLoCo's outer loop.

    Call it where the inner optimizer would be called: ``loss.backward(); opt.step();
    opt.zero_grad()``. Construction is collective (every rank, the same arguments, the same
    parameter and buffer shapes): the ranks compare their settings (``MismatchError`` on every
    rank where they differ) and load rank 0's weights and buffers. ``model`` is the plain
    module: a model wrapped in DDP or FSDP (what ``accelerator.prepare`` returns) is refused.
    ``.optimizer`` is the inner optimizer, for LR schedulers. ``comm``: any communicator
    ``collectives`` accepts (None follows the launcher); like torch's optimizers it takes no
    timeout: its waits are the process group's own timeout on a torch.distributed group,
    else ``collectives.defaults.timeout``; set :attr:`timeout` (seconds) to choose another.

    Example::

        >>> model = torch.nn.Linear(64, 64)
        >>> opt = collectives.optim.DiLoCo(torch.optim.AdamW(model.parameters(), 1e-3), model,
        ...                                sync_every=50)
        >>> for x, y in batches:
        ...     torch.nn.functional.mse_loss(model(x), y).backward()
        ...     opt.step()
        ...     opt.zero_grad()
        >>> opt.flush()  # the last interval's progress into the global weights
        >>> with opt.global_weights() as m:
        ...     torch.save(m.state_dict(), "model.pt")
    """

    @moved.keywords("DiLoCo")
    def __init__(self, optimizer: torch.optim.Optimizer, model: torch.nn.Module, *,
                 sync_every: int | str = "auto", outer_lr: float | str = "auto",
                 outer_momentum: float | str = "auto", compressor: Any = "auto", comm: Any = None,
                 overlap: bool = True) -> None:
        self.comm = as_communicator(comm)
        #: seconds each wait may block (None: ``collectives.defaults.timeout``)
        self.timeout = comm_deadline(self.comm)
        with refusing(self.comm, "DiLoCo settings", True, self.timeout):
            self.params = checks.check_arguments(optimizer, model, sync_every, outer_lr,
                                                 outer_momentum, overlap)
            spec = compressor if compressor == "auto" else checks.spec_of(compressor)
        self.optimizer, self.model, self.overlap = optimizer, model, overlap
        #: floating-point buffers, averaged at every sync (integer ones count alike anyway)
        self.buffers = [b for b in model.buffers() if b.is_floating_point()]
        #: as given: a number, or "auto" (:func:`outer_for` the sync interval)
        self.outer_lr, self.outer_momentum = checks.setting(outer_lr), \
            checks.setting(outer_momentum)
        self.sync_every: int | None = None if sync_every == "auto" else int(sync_every)
        self.auto_sync = sync_every == "auto"
        agree_settings(self.comm, "DiLoCo settings", {
            "sync_every": str(sync_every), "outer_lr": repr(self.outer_lr),
            "outer_momentum": repr(self.outer_momentum), "compressor": str(spec),
            "overlap": str(overlap), "parameters": checks.shapes(self.params),
            "buffers": checks.shapes(self.buffers)}, self.timeout)
        #: where the syncs are exchanged: a communicator of their own (the same ranks), so a
        #: collective the training loop makes meanwhile on ``comm`` (a logging allreduce,
        #: Lightning's broadcasts) cannot interleave with a background exchange
        self.exchange_comm = self.comm if self.comm.size == 1 else split_by(
            self.comm, 0, self.comm.rank, label="DiLoCo syncs", timeout=self.timeout)
        flat = self._flat(self.params)
        api.broadcast(flat, root=0, comm=self.comm, timeout=self.timeout)  # rank 0's weights
        self._master = torch.nn.Parameter(flat, requires_grad=False)
        self._global_buffers = self._flat(self.buffers) if self.buffers else None
        if self._global_buffers is not None:
            api.broadcast(self._global_buffers, root=0, comm=self.comm, timeout=self.timeout)
        self._load()
        self.outer = torch.optim.SGD([self._master], lr=1.0)
        self._set_outer(self.sync_every or 1)  # averaging while "auto" probes
        self.compressor = self._auto_compressor(flat) if spec == "auto" else spec
        #: the compressor and its residual store (``collectives.session``; none: no feedback)
        self.session = Session(self.compressor, error_feedback=self.compressor != "none")
        self.feedback = self.session.feedback(self.compressor)
        self.steps = 0  # inner steps taken
        self.syncs = 0  # outer steps landed
        self._probe: dict[str, list[float]] = {"step": [], "sync": []}  # while "auto" probes
        #: "auto" in the background: (compute seconds a step, the foreground rule's interval)
        #: from the probe, and the whole steps since the interval was last checked
        self._adapt: tuple[float, int] | None = None
        self._recent: list[float] = []
        self._last: float | None = None  # when the previous step() started
        self._pending: _Sync | None = None  # the sync sent and not landed
        self._sent_at = 0  # the inner step the last sync was sent at
        self._in_global = False
        #: seconds the last :meth:`step` blocked on syncs (0.0 where it made none)
        self.comm_s = 0.0
        #: seconds every step() so far blocked waiting for a background exchange
        self.stall_s = 0.0

    # -- the optimizer's interface -------------------------------------------------------
    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Any = None) -> Any:
        """An inner step; the sync in flight lands and the next is sent when one is due."""
        if self._in_global:
            raise RuntimeError("DiLoCo.step() inside global_weights(): the model holds the "
                               "global weights there, not the local ones it trains; step "
                               "after the with-block")
        if self._pending is not None and self._pending.job is not None:
            failed = self._pending.job.failure()
            if failed is not None:  # on every rank the exchange reached, at this step
                raise failed
        start = time.perf_counter()
        if self._last is not None and self.sync_every is None:  # a whole probe step
            self._probe["step"].append(start - self._last)
        elif self._last is not None and self._adapt is not None:
            self._recent.append(start - self._last)
        self._last = start
        loss = self.optimizer.step(closure)
        self.steps += 1
        t0 = time.perf_counter()
        due = self._due()
        if self._pending is not None and (self._pending.due <= self.steps or due):
            self._land()  # (a sync sent before the interval widened lands at the next sync)
        if due:
            probing = self.sync_every is None
            if self._adapt is not None and len(self._recent) >= 8:
                self._check_interval()
            self._send(background=self.overlap and not probing)
            if self._pending is not None and self._pending.job is None:
                self._land()
                if probing:
                    self._probe["sync"].append(time.perf_counter() - t0)
            if probing and self.auto_sync and self.syncs >= PROBE:
                self.sync_every = self._choose_sync_every()
                self._set_outer(self.sync_every)
                self._probe = {"step": [], "sync": []}
        self.comm_s = time.perf_counter() - t0
        return loss

    def flush(self) -> None:
        """Every step's progress into the global weights: the sync in flight lands now and the
        steps since the last sync are synced (in the foreground). Collective: every rank, at
        the same step, e.g. after the training loop."""
        if self._pending is not None:
            self._land()
        if self.steps > self._sent_at:
            self._send(background=False)
            self._land()

    def _due(self) -> bool:
        if self.sync_every is None:  # auto, still probing: every step
            return True
        return self.steps % self.sync_every == 0

    # -- the sync ---------------------------------------------------------------------------
    def _flat(self, tensors: list[torch.Tensor]) -> torch.Tensor:
        with torch.no_grad():
            return torch.cat([t.detach().reshape(-1).float() for t in tensors])

    def _send(self, background: bool) -> None:
        """This rank's pseudo-gradient (global less local) and floating buffers, exchanged
        now or on a thread of its own; it lands :attr:`sync_every` steps later there."""
        local = self._flat(self.params)
        with torch.no_grad():
            delta = self._master.detach() - local
        bufs = self._flat(self.buffers) if self.buffers else None
        sync = _Sync(delta, local, bufs, None if bufs is None else bufs.clone(),
                     self.steps + (self.sync_every or 0 if background else 0))
        step, first = self.syncs, self.syncs == 0

        def exchange() -> None:
            kwargs: dict[str, Any] = {}
            if self.feedback is not None:
                kwargs = {"compressor": self.feedback.compressor, "feedback": self.feedback,
                          "name": "diloco", "step": step}
            # the first sync compares the call on every rank; later ones are the same call
            check = None if first else False
            c = self.exchange_comm
            api.allreduce(delta, op="avg", comm=c, out=delta, timeout=self.timeout,
                          validate=check, **kwargs)
            if bufs is not None:
                api.allreduce(bufs, op="avg", comm=c, out=bufs, timeout=self.timeout,
                              validate=check)
        if background:
            sync.job = Background(exchange, f"DiLoCo sync {step}")
        else:
            exchange()
        self._pending, self._sent_at = sync, self.steps

    def _land(self) -> None:
        """The outer step on the pending sync's average, on every rank at the same step; the
        local weights become the new global ones plus the progress made since it was sent."""
        sync = self._pending
        assert sync is not None
        if sync.job is not None:
            t0 = time.perf_counter()
            sync.job.wait()
            self.stall_s += time.perf_counter() - t0
        self._pending = None
        self._master.grad = sync.delta
        self.outer.step()
        self._master.grad = None
        with torch.no_grad():
            if sync.buffers is not None:  # averaged as they were sent, this rank's since kept
                assert sync.buffer_snapshot is not None
                mine = self._flat(self.buffers) - sync.buffer_snapshot
                self._global_buffers = sync.buffers
                self._load_buffers(sync.buffers + mine)
            # the local progress since the send, kept on top of the new global weights
            self._load(self._master.detach() + (self._flat(self.params) - sync.snapshot))
        self.syncs += 1

    def _load(self, flat: torch.Tensor | None = None) -> None:
        """``flat`` (the global weights by default) into the model's parameters, in their
        dtypes."""
        src = self._master if flat is None else flat
        with torch.no_grad():
            at = 0
            for p in self.params:
                p.copy_(src[at:at + p.numel()].view_as(p))
                at += p.numel()
        if flat is None and self._global_buffers is not None:
            self._load_buffers(self._global_buffers)

    def _load_buffers(self, flat: torch.Tensor) -> None:
        with torch.no_grad():
            at = 0
            for b in self.buffers:
                b.copy_(flat[at:at + b.numel()].view_as(b))
                at += b.numel()

    @contextlib.contextmanager
    def global_weights(self) -> Iterator[torch.nn.Module]:
        """The model with the global weights and buffers (the last outer step's) in place of
        its local ones, which come back on exit: evaluate or save the model DiLoCo trains.
        Not collective; no :meth:`step` inside (refused). A sync in flight has not landed:
        :meth:`flush` first for every step's progress.

        Example::

            >>> with opt.global_weights() as m:
            ...     val_loss = evaluate(m)
        """
        local = self._flat(self.params)
        bufs = self._flat(self.buffers) if self.buffers else None
        self._load()
        self._in_global = True
        try:
            yield self.model
        finally:
            self._in_global = False
            self._load(local)
            if bufs is not None:
                self._load_buffers(bufs)

    # -- "auto" -----------------------------------------------------------------------------
    def _set_outer(self, sync_every: int) -> None:
        """The outer step's lr and momentum for syncs ``sync_every`` steps apart: the given
        ones, or :func:`outer_for` it where "auto"."""
        lr, momentum = outer_for(sync_every)
        group = self.outer.param_groups[0]
        group["lr"] = lr if self.outer_lr == "auto" else self.outer_lr
        group["momentum"] = momentum if self.outer_momentum == "auto" else self.outer_momentum
        group["nesterov"] = group["momentum"] > 0

    @property
    def outer_settings(self) -> tuple[float, float]:
        """The outer step's (lr, momentum) in force."""
        group = self.outer.param_groups[0]
        return float(group["lr"]), float(group["momentum"])

    def _choose_sync_every(self) -> int:
        """:func:`sync_every_for` the slowest rank's probe step and the fastest rank's sync
        (collective: one allreduce of two numbers)."""
        period, sync = probe_times(self._probe["step"], self._probe["sync"])
        mine = np.array([period, -sync], np.float64)
        agreed = api.allreduce(mine, op="max", comm=self.comm, timeout=self.timeout)
        period, sync = float(agreed[0]), -float(agreed[1])
        if self.overlap:
            self._adapt = (max(period - sync, 1e-6), sync_every_for(period, sync, False))
        return sync_every_for(period, sync, self.overlap)

    def _check_interval(self) -> None:
        """:func:`widen` the interval from the slowest rank's median step since the last check
        (collective: every rank checks at the same sync, one allreduce of one number)."""
        assert self._adapt is not None and self.sync_every is not None
        mine = np.array([float(np.median(self._recent))], np.float64)
        self._recent = []
        slowest = float(api.allreduce(mine, op="max", comm=self.comm, timeout=self.timeout)[0])
        wider = widen(slowest, self._adapt[0], self.sync_every, self._adapt[1])
        if wider != self.sync_every:
            self.sync_every = wider
            self._set_outer(wider)
        if wider >= self._adapt[1]:
            self._adapt = None  # as wide as the foreground rule: no more checks

    def _auto_compressor(self, flat: torch.Tensor) -> str:
        """8 bits where the cost model prices the float32 sync above the 8-bit one with its
        coding (timed here on this buffer, the slowest rank's), else none (collective)."""
        if self.comm.size == 1:
            return "none"
        cost = costmodel.params(self.comm, timeout=self.timeout)
        comp = compressors.get(AUTO_COMPRESSOR)
        host = flat.detach().cpu().numpy()
        t0 = time.perf_counter()
        comp.decompress(comp.compress(host, name="probe", step=0))
        mine = np.array([time.perf_counter() - t0], np.float64)
        codec = float(api.allreduce(mine, op="max", comm=self.comm, timeout=self.timeout)[0])
        return compressor_for(self.comm.size, flat.numel(), codec, cost)

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """This rank's state: the inner and outer optimizers', the global weights and
        buffers, the error feedback's residuals (this rank's own), the sync in flight (waited
        for: every rank saves at the same step), the step counts and the chosen interval.
        The model's weights are the model's ``state_dict`` (the local ones, between syncs)."""
        pending = self._pending
        if pending is not None and pending.job is not None:
            pending.job.wait()
            pending.job = None
        return {"version": VERSION, "steps": self.steps, "syncs": self.syncs,
                "sent_at": self._sent_at,
                "sync_every": self.sync_every, "compressor": self.compressor,
                "overlap": self.overlap, "world_size": self.comm.size, "rank": self.comm.rank,
                "inner": self.optimizer.state_dict(), "outer": self.outer.state_dict(),
                "global": self._master.detach().cpu().clone(),
                "global_buffers": None if self._global_buffers is None
                else self._global_buffers.cpu().clone(),
                "pending": None if pending is None else {
                    "delta": pending.delta.cpu().clone(),
                    "snapshot": pending.snapshot.cpu().clone(), "due": pending.due,
                    "buffers": pending.buffers, "buffer_snapshot": pending.buffer_snapshot},
                "feedback": None if self.feedback is None else self.feedback.state_dict(),
                "probe": {k: list(v) for k, v in self._probe.items()},
                "adapt": None if self._adapt is None else list(self._adapt)}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (validated: a bad field raises ValueError naming it and
        changes nothing). Load the model's own weights as well. The constructor's settings
        are kept: a state saved with another ``sync_every`` continues at this optimizer's
        (a saved interval is taken only where this one is ``"auto"``)."""
        checks.check_state(state, self, tuple(self._master.shape))
        self.optimizer.load_state_dict(state["inner"])
        self.outer.load_state_dict(state["outer"])
        device = self._master.device
        with torch.no_grad():
            self._master.copy_(state["global"].to(device))
        if state.get("global_buffers") is not None and self._global_buffers is not None:
            self._global_buffers = state["global_buffers"].to(device).clone()
        if self.feedback is not None and state["feedback"] is not None:
            self.feedback.load_state_dict(state["feedback"])
        self.steps, self.syncs = int(state["steps"]), int(state["syncs"])
        self._sent_at = int(state.get("sent_at", self.steps))
        if self.auto_sync:
            saved = state["sync_every"]
            self.sync_every = None if saved is None else int(saved)
            self._probe = {k: list(v) for k, v in state.get("probe", {}).items()} or \
                {"step": [], "sync": []}
            adapt = state.get("adapt")
            self._adapt = None if adapt is None else (float(adapt[0]), int(adapt[1]))
            self._recent = []
        self._set_outer(self.sync_every or 1)
        pending = state.get("pending")
        self._pending = None if pending is None else _Sync(
            pending["delta"].to(device).clone(), pending["snapshot"].to(device).clone(),
            pending["buffers"], pending["buffer_snapshot"], int(pending["due"]))
        self._last = None
