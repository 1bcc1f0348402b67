"""The automatic policy's accuracy criterion under Adam: errors in the preconditioned space."""

from __future__ import annotations

import numpy as np
import pytest

from collectives.policy import AutoConfig, AutoPolicy, Layer, canonical, criterion, profile
from collectives.policy import columns as col
from collectives.policy.moments import Moments
from collectives.policy.tunables import Tunables
from tests.test_policy import SLOW, Ranks, SteadyClock

TOPK = canonical("topk:ratio=0.01")
INT4 = canonical("uniform:bits=4")
LAYER = Layer("w", 256 * 256, (256, 256), "linear")
WHOLE = Tunables(sample=LAYER.numel)  # LAYER profiled whole: the criterion is under test


@pytest.fixture(autouse=True)
def _steady_clock(monkeypatch) -> None:
    """Codec timings that do not depend on this machine: every timed call 10 us."""
    monkeypatch.setattr(profile, "time", SteadyClock())


def few_large(step: int) -> np.ndarray:
    """A gradient of a few large coordinates (the same 300) and many small ones: top-k 1%
    keeps the large ones, so little of the norm is lost, but Adam moves every coordinate
    about alike, and the small ones are most of the step."""
    rng = np.random.default_rng(step)
    g = 0.01 * rng.standard_normal(LAYER.numel)
    g[:300] = 10 * rng.standard_normal(300)
    return g.reshape(LAYER.shape).astype(np.float32)


def decide(grads, steps: int = 5, **options) -> AutoPolicy:
    """Profile LAYER on ``grads(step)`` for ``steps`` steps on a slow link, and decide."""
    policy = AutoPolicy(first=0, probe_steps=steps, cost=SLOW, latency="model", cache=False,
                        tunables=WHOLE, **options)
    comm = Ranks()
    for step in range(steps + 1):
        policy.update(comm, step)
        if policy.wants_profile(step):
            policy.observe(step, LAYER, grads(step), bucket=0)
    assert policy.rows, "decided"
    return policy


def errors(grads, cands, steps: int = 5) -> np.ndarray:
    """Each candidate's table columns for LAYER after ``steps`` steps of ``grads``."""
    prof = profile.Profiler(cands, tunables=WHOLE)
    for step in range(steps):
        prof.observe(step, LAYER, grads(step))
    return prof.table()[1][0, 1:].reshape(len(cands), col.PER_CANDIDATE)


def test_top_k_within_budget_in_norm_is_ruled_out_in_adams_space() -> None:
    cands = ("none", "fp16", TOPK)
    cols = errors(few_large, cands)
    plain = np.sqrt(cols[:, col.ERR] / cols[:, col.SQ])
    adam = np.sqrt(cols[:, col.ADAM_ERR] / cols[:, col.ADAM_SQ])
    assert plain[2] < 0.1 < 0.5 < adam[2], (plain, adam)  # 2% of the norm, all of Adam's step
    assert adam[0] == 0 and adam[1] < 1e-3  # the identity and fp16's rounding
    sgd = decide(few_large, candidates=cands, optimizer="sgd")
    assert sgd.decisions["w"] == TOPK  # what the gradient's norm allows: the fewest bytes
    policy = decide(few_large, candidates=cands)
    assert policy.config.optimizer == "adam"  # the default
    assert policy.decisions["w"] == "fp16", policy.table()
    line = next(x for x in policy.table().splitlines() if x.startswith("w "))
    assert line.endswith(f"Adam-scaled error {adam[2]:.2g} > 0.25 (topk)"), line
    assert "convergence: residual grows (topk)" in line  # (in Adam's space too)


def test_a_layer_without_gradient_statistics_sends_16_bits() -> None:
    """A layer whose gradient was zero while profiled (frozen, or not reached yet) has no
    second moments: no error of a lossy compressor can be bounded. The gradient's norm sees
    nothing to lose, and would take the fewest bytes."""
    cands = ("none", "fp16", INT4, TOPK)

    def zero(step: int) -> np.ndarray:
        return np.zeros(LAYER.shape, np.float32)

    assert decide(zero, candidates=cands, optimizer="sgd").decisions["w"] not in (
        "none", "fp16")
    policy = decide(zero, candidates=cands)
    assert policy.decisions["w"] == "fp16", policy.table()
    line = next(x for x in policy.table().splitlines() if x.startswith("w "))
    assert "convergence: Adam-scaled error cannot be bounded (no gradient statistics)" in line


def test_a_compressor_that_sends_where_adams_v_is_zero_is_ruled_out() -> None:
    """Rows of an embedding table no token touched have v = 0: a 2-bit min-max quantizer's
    bucket around a touched row sends them rounding noise, a step Adam would take at full size
    out of nothing. 4 bits send those zeros exactly (a grid holding zero), and top-k sends
    only what error feedback holds, never there."""
    def sparse_rows(step: int) -> np.ndarray:
        g = np.zeros(LAYER.shape, np.float32)
        g[::8] = np.random.default_rng(step).standard_normal((32, 256))
        return g

    int2 = canonical("uniform:bits=2")
    cands = ("none", "fp16", int2, INT4, TOPK)
    cols = errors(sparse_rows, cands)
    assert cols[2, col.UNBOUNDED] > 0
    assert cols[0, col.UNBOUNDED] == cols[1, col.UNBOUNDED] == 0
    assert cols[3, col.UNBOUNDED] == cols[4, col.UNBOUNDED] == 0
    crit = criterion.measure("adam", cands, np.concatenate([[1.0], cols.reshape(-1)])[None])
    assert crit.unbounded[0].tolist() == [False, False, True, False, False]
    assert crit.blocked[0] == "it sends where Adam's second moment is zero"
    assert crit.rel[0][3] < 0.5  # 4 bits: bounded, and rounding error on the touched rows
    # the table names the candidate it rules out, not the layer
    from collectives.policy import AutoConfig, report
    cfg = AutoConfig(candidates=cands)
    verdicts = report.Verdicts([False] * 5, [False, False, False, True, True], crit.rel[0],
                               blocked=crit.blocked[0])
    text = report.convergence(cfg, verdicts, crit.unbounded[0].tolist(), [2, 3, 4])
    assert "cannot be bounded for uniform:bits=2 (it sends where" in text, text


