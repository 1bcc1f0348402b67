"""Cheap gradient statistics the hook collects anyway: the averaged gradient's norm per bucket.

Per window of ``window`` steps: the mean squared norm of each bucket (the live shares the
policy weighs errors by) and the regime signal of Accordion (Agarwal et al. 2021): the
relative change of the mean norm between consecutive windows above ``threshold``. The
averaged gradient is identical on every rank, so both are too.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import Any

import numpy as np

WHOLE = -1  # the bucket key of a norm reported for the whole step


class Signals:
    """Squared norms per (step, bucket); ``close`` ends a window."""

    def __init__(self, window: int, threshold: float) -> None:
        self.window, self.threshold = window, threshold
        self.norms: dict[int, dict[Hashable, float]] = {}
        self.live: dict[Hashable, float] = {}  # mean squared norm per bucket, last window
        self.previous: float | None = None

    def add(self, step: int, sq_norm: float, bucket: Hashable | None = None) -> None:
        per = self.norms.setdefault(step, {})
        key = WHOLE if bucket is None else bucket
        per[key] = per.get(key, 0.0) + float(sq_norm)

    def close(self, step: int) -> float | None:
        """At a window's end (``step`` a multiple of the window): update the live shares;
        the relative change of the mean norm if above the threshold (a regime change)."""
        w = self.window
        if step == 0 or step % w:
            return None
        seen = [self.norms[s] for s in range(step - w, step) if s in self.norms]
        self.norms = {s: v for s, v in self.norms.items() if s >= step}
        if not seen:
            return None
        buckets = {b for per in seen for b in per if b != WHOLE}
        self.live = {b: float(np.mean([per.get(b, 0.0) for per in seen])) for b in buckets}
        cur = float(np.mean([math.sqrt(sum(per.values())) for per in seen]))
        prev, self.previous = self.previous, cur
        if prev is not None and prev > 0 and abs(cur - prev) / prev > self.threshold:
            return abs(cur - prev) / prev
        return None

    def state_dict(self) -> dict[str, Any]:
        return {"norms": {s: dict(v) for s, v in self.norms.items()}, "live": dict(self.live),
                "previous": self.previous}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.norms = {int(s): dict(v) for s, v in state["norms"].items()}
        self.live, self.previous = dict(state["live"]), state["previous"]
