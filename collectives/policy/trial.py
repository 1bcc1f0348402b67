"""Measured, not predicted: after a decision, the step times of its plan are compared with
those of the plans beside it, and the fastest is kept.

The plan's price is a model: codec speeds measured alone, a fitted link, overlap with the
backward pass assumed. On a machine whose cores are shared (several ranks per core, or a
data loader), a codec's work also slows the computation it should hide behind, and a
compressed plan can lose to plain fp16 though its price says otherwise; over shared memory,
even fp16's cast can cost more than the bytes it saves, and DDP's own uncompressed allreduce
is the fastest. The other way round, a price within the margin a prediction must clear keeps
16 bits where 8 measure faster (a nanoGPT at 1 Gbit/s: priced 147 ms a step, measured 225).
So the policy times them: the plan; its layers below 16 bits at 16 bits (``sixteen``, when it
has such layers); its layers of 16 bits below 16 where the error budget allows (``narrow``,
``decide.narrowed``); every layer uncompressed (``none``, when it sends any layer compressed:
the first decision, or one that compresses a layer the last sent whole). They take turns in
``tunables.trial_rounds`` rounds of a few steps each, ``trial_steps`` counted per plan in
all, so that a drift of the machine (a neighbour's job, a data loader's burst) falls on each
alike; the first step after each switch is not counted (buffers are regrouped). The simplest
plan is kept unless one of more error is clearly faster: uncompressed, then 16 bits, then the
plan, then the narrower plan. Clearly: by twice the noise of the two medians (their standard
errors, from the steps' median absolute deviations over every round, so a drift between
rounds widens them) and by at least ``tunables.min_share`` (3%) of the step. No fixed margin:
what the steps measure tightly is taken (on gpt at 1 Gbit/s, 8 bits measured 6% faster than
16 with steps a few ms apart), what they measure loosely is not. The medians and deviations
are averaged over the ranks by one small allgather at the end of the trial, a step every rank
reaches alike, so every rank keeps the same plan. A narrower plan kept sends layers below 16
bits that the decision did not: the loss check (``quality``) watches the window after it.
"""

from __future__ import annotations

import copy
import time
from typing import TYPE_CHECKING, Any

import numpy as np

from .config import AutoConfig
from .part import Part
from .tunables import DEFAULTS

if TYPE_CHECKING:
    from ..transport import Communicator
    from .decider import Decider

#: A median's standard error over n steps is about 1.2533 sigma / sqrt(n), and sigma about
#: 1.4826 times the median absolute deviation (normal steps; robust to a stray slow one).
MAD_TO_SE = 1.4826 * 1.2533


def clearly_faster(p: float, q: float, noise: float,
                   min_share: float = DEFAULTS.min_share) -> bool:
    """Whether a step of ``p`` seconds beats one of ``q`` by more than twice ``noise`` (the
    standard error of their difference) and by ``min_share`` of q."""
    return p <= q - max(min_share * q, 2.0 * noise)


