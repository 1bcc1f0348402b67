"""DiLoCo's rules of thumb from the sync interval: the outer step for an interval, and the
interval from the probe's timings. Plain formulas, no communication.

The outer step. Nesterov SGD with lr ``a`` and momentum ``m`` moves the global weights by
``a (1 + m)`` times a fresh pseudo-gradient at once and by ``a / (1 - m)`` times a steady
one (its gain). Averaging the local models is ``(1, 0)``: the progress of the interval is
taken once. DiLoCo's Nesterov (0.7, 0.9) takes 1.33 at once and 7 steadily; tuned for syncs
hundreds of steps apart over long runs, it multiplies the aligned progress of closer syncs
seven times. Measured side by side (``bench/results/tta/interval_sweep_np4``: vit and gpt, 4
ranks, 300 steps, syncs in the background), averaging was the better of the two at every
interval from 2 to 128, and (0.7, 0.9) collapsed at 2 and 8 (vit accuracy 0.10 and 0.22
against 0.88 and 0.89 averaging; gpt loss 5.65 against 2.91 at 2). :func:`outer_for`
therefore averages up to ``GAIN_FROM`` = 128 steps apart. Beyond, where DiLoCo's authors
found momentum pays and this project has not measured, it keeps the immediate move at 1 (a
fresh pseudo-gradient is applied once, as averaging does) and lets the steady gain grow in
proportion to the interval: the longer the interval, the more the local trajectories curve
and their noise cancels, so the steady part of an interval's progress falls short of the
steps taken and momentum recovers it. Gain g gives m = sqrt(1 - 1/g) and a = 1 / (1 + m),
capped at m = ``MAX_MOMENTUM``.

The interval. A sync of c seconds against s seconds of compute a step: run in the
foreground it costs at most ``MAX_COMM_SHARE`` of the time when
H = ceil(c (1 - share) / (share s)); run in the background it is hidden when it completes
within H steps of compute, so the shortest hidden interval is H = ceil(c / (HIDE s)), and a
shorter interval is better for convergence per step (H = 1 is data-parallel training). A
background exchange is hidden only where it has cores to itself: its coding and copies run
on the cores the compute uses when ranks share them (4 ranks on 2 cores made gpt's steps 1.8x
slower at H = 1). :func:`widen` therefore watches the steps that follow and doubles the
interval while they run more than ``SLOWDOWN`` slower than compute alone, up to the
foreground rule's interval.
"""

from __future__ import annotations

import math

import numpy as np

#: the interval from which the outer step's steady gain grows above averaging's 1 (averaging
#: measured the better at every interval from 2 to 128)
GAIN_FROM = 128
#: the largest outer momentum the rule reaches (gain 1 / (1 - 0.81) = 5.26, from 674 steps)
MAX_MOMENTUM = 0.9
#: in the foreground: the most of the time a sync may take
MAX_COMM_SHARE = 0.1
#: in the background: the share of H steps' compute a sync should complete within
HIDE = 0.8
#: the largest interval "auto" picks
MAX_SYNC_EVERY = 1000
#: in the background: how much slower than compute alone steps may run before the interval
#: doubles (the exchange's own work, coding and copies and messages, competes for the cores)
SLOWDOWN = 0.1


def outer_for(sync_every: int) -> tuple[float, float]:
    """The outer Nesterov step's (lr, momentum) for syncs ``sync_every`` steps apart:
    averaging (1.0, 0.0) up to ``GAIN_FROM`` steps, then a steady gain of
    ``sync_every / GAIN_FROM`` with an immediate move of 1.

    >>> outer_for(4), outer_for(128)
    ((1.0, 0.0), (1.0, 0.0))
    >>> lr, m = outer_for(512); round(lr, 3), round(m, 3), round(lr / (1 - m), 2)
    (0.536, 0.866, 4.0)
    """
    gain = min(sync_every / GAIN_FROM, 1.0 / (1.0 - MAX_MOMENTUM ** 2))
    if gain <= 1.0:
        return 1.0, 0.0
    momentum = math.sqrt(1.0 - 1.0 / gain)
    return 1.0 / (1.0 + momentum), momentum


def sync_every_for(period_s: float, sync_s: float, background: bool) -> int:
    """The interval for syncs of ``sync_s`` seconds, within whole probe steps of
    ``period_s`` seconds that each held one (compute s = period - sync): the shortest one
    the background hides, or, in the foreground, the least within ``MAX_COMM_SHARE``.

    >>> sync_every_for(0.18, 0.10, background=False)  # 80 ms of work, 100 ms a sync
    12
    >>> sync_every_for(0.18, 0.10, background=True)
    2
    """
    step_s = max(period_s - sync_s, 1e-6)
    if background:
        want = sync_s / (HIDE * step_s)
    else:
        want = sync_s * (1.0 - MAX_COMM_SHARE) / (MAX_COMM_SHARE * step_s)
    return min(MAX_SYNC_EVERY, max(1, math.ceil(want - 1e-9)))


def probe_times(steps: list[float], syncs: list[float]) -> tuple[float, float]:
    """(median whole step, median sync) of one rank's probe, the first step (set-up) left
    out. The ranks then agree on the slowest step and the fastest sync: a rank that waited
    for a slower one counted the wait in its sync, and the last to arrive did not."""
    period = float(np.median(steps[1:])) if len(steps) > 1 else 1e-3
    sync = float(np.median(syncs)) if syncs else 0.0
    return period, sync


def widen(recent_s: float, compute_s: float, sync_every: int, limit: int) -> int:
    """The interval after background steps of ``recent_s`` seconds (the slowest rank's
    median) at ``sync_every``: doubled, up to ``limit`` (the foreground rule's interval), where
    they ran more than ``SLOWDOWN`` slower than ``compute_s`` (a step without its sync, from
    the probe); else kept.

    >>> widen(0.40, 0.23, 1, 4), widen(0.24, 0.23, 1, 4), widen(0.40, 0.23, 4, 4)
    (2, 1, 4)
    """
    if sync_every < limit and recent_s > (1.0 + SLOWDOWN) * compute_s:
        return min(limit, 2 * sync_every)
    return sync_every
