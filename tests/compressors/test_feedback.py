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


@pytest.mark.parametrize("cls", [ErrorFeedback, NoErrorFeedback, DGCFeedback])
@pytest.mark.parametrize(("key", "value"), [("beta", float("nan")), ("gamma", -1.0),
                                            ("beta", float("inf")), ("gamma", "1"),
                                            ("beta", True)])
def test_load_state_dict_rejects_bad_factors(cls, key, value):
    ef = cls(compressors.get("topk", ratio=0.1))
    ef.step(gaussian(100), "w")
    state = ef.state_dict()
    before = {k: v.copy() for k, v in ef.residuals.items()}
    state[key] = value
    with pytest.raises(ValueError, match=rf"{key} must be a number in \[0, 1e\+06\], got"):
        ef.load_state_dict(state)
    assert ef.beta == ef.gamma == 1.0 and set(ef.residuals) == set(before)  # unchanged


def test_load_state_dict_rejects_bad_residuals():
    ef = ErrorFeedback(compressors.get("sign"))
    ok = {"beta": 1.0, "gamma": 1.0}
    for residuals, err, words in (
            ({"w": np.array([1.0, np.nan], np.float32)}, ValueError, "'w'.*NaN/Inf"),
            ({"w": np.arange(3)}, ValueError, "float32 or float64 array, got int64"),
            ({"w": "abc"}, ValueError, "float32 or float64"),
            ({3: np.zeros(3, np.float32)}, TypeError, "tensor names"),
            ([np.zeros(3)], TypeError, "dict of tensor name")):
        with pytest.raises(err, match=words):
            ef.load_state_dict({**ok, "residuals": residuals})
    with pytest.raises(ValueError, match=r"missing \['gamma'\]"):
        ef.load_state_dict({"beta": 1.0, "residuals": {}})
    with pytest.raises(TypeError, match="expected the dict"):
        ef.load_state_dict([1.0, 1.0, {}])


@pytest.mark.parametrize("fused", [False, True])
def test_loaded_residual_of_another_size_or_dtype_raises_at_use(fused):
    c = compressors.get("topk", ratio=0.1)
    g = gaussian(100)
    for res, words in ((np.zeros(50, np.float32), "float32\\[50\\].*needs float32\\[100\\]"),
                       (np.zeros(100, np.float64), "float64\\[100\\].*needs float32\\[100\\]")):
        ef = ErrorFeedback(c)
        ef.load_state_dict({"beta": 1.0, "gamma": 1.0, "residuals": {"w": res}})
        with pytest.raises(ValueError, match=words):
            ef.residual_for("w", g.size) if fused else ef.compensate(g, "w")


def test_loaded_residual_of_no_tensor_warns_once():
    ef = ErrorFeedback(compressors.get("topk", ratio=0.1))
    state = {"beta": 1.0, "gamma": 1.0,
             "residuals": {"w": np.ones(100, np.float32), "old.name": np.ones(8, np.float32)}}
    ef.load_state_dict(state)
    ef.step(gaussian(100), "w", 0)
    ef.step(gaussian(10), "b", 0)
    with pytest.warns(RuntimeWarning, match=r"\['old.name'\] match no tensor"):
        ef.step(gaussian(100), "w", 1)  # a second step began: 'old.name' was not used
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ef.step(gaussian(100), "w", 2)  # once only
    ef2 = ErrorFeedback(compressors.get("topk", ratio=0.1))
    ef2.load_state_dict(state)
    np.testing.assert_allclose(ef2.compensate(np.zeros(100, np.float32), "w"), 1.0)


def test_no_feedback_twin_drops_loaded_residuals_with_a_warning():
    ef = NoErrorFeedback(compressors.get("sign"))
    with pytest.warns(RuntimeWarning, match="keeps no residuals"):
        ef.load_state_dict({"beta": 1.0, "gamma": 1.0, "residuals": {"w": np.ones(4)}})
    assert ef.residuals == {}


def test_dgc_validates_and_leaves_the_input_alone():
    c = compressors.get("topk", ratio=0.1)
    ef = DGCFeedback(c)
    g = gaussian(100)
    kept = g.copy()
    ef.step(g, "w", 0)
    np.testing.assert_array_equal(g, kept)  # the velocity is a copy, zeroed in place
    state = ef.state_dict()
    for key, value, words in (("momentum", float("nan"), "momentum"),
                              ("momentum", 1.0, r"momentum must be a number in \[0, 1\)"),
                              ("velocities", {"w": np.full(100, np.inf, np.float32)}, "NaN/Inf")):
        with pytest.raises(ValueError, match=words):
            ef.load_state_dict({**state, key: value})
    with pytest.raises(ValueError, match="missing"):
        ef.load_state_dict({k: v for k, v in state.items() if k != "velocities"})
    other = DGCFeedback(c)
    other.load_state_dict({**state, "velocities": {"w": np.zeros(7, np.float32)}})
    with pytest.raises(ValueError, match="velocity of 'w'"):
        other.compensate(g, "w")


def test_dgc_velocity_recovers_after_nonfinite_step():
    c = compressors.get("randomk", ratio=0.05)
    ef = DGCFeedback(c)
    for step in range(3):
        g = gaussian(200, seed=step)
        if step == 1:
            g[17] = np.inf
        ef.step(g, "w", step)
        assert np.isfinite(ef.velocities["w"]).all() and np.isfinite(ef.residuals["w"]).all()
