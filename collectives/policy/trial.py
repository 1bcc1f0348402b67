"""Measured, not predicted: after a decision that sends layers below 16 bits, the step times of
that plan are compared with the step times of 16 bits, and the faster is kept.

The plan's price is a model: codec speeds measured alone, a fitted link, overlap with the
backward pass assumed. On a machine whose cores are shared (several ranks per core, or a
data loader), a codec's work also slows the computation it should hide behind, and a
compressed plan can lose to plain fp16 though its price says otherwise. So the policy times
it: ``trial_steps`` steps of the plan, then as many with those layers at 16 bits (the first
step after each switch is not counted: buffers are regrouped), and keeps the plan only if
its median step is at least ``margin`` faster. The medians are averaged over the ranks by
one small allgather at the end of the trial, a step every rank reaches alike, so every rank
keeps the same plan.
"""

from __future__ import annotations

import copy
import time
from typing import Any

import numpy as np

from .config import AutoConfig
from .part import Part


class Trial(Part):
    """The trial under way: its phase, the plan it tries and the step times seen."""

    KEYS = {"_trial": "state", "_trial_result": "result"}
    SKIP = 1  # steps after a switch that are not counted

    def __init__(self, config: AutoConfig) -> None:
        self.config = config
        self.state: dict[str, Any] | None = None
        #: The last trial's outcome (plan and 16-bit medians in seconds, what was kept).
        self.result: dict[str, Any] | None = None
        self._last: tuple[int, float] | None = None  # (step, when update saw it begin)

    @property
    def active(self) -> bool:
        return self.state is not None

    def tick(self, step: int) -> None:
        """``step`` begins: the step before it took the time since it began (counted in the
        phase under way unless it is one of the first after a switch)."""
        now = time.perf_counter()
        last, self._last = self._last, (step, now)
        st = self.state
        if st is None or last is None or last[0] != step - 1:
            return
        if last[0] >= st["since"] + self.SKIP:
            st["times"][st["phase"]].append(now - last[1])

    def start(self, step: int, decider: Any) -> None:
        """A decision sent layers below 16 bits: time its plan from ``step`` on."""
        if self.config.trial_steps <= 0:
            return
        self.state = {"phase": "plan", "since": step, "times": {"plan": [], "sixteen": []},
                      "decisions": None, "rows": None}

    def due(self) -> bool:
        """Whether the phase under way has its steps."""
        st = self.state
        return st is not None and len(st["times"][st["phase"]]) >= self.config.trial_steps

    def advance(self, comm: Any, step: int, decider: Any, safe: str) -> str | None:
        """End the phase under way: after the plan's steps, hold its layers at ``safe`` (16
        bits) and time those; after those (collective), keep the faster. Returns "timing
        16 bits", "kept" or "16 bits", and None while nothing changed."""
        st = self.state
        assert st is not None
        if st["phase"] == "plan":
            st["decisions"] = dict(decider.decisions)
            st["rows"] = copy.deepcopy(decider.rows)
            decider.hold(safe, "timing 16 bits against the plan")
            st["phase"], st["since"] = "sixteen", step
            return "timing 16 bits"
        mine = np.array([np.median(st["times"]["plan"]), np.median(st["times"]["sixteen"])])
        table = comm.allgather_ints(mine.view(np.int64), collective="policy step times")
        plan_s, sixteen_s = np.asarray(table, np.int64).view(np.float64).reshape(
            comm.size, 2).mean(axis=0)
        keep = plan_s <= sixteen_s * (1.0 - self.config.margin)
        if keep:
            decider.decisions.clear()
            decider.decisions.update(st["decisions"])
            decider.rows[:] = st["rows"]
        else:
            for row in decider.rows:
                if row.get("why") == "timing 16 bits against the plan":
                    row["why"] = (f"measured: 16 bits as fast ({sixteen_s * 1e3:.1f} ms a "
                                  f"step against {plan_s * 1e3:.1f})")
        self.result = {"step": step, "plan_s": float(plan_s), "sixteen_s": float(sixteen_s),
                       "kept": "plan" if keep else safe}
        self.state = None
        return "kept" if keep else "16 bits"
