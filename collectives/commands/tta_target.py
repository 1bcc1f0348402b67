"""The quality target of ``compcoll bench tta`` and each run's time to reach it.

A curve is a list of points ``(step, seconds, quality)``: the quality measured after ``step``
training steps, ``seconds`` of training wall-clock time (evaluation excluded) from the start.
Accuracy is better higher; bits per byte (a loss) is better lower.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

Point = tuple[int, float, float]


@dataclass(frozen=True)
class Target:
    """The quality every run must reach, and how it was derived."""

    value: float
    higher_is_better: bool
    reference: float  # the reference run's best quality
    tolerance: float  # points of accuracy, or percent of a loss

    def reached(self, quality: float) -> bool:
        # A rounding margin: 0.94 - 0.01 must admit a measured 0.93.
        slack = 1e-9 * max(1.0, abs(self.value))
        if self.higher_is_better:
            return quality >= self.value - slack
        return quality <= self.value + slack

    def describe(self, reference_run: str, metric: str) -> str:
        if self.higher_is_better:
            how = f"{self.tolerance:g} point(s) below"
        else:
            how = f"{self.tolerance:g}% above"
        return (f"target {metric} {self.value:.4f}: {how} {reference_run}'s best "
                f"({self.reference:.4f})")


def best(curve: Sequence[Point], higher_is_better: bool) -> float:
    """The best quality on the curve."""
    if not curve:
        raise ValueError("an empty curve has no best quality")
    values = [q for _, _, q in curve]
    return max(values) if higher_is_better else min(values)


def target(reference_best: float, higher_is_better: bool, tolerance: float) -> Target:
    """The reference's best quality made easier by ``tolerance``: that many points of
    accuracy lower (1 point = 0.01), or that many percent of a loss higher."""
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    if higher_is_better:
        value = reference_best - tolerance / 100.0
    else:
        value = reference_best * (1.0 + tolerance / 100.0)
    return Target(value, higher_is_better, reference_best, tolerance)


def first_reached(curve: Sequence[Point], goal: Target) -> Point | None:
    """The first point of the curve at the target's quality or better; None if none is."""
    for point in curve:
        if goal.reached(point[2]):
            return point
    return None
