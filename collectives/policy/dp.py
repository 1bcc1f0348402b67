"""Per-layer choice under an error budget by dynamic programming (as L-GreCo does).

Layer l with option c has a predicted time t[l][c] and an error cost e[l][c] >= 0 (its share
of the total squared relative error). The budget E is cut into ``bins`` equal units; an
option costs ceil(e / unit) units, rounded up so that any plan the program accepts really
stays within E. dp[b] = least total time of the layers so far using at most b units.
"""

from __future__ import annotations

import math

import numpy as np


def solve(times: list[list[float]], errors: list[list[float]], budget: float,
          bins: int = 256) -> list[int]:
    """Index of the chosen option per layer: least total time with sum of errors <= budget.

    Raises ValueError when no plan fits (give every layer an error-free option, "none").
    """
    if not (budget >= 0 and math.isfinite(budget)):
        raise ValueError(f"the error budget must be a finite number >= 0, got {budget}")
    unit = budget / bins if budget > 0 else 0.0
    inf = math.inf
    best = np.zeros(bins + 1)  # no layers yet: zero time at any budget
    choices: list[np.ndarray] = []
    for t_l, e_l in zip(times, errors, strict=True):
        new = np.full(bins + 1, inf)
        pick = np.full(bins + 1, -1, dtype=np.int64)
        for c, (t, e) in enumerate(zip(t_l, e_l, strict=True)):
            if not t < inf:  # an option ruled out
                continue
            if e <= 0:
                cost = 0
            elif unit == 0:
                continue
            else:
                cost = math.ceil(e / unit - 1e-12)
            if cost > bins:
                continue
            cand = best[:bins + 1 - cost] + t
            tail, tail_pick = new[cost:], pick[cost:]  # views: written through
            better = cand < tail
            tail[better], tail_pick[better] = cand[better], c
        choices.append(pick)
        best = new
    if not math.isfinite(best[bins]):
        raise ValueError("no per-layer choice fits the error budget; include 'none' among the "
                         "candidates or raise max_error")
    out, b = [], bins
    for layer in range(len(choices) - 1, -1, -1):
        c = int(choices[layer][b])
        out.append(c)
        e = errors[layer][c]
        b -= 0 if e <= 0 else math.ceil(e / unit - 1e-12)
    return out[::-1]
