"""``bench tta``'s step times: how steady a run's steps are and where a step's time goes.

All after warm-up (the first ``max(5, --start-step + 3)`` steps left out):

* ``median_ms``: the median step, the slowest rank's time (ranks meet at a barrier first).
* ``worst5_x``: the largest mean of 5 consecutive steps from the second step on (warm-up
  included), over ``median_ms``: how much slower than the steady step the worst stretch after
  the first step is (1.2: 20% slower). One noisy step moves it a fifth as much as it would
  move the single slowest step.
* ``split_ms``: each rank's own time in the parts of a step, the mean over ranks, the median
  over steps:

  - ``forward``: computing the loss (DDP's forward included);
  - ``backward``: ``loss.backward()``. Under DDP it includes copying gradients into buckets,
    the comm hook (called on the training thread: for our hook, compressing and launching
    the collectives) and the wait for every bucket's communication, which DDP does at the
    end of backward;
  - ``optimizer``: ``opt.step()`` and ``zero_grad``;
  - ``hook`` (our hooks only): the time spent inside our hook, summed over the step's buckets
    (compression and posting; from the hook's timeline, ``launched - start``); for our
    optimizers (``diloco``, ``onebit``) the time their ``step()`` spent in its collectives,
    coding included (``opt.comm_s``), a part of ``optimizer``;
  - ``exposed_wait`` (when the ``compute`` run is there, not for it): backward less the
    compute-only run's backward: what synchronising gradients adds to backward. For our hooks
    it includes ``hook``; the rest is bucket copies and the wait communication did not hide.

  The parts are each rank's and the step is the slowest rank's, so they need not add up.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

#: The keys of ``split_ms`` measured by the timed step, in their order.
PARTS = ("forward", "backward", "optimizer", "hook")

#: Consecutive steps whose mean ``worst5_x`` takes.
STRETCH = 5


def worst_stretch(step_ms: Sequence[float], steady_ms: float,
                  stretch: int = STRETCH) -> float | None:
    """The largest mean over ``stretch`` consecutive steps after the first (over all of them
    when fewer), divided by ``steady_ms``; None without a step after the first."""
    rest = np.asarray(step_ms[1:], dtype=float)
    if rest.size == 0 or not steady_ms > 0:
        return None
    k = min(stretch, rest.size)
    means = np.convolve(rest, np.ones(k) / k, mode="valid")
    return float(means.max()) / steady_ms


def hook_seconds(state: Any, step: int) -> float:
    """Seconds spent inside our hook in ``step``, summed over its buckets, read from the end
    of the state's timeline (records are appended in step order on the training thread)."""
    total = 0.0
    for rec in reversed(state.timeline):
        if rec["step"] != step:
            break
        total += rec["launched"] - rec["start"]
    return total


def split_ms(parts: Sequence[Sequence[float]], warm: int, mpi: Any,
             with_hook: bool) -> dict[str, float]:
    """Median over steps from ``warm`` on of each part (seconds per step on this rank, in the
    order of ``PARTS``) averaged over ranks, in ms; ``hook`` only ``with_hook``."""
    mine = np.asarray(parts, dtype=float).reshape(-1, len(PARTS))
    mean = np.asarray(mpi.allreduce(mine)) / mpi.size
    medians = np.median(mean[warm:], axis=0) * 1e3
    out = {k: float(v) for k, v in zip(PARTS, medians, strict=True)}
    if not with_hook:
        del out["hook"]
    return out


def add_exposed(rows: list[dict[str, Any]], compute: str = "compute") -> None:
    """Each run's ``split_ms["exposed_wait"]``: its backward less its model's compute-only
    backward (where that run is there; not for the compute run itself)."""
    floor = {r["model"]: r["split_ms"]["backward"] for r in rows if r["run"] == compute}
    for r in rows:
        if r["run"] != compute and r["model"] in floor:
            r["split_ms"]["exposed_wait"] = r["split_ms"]["backward"] - floor[r["model"]]


#: The step-split table: (heading, width, key of ``split_ms`` or of the row).
SPLIT_COLUMNS = [("model", 8, "model"), ("run", 11, "run"), ("median(ms)", 10, "median_ms"),
                 ("forward", 8, "forward"), ("backward", 8, "backward"),
                 ("optimizer", 9, "optimizer"), ("hook", 7, "hook"),
                 ("exposed", 8, "exposed_wait")]


def split_table(rows: list[dict[str, Any]]) -> list[str]:
    """The "step split" table, one line per run (ms; "-" where a part does not apply)."""
    lines = ["# step split (ms, medians after warm-up; parts: each rank's, mean over ranks; "
             "exposed: backward less the compute run's)",
             " ".join(f"{h:>{w}}" for h, w, _ in SPLIT_COLUMNS)]
    for r in rows:
        cells = []
        for _, width, key in SPLIT_COLUMNS:
            v = r.get(key, r.get("split_ms", {}).get(key))
            text = "-" if v is None else (f"{v:.1f}" if isinstance(v, float) else str(v))
            cells.append(f"{text:>{width}}")
        lines.append(" ".join(cells))
    return lines
