"""Policies: rules, tables, the dynamic program and the automatic selector (one process)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from collectives.costmodel import CostParams
from collectives.policy import AutoPolicy, Layer, Rules, Table, as_policy, canonical, solve
from collectives.policy.tunables import Tunables
from collectives.transport import CommCache

SLOW = CostParams(alpha=5e-5, beta=8e-9, gamma=1e-10)  # ~1 Gbit/s


class Ranks:
    """Four ranks that measured the same: enough for the policy's combine step."""

    size, rank, engine = 4, 0, "mpi"

    def __init__(self) -> None:
        self.cache = CommCache(cost_params=SLOW)

    def allgather_ints(self, values, collective="", timeout=None):
        return np.tile(np.asarray(values).reshape(1, -1), (self.size, 1))


def lay(name: str, numel: int, kind: str = "linear", shape=None) -> Layer:
    return Layer(name, numel, shape or ((numel,) if kind == "1d" else (numel // 64, 64)), kind)


def test_rules_pick_what_they_say() -> None:
    rules = Rules([("numel<16384", "none"), ("kind=embedding", "topk:ratio=0.01"),
                   ("name~^head\\.", "fp16"), ("kind=conv & numel>=1e5", "powersgd:rank=4"),
                   ("*", "uniform:bits=4")])
    assert rules.choose(lay("b", 10, "1d")) == "none"
    assert rules.choose(lay("emb", 1 << 20, "embedding")).startswith("topk:")
    assert rules.choose(lay("head.w", 1 << 16)).startswith("fp16")
    assert rules.choose(lay("c", 1 << 17, "conv")).startswith("powersgd:rank=4")
    assert rules.choose(lay("c", 1 << 15, "conv")).startswith("uniform:bits=4")
    assert "uniform:bits=4" in rules.table([lay("x", 1 << 20)])


@pytest.mark.parametrize("rules, words", [
    ([("numel<x", "none")], "not a number"), ([("kind=foo", "none")], "unknown kind"),
    ([("size<3", "none")], "size<3"), ([("*", "uniform:bitz=3")], "bitz"),
    ([("*", "zip")], "zip"), ([("name~[", "none")], "regular expression"),
    ([], "at least one"), ([("*",)], "pair"), ([("numel<-1", "none")], "whole number"),
])
def test_bad_rules_raise_value_error_naming_the_problem(rules, words) -> None:
    with pytest.raises(ValueError, match=words):
        Rules(rules)


def test_unmatched_layer_and_tables() -> None:
    with pytest.raises(ValueError, match="no rule matches layer 'w'"):
        Rules([("kind=conv", "none")]).choose(lay("w", 100))
    table = Table({"a": "fp16"}, default="none")
    assert table.choose(lay("a", 8)) == "fp16" and table.choose(lay("b", 8)) == "none"
    with pytest.raises(ValueError, match="does not have"):
        table.bind([lay("b", 8)])
    with pytest.raises(ValueError, match="not in the table"):
        Table({"a": "fp16"}).choose(lay("b", 8))
    assert isinstance(as_policy({"a": "fp16", "*": "none"}), Table)
    for bad in (3, None, "uniform:bits=99"):
        with pytest.raises(ValueError):
            as_policy(bad)


def test_dynamic_program_matches_brute_force() -> None:
    rng = np.random.default_rng(0)
    for _ in range(30):
        layers, opts = int(rng.integers(1, 5)), int(rng.integers(1, 4))
        times = rng.uniform(0, 1, (layers, opts + 1)).tolist()
        errors = np.concatenate([np.zeros((layers, 1)), rng.uniform(0, 0.5, (layers, opts))],
                                axis=1).tolist()
        budget = float(rng.uniform(0, 1))
        pick = solve(times, errors, budget, bins=512)
        assert sum(errors[i][c] for i, c in enumerate(pick)) <= budget + 1e-12
        best = min(sum(times[i][c] for i, c in enumerate(combo))
                   for combo in itertools.product(range(opts + 1), repeat=layers)
                   if sum(errors[i][c] for i, c in enumerate(combo)) <= budget)
        got = sum(times[i][c] for i, c in enumerate(pick))
        assert got <= best + 1.0 / 512 * layers + 1e-9 or math.isclose(got, best)


def _profile(policy: AutoPolicy, layers: list[Layer], steps: range) -> None:
    rng = np.random.default_rng(1)
    scale = {"big": 1.0, "mid": 0.5, "tiny": 2.0}  # known gradients: Gaussian, fixed scales
    for step in steps:
        assert policy.wants_profile(step) or step == steps[-1] + 1
        for layer in layers:
            policy.observe(step, layer, scale[layer.name] * rng.standard_normal(layer.numel))


@pytest.mark.parametrize("budget", [0.0, 0.05, 0.3])
def test_auto_policy_respects_its_budget_and_leaves_tiny_layers_alone(budget: float) -> None:
    layers = [lay("big", 1 << 17), lay("mid", 1 << 14), lay("tiny", 16, "1d")]
    policy = AutoPolicy(max_error=budget, first=0, probe_steps=2, cost=SLOW, latency="model")
    comm = Ranks()
    assert not policy.update(comm, 0) and policy.wants_profile(0)
    _profile(policy, layers, range(2))
    policy.update(comm, 2)
    assert set(policy.decisions) == {"big", "mid", "tiny"}
    assert policy.total_error <= budget + 1e-12
    assert policy.decisions["tiny"] == "none"
    if budget == 0:
        assert set(policy.decisions.values()) == {"none"}
    if budget == 0.3:  # a 1 Gbit/s link: the big layer is worth compressing
        assert policy.decisions["big"] != "none"
    table = policy.table()
    assert "big" in table and "budget" in table and policy.log[-1]["event"].startswith("decided")


def test_auto_policy_reevaluates_on_a_regime_change_without_profiling() -> None:
    policy = AutoPolicy(first=0, every=1000, window=2, threshold=0.5, probe_steps=1, cost=SLOW,
                        latency="model", min_numel=0)
    comm, layers = Ranks(), [lay("big", 1 << 12)]
    probes = []
    for step in range(10):
        policy.update(comm, step)
        if policy.wants_profile(step):
            probes.append(step)
            _profile(policy, layers, range(step, step + 1))
        policy.observe_norm(step, 1.0 if step < 4 else 100.0)  # the norm jumps at step 4
    assert any(e["event"] == "regime change" for e in policy.log)
    assert probes == [0], probes  # measured once; the regime change re-prices
    decided = [e for e in policy.log if e["event"].startswith("decided")]
    assert [e["step"] for e in decided] == [1, 6] and "regime change" in decided[1]["event"]


def test_auto_config_is_validated() -> None:
    for kwargs, words in (({"candidates": ("fp16",)}, "none"), ({"max_error": -1}, "max_error"),
                          ({"every": 0}, "every"), ({"candidates": ("zip",)}, "zip"),
                          ({"latency": -1.0}, "latency"), ({"latency": {"none": 1e-3}}, "fp16"),
                          ({"latency": "fast"}, "latency")):
        with pytest.raises(ValueError, match=words):
            AutoPolicy(**kwargs)


def test_plan_pays_one_latency_per_bucket_and_compressor() -> None:
    from collectives.policy import plan

    cands = ("none", "fp16")
    fixed = [plan.latency(4, "none", SLOW), plan.latency(4, "fp16", SLOW)]
    body = [[1e-3, 0.5e-3], [1e-6, 2e-6]]  # a big layer and a tiny one
    errors = [[0.0, 1e-4], [0.0, 1e-4]]
    fused, _ = plan.plan(cands, body, errors, 0.01, 64, fixed, ["b0", "b0"])
    apart, _ = plan.plan(cands, body, errors, 0.01, 64, fixed, ["b0", "b1"])
    assert fused == [1, 1]  # the tiny layer rides in the big one's collective
    assert apart == [1, 0]  # alone, it is cheaper uncompressed


def test_min_gain_prefers_the_lower_error_on_a_tie() -> None:
    from collectives.policy import plan

    body = [[10e-6, 9e-6, 5e-6, 8.5e-6]]  # none, then three compressors of rising error
    errors = [[0.0, 0.01, 0.02, 0.03]]
    assert plan.prune(body, errors, 2e-6) == [[10e-6, math.inf, 5e-6, math.inf]]
    cands = ("none", "fp16", "uniform:bits=8", "uniform:bits=4")
    pick, _ = plan.plan(cands, [[10e-6, 9e-6, 9.5e-6, 9e-6]], errors, 1.0, 64, [0.0] * 4,
                        ["b0"], plan.Noise(min_gain=2e-6))
    assert pick == [0]  # a microsecond is noise: uncompressed, error-free


def test_biases_join_their_buckets_collective_rather_than_start_one() -> None:
    from collectives.policy import plan

    cands = ("none", "fp16", "uniform:bits=8", "uniform:bits=4", "topk:ratio=0.01")
    big = [20e-3, 10e-3, 5e-3, 2.5e-3, 0.3e-3]  # bodies: compressing a large layer pays
    tiny = [16e-6, 14e-6, 12e-6, 10e-6, 6e-6]  # a bias: a few microseconds either way
    body = [big, big] + [tiny] * 30
    errors = [[0, 1e-6, 1e-4, 1e-3, 0.02],  # bucket 0: topk is fine for this one
              [0, 1e-6, 1e-4, 1e-3, 0.5]] + [[0, 1e-12, 1e-10, 1e-9, 1e-8]] * 30  # not this
    buckets = [0] + [1] * 31
    pick, total = plan.plan(cands, body, errors, 0.3 ** 2, 256, [1e-3] * 5, buckets,
                            plan.Noise(2e-6))
    assert pick[0] == 4 and pick[1] == 3  # topk alone in bucket 0, uniform:bits=4 in 1
    assert set(pick[1:]) <= {pick[1], 0}, pick  # no third collective for the biases
    assert total == pytest.approx(plan.step_time(pick, body, [1e-3] * 5, buckets))
    assert total < 0.3e-3 + 2.5e-3 + 30 * 6e-6 + 3e-3  # cheaper than biases in topk


class SteadyClock:
    """A timing source that does not depend on the machine: each reading 10 us later."""

    now = 0.0

    def perf_counter(self) -> float:
        self.now += 1e-5
        return self.now


def _bucket_of_biases(policy: AutoPolicy, steps: range, biases: int = 30) -> list[Layer]:
    """One DDP bucket: a large weight and many biases (gradients of a known scale)."""
    layers = [lay("w", 1 << 16)] + [lay(f"b{i:02d}", 64, "1d") for i in range(biases)]
    rng = np.random.default_rng(2)
    for step in steps:
        for layer in layers:
            scale = 1.0 if layer.name == "w" else 0.01  # biases: a tiny share of the norm
            policy.observe(step, layer, scale * rng.standard_normal(layer.numel), bucket=0)
    return layers


@pytest.mark.parametrize("latency", [1e-3, {"none": 1e-3, "fp16": 1.2e-3, "uniform:bits=8": 2e-3,
                                            "uniform:bits=4": 2e-3, "topk:ratio=0.01": 3e-3,
                                            "powersgd:rank=4": 4e-3}])
def test_a_millisecond_per_collective_keeps_biases_with_the_bucket(latency, monkeypatch) -> None:
    from collectives.policy import profile

    # Codec times of this machine's load would decide the close call between a quantized
    # weight and a plain one (about 10% apart): every timed call takes 10 us instead.
    monkeypatch.setattr(profile, "time", SteadyClock())
    # (One probe step: the error in the gradient's norm; Adam's is measured over several.)
    # No cache: codec speeds another test left in this machine's file would be used instead.
    policy = AutoPolicy(max_error=0.3, first=0, probe_steps=1, cost=SLOW, latency=latency,
                        optimizer="sgd", cache=False)
    comm = Ranks()
    policy.update(comm, 0)
    layers = _bucket_of_biases(policy, range(1))
    policy.update(comm, 1)
    used = set(policy.decisions.values())
    big = policy.decisions["w"]
    assert big != "none" and used <= {big, "none"}, policy.table()  # at most two collectives
    assert policy.total_error <= 0.3 + 1e-12
    assert len(policy.decisions) == len(layers)
    assert "one collective (us): none 1000" in policy.table()


def test_measured_latency_is_the_slowest_ranks_median_on_every_rank(monkeypatch) -> None:
    from collectives.policy import latency

    cands = ("none", "fp16", "topk:ratio=0.01")
    cost = {"none": 1e-3, "fp16": 2e-3, "topk:ratio=0.01": 4e-3}

    class Clock:  # each call takes its candidate's time, (1 + rank) times over on rank r
        now, rank, calls = 0.0, 0, 0

        def perf_counter(self) -> float:
            return self.now

        def allreduce(self, buf, *, comm, compressor=None, algorithm=None, **kw) -> None:
            spec = "none" if compressor is None else \
                next(s for s in cands if s.split(":")[0] == compressor.name)
            assert kw.get("validate") is False and kw.get("feedback") is None
            assert compressor is not None or algorithm == "mpi"  # the plain path, engine's
            first = self.calls < len(cands)
            self.calls += 1
            self.now += cost[spec] * (1 + self.rank) * (50 if first else 1)  # warm-up: slow

    clock = Clock()
    monkeypatch.setattr(latency, "time", clock)
    monkeypatch.setattr(latency, "api", clock)

    class Rank:
        size, engine = 4, "mpi"

        def __init__(self, rank: int, table=None) -> None:
            self.rank, self.table = rank, table

        def allgather_ints(self, values, collective="", timeout=None):
            return self.table

    mine = []
    for r in range(4):
        clock.rank, clock.calls = r, 0
        mine.append(latency.medians(Rank(r), cands, repeats=3))
    np.testing.assert_allclose(mine[1], 2 * mine[0], rtol=1e-6)  # the warm-up is left out
    table = np.stack(mine)
    agreed = [latency.slowest(Rank(r, table), cands, mine[r]) for r in range(4)]
    assert all(a == agreed[0] for a in agreed)  # every rank plans with the same numbers
    assert agreed[0] == pytest.approx({s: 4 * t for s, t in cost.items()}, rel=1e-6)


def test_measured_latency_is_kept_and_survives_a_state_dict(monkeypatch) -> None:
    from collectives.policy import auto

    seconds = (("none", 2e-3), ("fp16", 3e-3), ("uniform:bits=8", 3e-3), ("uniform:bits=4", 3e-3),
               ("topk:ratio=0.01", 5e-3), ("powersgd:rank=4", 6e-3))
    measured = {canonical(k): v for k, v in seconds}
    calls = []

    def one_round(comm, cands, plain, step, **kw):  # one timed call per candidate
        calls.append(plain)
        return np.array([measured[c] for c in cands])

    monkeypatch.setattr(auto.latencies, "one_round", one_round)
    rounds = ["torch"] * (Tunables().latency_repeats + 1)
    comm = Ranks()
    comm.cache.cost_params = SLOW  # the fitted model of this "machine"
    policy = AutoPolicy(max_error=0.3, first=0, probe_steps=1, every=3)
    policy.update(comm, 0, plain="torch")
    _bucket_of_biases(policy, range(1))
    policy.update(comm, 1, plain="torch")
    assert calls == rounds and policy.measured["seconds"] == pytest.approx(measured)
    assert any(e["event"] == "collective latency measured" for e in policy.log)
    fresh = AutoPolicy(max_error=0.3, first=0, probe_steps=1, every=3)
    fresh.load_state_dict(policy.state_dict())
    assert fresh.measured == policy.measured and fresh.collective_s == policy.collective_s
    for p in (policy, fresh):  # the next decision reuses it: the same prices on both
        p.update(comm, 4)
        assert not p.wants_profile(4)  # decided again from the same numbers, not profiled
        assert sum(e["event"].startswith(("decided", "kept")) for e in p.log) == 2
    assert calls == rounds and fresh.collective_s == policy.collective_s
    assert policy.collective_s["none"] == pytest.approx(2e-3)  # cost fitted here: as measured


#: The small MLP of one DDP bucket, and what each candidate's collective truly costs on
#: shared cores (milliseconds, all within a few percent: no choice is clearly faster).
MLP = [lay("fc1.weight", 4096), lay("fc1.bias", 64, "1d"), lay("fc2.weight", 640),
       lay("fc2.bias", 10, "1d")]
TRUE_S = {"none": 1.0e-3, "fp16": 1.05e-3, "uniform:bits=8": 1.05e-3,
          "uniform:bits=4": 1.05e-3, "topk:ratio=0.01": 1.3e-3, "powersgd:rank=4": 2.1e-3}
FAST = CostParams(alpha=5e-6, beta=8e-11, gamma=1e-10)  # ~100 Gbit/s: bytes are nearly free


class NoisyClock:
    """The timing source of one run on busy shared cores: every timed call takes its true
    time times a factor drawn in [0.6, 1.6], and one call in six is descheduled (x4)."""

    def __init__(self, seed: int) -> None:
        self.rng, self.now = np.random.default_rng(seed), 0.0

    def noise(self) -> float:
        return float(self.rng.uniform(0.6, 1.6) * (4.0 if self.rng.random() < 1 / 6 else 1.0))

    def perf_counter(self) -> float:  # the profiler's codec timings: microseconds, noisy
        self.now += 2e-6 * self.noise()
        return self.now

    def allreduce(self, buf, *, comm, compressor=None, **kw) -> None:  # one measured call
        spec = "none" if compressor is None else canonical(
            f"{compressor.name}:" + ",".join(f"{k}={v}" for k, v in compressor.params.items()))
        self.now += {canonical(k): v for k, v in TRUE_S.items()}[spec] * self.noise()


def _noisy_run(seed: int, monkeypatch) -> AutoPolicy:
    from collectives.policy import latency, profile

    clock = NoisyClock(seed)
    for module, attr in ((profile, "time"), (latency, "time"), (latency, "api")):
        monkeypatch.setattr(module, attr, clock)
    comm = Ranks()
    comm.cache.cost_params, comm.engine = FAST, "mpi"
    policy = AutoPolicy(max_error=0.3, first=0, probe_steps=2, every=2, min_numel=0)
    rng = np.random.default_rng(0)  # the same gradients in every run: only timing differs
    for step in range(6):  # decides at step 2 and again at step 4 (every 2)
        policy.update(comm, step)
        if policy.wants_profile(step):
            for layer in MLP:
                policy.observe(step, layer, rng.standard_normal(layer.numel), bucket=0)
    assert sum(e["event"].startswith(("decided", "kept")) for e in policy.log) == 2
    return policy


def test_noisy_timings_do_not_flip_the_decision(monkeypatch) -> None:
    """Twelve runs of the same model with timings as noisy as shared cores make them: one
    decision, every time, and the uncompressed path is never priced above a compressor."""
    runs = [_noisy_run(seed, monkeypatch) for seed in range(12)]
    outcomes = {tuple(sorted(p.decisions.items())) for p in runs}
    assert len(outcomes) == 1, [sorted(set(p.decisions.values())) for p in runs]
    assert set(runs[0].decisions.values()) == {"none"}  # nothing is clearly faster
    for p in runs:
        assert p.collective_s["none"] == min(p.collective_s.values())


def test_a_clear_gain_still_wins_and_a_standing_decision_needs_a_clear_one() -> None:
    from collectives.policy import plan

    cands = ("none", "fp16")
    body = [[10e-3, 5e-3]]  # compressing saves half the layer's time: a clear gain
    assert plan.plan(cands, body, [[0.0, 1e-4]], 0.01, 64, [1e-3, 1e-3], ["b"],
                     plan.Noise(2e-6, 0.1))[0] == [1]
    body = [[10e-3, 9.5e-3]]  # 5% of the step: within the margin, the lower error stays
    assert plan.plan(cands, body, [[0.0, 1e-4]], 0.01, 64, [1e-3, 1e-3], ["b"],
                     plan.Noise(2e-6, 0.1))[0] == [0]
    assert plan.clear(0.89, 1.0, 0.0, 0.1) and not plan.clear(0.91, 1.0, 0.0, 0.1)


def test_plain_first_caps_the_identity_twins_prices() -> None:
    from collectives.policy import latency, profile

    seconds = latency.plain_first({"none": 3e-3, "fp16": 1e-3, "topk:ratio=0.01": 2e-3})
    assert seconds == {"none": 1e-3, "fp16": 1e-3, "topk:ratio=0.01": 2e-3}
    cands = ("none", "fp16")
    row = np.zeros((1, 1 + 2 * profile.PER_CANDIDATE))
    cols = row[:, 1:].reshape(1, 2, profile.PER_CANDIDATE)
    cols[0, 0, 2:4], cols[0, 1, 2:4] = (5e-6, 1e-6), (2e-6, 3e-6)  # none measured slower
    out = profile.plain_first(row, cands)[:, 1:].reshape(1, 2, profile.PER_CANDIDATE)
    assert out[0, 0, 2:4].tolist() == [2e-6, 1e-6] and out[0, 1, 2:4].tolist() == [2e-6, 3e-6]


@pytest.mark.parametrize("fp16_s, kept", [(1.05e-3, True), (2e-3, False)])
def test_a_standing_decision_yields_only_to_a_clear_gain(fp16_s: float, kept: bool,
                                                       monkeypatch) -> None:
    """Deciding again, the plan in place stays unless the new one is predicted faster by the
    margin: 5% is noise (kept), half the step is not (replaced). The codec timings are
    pinned (a steady clock, and no cache, whose codec speeds another test measured on this
    machine): on a busy machine a slow fp16 encode would clear the margin on its own."""
    from collectives.policy import profile

    monkeypatch.setattr(profile, "time", SteadyClock())
    latency = {**TRUE_S, "fp16": fp16_s}
    policy = AutoPolicy(max_error=0.3, first=0, probe_steps=1, cost=FAST, latency=latency,
                        min_numel=0, cache=False)
    comm = Ranks()
    policy.update(comm, 0)
    rng = np.random.default_rng(0)
    for layer in MLP:
        policy.observe(0, layer, rng.standard_normal(layer.numel), bucket=0)
    policy.decisions = {lay.name: canonical("fp16") for lay in MLP}  # the standing plan
    policy.update(comm, 1)
    assert set(policy.decisions.values()) == ({canonical("fp16")} if kept else {"none"})


@pytest.mark.parametrize("hierarchy", ["flat", "two_level", "auto"])
def test_the_policy_prices_calls_as_the_hook_runs_them(hierarchy: str, monkeypatch) -> None:
    """The hook's ``hierarchy`` reaches the pricing: a hook whose compressed calls run flat
    is not planned with two-level prices (nor the other way round)."""
    from collectives.policy import plan

    seen: list[str] = []
    real = plan.price

    def price(*args, **kw):
        seen.append(args[5] if len(args) > 5 else kw.get("hierarchy", "auto"))
        return real(*args, **kw)

    monkeypatch.setattr(plan, "price", price)
    policy = AutoPolicy(max_error=0.3, first=0, probe_steps=1, cost=FAST, latency=TRUE_S,
                        min_numel=0)
    comm = Ranks()
    policy.update(comm, 0, hierarchy=hierarchy)
    rng = np.random.default_rng(0)
    for layer in MLP:
        policy.observe(0, layer, rng.standard_normal(layer.numel), bucket=0)
    policy.update(comm, 1, hierarchy=hierarchy)
    assert seen and set(seen) == {hierarchy}
    with pytest.raises(ValueError, match="hierarchy must be one of auto, flat, two_level"):
        policy.update(comm, 2, hierarchy="hosts")


def test_decisions_are_logged_on_rank_zero(caplog) -> None:
    layers = [lay("big", 1 << 17), lay("tiny", 16, "1d")]
    policy = AutoPolicy(max_error=0.3, first=0, probe_steps=2, cost=SLOW, latency="model")
    comm = Ranks()
    policy.update(comm, 0)
    _profile(policy, layers, range(2))
    with caplog.at_level("INFO", logger="collectives.policy.auto"):
        policy.update(comm, 2)
    logged = [r.getMessage() for r in caplog.records if r.name == "collectives.policy.auto"]
    assert len(logged) == 1 and "step 2: decided" in logged[0]
    assert policy.table() in logged[0]  # the whole per-layer table
    other = Ranks()
    other.rank = 1
    again = AutoPolicy(max_error=0.3, first=0, probe_steps=2, cost=SLOW, latency="model")
    again.update(other, 0)
    _profile(again, layers, range(2))
    caplog.clear()
    with caplog.at_level("INFO", logger="collectives.policy.auto"):
        again.update(other, 2)
    assert not caplog.records, "only rank 0 logs (every rank decides alike)"


def test_a_sampled_layer_is_timed_once_on_all_of_it_by_a_sparse_coder() -> None:
    from collectives.policy.profile import PER_CANDIDATE, Profiler

    SAMPLE = Tunables().sample

    cands = ("none", "fp16", "topk:ratio=0.01", "powersgd:rank=2")
    prof = Profiler(cands)
    big = lay("table", 4 * SAMPLE, "embedding", shape=(4096, SAMPLE // 1024))
    small = lay("small", 1 << 10)
    rng = np.random.default_rng(0)
    g = np.zeros(big.shape, np.float32)
    g[rng.choice(4096, 30, replace=False)] = 1.0  # sparser than k: top-k's cost follows data
    prof.observe(0, big, g)
    prof.observe(0, small, rng.standard_normal(1 << 10))
    assert prof.whole == {"table"}  # the small layer is its own sample
    times = prof.stats["table"][1:].reshape(-1, PER_CANDIDATE)[:, 2:4].copy()
    assert np.isfinite(times).all()
    prof.observe(1, big, g)
    after = prof.stats["table"][1:].reshape(-1, PER_CANDIDATE)[:, 2:4]
    sparse = cands.index("topk:ratio=0.01")
    # top-k's cost follows the data: it keeps the time taken on all of the layer, not the
    # sample's scaled; the dense codecs are timed on the sample (linear in the elements)
    assert np.array_equal(after[sparse], times[sparse])
    state = prof.state_dict()
    again = Profiler(cands)
    again.load_state_dict(state)
    assert again.whole == {"table"}
