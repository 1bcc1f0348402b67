"""OneBitAdam's gradients of one step, as every rank must see them: which parameters train
(decided at construction, the same on every rank), each one's gradient (zeros where it has
none), whether it had one, and what this rank found wrong with its own gradients.

A rank that finds something wrong (a sparse gradient, one whose shape is not its parameter's,
a ``requires_grad`` changed after construction) does not raise on its own: the other ranks
would wait in the step's collective until their deadline. It sends zeros of the parameter's
shape and a flag in the step's first collective; every rank reads the same count and all of
them raise before anything changed (:func:`refuse`), this rank with its own reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..errors import MismatchError

#: Largest |gradient| a rank sends in fp16 in the warm-up. Each rank divides by the ranks
#: before rounding, so the sum stays within |g| plus rounding: half of fp16's largest finite
#: value (65504) leaves room for that rounding in every partial sum. Past it the step's
#: average goes in float32 instead (the ranks decide on the flags' sum, all alike).
FP16_SAFE = 2.0 ** 15

#: The flags before the per-parameter counts, in the step's first collective.
BAD, OVERFLOW, VOTE = 0, 1, 2
FLAGS = 3


@dataclass
class Grads:
    """One step's gradients of the parameters that train, in the groups' order."""

    items: list[tuple[dict, torch.Tensor, torch.Tensor]]  # (group, parameter, gradient)
    present: list[bool]  # whether this rank had a gradient for each
    problem: str | None  # what this rank refuses in its own gradients (None: nothing)


def name_of(group: dict[str, Any], gi: int, j: int, p: torch.Tensor) -> str:
    """A parameter in words: its name where the optimizer was given named parameters."""
    names = group.get("param_names")
    where = repr(names[j]) if names else f"{j} of param group {gi}"
    return f"parameter {where} (shape {tuple(p.shape)})"


def collect(groups: list[dict[str, Any]], trains: list[bool], decay: bool) -> Grads:
    """The gradients of the parameters that train (``trains``: per parameter, in order,
    whether it required a gradient at construction), L2 weight decay added if ``decay``.
    A trainable parameter without a gradient counts as a zero gradient; one that does not
    train is left out, its ``.grad`` ignored."""
    items, present, problem, k = [], [], None, 0
    for gi, g in enumerate(groups):
        for j, p in enumerate(g["params"]):
            trains_now, k = trains[k], k + 1
            grad = p.grad
            if p.requires_grad != trains_now and problem is None:
                problem = (f"{name_of(g, gi, j, p)}: requires_grad changed to "
                           f"{p.requires_grad} after the optimizer was built; the ranks agree "
                           "on the parameters that train at construction: build a new "
                           "OneBitAdam to train other parameters")
            if not trains_now:
                continue
            if grad is not None and grad.layout != torch.strided:
                problem = problem or (
                    f"{name_of(g, gi, j, p)} has a sparse gradient ({grad.layout}); OneBitAdam "
                    "averages dense gradients: build the layer with sparse=False (e.g. "
                    "nn.Embedding(..., sparse=False))")
                grad = None
            elif grad is not None and grad.shape != p.shape:
                problem = problem or (
                    f"{name_of(g, gi, j, p)} has a gradient of shape {tuple(grad.shape)}; a "
                    "gradient must have its parameter's shape")
                grad = None
            present.append(grad is not None)
            grad = torch.zeros_like(p) if grad is None else grad.detach()
            if decay and g["weight_decay"]:
                grad = grad.add(p.detach(), alpha=g["weight_decay"])
            items.append((g, p, grad))
    return Grads(items, present, problem)


def flags(grads: Grads, vote: bool, big: bool, like: torch.Tensor | None) -> torch.Tensor:
    """This rank's flags (refused, ``big``: overflows fp16, ``vote``) and per-parameter
    presence, float32 on ``like``'s device: what rides in the step's first collective (summed
    over the ranks)."""
    vals = [float(grads.problem is not None), float(big), float(vote)]
    vals += [float(x) for x in grads.present]
    return torch.tensor(vals, dtype=torch.float32,
                        device=None if like is None else like.device)


def overflow(grads: list[torch.Tensor]) -> bool:
    """Whether a finite gradient value is too large for the fp16 wire (past ``FP16_SAFE``).
    A non-finite value is no overflow: it travels as it is (Inf and NaN pass through fp16).
    One fused pass (each tensor's 2-norm, never below its largest |value|); the tensors whose
    norm passes the bound are then read again for their largest finite |value|."""
    if not grads:
        return False
    norms = torch.stack(torch._foreach_norm(grads)).tolist()
    return any(n > FP16_SAFE and float(x.abs().nan_to_num_(0.0, 0.0, 0.0).max()) > FP16_SAFE
               for n, x in zip(norms, grads, strict=True))


def refuse(grads: Grads, bad: float, step: int) -> None:
    """Raise on every rank when any rank refused its gradients (``bad``: how many, read from
    the step's first collective): ValueError with the reason on a rank that refused,
    MismatchError (a ValueError) naming how many did on the others. Nothing changed."""
    if grads.problem is not None:
        raise ValueError(f"OneBitAdam step {step} refused: {grads.problem} (no rank stepped)")
    if bad > 0.5:
        raise MismatchError(f"OneBitAdam step {step} refused: {round(bad)} other rank(s) "
                            "refused their gradients (see their error); no rank stepped")
