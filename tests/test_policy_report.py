"""The automatic policy's table and log: parts of the step that add up, and a reason per layer."""

from __future__ import annotations

import logging
import re

import numpy as np
import pytest

from collectives.policy import AutoConfig, AutoPolicy, Layer, canonical, profile, report
from collectives.policy.base import short
from tests.test_policy import FAST, MLP, SLOW, TRUE_S, Ranks, SteadyClock, lay


@pytest.fixture(autouse=True)
def _steady_clock(monkeypatch) -> None:
    """Codec timings that do not depend on this machine."""
    monkeypatch.setattr(profile, "time", SteadyClock())


def run(layers: list[Layer], buckets: list[list[Layer]] | None = None, steps: int = 1,
        **options) -> AutoPolicy:
    """Profile ``layers`` (bucket 0 unless ``buckets`` places them) and decide once."""
    policy = AutoPolicy(first=0, probe_steps=steps, cache=False, **options)
    comm, rng = Ranks(), np.random.default_rng(0)
    where = {x.name: b for b, ls in enumerate(buckets or [layers]) for x in ls}
    for step in range(steps + 1):
        policy.update(comm, step)
        for b, ls in enumerate(buckets or []):
            policy.see_bucket(b, ls, ["torch.float32"] * len(ls))
        if policy.wants_profile(step):
            for x in layers:
                grad = rng.standard_normal(x.numel).astype(np.float32)
                policy.observe(step, x, grad, where[x.name])
    assert policy.rows, "decided"
    return policy


def row(policy: AutoPolicy, name: str) -> str:
    return next(x for x in policy.table().splitlines() if x.startswith(name + " "))


def test_step_us_adds_up_to_the_predicted_step_and_small_layers_show_a_dash() -> None:
    big, mid, bias, head = (lay("w", 1 << 17), lay("v", 1 << 15), lay("w.bias", 64, "1d"),
                            lay("head", 1 << 10))
    policy = run([big, mid, bias, head], [[big, bias], [mid, head]], cost=SLOW, latency=1e-3,
                 max_error=0.3)
    predicted = policy.log[-1]["predicted_s"] * 1e6
    assert sum(r["step_us"] for r in policy.rows) == pytest.approx(predicted, rel=1e-9)
    table = policy.table()
    shown = [float(x.split()[4]) for x in table.splitlines()[1:5] if x.split()[4] != "-"]
    listed = sum(r["step_us"] for r in policy.rows if r["profiled"])
    assert sum(shown) == pytest.approx(listed, abs=0.1 * len(shown))
    m = re.search(r"predicted step ([\d.]+) ms = ([\d.]+) ms in step_us \+ ([\d.]+) ms", table)
    assert m, table
    assert float(m.group(1)) == pytest.approx(predicted / 1e3, abs=0.006)
    assert float(m.group(2)) == pytest.approx(listed / 1e3, abs=0.006)
    assert float(m.group(2)) + float(m.group(3)) == pytest.approx(float(m.group(1)), abs=0.011)
    for small in ("w.bias", "head"):  # never profiled: no price of their own
        assert row(policy, small).split()[4] == "-" and "small (< min_numel)" in row(policy,
                                                                                     small)
    assert row(policy, "w").split()[4] != "-"


def test_a_small_layer_says_which_collective_it_rides_in() -> None:
    big, bias = lay("w", 1 << 17), lay("b", 64, "1d")
    # (16 bits: under Adam a small layer rides only in a 16-bit group, see choose_bucket)
    policy = run([big, bias], [[big, bias]], cost=SLOW, latency=1e-4, max_error=0.3,
                 candidates=("none", "fp16"))
    spec = policy.decisions["w"]
    assert spec != "none" and policy.decisions["b"] == "none"
    line = row(policy, "b")
    assert f"rides in its bucket's {short(spec)} collective" in line, policy.table()
    assert line.split()[2] == short(spec)  # the table shows how it travels
    alone = run([big, bias], [[big], [bias]], cost=SLOW, latency=1e-4, max_error=0.3,
                candidates=("none", "fp16"))
    # Alone in its bucket, where the plan compresses: 16 bits, as the fp16 hook sends it.
    assert "small (< min_numel), rides in its bucket's fp16 collective" in row(alone, "b")
    quiet = run([big, bias], [[big], [bias]], cost=SLOW, latency=1e-4, max_error=0.3,
                candidates=("none",))
    assert "small (< min_numel), rides in its bucket uncompressed" in row(quiet, "b")


@pytest.mark.parametrize("case, words", [
    ("fast link", "no compressor clearly cheaper (best "),
    ("growing residual", "convergence: residual grows (topk)"),
    ("tiny budget", "Adam-scaled error 0.018 > 1e-06 (uniform)"),
])
def test_a_layer_sent_whole_says_why(case: str, words: str) -> None:
    if case == "fast link":  # bytes nearly free: nothing is worth its coding
        policy = run(MLP, cost=FAST, latency=TRUE_S, min_numel=0, max_error=0.3,
                     optimizer="sgd")
        name = "fc1.weight"
    elif case == "growing residual":  # top-k 1% of a dense gradient withholds ever more
        policy = run([lay("w", 1 << 16)], steps=5, candidates=("none", "topk:ratio=0.01"),
                     cost=SLOW, latency="model", max_error=10.0)
        name = "w"
    else:  # every compressor's own error is above the per-layer bound (8-bit's the least)
        policy = run([lay("w", 1 << 16)], steps=5, cost=SLOW, latency="model", max_error=1e-6)
        name = "w"
    assert policy.decisions[name] == "none"
    assert words in row(policy, name), policy.table()


