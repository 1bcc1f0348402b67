"""DiLoCo: local steps, and every ``sync_every`` steps an outer step on the ranks' compressed
average pseudo-gradient.

Each rank trains its own copy of the model with the inner optimizer (AdamW, Adam, anything).
Every ``sync_every`` inner steps the ranks average their pseudo-gradients, the global weights
less their local ones, through compcoll's allreduce (compressed, with error feedback kept
across syncs; two-level on hosts of several ranks), and take an outer step on the global
weights: SGD with Nesterov momentum, as in DiLoCo (Douillard et al. 2023), whose result every
rank loads. With ``sync_every=1``, no compressor and an outer SGD of lr 1 without momentum,
this is synchronous data-parallel SGD with the inner optimizer's step size: the average of the
local steps is the step of the averaged gradient for plain SGD.

The global weights are a float32 master copy, flat, on the model's device. Communication is
one collective per sync over all parameters (float32 pseudo-gradients whatever the model's
dtype). Syncs are not streamed (fragments in turn, overlapped with inner steps): a sync
blocks the step that makes it.

The outer step: ``outer_lr`` and ``outer_momentum`` as given, or, at their default
``"auto"``, :func:`outer_for` the sync interval: averaging the local models (SGD of lr 1,
no momentum) for syncs less than ``NESTEROV_FROM`` steps apart, DiLoCo's Nesterov step (lr
0.7, momentum 0.9) for syncs further apart. While ``sync_every="auto"`` probes (a sync every
step) the outer step averages.

``sync_every="auto"`` syncs every step for the first ``PROBE`` steps (the warm-up, where the
local models are furthest from each other), timing the syncs and the steps between them, and
then syncs every H steps, the least H for which a sync costs at most ``max_comm_share`` of the
time of the H steps; the ranks take the largest H any of them found. ``compressor="auto"``
compresses to 8 bits (``uniform:bits=8``) where the cost model prices the float32 allreduce
of the pseudo-gradient at more than the 8-bit one with its coding (measured on this buffer),
else sends float32; one rank alone sends nothing.
"""

from __future__ import annotations

import contextlib
import math
import numbers
import time
from collections.abc import Iterator, Mapping
from typing import Any

import numpy as np
import torch

import compressors

from .. import api, costmodel
from ..policy.base import canonical
from ..session import Session
from ..torchwork import comm_deadline
from ..transport import as_communicator
from ..validation import agree_settings, refusing

VERSION = 1
#: sync_every="auto": steps synced every step first, timed for the choice of H.
PROBE = 5
#: sync_every="auto": the largest H it picks.
MAX_SYNC_EVERY = 1000
#: compressor="auto": what a slow link gets.
AUTO_COMPRESSOR = "uniform:bits=8"
#: outer_lr/outer_momentum="auto": the sync interval from which the outer step is DiLoCo's
#: Nesterov step (lr 0.7, momentum 0.9, tuned by its authors for syncs 50-2000 steps apart
#: over runs of tens of thousands of steps). Below it the outer step averages: Nesterov's
#: steady gain lr / (1 - momentum) = 7 multiplies the inner optimizer's progress between
#: strongly aligned syncs. Measured on the bundled gpt (4 ranks, AdamW, 300 steps, DDP's
#: loss 2.890): syncs 4 steps apart end at 2.900 averaging and 2.934 with (0.7, 0.5), and with
#: (0.7, 0.9) at 3.985 (1 Gbit/s links); syncs at auto's interval on shared memory end at 4.376
#: with (0.7, 0.9), syncs 32 steps apart at 3.111.
NESTEROV_FROM = 100


