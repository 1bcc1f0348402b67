"""How far a row's repeated timings spread, and which ratios of two rows that spread leaves open.

A row's time is the median of its timed calls; its spread is their interquartile range as a
share of that median, ``(p75 - p25) / p50``. A ratio of two rows' medians reports the
difference ``|ratio - 1|``; when the spread of either row is wider than that difference,
another run may well order the two the other way, and the ratio is flagged as within the noise
(printed with a trailing ``~``). The rule errs on the side of flagging: the median of n calls
wanders less than the middle half of them does.

Example::

    >>> flags([100.0, 90.0, 50.0], [0.02, 0.15, 0.05])  # the baseline first
    [None, True, False]
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

#: Printed after a ratio that is within the noise (a space otherwise, so the digits align).
FLAG = "~"
#: What the JSON's ``spread`` and ``noisy`` of a row mean (its metadata carries these lines).
SPREAD_MEANS = ("(p75 - p25) / p50 of the row's timed calls: their interquartile range over "
                "their median")
NOISY_MEANS = ("its ratio to the baseline row (MPI_Allreduce at the same size and placement) is "
               "within the noise: |ratio - 1| is smaller than the spread of the row or of the "
               "baseline; null for the baseline itself and where a spread is missing")


def spread(times: Sequence[float] | np.ndarray) -> float | None:
    """``(p75 - p25) / p50`` of ``times``: the middle half's width as a share of the median
    (None for fewer than two times, whose spread is unknown, or a median of 0)."""
    values = np.asarray(times, dtype=np.float64)
    if values.size < 2:
        return None
    p25, p50, p75 = np.percentile(values, [25, 50, 75])
    return float((p75 - p25) / p50) if p50 > 0 else None


def within_noise(ratio: float | None, spread: float | None, base_spread: float | None
                 ) -> bool | None:
    """Whether ``ratio`` (a row's over its baseline's) is within the noise: True when the
    wider of the two rows' spreads exceeds ``|ratio - 1|``; None when a value is missing."""
    if ratio is None or spread is None or base_spread is None:
        return None
    return max(spread, base_spread) > abs(ratio - 1.0)


def flags(medians: Sequence[float], spreads: Sequence[float | None], base: int = 0
          ) -> list[bool | None]:
    """For each row, whether its ratio to row ``base`` (the base's median over its own, a
    speed-up) is within the noise (:func:`within_noise`); None for the base row."""
    ref = medians[base]
    return [None if i == base or t <= 0 else within_noise(ref / t, s, spreads[base])
            for i, (t, s) in enumerate(zip(medians, spreads, strict=True))]


def percent(value: float) -> str:
    """A spread as a percentage in at most 4 characters: ``2.5``, ``37``, ``>999``."""
    pct = value * 100
    return f"{pct:.1f}" if pct < 9.95 else f"{pct:.0f}" if pct < 999.5 else ">999"


def ratio_cell(ratio: float | None, noisy: bool | None) -> str:
    """``1.23~`` within the noise, ``1.23 `` outside it (``- `` without a ratio)."""
    return f"{'-' if ratio is None else f'{ratio:.2f}'}{FLAG if noisy else ' '}"


def legend(iters: int, baseline: str, ratio: str) -> str:
    """The comment that says what the time, spread and flag columns hold."""
    return (f"time: the median of the {iters} timed calls of each row; iqr%: their "
            f"interquartile range (p75 - p25) as a percentage of that median; {FLAG} after "
            f"'{ratio}': within the noise, |ratio - 1| is smaller than the iqr of the row or "
            f"of {baseline}'s at that size, so another run may order the two the other way")


def summary(rows: list[dict[str, Any]], ratio: str) -> str:
    """One comment line: how many of the rows' ratios are flagged."""
    judged = [r for r in rows if r.get("noisy") is not None]
    noisy = sum(1 for r in judged if r["noisy"])
    return f"# {FLAG} within the noise: {noisy} of {len(judged)} '{ratio}' ratios"
