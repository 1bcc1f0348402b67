"""The quality target of ``compcoll bench tta`` and each run's time to reach it.

A curve is a list of points ``(step, seconds, quality)``: the quality measured after ``step``
training steps, ``seconds`` of training wall-clock time (evaluation excluded) from the start.
Accuracy is better higher; bits per byte (a loss) is better lower.

One evaluation on a small test set is noisy (297 digits move accuracy in steps of 0.34
points), so curves are smoothed before they are compared: each point's quality becomes the
mean of the last ``window`` measured qualities up to it (fewer at the start of the curve),
a trailing moving average that uses nothing measured later. The target is the reference
run's best smoothed quality less the tolerance, and a run reaches it at the first point whose
smoothed quality meets it, at that point's time. ``window`` 1 compares the raw measurements.
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
    reference: float  # the reference run's best (smoothed) quality
    tolerance: float  # points of accuracy, or percent of a loss
    window: int = 1  # evaluations in the trailing moving average (1: raw qualities)

    def reached(self, quality: float) -> bool:
        """Whether one (smoothed) quality meets the target."""
        # A rounding margin: 0.94 - 0.01 must admit a measured 0.93.
        slack = 1e-9 * max(1.0, abs(self.value))
        if self.higher_is_better:
            return quality >= self.value - slack
        return quality <= self.value + slack

    def reached_last(self, qualities: Sequence[float]) -> bool:
        """Whether the mean of the last ``window`` of these qualities meets the target."""
        return bool(qualities) and self.reached(smoothed(qualities, self.window)[-1])

    def describe(self, reference_run: str, metric: str) -> str:
        if self.higher_is_better:
            how = f"{self.tolerance:g} point(s) below"
        else:
            how = f"{self.tolerance:g}% above"
        text = (f"target {metric} {self.value:.4f}: {how} {reference_run}'s best "
                f"({self.reference:.4f})")
        if self.window > 1:
            text += (f", every curve smoothed by the mean of its last {self.window} "
                     "evaluations")
        return text


def _check_window(window: int) -> None:
    if isinstance(window, bool) or not (isinstance(window, int) and window >= 1):
        raise ValueError(f"the smoothing window must be an integer >= 1 evaluations, "
                         f"got {window!r}")


def smoothed(qualities: Sequence[float], window: int) -> list[float]:
    """Trailing moving average: each value the mean of the last ``window`` up to it (of all
    of them while fewer have been measured)."""
    _check_window(window)
    out = []
    for i in range(len(qualities)):
        last = qualities[max(0, i + 1 - window):i + 1]  # summed afresh: window 1 is exact
        out.append(sum(last) / len(last))
    return out


def smooth(curve: Sequence[Point], window: int) -> list[Point]:
    """The curve with each quality replaced by its trailing moving average."""
    values = smoothed([q for _, _, q in curve], window)
    return [(s, t, v) for (s, t, _), v in zip(curve, values, strict=True)]


def best(curve: Sequence[Point], higher_is_better: bool) -> float:
    """The best quality on the curve."""
    if not curve:
        raise ValueError("an empty curve has no best quality")
    values = [q for _, _, q in curve]
    return max(values) if higher_is_better else min(values)


def target(reference_best: float, higher_is_better: bool, tolerance: float,
           window: int = 1) -> Target:
    """The reference's best (smoothed over ``window`` evaluations) quality made easier by
    ``tolerance``: that many points of accuracy lower (1 point = 0.01), or that many percent
    of a loss higher."""
    if not tolerance >= 0:
        raise ValueError(f"tolerance must be >= 0, got {tolerance}")
    _check_window(window)
    if higher_is_better:
        value = reference_best - tolerance / 100.0
    else:
        value = reference_best * (1.0 + tolerance / 100.0)
    return Target(value, higher_is_better, reference_best, tolerance, window)


def reference_target(curve: Sequence[Point], higher_is_better: bool, tolerance: float,
                     window: int) -> Target:
    """The target a reference run's raw curve sets: its best smoothed quality less the
    tolerance."""
    return target(best(smooth(curve, window), higher_is_better), higher_is_better, tolerance,
                  window)


def first_reached(curve: Sequence[Point], goal: Target) -> Point | None:
    """The first point of the raw curve whose smoothed quality meets the target, as a
    smoothed point ``(step, seconds, smoothed quality)``; None if none does."""
    for point in smooth(curve, goal.window):
        if goal.reached(point[2]):
            return point
    return None
