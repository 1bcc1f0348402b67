"""The automatic policy's trial: a decision that compresses is timed against 16 bits and
against sending everything uncompressed, and the simplest plan is kept unless one of more
error is clearly faster (step times from a clock the test sets, never measured)."""

from __future__ import annotations

import numpy as np
import pytest

from collectives.policy import AutoPolicy, canonical, profile, trial
from collectives.policy.tunables import Tunables
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


def run(monkeypatch, plan_s: float, sixteen_s: float, none_s: float = 1.0, steps: int = 40,
        candidates: tuple[str, ...] = ("none", "fp16", "uniform:bits=8"), jitter: float = 0.0,
        far: float = float("inf")) -> tuple[AutoPolicy, list[str]]:
    """Drive the policy ``steps`` steps, each lasting what the layer is sent with says (longer
    and shorter by ``jitter`` of it in turn). Uncompressed is timed whatever its price
    (``far``: the share of the plan's price past which it is not)."""
    clock = StepClock()
    monkeypatch.setattr(trial, "time", clock)
    pol = AutoPolicy(candidates=candidates, first=FIRST,
                     probe_steps=1, every=1000, cost=SLOW, latency="model", cache=False,
                     optimizer="sgd", trial_steps=STEPS, loss_window=0,
                     tunables=Tunables(uncompressed_far=far))
    comm, rng, seen = Ranks(), np.random.default_rng(0), []
    for step in range(steps):
        pol.update(comm, step)
        if pol.wants_profile(step):
            pol.observe(step, BIG, rng.standard_normal(BIG.numel), bucket=0)
        pol.observe_norm(step, 1.0, 0)
        now = pol.decisions.get("w", "fp16")
        seen.append(now)
        clock.now += {INT8: plan_s, "fp16": sixteen_s, "none": none_s}[now] * (
            1.0 + jitter * (-1) ** step)
    return pol, seen


def row(pol: AutoPolicy) -> str:
    return next(x for x in pol.table().splitlines() if x.startswith("w "))


def test_a_plan_slower_than_16_bits_in_measured_steps_gives_way_to_16_bits(monkeypatch) -> None:
    pol, seen = run(monkeypatch, plan_s=0.120, sixteen_s=0.100, none_s=0.200)
    first = seen.index(INT8)
    assert seen[first:first + STEPS + 1] == [INT8] * (STEPS + 1), seen
    assert "none" in seen[first:], seen  # uncompressed was timed too
    assert seen[-1] == "fp16" and INT8 not in seen[first + 3 * STEPS + 4:], seen
    r = pol._trial.result
    assert r["kept"] == "fp16"
    assert (r["plan_s"], r["sixteen_s"], r["none_s"]) == pytest.approx((0.120, 0.100, 0.200))
    assert "measured: 16 bits as fast" in row(pol)


def test_a_plan_faster_in_measured_steps_is_kept(monkeypatch) -> None:
    pol, seen = run(monkeypatch, plan_s=0.060, sixteen_s=0.100, none_s=0.200)
    first = seen.index(INT8)
    assert "fp16" in seen[first:] and "none" in seen[first:], seen  # both were timed
    assert seen[-1] == INT8 and pol._trial.result["kept"] == "plan", seen
    assert pol.rows and pol.rows[0]["compressor"] == INT8


def test_where_uncompressed_is_as_fast_it_is_kept(monkeypatch) -> None:
    """Over shared memory fp16's cast costs more than its bytes save: DDP's own path wins,
    and the layer goes uncompressed, though the price said compress."""
    pol, seen = run(monkeypatch, plan_s=0.110, sixteen_s=0.105, none_s=0.100)
    assert seen[-1] == "none" and pol._trial.result["kept"] == "none", seen
    assert "measured: uncompressed as fast" in row(pol)
    # 16 bits less than tunables.min_share faster than uncompressed: still uncompressed (less error)
    pol, seen = run(monkeypatch, plan_s=0.110, sixteen_s=0.098, none_s=0.100)
    assert seen[-1] == "none", seen


def test_a_gain_under_the_margin_counts_only_where_the_steps_measure_it(monkeypatch) -> None:
    # 5% faster, every step alike: a gain the steps show clearly, taken
    pol, seen = run(monkeypatch, plan_s=0.110, sixteen_s=0.095, none_s=0.100)
    assert seen[-1] == "fp16" and pol._trial.result["kept"] == "fp16", seen
    # the same 5% on steps 5% apart from one another: within the noise, uncompressed stays
    pol, seen = run(monkeypatch, plan_s=0.110, sixteen_s=0.095, none_s=0.100, jitter=0.05)
    assert seen[-1] == "none", seen


def test_clearly_faster_asks_twice_the_noise_between_min_share_and_the_margin() -> None:
    assert trial.clearly_faster(0.96, 1.0, 0.0, 0.1)  # 4% > min_share, no noise
    assert not trial.clearly_faster(0.98, 1.0, 0.0, 0.1)  # 2% < min_share
    assert not trial.clearly_faster(0.94, 1.0, 0.04, 0.1)  # 6% < twice the noise
    assert trial.clearly_faster(0.89, 1.0, 0.5, 0.1)  # the margin is the most it asks


def test_uncompressed_priced_far_slower_is_not_timed(monkeypatch) -> None:
    """At 1 Gbit/s the model prices the layer uncompressed at several times its 8 bits: the
    trial times 16 bits only (uncompressed steps would only cost start-up)."""
    pol, seen = run(monkeypatch, plan_s=0.060, sixteen_s=0.100, none_s=0.200, far=1.5)
    plan_s, none_s = pol._decider.predicted
    assert none_s > 1.5 * plan_s > 0
    first = seen.index(INT8)
    assert "fp16" in seen[first:] and "none" not in seen[first:], seen
    assert pol._trial.result["kept"] == "plan" and "none_s" not in pol._trial.result


def test_a_16_bit_plan_is_timed_against_uncompressed_only(monkeypatch) -> None:
    pol, seen = run(monkeypatch, plan_s=1.0, sixteen_s=0.120, none_s=0.100,
                    candidates=("none", "fp16"))
    first = seen.index("none", FIRST + 2)
    assert INT8 not in seen and seen[-1] == "none", seen
    assert set(pol._trial.result) >= {"plan_s", "none_s"}
    assert "sixteen_s" not in pol._trial.result
    assert first > FIRST


def test_the_same_plan_decided_again_keeps_the_measurement(monkeypatch) -> None:
    pol, seen = run(monkeypatch, plan_s=0.110, sixteen_s=0.105, none_s=0.100)
    assert pol.decisions["w"] == "none"
    tried = dict(pol._trial.result["plan"])
    pol.decisions.clear()
    pol.decisions.update(tried)
    assert pol._trial.repeat(pol._decider, "fp16")
    assert pol.decisions["w"] == "none" and not pol._trial.active


def test_no_trial_when_turned_off(monkeypatch) -> None:
    monkeypatch.setattr(trial, "time", StepClock())
    pol = AutoPolicy(first=0, trial_steps=0)
    pol._trial.start(0, ["sixteen", "none"])
    assert not pol._trial.active


def test_trial_steps_must_be_a_count() -> None:
    with pytest.raises(ValueError, match="trial_steps"):
        AutoPolicy(trial_steps=-1)
