"""The named checks the automatic policy's phase machine (``phases``) moves on.

Each is a predicate on the parts and the step, with the reason it exists. The checks inside a
decision live where the decision is made, under names of their own: the residual bound
(``decide.residual_grows``), the per-layer error bound (``decide.over_budget``), hysteresis
(``decide.keeps_standing``), the noise clamps (``columns.plain_first``,
``latency.plain_first``), small layers riding in their bucket (``Decider.choose_bucket``); the
watchers' checks are their parts' (``Trial.due``, ``Quality.due``, ``Decider.close``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .actions import Now, Parts


def past_warm_up(p: Parts, now: Now) -> bool:
    """Whether ``first`` steps have passed: DDP rebuilds its buckets after the first step, so
    the layout the measurements are keyed and scheduled by is known only then."""
    return now.step >= p.config.first


def cache_unread(p: Parts) -> bool:
    """Whether nothing was measured or decided yet: the only time the cache is read (a later
    read would take another run's numbers over this run's own)."""
    return not p.probing.ready and p.decider.last is None


def lacks_measurements(p: Parts, todo: list[str]) -> bool:
    """Whether profiling must begin: nothing measured (or read) yet, or layers ``todo`` that
    no measurement covers (a model that grew); a decision cannot price what was never seen."""
    return not p.probing.ready or bool(todo)


def probe_over(p: Parts, now: Now) -> bool:
    """Whether the profiling under way has had all its steps (every group of buckets its
    ``probe_steps``): its rows can be combined and priced."""
    return now.step >= p.probing.end()


def decision_due(p: Parts, now: Now) -> bool:
    """Whether a decision is due: none yet, a regime change of the gradient norm, or
    ``every`` steps since the last (``Decider.due``)."""
    return p.decider.due(now.step)


def shares_unchanged(p: Parts) -> bool:
    """Whether a due decision may keep the standing plan without pricing: there is one, the
    regime holds, no bucket's live share moved by ``tunables.shift`` and no quality fallback
    is in force. The prices depend on nothing else that moves, so the plan would be the same."""
    dec = p.decider
    return dec.last is not None and not dec.regime \
        and not dec.moved(p.config.tunables.shift) and p.quality.fallback is None