def one_large_coordinate() -> tuple[Moments, np.ndarray]:
    """Moments (key "k") of five steps of one gradient: a coordinate of 1, 999 of 1e-6."""
    m = Moments()
    g = np.full(1000, 1e-6)
    g[0] = 1.0
    for step in range(5):
        m.add("k", g, step)
    return m, g


def test_noise_enters_adams_second_moment() -> None:
    """Adam divides what it receives by the root of that's second moment: a coordinate whose
    gradient drowns in a compressor's noise moves about one learning rate at random, an error
    of at most about its own step, not the noise over the gradient's tiny root."""
    m, g = one_large_coordinate()
    noisy = g.copy()
    noisy[1:] += 1e-2  # noise 10^4 times the small coordinates' gradient
    err, sq, _, unbounded = m.measure("k", noisy, np.zeros_like(g))
    assert not unbounded
    # each small coordinate: about +1 sent against its own step of about +1
    assert err / sq < 0.01
    noisy[1:] = g[1:] - 1e-2  # noise of the other sign: about -1 against +1, each
    err, sq, _, _ = m.measure("k", noisy, np.zeros_like(g))
    # (each small coordinate's own step is 1e-6 / (1e-6 + Adam's eps 1e-8), about 0.99)
    np.testing.assert_allclose(err, 999 * 1.99 ** 2, rtol=0.01)
    np.testing.assert_allclose(sq, 1 + 999 * 0.99 ** 2, rtol=0.01)


def test_a_residual_counts_in_what_adam_receives() -> None:
    """Error feedback's residual is sent later and divided by the root of the second moment
    of what arrives: a quantizer's residual on coordinates drowned in its noise counts one
    step each at most (not the noise over their tiny gradient, 10^4 steps each), while
    top-k's residual on the coordinates it does not send still counts the steps of gradient
    it holds back."""
    m, g = one_large_coordinate()
    noisy = g.copy()
    noisy[1:] += 1e-2
    residual = np.zeros_like(g)
    residual[1:] = -1e-2  # what the quantizer owes: its noise, back
    _, sq, res, _ = m.measure("k", noisy, residual)
    assert 0.9 < res < 1.05 and sq > 900  # about one step on each of 999 coordinates
    sparse = np.zeros_like(g)
    sparse[0] = 1.0  # top-k: the large coordinate only
    held = np.zeros_like(g)
    held[1:] = 5 * g[1:]  # five steps of the small coordinates' gradient, held back
    _, _, res, _ = m.measure("k", sparse, held)
    assert res > 10  # 999 coordinates of (5 / sqrt(2))^2 over about 981


def test_moments_are_adams_bias_corrected_second_moment() -> None:
    m, rng = Moments(), np.random.default_rng(0)
    grads = [rng.standard_normal(64) for _ in range(3)]
    for step, g in enumerate(grads):
        m.add("k", g, step)
        m.add("k", 100 * g, step)  # once a step
    v, beta = np.zeros(64), 0.999
    for g in grads:
        v = beta * v + (1 - beta) * g * g
    np.testing.assert_allclose(m.scale("k"), np.sqrt(v / (1 - beta ** 3)), rtol=1e-12)
    # Over a few steps, about the mean of g^2.
    np.testing.assert_allclose(m.scale("k") ** 2, np.mean(np.square(grads), axis=0), rtol=2e-3)
    m.add("k", np.full(64, np.nan), 3)  # a skipped (non-finite) step leaves v as it was
    np.testing.assert_allclose(m.scale("k"), np.sqrt(v / (1 - beta ** 3)), rtol=1e-12)


def test_the_sgd_criterion_is_the_relative_error_in_norm() -> None:
    cands = ("none", INT4)
    cols = errors(few_large, cands)
    row = np.concatenate([[7.0], cols.reshape(-1)])[None]
    crit = criterion.measure("sgd", cands, row)
    np.testing.assert_allclose(crit.rel[0], np.sqrt(cols[:, col.ERR] / cols[:, col.SQ]))
    assert not crit.unbounded.any() and crit.live and crit.norms.tolist() == [7.0]
    adam = criterion.measure("adam", cands, row)
    assert not adam.live and adam.norms[0] == cols[:, col.ADAM_SQ].max()


@pytest.mark.parametrize("bad", ["adamw", "", None])
def test_the_optimizer_is_validated(bad) -> None:
    with pytest.raises(ValueError, match="optimizer must be 'adam'"):
        AutoConfig(optimizer=bad)
    assert AutoConfig(optimizer="sgd").optimizer == "sgd"