def test_the_reasons_the_plan_alone_knows() -> None:
    cfg = AutoConfig(candidates=("none", "fp16"), max_error=0.3)
    big = lay("w", 1 << 16)
    options, no = report.Options([100e-6, 10e-6], [0.0, 0.05]), [False, False]
    fine = report.Verdicts(no, no)
    assert report.why(cfg, big, True, 0, options, fine, 0.01, None) == "error budget"
    assert report.why(cfg, big, True, 0, options, fine, 0.09, 1).startswith(
        "standing decision kept (over fp16")
    assert report.why(cfg, big, True, 0, options, fine, 0.09, None) == \
        "a collective of its own costs more than it saves"
    assert report.why(cfg, big, False, 0, options, fine, 0.09, None) == \
        "not profiled yet"
    held = report.why(AutoConfig(max_error=0.3), big, True, 2,
                      report.Options([1e-6] * 6, [0.0] * 6),
                      report.Verdicts([False] * 4 + [True, True], [False] * 6), 0.0, None)
    assert held == "held back, residual grows: topk, powersgd:rank=4"
    assert report.why(cfg, big, True, 1, options, fine, 0.0, None) == "-"


def _regime_run(caplog, level: int) -> list[logging.LogRecord]:
    policy = AutoPolicy(first=0, every=1000, window=2, threshold=0.5, probe_steps=1,
                        cost=SLOW, latency="model", cache=False)
    comm, layers = Ranks(), [lay("big", 1 << 17), lay("tiny", 16, "1d")]
    rng = np.random.default_rng(0)
    with caplog.at_level(level, logger="collectives.policy.auto"):
        for step in range(10):
            policy.update(comm, step)
            if policy.wants_profile(step):
                for x in layers:
                    policy.observe(step, x, rng.standard_normal(x.numel))
            policy.observe_norm(step, 1.0 if step < 4 else 100.0)  # a regime change at 4
    decided = [e for e in policy.log if e["event"].startswith("decided")]
    assert [e["event"] for e in decided] == ["decided (measured)", "decided (regime change)"]
    return [r for r in caplog.records if r.name == "collectives.policy.auto"]


def test_info_logs_one_line_a_decision_and_the_table_when_it_changes(caplog) -> None:
    first, again = _regime_run(caplog, logging.INFO)
    assert "step 1: decided (measured): " in first.getMessage()
    assert "layer " in first.getMessage() and "step_us" in first.getMessage()  # changed
    line = again.getMessage()
    assert "\n" not in line, line  # unchanged: the summary alone
    assert re.fullmatch(r"step 6: decided \(regime change\): 1 of 2 layers compressed, "
                        r"[\d.]+ of the float32 bytes, predicted [\d.]+ ms a step", line), line


def test_debug_logs_the_table_of_an_unchanged_decision(caplog) -> None:
    records = _regime_run(caplog, logging.DEBUG)
    debug = [r.getMessage() for r in records if r.levelno == logging.DEBUG]
    assert len(debug) == 1 and "unchanged" in debug[0] and "step_us" in debug[0]


def test_the_summary_counts_what_travels_compressed() -> None:
    rows = [{"layer": "w", "numel": 1000, "compressor": canonical("fp16"), "bytes": 2000},
            {"layer": "b", "numel": 10, "compressor": "none", "bytes": 40}]
    line = report.summary(3, "first", rows, 2.5e-3)
    assert line == ("step 3: decided (first): 1 of 2 layers compressed, 0.505 of the float32 "
                    "bytes, predicted 2.50 ms a step")
    rides = report.summary(3, "first", rows, 2.5e-3, {"b": canonical("fp16")})
    assert "2 of 2 layers compressed, 0.500 of the float32 bytes" in rides


def test_a_layer_beside_small_ones_keeps_16_bits_rather_than_float32() -> None:
    """On a slow link a mid-sized layer in a bucket of small ones sends fp16 with them in one
    collective: the small layers ride in its 16-bit group, so going float32 saves no
    collective (they were priced as float32 only before)."""
    mid = lay("v", 1 << 16)
    smalls = [lay(f"b{i}", 256, "1d") for i in range(6)]
    policy = run([mid, *smalls], [[mid, *smalls]], cost=SLOW, latency=1e-3, max_error=0.3,
                 candidates=("none", "fp16"))
    assert policy.decisions["v"] == "fp16", policy.table()
    assert all(policy.decisions[s.name] == "none" for s in smalls)  # their own: never priced
    assert policy.choose_bucket([mid, *smalls]) == ["fp16"] * 7
    assert "rides in its bucket's fp16 collective" in row(policy, "b0")
