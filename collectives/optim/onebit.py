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
collectives compare their arguments across ranks the first time of each kind only.
"""

from __future__ import annotations

import math
import numbers
import time
from collections.abc import Iterable
from typing import Any

import torch
from torch.optim.adam import adam

import compressors

from .. import api
from ..policy.base import canonical
from ..session import Session
from ..torchwork import comm_deadline
from ..transport import as_communicator
from ..validation import agree_settings, refusing

VERSION = 1
FREEZE_MIN = 20
FREEZE_WINDOW = 10
FREEZE_TOLERANCE = 0.2


class OneBitAdam(torch.optim.Optimizer):
    """Adam that averages the ranks' gradients itself: use it on a plain model (no DDP).

    Construction is collective (every rank, the same arguments): the ranks compare settings
    (``MismatchError`` on every rank where they differ) and load rank 0's weights. Every rank
    must call :meth:`step` at every step, with a gradient on the same parameters (a parameter
    without one counts as a zero gradient).

    ``compressor``: the momenta's compressor after the freeze ("sign"), or a pair (warm-up,
    after the freeze) where the warm-up's gradients go in "fp16" (the default) or "none"
    (float32: exactly ``torch.optim.Adam`` on the averaged gradient until the freeze).
    ``comm``: any communicator ``collectives`` accepts (None follows the launcher). Like
    torch's optimizers it takes no timeout: its waits are the process group's own timeout on
    a torch.distributed group, else ``collectives.defaults.timeout``; set :attr:`timeout`
    (seconds) after construction to choose another.

    Example::

        >>> opt = collectives.optim.OneBitAdam(model.parameters(), lr=1e-3, freeze_step=100)
        >>> loss.backward(); opt.step(); opt.zero_grad()
    """

    def __init__(self, params: Iterable[Any], lr: float = 1e-3,
                 betas: tuple[float, float] = (0.9, 0.999), eps: float = 1e-8,
                 weight_decay: float = 0.0, *, freeze_step: int | str = "auto",
                 compressor: Any = "sign", comm: Any = None) -> None:
        self.comm = as_communicator(comm)
        #: seconds each wait may block (None: ``collectives.defaults.timeout``)
        self.timeout = comm_deadline(self.comm)
        with refusing(self.comm, "OneBitAdam settings", True, self.timeout):
            warmup_compressor, compressor = _phases(compressor)
            _check(lr, betas, eps, weight_decay, freeze_step, warmup_compressor)
            spec = canonical(compressor)
            if compressors.get(spec).capabilities.allreduce_steps:
                raise ValueError(f"compressor {spec!r} needs a matrix per parameter; "
                                 "OneBitAdam sends one flat momentum: use sign, a quantizer "
                                 "or top-k")
            super().__init__(params, {"lr": lr, "betas": tuple(betas), "eps": eps,
                                      "weight_decay": weight_decay})
        self.freeze_step = freeze_step
        self.compressor, self.warmup_compressor = spec, warmup_compressor
        #: the compressor and its residual store (``collectives.session``)
        self.session = Session(spec)
        self.feedback = self.session.feedback(spec)
        agree_settings(self.comm, "OneBitAdam settings", {
            "lr": repr(lr), "betas": repr(tuple(betas)), "eps": repr(eps),
            "weight_decay": repr(weight_decay), "freeze_step": str(freeze_step),
            "compressor": spec, "warmup_compressor": warmup_compressor,
            "parameters": ", ".join(f"{tuple(p.shape)}" for p in self._params())},
            self.timeout)
        with torch.no_grad():
            for p in self._params():  # rank 0's weights, as DDP starts
                api.broadcast(p.data, root=0, comm=self.comm, timeout=self.timeout)
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
        if self.frozen_at is None:
            # "auto": this rank's vote that v had settled by the last step travels in this
            # step's collective; all ranks read the same count, so all freeze together
            votes = self._warmup_step(self.freeze_step == "auto" and self._settled())
            if (votes > self.comm.size - 0.5 if self.freeze_step == "auto"
                    else self.t >= int(self.freeze_step)):
                self._freeze()
        else:
            self._compressed_step()
        return loss

    def _grads(self, decay: bool = True) -> list[tuple[dict, torch.Tensor, torch.Tensor]]:
        """(group, parameter, its gradient, with L2 weight decay if ``decay``) for every
        parameter, in the groups' order (the same on every rank)."""
        out = []
        for g in self.param_groups:
            for p in g["params"]:
                grad = torch.zeros_like(p) if p.grad is None else p.grad.detach()
                if decay and g["weight_decay"]:
                    grad = grad.add(p.detach(), alpha=g["weight_decay"])
                out.append((g, p, grad))
        return out

    def _warmup_step(self, vote: bool) -> float:
        """Adam on the averaged gradient (``warmup_compressor``: fp16 or none), weight decay
        added after the average, as torch.optim.Adam on DDP's averaged gradient: torch's own
        Adam arithmetic, its fused kernel where this torch has one for the parameters (one
        pass over them; the per-tensor loop cost about ten times as much on gpt). Returns
        the number of ranks whose ``vote`` was true (sent in the same collective)."""
        grads = self._grads(decay=False)
        avg, votes = self._average([gr for _, _, gr in grads], vote)
        at = 0
        for g in self.param_groups:
            n = len(g["params"])
            params = [p for _, p, _ in grads[at:at + n]]
            states = [self._state(p) for p in params]
            # a step count per parameter, one below this step (torch's Adam adds one first)
            steps = [torch.tensor(float(self.t - 1)) for _ in params]
            b1, b2 = g["betas"]
            kwargs = {"amsgrad": False, "beta1": b1, "beta2": b2, "lr": g["lr"],
                      "weight_decay": g["weight_decay"], "eps": g["eps"], "maximize": False}
            lists = (params, avg[at:at + n], [st["exp_avg"] for st in states],
                     [st["exp_avg_sq"] for st in states], [], steps)
            if self._fused:
                try:
                    adam(*lists, fused=True, **kwargs)
                except RuntimeError:  # no fused kernel for these parameters: the loop
                    self._fused = False
                    for x in steps:
                        x.fill_(float(self.t - 1))
            if not self._fused:
                adam(*lists, foreach=False, **kwargs)
            at += n
        norms = torch._foreach_norm([self.state[p]["exp_avg_sq"].float()
                                     for p in self._params()])
        self.vnorms.append(float(torch.linalg.vector_norm(torch.stack(norms)))
                           / (1 - self.param_groups[0]["betas"][1] ** self.t))
        return votes

    def _average(self, grads: list[torch.Tensor], vote: bool
                 ) -> tuple[list[torch.Tensor], float]:
        """The ranks' average of ``grads``, and how many ranks ``vote``, in one collective
        over kept flat buffers (the vote one element after the gradients, summed, not
        averaged): with fp16, each gradient divided by the ranks and rounded in one pass (the
        sum cannot overflow), summed, and widened back in one more."""
        n = sum(x.numel() for x in grads) + 1
        half = self.warmup_compressor == "fp16"
        if self._wire is None or self._wire.numel() != n:
            self._wire = torch.empty(n, dtype=torch.float16 if half else torch.float32)
            self._avg = torch.empty(n, dtype=torch.float32) if half else self._wire
        wire, flat = self._wire, self._avg
        assert flat is not None
        p, at = self.comm.size, 0
        for x in grads:
            view = wire[at:at + x.numel()].view(x.shape)
            if half:
                torch.mul(x, 1.0 / p, out=view)
            else:
                view.copy_(x)
            at += x.numel()
        wire[at] = float(vote) if half else float(vote) * p  # "avg" divides it by p
        self._collective("warm-up", wire, op="sum" if half else "avg")
        if half:
            flat.copy_(wire)
        votes = float(flat[at])
        out, at = [], 0
        for x in grads:
            out.append(flat[at:at + x.numel()].view(x.shape).to(x.dtype))
            at += x.numel()
        return out, votes

    def _compressed_step(self) -> None:
        """Fold this rank's gradient into the momentum, average the momenta (compressed for
        matrices, masked where v froze at zero), and step with the frozen v."""
        grads = self._grads()
        matrices = [x for x in grads if x[1].dim() >= 2]
        if matrices:
            self._matrices(matrices)
        vectors = [x for x in grads if x[1].dim() < 2]
        if vectors:
            self._vectors(vectors)

    def _matrices(self, grads: list[tuple[dict, torch.Tensor, torch.Tensor]]) -> None:
        """The matrices' momenta, folded straight into one flat buffer in Adam's units
        m / (sqrt(v_hat) + eps) (a multiply by the frozen reciprocal, zero where v is zero),
        clipped, averaged compressed; then each parameter moves by its averaged units times
        the step size (Adam's m / denominator, without dividing again) and keeps units times
        the denominator as its momentum. Five passes over the momenta besides the
        collective, and no allocation: the frozen arrays and the buffer are kept."""
        buf, scale, keep, denom, bound = self._frozen([(g, p) for g, p, _ in grads])
        views, at = [], 0
        for g, p, grad in grads:
            view = buf[at:at + p.numel()].view(p.shape)
            torch.lerp(self._state(p)["exp_avg"].float(), grad.float(), 1 - g["betas"][0],
                       out=view)
            views.append((view, denom[at:at + p.numel()].view(p.shape),
                          keep[at:at + p.numel()].view(p.shape)))
            at += p.numel()
        buf.mul_(scale).clamp_(-bound, bound)
        self._collective("momenta", buf, op="avg", compressor=self.feedback.compressor,
                         feedback=self.feedback, name="onebit", step=self.t)
        # masked by ``keep`` (a masked coordinate's average may hold the others' rounding),
        # and the momentum by the denominator zeroed there: one pass each
        for (g, p, _), (units, d, k) in zip(grads, views, strict=True):
            step_size = -g["lr"] / (1 - g["betas"][0] ** self.t)
            m = self._state(p)["exp_avg"]
            if p.dtype == units.dtype and m.dtype == units.dtype and m.is_contiguous():
                p.addcmul_(units, k, value=step_size)
                torch.mul(units, d, out=m)
            else:
                p.add_((units * k).to(p.dtype), alpha=step_size)
                m.copy_(units * d)

    def _vectors(self, grads: list[tuple[dict, torch.Tensor, torch.Tensor]]) -> None:
        """The 1-D parameters' momenta, averaged in full precision, and Adam's step with the
        frozen denominators (computed once, at the first step after the freeze)."""
        moms = [self._state(p)["exp_avg"].lerp(grad, 1 - g["betas"][0]) for g, p, grad in grads]
        flat = torch.cat([m.reshape(-1).float() for m in moms])
        self._collective("vectors", flat, op="avg")
        frozen = self.frozen_at
        assert frozen is not None
        if self._vector_denoms is None:
            self._vector_denoms = [
                _denominator(self._state(p)["exp_avg_sq"], 1 - g["betas"][1] ** frozen,
                             g["eps"]) for g, p, _ in grads]
        at = 0
        for (g, p, _), m, d in zip(grads, moms, self._vector_denoms, strict=True):
            st = self._state(p)
            st["exp_avg"].copy_(flat[at:at + m.numel()].view_as(m))
            p.addcdiv_(st["exp_avg"], d, value=-g["lr"] / (1 - g["betas"][0] ** self.t))
            at += m.numel()

    def _collective(self, kind: str, buf: torch.Tensor, **kwargs: Any) -> None:
        """Allreduce ``buf`` in place, its time added to :attr:`comm_s`. The ranks compare
        the call's arguments the first time of each ``kind`` only (the settings were compared
        at construction, and each kind's buffer keeps its size): no extra round trip a step."""
        t0 = time.perf_counter()
        api.allreduce(buf, comm=self.comm, out=buf, timeout=self.timeout,
                      validate=None if kind not in self._checked else False, **kwargs)
        self._checked.add(kind)
        self.comm_s += time.perf_counter() - t0

    def _frozen(self, params: list[tuple[dict, torch.Tensor]]
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, float]:
        """Over ``params`` ((group, parameter) pairs, flat in their order), from the frozen
        v, kept from the freeze on: the flat buffer the momenta are averaged in, the
        reciprocal of Adam's denominator sqrt(v_hat) + eps and the denominator (both zero where
        v is zero), where v is above zero (1.0, else 0.0); and the largest |m| / sqrt(v) Adam
        itself can reach."""
        n = sum(p.numel() for _, p in params)
        if self._flat_frozen is None or self._flat_frozen[0].numel() != n:
            frozen = self.frozen_at
            assert frozen is not None
            vs = [(g, self.state[p]["exp_avg_sq"]) for g, p in params]
            mask = torch.cat([v.reshape(-1) > 0 for _, v in vs])
            denom = torch.cat([_denominator(v, 1 - g["betas"][1] ** frozen, g["eps"]).reshape(-1)
                               for g, v in vs]).float().clamp_(min=1e-30)
            zero = torch.zeros_like(denom)
            scale = torch.where(mask, denom.reciprocal(), zero)
            self._flat_frozen = (torch.empty_like(denom), scale, mask.float(),
                                 torch.where(mask, denom, zero))
        bound = max(adam_bound(*g["betas"]) for g, _ in params)
        return (*self._flat_frozen, bound)

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
        self._wire = self._avg = None  # the warm-up's buffers are not needed again

    # -- checkpoints ------------------------------------------------------------------------
    def state_dict(self) -> dict[str, Any]:
        """torch's optimizer state (momenta, v) and this rank's own: the step, the freeze,
        the error feedback's residuals."""
        out = super().state_dict()
        out["onebit"] = {"version": VERSION, "t": self.t, "frozen_at": self.frozen_at,
                         "vnorms": list(self.vnorms), "compressor": self.compressor,
                         "world_size": self.comm.size, "feedback": self.feedback.state_dict()}
        return out

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        state = dict(state_dict)
        mine = state.pop("onebit", None)
        if not isinstance(mine, dict) or mine.get("version") != VERSION:
            raise ValueError(f"not a OneBitAdam state_dict of version {VERSION} (no 'onebit' "
                             "entry: a torch.optim.Adam state starts the warm-up from step 0)")
        if mine.get("compressor") != self.compressor:
            raise ValueError(f"OneBitAdam state_dict was saved with compressor "
                             f"{mine.get('compressor')!r}, this optimizer sends "
                             f"{self.compressor!r}")
        if mine.get("world_size") != self.comm.size:
            raise ValueError(f"OneBitAdam state_dict was saved on {mine.get('world_size')} "
                             f"ranks, this run has {self.comm.size}: the residuals are per rank")
        super().load_state_dict(state)
        self.feedback.load_state_dict(mine["feedback"])
        self.t, self.frozen_at = int(mine["t"]), mine["frozen_at"]
        self.vnorms = [float(x) for x in mine["vnorms"]]
        self._flat_frozen = self._vector_denoms = None


