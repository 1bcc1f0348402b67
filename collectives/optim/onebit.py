"""1-bit Adam: Adam whose gradients are averaged in 16 bits until its second moment settles,
then whose momentum is averaged compressed (Tang et al. 2021, "1-bit Adam: Communication
Efficient Large-Scale Training with Adam's Convergence Speed").

Until ``freeze_step`` the optimizer averages every gradient itself (fp16, one collective over
all parameters, divided before the sum as PyTorch's fp16 hook does) and takes Adam's step,
exactly ``torch.optim.Adam``'s with ``weight_decay`` as L2. From ``freeze_step`` on the second
moment v is frozen, so the step is linear in the momentum: each rank folds its own gradient
into the momentum it holds, and the ranks average those momenta through compcoll's compressed
allreduce (``sign`` with a scale per bucket by default; worker and server error feedback: the
reduce-scatter + allgather scheme keeps a residual at both stages). The momenta travel in
Adam's units, m / (sqrt(v_hat) + eps) (v is frozen and the same on every rank, so this is
exact), clipped to the largest |m| / sqrt(v) Adam's moments can reach (:func:`adam_bound`):
a bucket's one scale then cannot hand a coordinate of tiny v its neighbours' momentum divided
by that tiny v. Coordinates whose v is zero
at the freeze (no gradient ever reached them: embedding rows no sample used) are masked: their
momentum is zero and they do not move, where sign compression would send them noise. 1-D
parameters (biases, norm scales) keep full precision momenta, in one collective of their own.

``freeze_step="auto"`` freezes once the norm of the bias-corrected v changed by less than
``FREEZE_TOLERANCE`` of itself over the last ``FREEZE_WINDOW`` steps (and not before
``FREEZE_MIN`` steps). v is built from averaged gradients, so the ranks should agree; they
do not rely on it: each rank's vote rides one element of the next warm-up collective, and all
of them freeze after that step when every rank voted (they all read the same sum). The
collectives compare their arguments across ranks the first time of each kind only; what can
change between steps is checked each step on each rank and refused on every rank together
(see ``onebit_grads``).

``refresh="doubling"`` (0/1 Adam's variance that follows, Lu et al. 2022, "Maximizing
Communication Efficiency for Large-scale Training via 0/1 Adam"): after the freeze at step F,
steps 2F, 4F, 8F, ... (up to N with "doubling:until=N") are full-precision steps like the
warm-up's that update v (and m); the frozen arrays are then recomputed from the new v. The
momenta's error-feedback residuals do not go through those steps and are kept as they are
(in the units of the v they were computed with).
"""

from __future__ import annotations

import time
from collections.abc import Iterable
from typing import Any

import torch

import compressors

from .. import api, moved
from ..policy.base import canonical
from ..progress import Handle
from ..session import Session
from ..torchwork import comm_deadline
from ..transport import as_communicator
from ..validation import agree_settings, refusing
from . import onebit_grads as og
from .onebit_frozen import FrozenSteps
from .onebit_settings import (
    Schedule,
    adam_bound,
    check_group,
    check_hyper,
    group_words,
    params_words,
    phases,
)
from .onebit_state import Checkpoints
from .onebit_warmup import FullPrecisionSteps

__all__ = ["OneBitAdam", "adam_bound"]

FREEZE_MIN = 20
FREEZE_WINDOW = 10
FREEZE_TOLERANCE = 0.2
SETTINGS = "OneBitAdam settings"


