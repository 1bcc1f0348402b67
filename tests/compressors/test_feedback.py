"""Error feedback: telescoping sums, state round trips, the identity twin, DGC."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compressors
from compressors import DGCFeedback, ErrorFeedback, NoErrorFeedback

from .helpers import CONFIGS, gaussian


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_telescoping(name):
    c = compressors.get(name, **CONFIGS[name])
    ef = ErrorFeedback(c)
    grads = [gaussian((20, 30), np.float64, seed=s) for s in range(6)]
    sent = np.zeros((20, 30))
    for step, g in enumerate(grads):
        comp = ef.compensate(g, "w")
        p = c.compress(comp, name="w", step=step)
        ef.update("w", comp, p)
        sent += c.decompress(p)
    total = sent + ef.residuals["w"].reshape(20, 30)
    np.testing.assert_allclose(total, np.sum(grads, axis=0), rtol=1e-5, atol=1e-5)


def test_telescoping_torch_fp32():
    c = compressors.get("topk", ratio=0.05)
    ef = ErrorFeedback(c)
    grads = [torch.randn(500, generator=torch.Generator().manual_seed(s)) for s in range(5)]
    sent = torch.zeros(500)
    for step, g in enumerate(grads):
        p = ef.step(g, "b", step)
        sent += c.decompress(p)
    total = sent.numpy() + ef.residuals["b"]
    np.testing.assert_allclose(total, torch.stack(grads).sum(0).numpy(), atol=1e-5)


def test_scaled_residual():
    c = compressors.get("topk", ratio=0.1)
    ef = ErrorFeedback(c, beta=0.5, gamma=2.0)
    g = gaussian(100)
    comp = ef.compensate(g, "w")
    np.testing.assert_allclose(comp, 2 * g)
    ef.update("w", comp, c.compress(comp, name="w", step=0))
    res = ef.residuals["w"].copy()
    np.testing.assert_allclose(ef.compensate(g, "w"), 2 * g + 0.5 * res, rtol=1e-6)
    with pytest.raises(ValueError, match="beta"):
        ErrorFeedback(c, beta=float("nan"))


def test_state_dict_round_trip():
    c = compressors.get("sign")
    ef = ErrorFeedback(c)
    for s in range(3):
        ef.step(gaussian(64, seed=s), "a", s)
        ef.step(gaussian(32, seed=s), "b", s)
    state = ef.state_dict()
    assert all(isinstance(v, np.ndarray) for v in state["residuals"].values())
    other = ErrorFeedback(c)
    other.load_state_dict(state)
    g = gaussian(64, seed=9)
    np.testing.assert_array_equal(other.compensate(g, "a"), ef.compensate(g, "a"))


def test_none_twin_is_identity():
    ef = NoErrorFeedback(compressors.get("topk", ratio=0.1))
    g = gaussian(50)
    assert ef.compensate(g, "w") is g
    ef.step(g, "w")
    assert ef.residuals == {}


def test_nonfinite_does_not_poison_residual():
    c = compressors.get("uniform", bits=8)
    ef = ErrorFeedback(c)
    g = gaussian(600)
    g[10] = np.nan
    ef.step(g, "w")
    assert np.all(np.isfinite(ef.residuals["w"]))


def test_dgc_momentum_correction():
    c = compressors.get("topk", ratio=0.1)
    ef = DGCFeedback(c, momentum=0.9)
    g = gaussian(100)
    comp = ef.compensate(g, "w")
    np.testing.assert_allclose(comp, g)
    p = c.compress(comp, name="w", step=0)
    ef.update("w", comp, p)
    sent = p.buffers["indices"]
    assert np.all(ef.velocities["w"][sent] == 0) and np.all(ef.residuals["w"][sent] == 0)
    comp2 = ef.compensate(g, "w")
    mask = np.ones(100, bool)
    mask[sent] = False
    np.testing.assert_allclose(comp2[mask], g[mask] + (0.9 * g[mask] + g[mask]), rtol=1e-5)
    state = ef.state_dict()
    other = DGCFeedback(c)
    other.load_state_dict(state)
    assert other.momentum == 0.9 and set(other.velocities) == {"w"}
    with pytest.raises(ValueError, match="momentum"):
        DGCFeedback(c, momentum=1.0)
