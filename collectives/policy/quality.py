"""The user's quality signal: the training loss, checked after a decision that compresses.

What a compressor does to convergence is measured before it is used (``criterion``), but a
model can still learn more slowly under it. So the training loss each rank reports
(``AutoPolicy.observe_loss``: this rank's loss of the step, every step or every few) is
compared in two windows of ``loss_window`` steps: the one before a decision that sends some
layer below 16 bits a value, and the one after. Each window's trend is the least-squares line
through the loss averaged over the ranks (a smoothing that noise moves little); the quality
fell behind when the loss rises clearly after the decision (slope above ``tunables.z`` standard
errors), or falls by less than ``loss_ratio`` of its clear fall before, each window holding
``loss_samples`` reported steps at least. The compressed layers then send 16 bits
(:meth:`Quality.fell`), until a later regular decision finds the loss falling clearly again
in the window before it.

Every rank must take the same decision, and each has its own loss: the windows are averaged
over the ranks by one small allgather, at a decision and at the end of a window after one
(points every rank reaches alike), never on other steps.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import numpy as np

from .config import AutoConfig
from .part import Part

if TYPE_CHECKING:
    from ..transport import Communicator
    from .decider import Decider


def trend(means: np.ndarray, samples: int) -> tuple[float, float] | None:
    """Slope per step of the least-squares line through the finite ``means`` (one per step)
    and its standard error; None with fewer than ``samples`` of them."""
    x = np.flatnonzero(np.isfinite(means)).astype(np.float64)
    if len(x) < max(samples, 3):
        return None
    y = means[x.astype(np.int64)]
    xc = x - x.mean()
    sxx = float(np.square(xc).sum())
    if sxx == 0:
        return None
    slope = float((xc * (y - y.mean())).sum()) / sxx
    fit = y - y.mean() - slope * xc
    return slope, math.sqrt(float(np.square(fit).sum()) / (len(x) - 2) / sxx)


class Quality(Part):
    """This rank's reported losses, the check under way and the fallback in force."""

    KEYS = {"_losses": "losses", "_watch": "watch", "_fallback": "fallback",
            "_loss_before": "before_last"}

    def __init__(self, config: AutoConfig) -> None:
        self.config = config
        self.losses: dict[int, float] = {}  # this rank's loss by step (the last windows)
        #: The check under way: the decision's step and the trend before it.
        self.watch: dict[str, Any] | None = None
        #: The fallback in force: when, after which decision, and the trends compared.
        self.fallback: dict[str, Any] | None = None
        #: The trend before the last decision (a check armed later compares with it).
        self.before_last: list[float] | None = None

    def add(self, step: int, loss: float) -> None:
        """This rank's training loss of ``step`` (a non-finite one says nothing)."""
        if math.isfinite(loss):
            self.losses[int(step)] = float(loss)
            keep = int(step) - 2 * self.config.loss_window
            if len(self.losses) > 4 * self.config.loss_window + 8:
                self.losses = {s: v for s, v in self.losses.items() if s >= keep}

    def agree(self, comm: Communicator, lo: int, hi: int) -> tuple[float, float] | None:
        """The trend of the loss averaged over the ranks in steps [lo, hi) (collective, but
        for a window too short to hold ``loss_samples``: None on every rank alike)."""
        n = max(hi - lo, 0)
        if n < self.config.loss_samples:
            return None
        mine = np.zeros((n, 2))
        for s, v in self.losses.items():
            if lo <= s < hi:
                mine[s - lo] = v, 1.0
        table = comm.allgather_ints(mine.reshape(-1).view(np.int64), collective="policy loss")
        every = np.asarray(table, dtype=np.int64).view(np.float64).reshape(comm.size, n, 2)
        total = every.sum(axis=0)
        with np.errstate(invalid="ignore", divide="ignore"):
            means = np.where(total[:, 1] > 0, total[:, 0] / total[:, 1], np.nan)
        return trend(means, self.config.loss_samples)

    def before(self, comm: Communicator, step: int) -> tuple[float, float] | None:
        """At a decision: the trend of the window before it (collective; None when off)."""
        w = self.config.loss_window
        return self.agree(comm, max(step - w, 0), step) if w else None

    def safe(self) -> str:
        """The 16-bit format a layer falls back to (fp16, else bf16, else none)."""
        return next((s for s in ("fp16", "bf16") if s in self.config.candidates), "none")

    def decided(self, step: int, decider: Decider, old: dict[str, str],
                before: tuple[float, float] | None) -> str | None:
        """After a regular decision of ``decider`` (``old``: the decisions it replaced):
        watch the next window when it sends a layer below 16 bits that was not; a fallback
        in force ends when the loss fell clearly in the window before (``before``), else
        holds the new decisions at 16 bits. Returns "recovered" or "held", else None."""
        out = None
        if self.fallback is not None:
            # The window before must be one of 16 bits, and the loss falling clearly in it.
            z = self.config.tunables.z
            if before is None or not before[0] < -z * before[1] or \
                    step - self.fallback["step"] < self.config.loss_window:
                self.watch = None
                decider.hold(self.safe(), "quality fell behind")
                return "held"
            self.fallback, out = None, "recovered"
        self.before_last = list(before) if before is not None else None
        self.watch = {"step": step, "before": self.before_last} \
            if before is not None and decider.narrower(old) else None
        return out

    def narrowed(self, step: int) -> None:
        """The trial kept a plan sending layers below 16 bits that the decision sent in 16:
        watch the window from ``step`` against the trend before the decision (when the check
        is on)."""
        if self.before_last is not None and self.fallback is None:
            self.watch = {"step": step, "before": list(self.before_last)}

    def due(self, step: int) -> bool:
        """Whether the window after the decision watched has ended at ``step``."""
        w = self.watch
        return w is not None and step >= w["step"] + self.config.loss_window

    def fell(self, comm: Communicator, step: int, decider: Decider) -> dict[str, Any] | None:
        """End the check under way (collective): when the quality fell, hold ``decider``'s
        layers below 16 bits at 16 and return the fallback (their names under "held")."""
        assert self.watch is not None
        start, (b, sb) = self.watch["step"], self.watch["before"]
        self.watch = None
        after = self.agree(comm, start, step)
        if after is None:
            return None
        a, sa = after
        z = self.config.tunables.z
        rises = a > z * sa
        slower = b < -z * sb and -a < self.config.loss_ratio * -b
        if not (rises or slower):
            return None
        held = decider.hold(self.safe(), "quality fell behind")
        self.fallback = {"step": step, "decision": start, "before": b, "after": a,
                         "held": held}
        return self.fallback
