"""The automatic policy's step as a phase machine: one main phase, and watchers every step.

``AutoPolicy.update`` runs :meth:`Machine.step` once a step, on every rank alike, so every
rank runs the same collectives in the same order. A step is, in this order:

1. **Once**, at the first step: the link's fit (``actions.fit_link``).
2. **The watchers**, every step, whatever the main phase (a trial or a loss check runs on
   while the plan it watches is in force, and may change it):

   ========  ==========================================  ================================
   watcher   looks at (its part's named check)           then
   ========  ==========================================  ================================
   regime    a window of gradient norms closed           a regime change makes a decision
             (``Decider.close``)                         due (logged)
   trial     the step before was timed (``Trial.tick``); the next timing (16 bits,
             the timing under way has its steps          uncompressed) or, at the end, the
             (``Trial.due``)                             fastest plan kept (collective)
   loss      the window after a watched decision ended   16 bits if the loss fell behind
             (``Quality.due``)                           (collective)
   ========  ==========================================  ================================

3. **The main phase**: its transition on the evidence (:meth:`Phase.enter`, which may read
   the cache or begin profiling), then the work of the phase it lands in, this same step
   (:meth:`Phase.act`, which returns the phase of the next step):

   ========  =========================  ===================================  =====================
   phase     while                      enter (guards: ``guards``)           act
   ========  =========================  ===================================  =====================
   WarmUp    nothing measured, before   past_warm_up: read the cache if      nothing
             ``first``                  cache_unread; lacks_measurements:
                                        -> Probing, else -> Decided
   Probing   profiling under way        (stays)                              probe_over: combine,
                                                                             decide -> Decided;
                                                                             else a latency round
   Decided   measurements ready         past_warm_up and new layers          decision_due: keep
                                        -> Probing                           if shares_unchanged,
                                                                             else decide
   ========  =========================  ===================================  =====================

4. **Save**: what was measured new is written to the cache (``actions.save``).

The phase is not stored: :meth:`Phase.of` reads it from the parts (profiling under way:
Probing; measurements ready: Decided; else WarmUp), whose fields ``state_dict`` keeps, so a
policy restored from a checkpoint resumes in its phase.
"""

from __future__ import annotations

from collections.abc import Callable

from . import actions, guards
from .actions import Now, Parts


class Phase:
    """One phase of the main line: ``enter`` moves on the evidence, ``act`` does the step's
    work; each returns the phase that follows."""

    name = "phase"

    def enter(self, p: Parts, now: Now) -> Phase:
        """The phase this step runs in (self, unless the evidence moves it)."""
        return self

    def act(self, p: Parts, now: Now) -> Phase:
        """This step's work; the phase of the next step."""
        return self

    @staticmethod
    def of(p: Parts) -> Phase:
        """The phase the parts are in."""
        return PROBING if p.probing.active else DECIDED if p.probing.ready else WARM_UP

    def __repr__(self) -> str:
        return self.name


class WarmUp(Phase):
    """Before ``first``, nothing measured: layers send ``initial``, nothing is collective."""

    name = "warm-up"

    def enter(self, p: Parts, now: Now) -> Phase:
        if not guards.past_warm_up(p, now):
            return self
        if guards.cache_unread(p):
            actions.read_cache(p, now)
        todo = p.probing.todo(p.layout)
        if guards.lacks_measurements(p, todo):
            p.probing.begin(now.step, todo, p.layout)
        return Phase.of(p)


class Probing(Phase):
    """Profiling, one group of buckets after another: a latency round each step, and the
    first decision (or one with the new layers) when the probe steps are over."""

    name = "probing"

    def act(self, p: Parts, now: Now) -> Phase:
        if not guards.probe_over(p, now):
            p.costs.round(now.comm, now.plain)  # spread over the profiling steps
            return self
        actions.finish_probe(p, now)
        actions.decide(p, now, "measured" if p.decider.last is None else
                       "new layers measured")
        return Phase.of(p)


class Decided(Phase):
    """A plan in force: decided again when due (priced afresh, or kept when nothing it
    depends on moved); layers the measurements lack are profiled."""

    name = "decided"

    def enter(self, p: Parts, now: Now) -> Phase:
        if not guards.past_warm_up(p, now):
            return self
        todo = p.probing.todo(p.layout)
        if todo:
            p.probing.begin(now.step, todo, p.layout)
        return Phase.of(p)

    def act(self, p: Parts, now: Now) -> Phase:
        if not guards.decision_due(p, now):
            return self
        if guards.shares_unchanged(p):
            actions.keep(p, now)
        else:
            actions.decide(p, now, p.decider.why_now(p.journal.cached))
        return self


WARM_UP, PROBING, DECIDED = WarmUp(), Probing(), Decided()


def regime(p: Parts, now: Now) -> None:
    """Close a window of the gradient norms; a regime change is logged (and makes a
    decision due)."""
    change = p.decider.close(now.step)
    if change is not None:
        p.journal.log.append({"step": now.step, "event": "regime change",
                              "norm_change": change})


def trial(p: Parts, now: Now) -> None:
    """Time the step before; when the timing under way has its steps, move the trial on."""
    p.trial.tick(now.step)
    if p.trial.due():
        actions.time_plan(p, now)


def loss(p: Parts, now: Now) -> None:
    """When the window after a watched decision has ended, check the loss."""
    if p.quality.due(now.step):
        actions.check_loss(p, now)


#: Run every step, in this order, before the main phase.
WATCHERS: tuple[Callable[[Parts, Now], None], ...] = (regime, trial, loss)


class Machine:
    """The watchers and the main phase over the policy's parts (see the module doc)."""

    def __init__(self, parts: Parts) -> None:
        self.parts = parts
        self.started = False  # the first step's one-time costs are paid
        self.phase: Phase = Phase.of(parts)  # the phase after the last step (for reports)

    def step(self, now: Now) -> None:
        """Run one step: once the link's fit, the watchers, the main phase, the save."""
        p = self.parts
        if not self.started:
            self.started = True
            actions.fit_link(p, now)
        for watch in WATCHERS:
            watch(p, now)
        self.phase = Phase.of(p).enter(p, now).act(p, now)
        actions.save(p, now)
