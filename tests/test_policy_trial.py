"""The automatic policy's trial: a decision is timed against 16 bits, against its 16-bit
layers below 16 bits and against sending everything uncompressed, the plans taking turns, and
the simplest plan is kept unless one of more error is clearly faster (step times from a clock
the test sets, never measured)."""

from __future__ import annotations

import numpy as np
import pytest

from collectives.policy import AutoPolicy, canonical, profile, trial
from collectives.policy.tunables import Tunables
from tests.test_policy import SLOW, Ranks, SteadyClock
from tests.test_policy_loss import BIG, FIRST

INT8 = canonical("uniform:bits=8")
STEPS = 4
ROUNDS = 2  # (the default's three rounds of 4 steps would be 1, 1 and 2)


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
        far: float = float("inf"), **kw) -> tuple[AutoPolicy, list[str]]:
    """Drive the policy ``steps`` steps, each lasting what the layer is sent with says (longer
    and shorter by ``jitter`` of it in turn; ``plan_s``: at 8 bits). Uncompressed is timed
    whatever its price (``far``: the share of the plan's price past which it is not); ``kw``
    go to the policy."""
    clock = StepClock()
    monkeypatch.setattr(trial, "time", clock)
    pol = AutoPolicy(**{"candidates": candidates, "first": FIRST, "probe_steps": 1,
                        "every": 1000, "cost": SLOW, "latency": "model", "cache": False,
                        "optimizer": "sgd", "trial_steps": STEPS, "loss_window": 0,
                        "tunables": Tunables(uncompressed_far=far, trial_rounds=ROUNDS), **kw})
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


def blocks(seen: list[str]) -> list[tuple[str, int]]:
    """The runs of ``seen``: (what was sent, for how many steps in a row)."""
    out: list[tuple[str, int]] = []
    for s in seen:
        if out and out[-1][0] == s:
            out[-1] = (s, out[-1][1] + 1)
        else:
            out.append((s, 1))
    return out


#: Steps of one plan's turn: its share of the counted steps in a round, and one not counted.
TURN = STEPS // ROUNDS + Tunables().skip


def test_a_plan_slower_than_16_bits_in_measured_steps_gives_way_to_16_bits(monkeypatch) -> None:
    pol, seen = run(monkeypatch, plan_s=0.120, sixteen_s=0.100, none_s=0.200)
    first = seen.index(INT8)
    # the plans take turns, two rounds of the plan, 16 bits, then uncompressed
    turns = [(INT8, TURN), ("fp16", TURN), ("none", TURN)] * 2
    assert blocks(seen[first:])[:6] == turns, blocks(seen)
    assert seen[-1] == "fp16" and INT8 not in seen[first + 6 * TURN:], seen
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


def test_clearly_faster_asks_twice_the_noise_and_min_share() -> None:
    assert trial.clearly_faster(0.96, 1.0, 0.0)  # 4% > min_share, no noise
    assert not trial.clearly_faster(0.98, 1.0, 0.0)  # 2% < min_share
    assert not trial.clearly_faster(0.94, 1.0, 0.04)  # 6% < twice the noise
    # no fixed margin: 11% within noise of 0.2 is not clear, however large the gain looks
    assert not trial.clearly_faster(0.89, 1.0, 0.2)
    assert trial.clearly_faster(0.5, 1.0, 0.2)


def test_a_16_bit_plan_is_timed_below_16_bits_and_kept_there_when_faster(monkeypatch) -> None:
    """A prediction must clear the margin to send 8 bits (here 40%): the plan is fp16, but
    8 bits fit the budget, so the trial times them in turns with fp16 and uncompressed, and
    keeps 8 bits where the steps are clearly faster."""
    pol, seen = run(monkeypatch, plan_s=0.080, sixteen_s=0.100, none_s=0.200, margin=0.4)
    first = seen.index(INT8)  # (the plan's first turn runs on from the start's fp16)
    assert blocks(seen[first:])[:5] == [(INT8, TURN), ("none", TURN), ("fp16", TURN),
                                        (INT8, TURN), ("none", TURN)], blocks(seen)
    r = pol._trial.result
    assert r["phase"] == "narrow" and r["plan"] == {"w": "fp16"} and r["narrow"] == {"w": INT8}
    assert seen[-1] == INT8 and pol.decisions["w"] == INT8 and pol.rows[0]["compressor"] == INT8
    assert "measured: below 16 bits as fast" in row(pol)
    # 2% faster: within min_share, fp16 stays
    pol, seen = run(monkeypatch, plan_s=0.098, sixteen_s=0.100, none_s=0.200, margin=0.4)
    assert pol._trial.result["phase"] == "plan" and seen[-1] == "fp16", seen


def test_a_narrower_plan_kept_is_watched_by_the_loss_check(monkeypatch) -> None:
    pol, _ = run(monkeypatch, plan_s=0.080, sixteen_s=0.100, none_s=0.200, margin=0.4)
    q = pol._quality
    q.before_last = [-0.01, 0.001]  # the trend before the decision (the check is on)
    q.narrowed(50)
    assert q.watch == {"step": 50, "before": [-0.01, 0.001]}
    q.watch, q.fallback = None, {"step": 1}
    q.narrowed(60)  # a fallback in force: nothing to watch
    assert q.watch is None


def test_one_round_times_each_plan_in_one_turn(monkeypatch) -> None:
    pol, seen = run(monkeypatch, plan_s=0.120, sixteen_s=0.100, none_s=0.200,
                    tunables=Tunables(trial_rounds=1, uncompressed_far=float("inf")))
    first = seen.index(INT8)
    one = STEPS + Tunables().skip
    assert blocks(seen[first:])[:3] == [(INT8, one), ("fp16", one), ("none", one)], seen
    assert pol._trial.result["rounds"] == 1 and seen[-1] == "fp16"


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


def test_rounds_share_the_counted_steps_and_never_outnumber_them(monkeypatch) -> None:
    """Three rounds of 4 counted steps: turns of 1, 1 and 2 counted steps; more rounds than
    counted steps: one counted step a turn."""
    pol, seen = run(monkeypatch, plan_s=0.120, sixteen_s=0.100, none_s=0.200,
                    tunables=Tunables(trial_rounds=3, uncompressed_far=float("inf")))
    first = seen.index(INT8)
    skip = Tunables().skip
    turns = [(s, k + skip) for k in (1, 1, 2) for s in (INT8, "fp16", "none")]
    assert blocks(seen[first:])[:9] == turns, blocks(seen)
    pol, seen = run(monkeypatch, plan_s=0.120, sixteen_s=0.100, none_s=0.200,
                    tunables=Tunables(trial_rounds=9, uncompressed_far=float("inf")))
    first = seen.index(INT8)
    assert blocks(seen[first:])[:12] == [(s, 1 + skip) for s in (INT8, "fp16", "none")] * 4
    assert pol._trial.result["kept"] == "fp16"


def test_the_log_of_a_turn_carries_its_own_step(monkeypatch) -> None:
    pol, _ = run(monkeypatch, plan_s=0.120, sixteen_s=0.100, none_s=0.200)
    trial_events = [e for e in pol.log if e["event"].startswith("trial")]
    steps = [e["step"] for e in trial_events]
    assert steps == sorted(steps) and len(set(steps)) == len(steps), trial_events
    assert all("plan_s" not in e for e in trial_events if "timing" in e["event"])
