"""Policies: rules, tables, the dynamic program and the automatic selector (one process)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest

from collectives.costmodel import CostParams
from collectives.policy import AutoPolicy, Layer, Rules, Table, as_policy, solve

SLOW = CostParams(alpha=5e-5, beta=8e-9, gamma=1e-10)  # ~1 Gbit/s


class Ranks:
    """Four ranks that measured the same: enough for the policy's combine step."""

    size, rank = 4, 0

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
    policy = AutoPolicy(max_error=budget, first=0, probe_steps=2, cost=SLOW)
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


def test_auto_policy_reevaluates_on_a_regime_change() -> None:
    policy = AutoPolicy(first=0, every=1000, window=2, threshold=0.5, probe_steps=1, cost=SLOW)
    comm, layers = Ranks(), [lay("big", 1 << 12)]
    probes = []
    for step in range(10):
        policy.update(comm, step)
        if policy.wants_profile(step):
            probes.append(step)
            _profile(policy, layers, range(step, step + 1))
        policy.observe_norm(step, 1.0 if step < 4 else 100.0)  # the norm jumps at step 4
    assert any(e["event"] == "regime change" for e in policy.log)
    assert probes[0] == 0 and len(probes) == 2 and probes[1] >= 6, probes
    assert sum(e["event"].startswith("decided") for e in policy.log) == 2


def test_auto_config_is_validated() -> None:
    for kwargs, words in (({"candidates": ("fp16",)}, "none"), ({"max_error": -1}, "max_error"),
                          ({"every": 0}, "every"), ({"candidates": ("zip",)}, "zip")):
        with pytest.raises(ValueError, match=words):
            AutoPolicy(**kwargs)


def test_plan_pays_one_latency_per_bucket_and_compressor() -> None:
    from collectives.policy import plan

    cands = ("none", "fp16")
    lat = [plan.latency(4, "none", SLOW), plan.latency(4, "fp16", SLOW)]
    body = [[1e-3, 0.5e-3], [1e-6, 2e-6]]  # a big layer and a tiny one
    times = [[b + lat[c] for c, b in enumerate(row)] for row in body]
    errors = [[0.0, 1e-4], [0.0, 1e-4]]
    fused, _ = plan.plan(4, cands, times, errors, 0.01, 64, SLOW, ["b0", "b0"])
    apart, _ = plan.plan(4, cands, times, errors, 0.01, 64, SLOW, ["b0", "b1"])
    assert fused == [1, 1]  # the tiny layer rides in the big one's collective
    assert apart == [1, 0]  # alone, it is cheaper uncompressed
