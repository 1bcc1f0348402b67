"""What the automatic policy's phases (``phases``) do: read the cache, decide, time a plan,
check the loss, keep the measurements. Each is collective where its docstring says so, and
every rank reaches it at the same step, so every rank runs the same collectives in order."""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .. import costmodel
from . import report

if TYPE_CHECKING:
    from ..transport import Communicator
    from .cachefile import CacheFile
    from .config import AutoConfig
    from .costs import Costs
    from .decider import Decider
    from .layout import Layout
    from .probing import Probing
    from .quality import Quality
    from .trial import Trial

#: The policy's logger (``collectives.policy.auto``, as the docs name it): one line a decision.
log = logging.getLogger(__name__.rpartition(".")[0] + ".auto")


@dataclass
class Journal:
    """What the machine records for the policy: its log of events (kept in ``state_dict``),
    whether the measurements came from the cache, and whether something measured is not
    saved yet."""

    log: list[dict[str, Any]] = field(default_factory=list)
    cached: bool = False
    unsaved: bool = False


@dataclass(frozen=True)
class Parts:
    """The policy's parts, as the machine's phases and actions see them."""

    config: AutoConfig
    layout: Layout
    probing: Probing
    costs: Costs
    cache: CacheFile
    decider: Decider
    quality: Quality
    trial: Trial
    journal: Journal

    def table(self) -> str:
        """The last decision as a table (``Decider.table``)."""
        return self.decider.table(self.layout)


@dataclass(frozen=True)
class Now:
    """The step the machine runs: the communicator, the step, and how the hook sends
    (``plain``: the algorithm of uncompressed groups; ``hierarchy``: of compressed calls)."""

    comm: Communicator
    step: int
    plain: str | None
    hierarchy: str


def fit_link(p: Parts, now: Now) -> None:
    """The first step pays the one-time costs: the link's fit (collective on first use; kept
    on the communicator) when pricing or the cache's key needs it."""
    cfg = p.config
    if p.costs.wants_fit() or cfg.cache and not cfg.link:
        costmodel.params(now.comm)


def read_cache(p: Parts, now: Now) -> None:
    """This model's measurements from the cache (collective), else this machine's codec
    speeds for the profiler."""
    record = p.cache.read(now.comm, p.layout)
    if record is None:
        p.probing.speeds = p.cache.speeds(now.comm)  # (this machine's, any model's)
        return
    p.probing.adopt(record["table"])
    p.costs.adopt(record["measured"], record["fit"])
    p.journal.cached = True
    assert p.cache.found is not None
    p.journal.log.append({"step": now.step, "event": "measurements read",
                          "file": str(p.cache.found.path)})


def finish_probe(p: Parts, now: Now) -> None:
    """End the profiling (collective): its rows combined, this machine's codec speeds kept."""
    p.cache.keep_speeds(now.comm, p.probing.finish(now.comm))
    p.journal.unsaved = True


def decide(p: Parts, now: Now, reason: str) -> None:
    """A decision (collective): price the measurements, then the watchers' reaction to it
    (the loss check armed or a fallback held, a trial started or its result repeated)."""
    comm, step, dec, journal = now.comm, now.step, p.decider, p.journal
    dec.begin(step)
    if not p.layout.layers:  # no gradient was seen (the same on every rank)
        journal.log.append({"step": step, "event": "nothing profiled; decisions kept"})
        return
    cost = p.costs.model(comm)  # (collective on first use)
    fixed, seconds = p.costs.fixed(comm, cost, now.plain)
    if seconds is not None:
        journal.unsaved = True
        journal.log.append({"step": step, "event": "collective latency measured",
                            "latency_us": {k: v * 1e6 for k, v in seconds.items()}})
    p.trial.abandon(dec)  # (a trial under way times what the decision replaces)
    old = dict(dec.decisions)
    before = p.quality.before(comm, step)  # (collective when the check is on)
    out = dec.decide(comm, p.layout, p.probing.measurements, cost, fixed, now.hierarchy)
    journal.log.append({"step": step, "event": f"decided ({reason})", "predicted_s": out.total,
                        "error": dec.total_error,
                        "collective_us": {k: v * 1e6 for k, v in dec.collective_s.items()}})
    fallback = p.quality.decided(step, dec, old, before)
    if fallback is None and p.trial.repeat(dec, p.quality.safe()):
        journal.log.append({"step": step, "event": "trial: its measurement kept"})
    elif fallback is None:  # measured against 16 bits and uncompressed next
        p.trial.start(step, dec.phases(old))
    if fallback is not None:
        journal.log.append({"step": step, "event": f"quality {fallback}"})
    if comm.rank == 0:  # every rank decides alike
        report.log_decision(log, step, reason, dec.rows, out.total, dec.rides(p.layout),
                            old != dec.decisions, p.table())


def keep(p: Parts, now: Now) -> None:
    """The prices depend on nothing that moved: the same plan, at no cost."""
    p.decider.keep(now.step)
    p.journal.log.append({"step": now.step, "event": "kept (live shares unchanged)"})


def time_plan(p: Parts, now: Now) -> None:
    """The trial's phase has its steps: time 16 bits next, or keep the faster (collective
    at the trial's end; every rank alike)."""
    outcome = p.trial.advance(now.comm, now.step, p.decider, p.quality.safe())
    ended = not outcome.startswith("timing")
    p.journal.log.append({**(p.trial.result or {} if ended else {}), "step": now.step,
                          "event": f"trial: {outcome}"})
    if outcome == "below 16 bits":  # layers below 16 bits the decision did not send so
        p.quality.narrowed(now.step)
    if now.comm.rank == 0 and ended:
        r = p.trial.result or {}
        times = ", ".join(f"{r[k] * 1e3:.1f} ms {w}" for k, w in (
            ("plan_s", "under the plan"), ("sixteen_s", "at 16 bits"),
            ("narrow_s", "below 16 bits"), ("none_s", "uncompressed")) if k in r)
        log.info("step %d: measured a step %s: %s kept", now.step, times,
                 "the plan" if outcome == "kept" else outcome)


def check_loss(p: Parts, now: Now) -> None:
    """The window after a decision has ended: 16 bits if the loss fell behind (collective;
    every rank alike), logged once on rank 0."""
    fell = p.quality.fell(now.comm, now.step, p.decider)
    if fell is not None:
        p.journal.log.append({"step": now.step, "event": "quality fell behind", **fell})
        if now.comm.rank == 0 and fell["held"]:
            log.warning("%s\n%s", report.fell_behind(now.step, fell, p.quality.safe()),
                        p.table())


def save(p: Parts, now: Now) -> None:
    """Measured something new: keep it for the next run (rank 0 writes)."""
    if p.journal.unsaved:
        p.cache.write(now.comm, p.layout, p.probing.measurements, p.costs.measured,
                      p.costs.fitted)
        p.journal.unsaved = False