class OneBitAdam(FullPrecisionSteps, FrozenSteps, Checkpoints, torch.optim.Optimizer):
    """Adam that averages the ranks' gradients itself: use it on a plain model (no DDP).

    Construction is collective (every rank, the same arguments): the ranks compare settings,
    every param group's lr, betas, eps and weight_decay, and the parameters' shapes and which
    of them require a gradient (``MismatchError`` on every rank where they differ), and load
    rank 0's weights. So is :meth:`add_param_group` afterwards. Every rank must call
    :meth:`step` at every step. A parameter that does not require a gradient at construction
    never moves (its ``.grad`` ignored), nor does one no rank has a gradient for at a step (as
    torch.optim.Adam skips a parameter without one); one that has a gradient on some ranks
    only counts as a zero gradient on the others. The learning rate (and the other settings)
    is read from ``param_groups`` at every step, so schedulers work; it is not compared again.

    ``compressor``: the momenta's compressor after the freeze ("sign"), or a pair (warm-up,
    after the freeze) where the warm-up's gradients go in "fp16" (the default) or "none"
    (float32: exactly ``torch.optim.Adam`` on the averaged gradient until the freeze).
    ``comm``: any communicator ``collectives`` accepts (None follows the launcher). Like
    torch's optimizers it takes no timeout: its waits are the process group's own timeout on
    a torch.distributed group, else ``collectives.defaults.timeout``; set :attr:`timeout`
    (seconds) after construction to choose another.

    ``schedule`` keywords (one value, :class:`~collectives.optim.onebit_settings.Schedule`):
    ``freeze_step`` ("auto", or the step v freezes at) and ``refresh`` ("doubling": v is
    refreshed at full precision at twice, four times, ... the freeze step; "doubling:until=N"
    up to step N, say where the learning rate's warm-up ends; "never": v stays frozen).

    Gradients are checked at each step on each rank: a sparse one, one whose shape is not its
    parameter's, or a ``requires_grad`` changed since construction make the step raise on
    every rank before anything changed (ValueError with the reason on that rank,
    ``MismatchError`` on the others). Non-finite gradients propagate as in torch.optim.Adam:
    the weights become NaN or Inf (after the freeze, the compressor spreads them over the
    buckets they travel in); finite ones too large for the fp16 warm-up are averaged in
    float32 at that step.

    Example::

        >>> opt = collectives.optim.OneBitAdam(model.parameters(), lr=1e-3, freeze_step=100)
        >>> loss.backward(); opt.step(); opt.zero_grad()
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, *, compressor: Any = "sign", comm: Any = None,
                 **schedule: Any) -> None:
        self.comm = as_communicator(comm)
        #: seconds each wait may block (None: ``collectives.defaults.timeout``)
        self.timeout = comm_deadline(self.comm)
        self._trains: list[bool] = []  # per parameter: whether it trains (fixed when added)
        self._built = False  # add_param_group is collective once the constructor is done
        with refusing(self.comm, SETTINGS, True, self.timeout):
            unknown = sorted(set(schedule) - {"freeze_step", "refresh"})
            moved.refuse("OneBitAdam", unknown)  # a keyword it took before: where it went
            if unknown:
                raise TypeError(f"OneBitAdam() got an unexpected keyword argument "
                                f"{unknown[0]!r} (it takes lr, betas, eps, weight_decay, "
                                "compressor, comm, freeze_step and refresh)")
            self.schedule = Schedule.of(**schedule)
            warmup_compressor, compressor = phases(compressor)
            check_hyper(lr, betas, eps, weight_decay)
            spec = canonical(compressor)
            if compressors.get(spec).capabilities.allreduce_steps:
                raise ValueError(f"compressor {spec!r} needs a matrix per parameter; "
                                 "OneBitAdam sends one flat momentum: use sign, a quantizer "
                                 "or top-k")
            super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps,
                                      "weight_decay": weight_decay})
        self.freeze_step, self.refresh = self.schedule.freeze_step, self.schedule.spec
        self.compressor, self.warmup_compressor = spec, warmup_compressor
        #: the compressor and its residual store (``collectives.session``)
        self.session = Session(spec)
        self.feedback = self.session.feedback(spec)
        agree_settings(self.comm, SETTINGS, {
            "lr": repr(lr), "betas": repr(tuple(betas)), "eps": repr(eps),
            "weight_decay": repr(weight_decay), "freeze_step": str(self.freeze_step),
            "refresh": self.refresh, "compressor": spec, "warmup_compressor": warmup_compressor,
            "param groups": "; ".join(group_words(g) for g in self.param_groups),
            "parameters": "; ".join(params_words(g) for g in self.param_groups)},
            self.timeout)
        self._load_from_root(self._params())
        self.t = 0  # steps taken
        self.frozen_at: int | None = None  # the step v froze at
        self.vnorms: list[float] = []  # the bias-corrected v's norm after each warm-up step
        # from the freeze on, flat over the matrices (see ``_frozen``), and the 1-D
        # parameters' denominators
        self._flat_frozen: tuple[torch.Tensor, ...] | None = None
        self._vector_denoms: list[torch.Tensor] | None = None
        # the warm-up's kept flat buffers (what travels, and the average in float32)
        self._wire: torch.Tensor | None = None
        self._avg: torch.Tensor | None = None
        self._fused = True  # torch's fused Adam kernel, until it refuses the parameters
        #: seconds the last :meth:`step` spent in its collectives (coding included)
        self.comm_s = 0.0
        self._checked: set[str] = set()  # collectives compared across ranks once
        self._built = True

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        """torch's ``add_param_group``, collective once the optimizer is built: every rank
        adds the same group (its settings and parameters' shapes compared, ``MismatchError``
        on every rank where they differ) and loads rank 0's weights of its parameters."""
        if not self._built:  # torch's constructor adding the constructor's groups
            super().add_param_group(param_group)
            self._settle_group()
            return
        with refusing(self.comm, SETTINGS, True, self.timeout):
            super().add_param_group(param_group)
            self._settle_group()
        group = self.param_groups[-1]
        try:
            agree_settings(self.comm, SETTINGS, {
                "new param group": group_words(group),
                "its parameters": params_words(group)}, self.timeout)
        except Exception:
            self._forget_group()
            raise
        self._load_from_root(group["params"])
        # the flat buffers and the frozen arrays cover the new parameters from the next step
        self._wire = self._avg = self._flat_frozen = self._vector_denoms = None
        self._checked.clear()

    def _settle_group(self) -> None:
        """Check the group torch just added; record which of its parameters train."""
        group = self.param_groups[-1]
        try:
            check_group(group, len(self.param_groups) - 1)
        except ValueError:
            self._forget_group()
            raise
        self._trains += [p.requires_grad for p in group["params"]]

    def _forget_group(self) -> None:
        self.param_groups.pop()
        del self._trains[len(self._params()):]

    def _load_from_root(self, params: list[torch.Tensor]) -> None:
        with torch.no_grad():
            for p in params:  # rank 0's weights, as DDP starts
                api.broadcast(p.data, root=0, comm=self.comm, timeout=self.timeout)

    def _params(self) -> list[torch.Tensor]:
        return [p for g in self.param_groups for p in g["params"]]

    # -- the step ---------------------------------------------------------------------------
    @torch.no_grad()
    def step(self, closure: Any = None) -> Any:
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()
        self.t += 1
        self.comm_s = 0.0
        try:
            if self.frozen_at is None:
                # "auto": this rank's vote that v had settled by the last step travels in
                # this step's collective; all ranks read the same count, so all freeze together
                auto = self.freeze_step == "auto"
                votes = self._full_step(self._grads(False), auto and self._settled(), False)
                if votes > self.comm.size - 0.5 if auto else self.t >= int(self.freeze_step):
                    self._freeze()
            elif self.schedule.refreshes(self.t, self.frozen_at):
                self._full_step(self._grads(False), False, True)
                self._flat_frozen = self._vector_denoms = None  # from the new v
            else:
                self._compressed_step(self._grads(True))
        except ValueError:  # refused on every rank before anything changed
            self.t -= 1
            raise
        return loss

    def _grads(self, decay: bool) -> og.Grads:
        return og.collect(self.param_groups, self._trains, decay)

    def _collective(self, kind: str, buf: torch.Tensor, **kwargs: Any) -> Handle:
        """Start allreducing ``buf`` in place, its time added to :attr:`comm_s`. The ranks
        compare the call's arguments the first time of each ``kind`` only (the settings were
        compared at construction, and each kind's buffer keeps its size): no extra round trip
        a step."""
        t0 = time.perf_counter()
        handle = api.iallreduce(buf, comm=self.comm, out=buf, timeout=self.timeout,
                                validate=None if kind not in self._checked else False, **kwargs)
        self._checked.add(kind)
        self.comm_s += time.perf_counter() - t0
        return handle

    def _wait(self, handle: Handle) -> None:
        t0 = time.perf_counter()
        handle.wait()
        self.comm_s += time.perf_counter() - t0

    def _state(self, p: torch.Tensor) -> dict[str, torch.Tensor]:
        st = self.state[p]
        if not st:
            st["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            st["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        return st

    # -- freezing ---------------------------------------------------------------------------
    def _settled(self) -> bool:
        """Whether v's norm settled by the last warm-up step ("auto")."""
        if len(self.vnorms) < max(FREEZE_MIN, FREEZE_WINDOW + 1):
            return False
        now, then = self.vnorms[-1], self.vnorms[-1 - FREEZE_WINDOW]
        return now > 0 and abs(now - then) <= FREEZE_TOLERANCE * now

    def _freeze(self) -> None:
        self.frozen_at = self.t
        self._flat_frozen = self._vector_denoms = None
        self._wire = self._avg = None  # the warm-up's buffers wait for the next refresh