class Trial(Part):
    """The trial under way: its phase, the plan it tries and the step times seen."""

    KEYS = {"_trial": "state", "_trial_result": "result"}

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
        if last[0] >= st["since"] + self.config.tunables.skip:
            st["times"][st["phase"]].append(now - last[1])

    def start(self, step: int, phases: list[str]) -> None:
        """A decision to time from ``step`` on: the plan first, then the ``phases`` after it
        ("sixteen": its layers below 16 bits at 16 bits; "none": every layer uncompressed)."""
        if self.config.trial_steps <= 0 or not phases:
            return
        order = ["plan", *phases]
        self.state = {"phase": "plan", "order": order, "since": step, "round": 0,
                      "rounds": self.config.tunables.trial_rounds,
                      "times": {p: [] for p in order}, "decisions": None, "rows": None,
                      "narrow": None}

    def abandon(self, decider: Decider) -> None:
        """A decision comes before the trial under way ended: the plan it was timing stands
        again (what the next decision weighs and replaces), and nothing is kept."""
        st, self.state = self.state, None
        if st is not None and st.get("decisions") is not None:
            self._apply(decider, st, "plan", "none", "")

    def due(self) -> bool:
        """Whether the phase under way has its steps for this round."""
        st = self.state
        if st is None:
            return False
        n = self.config.trial_steps
        rounds = min(st.get("rounds", 1), n)  # (a trial saved before rounds: one)
        want = (min(st.get("round", 0), rounds - 1) + 1) * n // rounds  # counted so far
        return len(st["times"][st["phase"]]) >= want

    def advance(self, comm: Communicator, step: int, decider: Decider, safe: str) -> str | None:
        """End the phase under way: time the next one in this round, or the plan again in
        the next round; after the last (collective), keep the fastest as the module doc
        says. Returns "timing " and what is timed next, or what was kept: "kept", "16 bits",
        "uncompressed" or "below 16 bits"."""
        st = self.state
        assert st is not None
        order = st.get("order", ["plan", "sixteen"])  # (a trial saved before "order")
        if st["decisions"] is None:
            st["decisions"] = dict(decider.decisions)
            st["rows"] = copy.deepcopy(decider.rows)
            st["narrow"] = dict(decider.narrow)
        at = order.index(st["phase"])
        nxt = None
        if at + 1 < len(order):
            nxt = order[at + 1]
        elif st.get("round", 0) + 1 < min(st.get("rounds", 1), self.config.trial_steps):
            nxt, st["round"] = order[0], st["round"] + 1
        if nxt is not None:
            self._apply(decider, st, nxt, safe, WHY[nxt])
            st["phase"], st["since"] = nxt, step
            return f"timing {NAMES[nxt]}"
        times = [np.asarray(st["times"][p], np.float64) for p in order]
        meds = [float(np.median(t)) for t in times]
        mine = np.array(meds + [float(np.median(np.abs(t - m))) for t, m in
                                zip(times, meds, strict=True)])
        table = comm.allgather_ints(mine.view(np.int64), collective="policy step times")
        means = np.asarray(table, np.int64).view(np.float64).reshape(
            comm.size, 2 * len(order)).mean(axis=0)
        secs = dict(zip(order, (float(x) for x in means[:len(order)]), strict=True))
        # each median's standard error, squared
        var = {p: (MAD_TO_SE * float(mad)) ** 2 / max(len(t), 1)
               for p, mad, t in zip(order, means[len(order):], times, strict=True)}
        kept = None
        for p in ("none", "sixteen", "plan", "narrow"):  # least error first
            if p in secs and (kept is None or clearly_faster(
                    secs[p], secs[kept], float(np.sqrt(var[p] + var[kept])),
                    self.config.tunables.min_share)):
                kept = p
        assert kept is not None
        words = ", ".join(f"{secs[p] * 1e3:.1f} ms {NAMES[p]}" for p in order)
        self._apply(decider, st, kept, safe, f"measured: {NAMES[kept]} as fast ({words})")
        self.result = {"step": step, "kept": safe if kept == "sixteen" else kept,
                       "phase": kept, "why": f"measured: {NAMES[kept]} as fast ({words})",
                       "plan": dict(st["decisions"]), "narrow": dict(st.get("narrow") or {}),
                       "rounds": st.get("rounds", 1), **{f"{p}_s": secs[p] for p in order}}
        self.state = None
        return OUTCOMES[kept]

    def repeat(self, decider: Decider, safe: str) -> bool:
        """A decision that is the plan the last trial timed and did not keep: what the trial
        kept, at once, without timing it again (the measurement still stands)."""
        r = self.result
        if not r or r.get("phase", "plan") == "plan" or r.get("plan") != decider.decisions:
            return False
        st = {"decisions": dict(decider.decisions), "rows": copy.deepcopy(decider.rows),
              "narrow": r.get("narrow", {})}
        self._apply(decider, st, r["phase"], safe, r["why"])
        return True

    @staticmethod
    def _apply(decider: Decider, st: dict[str, Any], phase: str, safe: str, why: str) -> None:
        """The plan's decisions and table, with ``phase``'s layers held."""
        decider.decisions.clear()
        decider.decisions.update(st["decisions"])
        decider.rows[:] = copy.deepcopy(st["rows"])
        if phase == "sixteen":
            decider.hold(safe, why)
        elif phase == "none":
            decider.hold("none", why, wide=True)
        elif phase == "narrow":
            decider.send(st.get("narrow") or {}, why)


#: What each phase holds, in the words of the table and the log.
NAMES = {"plan": "the plan", "sixteen": "16 bits", "none": "uncompressed",
         "narrow": "below 16 bits"}
WHY = {"plan": "timing the plan", "sixteen": "timing 16 bits against the plan",
       "none": "timing uncompressed against the plan",
       "narrow": "timing below 16 bits against the plan"}
#: What :meth:`Trial.advance` returns for the plan it kept.
OUTCOMES = {"plan": "kept", "sixteen": "16 bits", "none": "uncompressed",
            "narrow": "below 16 bits"}
