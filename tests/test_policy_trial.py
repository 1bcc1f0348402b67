"""The automatic policy's trial: a decision that compresses below 16 bits is timed against 16
bits, and the faster plan is kept (step times from a clock the test sets, never measured)."""

from __future__ import annotations

import numpy as np
import pytest

from collectives.policy import AutoPolicy, canonical, profile, trial
from tests.test_policy import SLOW, Ranks, SteadyClock
from tests.test_policy_loss import BIG, FIRST

INT8 = canonical("uniform:bits=8")
STEPS = 4


class StepClock:
    """perf_counter for the trial: each step lasts what ``seconds(decision)`` says."""

    def __init__(self) -> None:
        self.now = 0.0

    def perf_counter(self) -> float:
        return self.now


@pytest.fixture(autouse=True)
def _steady_clock(monkeypatch) -> None:
    monkeypatch.setattr(profile, "time", SteadyClock())


def run(monkeypatch, plan_s: float, sixteen_s: float, steps: int = 40
        ) -> tuple[AutoPolicy, list[str]]:
    clock = StepClock()
    monkeypatch.setattr(trial, "time", clock)
    pol = AutoPolicy(candidates=("none", "fp16", "uniform:bits=8"), first=FIRST,
                     probe_steps=1, every=1000, cost=SLOW, latency="model", cache=False,
                     optimizer="sgd", trial_steps=STEPS, loss_window=0)
    comm, rng, seen = Ranks(), np.random.default_rng(0), []
    for step in range(steps):
        pol.update(comm, step)
        if pol.wants_profile(step):
            pol.observe(step, BIG, rng.standard_normal(BIG.numel), bucket=0)
        pol.observe_norm(step, 1.0, 0)
        now = pol.decisions.get("w", "fp16")
        seen.append(now)
        clock.now += plan_s if now == INT8 else sixteen_s
    return pol, seen


def test_a_plan_slower_than_16_bits_in_measured_steps_gives_way_to_16_bits(monkeypatch) -> None:
    pol, seen = run(monkeypatch, plan_s=0.120, sixteen_s=0.100)
    first = seen.index(INT8)
    assert seen[first:first + STEPS + 1] == [INT8] * (STEPS + 1), seen
    assert seen[-1] == "fp16" and INT8 not in seen[first + 2 * STEPS + 4:], seen
    assert pol._trial.result["kept"] == "fp16"
    assert pol._trial.result["plan_s"] == pytest.approx(0.120)
    assert pol._trial.result["sixteen_s"] == pytest.approx(0.100)
    row = next(x for x in pol.table().splitlines() if x.startswith("w "))
    assert "measured: 16 bits as fast" in row


def test_a_plan_faster_in_measured_steps_is_kept(monkeypatch) -> None:
    pol, seen = run(monkeypatch, plan_s=0.060, sixteen_s=0.100)
    first = seen.index(INT8)
    assert "fp16" in seen[first:], seen  # 16 bits were timed
    assert seen[-1] == INT8 and pol._trial.result["kept"] == "plan", seen
    assert pol.rows and pol.rows[0]["compressor"] == INT8


def test_no_trial_when_turned_off(monkeypatch) -> None:
    monkeypatch.setattr(trial, "time", StepClock())
    pol = AutoPolicy(first=0, trial_steps=0)
    pol._trial.start(0, pol._decider)
    assert not pol._trial.active


def test_trial_steps_must_be_a_count() -> None:
    with pytest.raises(ValueError, match="trial_steps"):
        AutoPolicy(trial_steps=-1)