class DiLoCo:
    """Wrap ``optimizer`` (over ``model``'s parameters) with DiLoCo's outer loop.

    Call it where the inner optimizer would be called: ``loss.backward(); opt.step();
    opt.zero_grad()``. Construction is collective (every rank, the same arguments): the ranks
    compare their settings (``MismatchError`` on every rank where they differ) and load rank
    0's weights. ``.optimizer`` is the inner optimizer, for LR schedulers. ``comm``: any
    communicator ``collectives`` accepts (None follows the launcher); like torch's optimizers
    it takes no timeout: its waits are the process group's own timeout on a torch.distributed
    group, else ``collectives.defaults.timeout``; set :attr:`timeout` (seconds) to choose
    another.

    Example::

        >>> model = torch.nn.Linear(64, 64)
        >>> opt = collectives.optim.DiLoCo(torch.optim.AdamW(model.parameters(), 1e-3), model,
        ...                                sync_every=50)
        >>> for x, y in batches:
        ...     torch.nn.functional.mse_loss(model(x), y).backward()
        ...     opt.step()
        ...     opt.zero_grad()
    """

    def __init__(self, optimizer: torch.optim.Optimizer, model: torch.nn.Module, *,
                 sync_every: int | str = "auto", outer_lr: float | str = "auto",
                 outer_momentum: float | str = "auto", compressor: Any = "auto", comm: Any = None,
                 max_comm_share: float = 0.1) -> None:
        self.comm = as_communicator(comm)
        #: seconds each wait may block (None: ``collectives.defaults.timeout``)
        self.timeout = comm_deadline(self.comm)
        with refusing(self.comm, "DiLoCo settings", True, self.timeout):
            self.params = _check(optimizer, model, sync_every, outer_lr, outer_momentum,
                                 max_comm_share)
            spec = compressor if compressor == "auto" else _spec(compressor)
        self.optimizer, self.model = optimizer, model
        #: as given: a number, or "auto" (:func:`outer_for` the sync interval)
        self.outer_lr, self.outer_momentum = _setting(outer_lr), _setting(outer_momentum)
        self.max_comm_share = float(max_comm_share)
        self.sync_every: int | None = None if sync_every == "auto" else int(sync_every)
        self.auto_sync = sync_every == "auto"
        numel = sum(p.numel() for p in self.params)
        agree_settings(self.comm, "DiLoCo settings", {
            "sync_every": str(sync_every), "outer_lr": repr(self.outer_lr),
            "outer_momentum": repr(self.outer_momentum), "compressor": str(spec),
            "max_comm_share": repr(self.max_comm_share),
            "parameters": f"{len(self.params)} tensors of {numel} elements"}, self.timeout)
        with torch.no_grad():
            flat = torch.cat([p.detach().reshape(-1).float() for p in self.params])
        api.broadcast(flat, root=0, comm=self.comm, timeout=self.timeout)  # rank 0's weights
        self._master = torch.nn.Parameter(flat, requires_grad=False)
        self._load()
        self.outer = torch.optim.SGD([self._master], lr=1.0)
        self._set_outer(self.sync_every or 1)  # averaging while "auto" probes
        self.compressor = self._auto_compressor(flat) if spec == "auto" else spec
        #: the compressor and its residual store (``collectives.session``; none: no feedback)
        self.session = Session(self.compressor, error_feedback=self.compressor != "none")
        self.feedback = self.session.feedback(self.compressor)
        self.steps = 0  # inner steps taken
        self.syncs = 0  # outer steps taken
        self._times: dict[str, list[float]] = {"step": [], "sync": []}
        self._last: float | None = None  # when the previous step() started
        #: seconds the last :meth:`step` spent in its sync (0.0 where it made none)
        self.comm_s = 0.0

    # -- the optimizer's interface -------------------------------------------------------
    @property
    def param_groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    def zero_grad(self, set_to_none: bool = True) -> None:
        self.optimizer.zero_grad(set_to_none=set_to_none)

    def step(self, closure: Any = None) -> Any:
        """An inner step; an outer step (collective) when one is due."""
        start = time.perf_counter()
        if self._last is not None:  # from one step() to the next: a whole training step
            self._times["step"].append(start - self._last)
        self._last = start
        loss = self.optimizer.step(closure)
        self.steps += 1
        self.comm_s = 0.0
        if self._due():
            t0 = time.perf_counter()
            self._sync()
            self.comm_s = time.perf_counter() - t0
            self._times["sync"].append(self.comm_s)
            if self.auto_sync and self.sync_every is None and self.syncs >= PROBE:
                self.sync_every = self._choose_sync_every()
                self._set_outer(self.sync_every)
        return loss

    def _due(self) -> bool:
        if self.sync_every is None:  # auto, still probing: every step
            return True
        return self.steps % self.sync_every == 0

    # -- the outer step -------------------------------------------------------------------
    def _sync(self) -> None:
        """Average the pseudo-gradients (global less local), step the global weights with the
        outer optimizer, and load them into the model."""
        with torch.no_grad():
            delta = self._master.detach() - torch.cat(
                [p.detach().reshape(-1).float() for p in self.params])
        kwargs: dict[str, Any] = {}
        if self.feedback is not None:
            kwargs = {"compressor": self.feedback.compressor, "feedback": self.feedback,
                      "name": "diloco", "step": self.syncs}
        api.allreduce(delta, op="avg", comm=self.comm, out=delta, timeout=self.timeout,
                      **kwargs)
        self._master.grad = delta
        self.outer.step()
        self._master.grad = None
        self._load()
        self.syncs += 1

    def _load(self) -> None:
        """The global weights into the model's parameters (in their dtypes)."""
        with torch.no_grad():
            at = 0
            for p in self.params:
                n = p.numel()
                p.copy_(self._master[at:at + n].view_as(p))
                at += n

    @contextlib.contextmanager
    def global_weights(self) -> Iterator[torch.nn.Module]:
        """The model with the global weights (the last outer step's) in place of its local
        ones, which come back on exit: evaluate or save the model DiLoCo trains, between
        syncs as well. Not collective; no step inside.

        Example::

            >>> with opt.global_weights() as m:
            ...     val_loss = evaluate(m)
        """
        with torch.no_grad():
            local = [p.detach().clone() for p in self.params]
            self._load()
        try:
            yield self.model
        finally:
            with torch.no_grad():
                for p, mine in zip(self.params, local, strict=True):
                    p.copy_(mine)

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
        """:func:`sync_every_for` the probe's times, the largest any rank found
        (collective)."""
        mine = np.array([sync_every_for(self._times["step"][1:],  # the first: set-up
                                        self._times["sync"], self.max_comm_share)], np.float64)
        agreed = api.allreduce(mine, op="max", comm=self.comm, timeout=self.timeout)
        return int(agreed[0])

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
        p, n = self.comm.size, flat.numel()
        dense = costmodel.predict("ring", p, 4 * n, cost)
        wire = comp.payload_nbytes(n) or n
        return AUTO_COMPRESSOR if costmodel.predict("ring", p, wire, cost) + 2 * codec < dense \
            else "none"

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """This rank's state: the inner and outer optimizers', the global weights, the error
        feedback's residuals (this rank's own), the step counts and the chosen settings.
        The model's weights are the model's ``state_dict`` (the local ones, between syncs)."""
        return {"version": VERSION, "steps": self.steps, "syncs": self.syncs,
                "sync_every": self.sync_every, "compressor": self.compressor,
                "world_size": self.comm.size, "rank": self.comm.rank,
                "inner": self.optimizer.state_dict(), "outer": self.outer.state_dict(),
                "global": self._master.detach().cpu().clone(),
                "feedback": None if self.feedback is None else self.feedback.state_dict(),
                "times": {k: list(v) for k, v in self._times.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (validated: a bad field raises ValueError naming it and
        changes nothing). Load the model's own weights as well."""
        _validate(state, self, tuple(self._master.shape))
        self.optimizer.load_state_dict(state["inner"])
        self.outer.load_state_dict(state["outer"])
        with torch.no_grad():
            self._master.copy_(state["global"].to(self._master.device))
        if self.feedback is not None and state["feedback"] is not None:
            self.feedback.load_state_dict(state["feedback"])
        self.steps, self.syncs = int(state["steps"]), int(state["syncs"])
        self.sync_every = None if state["sync_every"] is None else int(state["sync_every"])
        self._times = {k: list(v) for k, v in state["times"].items()}
        self._last = None


def outer_for(sync_every: int) -> tuple[float, float]:
    """The outer step's (lr, momentum) for ``"auto"``: averaging (1.0, 0.0) for syncs fewer
    than ``NESTEROV_FROM`` steps apart, DiLoCo's Nesterov step (0.7, 0.9) from there on.

    >>> outer_for(4), outer_for(500)
    ((1.0, 0.0), (0.7, 0.9))
    """
    return (1.0, 0.0) if sync_every < NESTEROV_FROM else (0.7, 0.9)


def sync_every_for(steps: list[float], syncs: list[float], share: float) -> int:
    """The least H for which a sync costs at most ``share`` of the time of H steps and the
    sync, from the probe's medians: ``steps`` are whole training steps (from one ``step()``
    call to the next) that each held one sync, ``syncs`` the syncs' own times (seconds).
    A step without its sync, s, and the sync, c: c <= share (H s + c), so
    H = ceil(c (1 - share) / (share s)), within [1, ``MAX_SYNC_EVERY``].

    >>> sync_every_for([0.18] * 4, [0.10] * 4, 0.1)  # 80 ms of work, 100 ms a sync
    12
    """
    sync_s = float(np.median(syncs)) if syncs else 0.0
    step_s = max(float(np.median(steps)) - sync_s if steps else 1e-3, 1e-6)
    want = sync_s * (1.0 - share) / (share * step_s)
    return min(MAX_SYNC_EVERY, max(1, math.ceil(want)))


def _check(optimizer: Any, model: Any, sync_every: Any, outer_lr: Any, outer_momentum: Any,
           share: Any) -> list[torch.nn.Parameter]:
    """The model's trainable parameters, once every argument is checked (ValueError or
    TypeError naming the argument and what is accepted)."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError(f"DiLoCo wraps a torch.optim.Optimizer (AdamW, Adam, ...), got "
                        f"{type(optimizer).__name__}")
    if not isinstance(model, torch.nn.Module):
        raise TypeError(f"DiLoCo needs the model (a torch.nn.Module), got {type(model).__name__}")
    if sync_every != "auto" and (isinstance(sync_every, bool) or not isinstance(
            sync_every, numbers.Integral) or sync_every < 1):
        raise ValueError(f"sync_every must be 'auto' or an integer >= 1, got {sync_every!r}")
    for name, value, lo, hi in (("outer_lr", outer_lr, 0.0, math.inf),
                                ("outer_momentum", outer_momentum, 0.0, 1.0),
                                ("max_comm_share", share, 0.0, 1.0)):
        if isinstance(value, str) and value == "auto" and name != "max_comm_share":
            continue
        ok = isinstance(value, numbers.Real) and not isinstance(value, bool) and \
            math.isfinite(value) and lo <= value < hi and (name == "outer_momentum" or value > 0)
        if not ok:
            bounds = "in [0, 1)" if name == "outer_momentum" else \
                "in (0, 1)" if name == "max_comm_share" else "> 0 and finite"
            either = "" if name == "max_comm_share" else "'auto' or "
            raise ValueError(f"{name} must be {either}a number {bounds}, got {value!r}")
    params = [p for p in model.parameters() if p.requires_grad]
    if not params:
        raise ValueError("the model has no trainable parameters")
    mine = {id(p) for p in params}
    stray = sum(1 for g in optimizer.param_groups for p in g["params"] if id(p) not in mine)
    if stray:
        raise ValueError(f"the optimizer holds {stray} parameter(s) that are not the model's "
                         "trainable ones: build it over model.parameters()")
    if len({p.device for p in params}) != 1:
        raise ValueError("the model's parameters are on several devices; DiLoCo keeps one "
                         "flat copy of them on one device")
    return params


def _setting(value: Any) -> float | str:
    """A checked outer setting as kept: "auto" or a float."""
    return "auto" if isinstance(value, str) else float(value)


def _spec(compressor: Any) -> str:
    """The canonical spec of ``compressor`` (a spec or a Compressor); "none" for None."""
    if compressor is None or compressor == "none":
        return "none"
    spec = canonical(compressor)
    if compressors.get(spec).capabilities.allreduce_steps:
        raise ValueError(f"compressor {spec!r} needs a matrix per parameter; DiLoCo sends one "
                         "flat pseudo-gradient: use a quantizer or top-k")
    return spec


def _validate(state: Any, opt: DiLoCo, weights: tuple[int, ...]) -> None:
    """ValueError naming what in ``state`` does not fit ``opt``, whose global weights have
    the shape ``weights``."""
    if not isinstance(state, Mapping) or state.get("version") != VERSION:
        raise ValueError(f"not a DiLoCo state_dict of version {VERSION}")
    missing = [k for k in ("steps", "syncs", "sync_every", "compressor", "world_size",
                           "inner", "outer", "global", "feedback", "times") if k not in state]
    if missing:
        raise ValueError(f"DiLoCo state_dict lacks {', '.join(missing)}")
    g = state["global"]
    if not isinstance(g, torch.Tensor) or tuple(g.shape) != weights:
        shape = tuple(g.shape) if isinstance(g, torch.Tensor) else type(g).__name__
        raise ValueError(f"DiLoCo state_dict: global weights of shape {shape}, this model has "
                         f"{weights}")
    if state["compressor"] != opt.compressor:
        raise ValueError(f"DiLoCo state_dict was saved with compressor "
                         f"{state['compressor']!r}, this optimizer sends {opt.compressor!r}")
    if state["world_size"] != opt.comm.size:
        raise ValueError(f"DiLoCo state_dict was saved on {state['world_size']} ranks, this "
                         f"run has {opt.comm.size}: the residuals are per rank")