def _denominator(v: torch.Tensor, corr2: float, eps: float) -> torch.Tensor:
    """Adam's denominator, sqrt(v / corr2) + eps, in torch.optim.Adam's arithmetic."""
    return (v.sqrt() / math.sqrt(corr2)).add_(eps)


def adam_bound(beta1: float, beta2: float) -> float:
    """The largest |m| / sqrt(v) Adam's moments can reach: by Cauchy-Schwarz,
    (1 - b1) / sqrt((1 - b2) (1 - b1^2 / b2)); unbounded (inf) when b1^2 >= b2."""
    if beta1 * beta1 >= beta2:
        return math.inf
    return (1 - beta1) / math.sqrt((1 - beta2) * (1 - beta1 * beta1 / beta2))


def _check(lr: Any, betas: Any, eps: Any, weight_decay: Any, freeze_step: Any,
           warmup: Any) -> None:
    """ValueError naming the first bad argument and what is accepted."""
    def real(x: Any) -> bool:
        return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)
    if not (real(lr) and lr > 0):
        raise ValueError(f"lr must be a finite number > 0, got {lr!r}")
    if not (isinstance(betas, tuple | list) and len(betas) == 2
            and all(real(b) and 0 <= b < 1 for b in betas)):
        raise ValueError(f"betas must be two numbers in [0, 1), got {betas!r}")
    if not (real(eps) and eps >= 0):
        raise ValueError(f"eps must be a finite number >= 0, got {eps!r}")
    if not (real(weight_decay) and weight_decay >= 0):
        raise ValueError(f"weight_decay must be a finite number >= 0, got {weight_decay!r}")
    if freeze_step != "auto" and (isinstance(freeze_step, bool) or not isinstance(
            freeze_step, numbers.Integral) or freeze_step < 1):
        raise ValueError(f"freeze_step must be 'auto' or an integer >= 1, got {freeze_step!r}")
    if warmup not in ("fp16", "none"):
        raise ValueError(f"the warm-up compressor (compressor=(warm-up, after the freeze)) must "
                         f"be 'fp16' or 'none', got {warmup!r}")


def _phases(compressor: Any) -> tuple[Any, Any]:
    """(warm-up compressor, compressor after the freeze) from ``compressor=``: one spec (the
    warm-up in fp16) or a pair."""
    if isinstance(compressor, tuple | list):
        if len(compressor) != 2:
            raise ValueError(f"compressor takes one spec, or a pair (warm-up, after the freeze) "
                             f"such as ('none', 'sign'), got {compressor!r}")
        return compressor[0], compressor[1]
    return "fp16", compressor
