"""The automatic policy's quality check: the training loss before and after a decision."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from collectives.policy import AutoConfig, AutoPolicy, Layer, Policy, canonical, profile
from collectives.policy.quality import Quality, trend
from tests.test_policy import SLOW, Ranks, SteadyClock

INT8 = canonical("uniform:bits=8")
BIG = Layer("w", 1 << 16, (256, 256), "linear")
FIRST = 12  # profiled at step 12, decided at 13: ten losses reported before it
WINDOW = 10


@pytest.fixture(autouse=True)
def _steady_clock(monkeypatch) -> None:
    monkeypatch.setattr(profile, "time", SteadyClock())


def policy(**options) -> AutoPolicy:
    """One layer worth compressing on a slow link, a decision every 20 steps."""
    kw = {"candidates": ("none", "fp16", "uniform:bits=8"), "first": FIRST, "probe_steps": 1,
          "every": 20, "cost": SLOW, "latency": "model", "cache": False, "optimizer": "sgd",
          "loss_window": WINDOW, "loss_samples": 5, "trial_steps": 0, **options}
    return AutoPolicy(**kw)


def run(pol: AutoPolicy, losses, steps: range, comm=None) -> list[str]:
    """What the hook and the training loop do, step by step; the decisions at each step."""
    comm, rng, seen = comm or Ranks(), np.random.default_rng(0), []
    for step in steps:
        pol.update(comm, step)
        if pol.wants_profile(step):
            pol.observe(step, BIG, rng.standard_normal(BIG.numel), bucket=0)
        pol.observe_norm(step, 1.0, 0)
        loss = losses(step)
        if loss is not None:
            pol.observe_loss(step, loss)
        seen.append(pol.decisions.get("w", "(none yet)"))
    return seen


def falling(step: int) -> float:
    return 5.0 - 0.1 * step + 0.01 * (-1) ** step


def events(pol: AutoPolicy) -> list[tuple[int, str]]:
    return [(e["step"], e["event"]) for e in pol.log if e["event"].startswith(("decided",
                                                                               "quality"))]


@pytest.mark.parametrize("after", ["flat", "rising"])
def test_a_loss_that_stops_falling_after_compressing_falls_back_to_fp16(after, caplog) -> None:
    """The loss falls 0.1 a step; the decision at step 13 quantizes to 8 bits; the loss then
    stops falling (or rises): at the end of the window (step 23) the layer goes to fp16, the
    table says why, and rank 0 says so once."""
    def losses(step: int) -> float:
        if step < FIRST + 1:
            return falling(step)
        late = step - FIRST - 1
        return falling(FIRST + 1) + (0.0 if after == "flat" else 0.05 * late) \
            + 0.01 * (-1) ** step

    pol = policy()
    with caplog.at_level(logging.INFO, logger="collectives.policy.auto"):
        seen = run(pol, losses, range(30))
    assert seen[FIRST + 1] == INT8 and seen[FIRST + WINDOW] == INT8, seen
    assert seen[FIRST + 1 + WINDOW] == "fp16" and seen[-1] == "fp16", seen
    assert events(pol) == [(13, "decided (measured)"), (23, "quality fell behind")]
    fell = next(e for e in pol.log if e["event"] == "quality fell behind")
    assert fell["decision"] == 13 and fell["held"] == ["w"]
    assert fell["before"] == pytest.approx(-0.1, abs=0.01)
    assert "quality fell behind" in next(x for x in pol.table().splitlines()
                                         if x.startswith("w "))
    warned = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warned) == 1 and "step 23: quality fell behind after the decision at step 13" \
        in warned[0].getMessage()


def test_a_loss_that_keeps_falling_keeps_the_decision_and_the_fallback_ends_on_recovery(
        ) -> None:
    pol = policy()
    assert run(pol, falling, range(30))[-1] == INT8  # no fallback: as fast after as before
    assert events(pol) == [(13, "decided (measured)")]
    # Flat after the decision: fp16 from step 23; at the regular decision at 33 the loss
    # has not fallen again (held), at 53 it has (the window 43-52 falls): 8 bits again.
    pol = policy()

    def losses(step: int) -> float:
        return falling(step) if step <= FIRST or step >= 43 else 3.7 + 0.01 * (-1) ** step

    seen = run(pol, losses, range(60))
    assert seen[22] == INT8 and seen[23] == "fp16" and seen[52] == "fp16", seen
    assert seen[53] == INT8, seen
    assert [e for e in events(pol) if e[1].startswith("quality")] == [
        (23, "quality fell behind"), (33, "quality held"), (53, "quality recovered")]


def test_a_fallback_is_not_lifted_by_the_window_that_caused_it() -> None:
    """The window after a decision ends at the next regular decision (every = loss_window):
    the fallback holds there, since the window before it was not one of 16 bits."""
    pol = policy(every=WINDOW)
    slow = run(pol, lambda s: falling(s) if s <= FIRST else falling(FIRST) - 0.02 * (s - FIRST),
               range(25))
    assert slow[22] == INT8 and slow[23] == "fp16" and slow[24] == "fp16", slow
    assert [e for e in events(pol) if e[0] == 23] == [
        (23, "quality fell behind"), (23, "decided (every 10)"), (23, "quality held")]


def test_no_losses_or_too_few_mean_no_check() -> None:
    pol = policy()
    assert run(pol, lambda step: None, range(30))[-1] == INT8
    assert pol._quality.watch is None and pol._quality.fallback is None
    sparse = policy()  # every fifth step only: under loss_samples in a window
    assert run(sparse, lambda s: falling(s) if s % 5 == 0 else None, range(30))[-1] == INT8
    off = policy(loss_window=0)
    assert run(off, lambda step: 3.0, range(30))[-1] == INT8


class TwoRanks:
    """Rank 0 of two; the other rank reported ``other`` ((sum, count) per step)."""

    size, rank, engine = 2, 0, "mpi"

    def __init__(self, other: dict[int, float], lo: int) -> None:
        self.other, self.lo = other, lo

    def allgather_ints(self, values, collective="", timeout=None):
        mine = np.asarray(values).view(np.float64).reshape(-1, 2)
        theirs = np.zeros_like(mine)
        for s, v in self.other.items():
            if 0 <= s - self.lo < len(mine):
                theirs[s - self.lo] = v, 1.0
        return np.stack([mine.reshape(-1), theirs.reshape(-1)]).view(np.int64)


def test_the_loss_is_averaged_over_the_ranks_and_a_missing_report_is_left_out() -> None:
    q = Quality(AutoConfig(loss_window=10, loss_samples=3))
    for s in range(10):  # this rank: flat at 2; the other: falling, only on even steps
        q.add(s, 2.0)
    other = {s: 2.0 - 0.2 * s for s in range(0, 10, 2)}
    slope, se = q.agree(TwoRanks(other, 0), 0, 10)
    means = np.array([(2.0 + other[s]) / 2 if s in other else 2.0 for s in range(10)])
    assert (slope, se) == pytest.approx(trend(means, 3))
    assert slope == pytest.approx(np.polyfit(np.arange(10), means, 1)[0])
    q.add(11, float("nan"))  # a skipped step says nothing
    assert 11 not in q.losses


def test_compression_state_passes_the_loss_of_the_step_under_way() -> None:
    pytest.importorskip("torch")
    import torch

    import collectives.ddp as cddp

    class Heard(Policy):
        adaptive = True
        heard: list[tuple[int, float]] = []

        def choose(self, layer):
            return "none"

        def observe_loss(self, step: int, loss: float) -> None:
            self.heard.append((step, loss))

    state = cddp.CompressionState(policy=Heard())
    state.current = 7
    state.observe_loss(torch.tensor(2.5))
    state.observe_loss(1.25)
    assert Heard.heard == [(7, 2.5), (7, 1.25)]
    Policy().observe_loss(0, 1.0)  # any policy hears it (a static one does nothing)


@pytest.mark.parametrize("kwargs, words", [({"loss_window": -1}, "loss_window"),
                                           ({"loss_ratio": 1.5}, "loss_ratio"),
                                           ({"loss_samples": 1}, "loss_samples")])
def test_the_loss_check_is_validated(kwargs, words) -> None:
    with pytest.raises(ValueError, match=words):
        AutoConfig(**kwargs)


@pytest.mark.parametrize("bad", ["abc", None, [1.0, 2.0]])
def test_a_loss_that_is_not_a_number_is_refused_naming_what_works(bad) -> None:
    with pytest.raises(TypeError, match=r"loss\.item\(\)"):
        policy().observe_loss(3, bad)
