"""OneBitAdam's settings: the checks of its arguments and param groups, the freeze and refresh
schedule (one value, :class:`Schedule`), and the Adam arithmetic its frozen phase relies on."""

from __future__ import annotations

import math
import numbers
from dataclasses import dataclass
from typing import Any

import torch

#: what ``refresh=`` accepts, in words (every refusal names it)
REFRESH_SPECS = "'doubling' (the default), 'doubling:until=N' (N an integer >= 1) or 'never'"


def _real(x: Any) -> bool:
    return isinstance(x, numbers.Real) and not isinstance(x, bool) and math.isfinite(x)


def check_hyper(lr: Any, betas: Any, eps: Any, weight_decay: Any, where: str = "") -> None:
    """ValueError naming the first bad hyperparameter (``where``: which param group) and what
    is accepted."""
    if not (_real(lr) and lr > 0):
        raise ValueError(f"{where}lr must be a finite number > 0, got {lr!r}")
    if not (isinstance(betas, tuple | list) and len(betas) == 2
            and all(_real(b) and 0 <= b < 1 for b in betas)):
        raise ValueError(f"{where}betas must be two numbers in [0, 1), got {betas!r}")
    if not (_real(eps) and eps >= 0):
        raise ValueError(f"{where}eps must be a finite number >= 0, got {eps!r}")
    if not (_real(weight_decay) and weight_decay >= 0):
        raise ValueError(f"{where}weight_decay must be a finite number >= 0, got "
                         f"{weight_decay!r}")


def check_group(group: dict[str, Any], index: int) -> None:
    """A param group's own lr, betas, eps and weight_decay, checked as the defaults are."""
    check_hyper(group["lr"], group["betas"], group["eps"], group["weight_decay"],
                f"param group {index}: ")


def group_words(group: dict[str, Any]) -> str:
    """A param group's settings in words, as the ranks compare them."""
    return (f"lr={group['lr']!r} betas={tuple(group['betas'])!r} eps={group['eps']!r} "
            f"weight_decay={group['weight_decay']!r}")


def params_words(group: dict[str, Any]) -> str:
    """A param group's parameters in words: each one's shape, ``frozen`` where it does not
    require a gradient (the ranks must train the same parameters)."""
    return " ".join(f"{tuple(p.shape)}{'' if p.requires_grad else 'frozen'}"
                    for p in group["params"])


def phases(compressor: Any) -> tuple[Any, Any]:
    """(warm-up compressor, compressor after the freeze) from ``compressor=``: one spec (the
    warm-up in fp16) or a pair; ValueError for a bad warm-up compressor."""
    warmup = "fp16"
    if isinstance(compressor, tuple | list):
        if len(compressor) != 2:
            raise ValueError(f"compressor takes one spec, or a pair (warm-up, after the freeze) "
                             f"such as ('none', 'sign'), got {compressor!r}")
        warmup, compressor = compressor
    if warmup not in ("fp16", "none"):
        raise ValueError(f"the warm-up compressor (compressor=(warm-up, after the freeze)) must "
                         f"be 'fp16' or 'none', got {warmup!r}")
    return warmup, compressor


@dataclass(frozen=True)
class Schedule:
    """When v freezes and when it is refreshed, derived from step counts only (so the same on
    every rank).

    ``freeze_step``: "auto" or the step v freezes at. ``refresh``: after the freeze, at steps
    F*2, F*4, F*8, ... (F the step v froze at) a full-precision step on the averaged gradient
    updates v (0/1 Adam's doubling intervals, Lu et al. 2022), up to and including step N
    with "doubling:until=N" (say, where the learning rate's warm-up ends); "never" keeps v as
    it froze. ``until`` is None where the doubling never ends.
    """

    freeze_step: int | str = "auto"
    refresh: str = "doubling"
    until: int | None = None

    @classmethod
    def of(cls, freeze_step: Any = "auto", refresh: Any = "doubling") -> Schedule:
        """The schedule ``OneBitAdam(freeze_step=..., refresh=...)`` asks for; ValueError
        naming a bad one and what is accepted."""
        if freeze_step != "auto" and (isinstance(freeze_step, bool) or not isinstance(
                freeze_step, numbers.Integral) or freeze_step < 1):
            raise ValueError(f"freeze_step must be 'auto' or an integer >= 1, got "
                             f"{freeze_step!r}")
        step = freeze_step if freeze_step == "auto" else int(freeze_step)
        if refresh in ("doubling", "never"):
            return cls(step, refresh)
        head, _, until = str(refresh).partition(":until=")
        if isinstance(refresh, str) and head == "doubling" and until.isdigit() and int(until):
            return cls(step, "doubling", int(until))
        raise ValueError(f"refresh must be {REFRESH_SPECS}, got {refresh!r}")

    @property
    def spec(self) -> str:
        """``refresh`` as given, e.g. "doubling:until=5000"."""
        return self.refresh if self.until is None else f"{self.refresh}:until={self.until}"

    def refreshes(self, t: int, frozen_at: int | None) -> bool:
        """Whether step ``t`` refreshes v (after a freeze at ``frozen_at``)."""
        if self.refresh == "never" or frozen_at is None or t <= frozen_at or t % frozen_at:
            return False
        k = t // frozen_at
        return k & (k - 1) == 0 and (self.until is None or t <= self.until)

    def refreshed(self, t: int, frozen_at: int | None) -> list[int]:
        """The steps up to ``t`` that refreshed v."""
        if frozen_at is None or self.refresh == "never":
            return []
        out, at = [], 2 * frozen_at
        while at <= t and (self.until is None or at <= self.until):
            out.append(at)
            at *= 2
        return out

    def v_at(self, t: int, frozen_at: int) -> int:
        """The step v was last updated at, by step ``t`` (its bias correction's count)."""
        return ([frozen_at] + self.refreshed(t, frozen_at))[-1]


def denominator(v: torch.Tensor, corr2: float, eps: float) -> torch.Tensor:
    """Adam's denominator, sqrt(v / corr2) + eps, in torch.optim.Adam's arithmetic."""
    return (v.sqrt() / math.sqrt(corr2)).add_(eps)


def adam_bound(beta1: float, beta2: float) -> float:
    """The largest |m| / sqrt(v) Adam's moments can reach: by Cauchy-Schwarz,
    (1 - b1) / sqrt((1 - b2) (1 - b1^2 / b2)); unbounded (inf) when b1^2 >= b2."""
    if beta1 * beta1 >= beta2:
        return math.inf
    return (1 - beta1) / math.sqrt((1 - beta2) * (1 - beta1 * beta1 / beta2))
