"""PowerSGD's steps as a collective would drive them, without communicating."""

from __future__ import annotations

import numpy as np
import pytest

import compressors
from compressors.powersgd import orthogonalize

from .helpers import gaussian


def test_orthogonalize_safe_on_zero_columns():
    p = np.zeros((10, 3), np.float32)
    p[:, 1] = 1.0
    q = orthogonalize(p)
    assert np.all(np.isfinite(q))
    np.testing.assert_array_equal(q[:, 0], 0)
    np.testing.assert_allclose(np.linalg.norm(q[:, 1]), 1, rtol=1e-6)
    r = orthogonalize(gaussian((50, 4)))
    np.testing.assert_allclose(r.T @ r, np.eye(4), atol=1e-5)


def test_low_rank_matrix_recovered_with_warm_start():
    rng = np.random.default_rng(0)
    m = (rng.standard_normal((40, 2)) @ rng.standard_normal((2, 30))).astype(np.float32)
    c = compressors.get("powersgd", rank=2)
    for step in range(3):
        y = c.decompress(c.compress(m, name="w", step=step))
    np.testing.assert_allclose(y, m, atol=1e-3)


def test_steps_match_two_rank_sum():
    """Two 'ranks' run p_step/q_step/reconstruct around summed buffers (what allreduce does)."""
    ranks = [compressors.get("powersgd", rank=3) for _ in range(2)]
    grads = [gaussian((24, 16), seed=s) for s in range(2)]
    outs = []
    steps = [c.p_step(g, "w", g.shape, "float32") for c, g in zip(ranks, grads, strict=True)]
    ps, ctxs = zip(*steps, strict=True)
    p_sum = ps[0] + ps[1]
    qs = [c.q_step(ctx, p_sum) for c, ctx in zip(ranks, ctxs, strict=True)]
    q_sum = qs[0] + qs[1]
    for c, ctx in zip(ranks, ctxs, strict=True):
        outs.append(c.reconstruct(ctx, q_sum, "w"))
    np.testing.assert_array_equal(outs[0], outs[1])
    # the same as compressing the summed gradient on one process
    single = compressors.get("powersgd", rank=3)
    ref = single.decompress(single.compress(grads[0] + grads[1], name="w", step=0))
    np.testing.assert_allclose(outs[0].reshape(24, 16), ref, rtol=1e-4, atol=1e-4)


def test_vectors_and_small_matrices_sent_uncompressed():
    c = compressors.get("powersgd", rank=4)
    v = gaussian(100)
    np.testing.assert_array_equal(c.decompress(c.compress(v, name="b", step=0)), v)
    small = gaussian((3, 3))
    np.testing.assert_array_equal(c.decompress(c.compress(small, name="s", step=0)), small)
    assert c.matrix_shape((3, 3)) is None and c.matrix_shape((64, 64)) == (64, 64, 4)


def test_nan_warm_start_in_a_checkpoint_is_dropped_with_a_warning():
    c = compressors.get("powersgd", rank=2)
    m = gaussian((20, 12))
    c.compress(m, name="w", step=0)
    state = c.warm_state()
    state["w"][0, 0] = np.nan
    fresh = compressors.get("powersgd", rank=2)
    with pytest.warns(RuntimeWarning, match="'w' holds NaN/Inf"):
        fresh.load_warm_state(state)
    y = fresh.decompress(fresh.compress(m, name="w", step=1))
    assert np.isfinite(y).all()
    np.testing.assert_array_equal(
        y, compressors.get("powersgd", rank=2).decompress(
            compressors.get("powersgd", rank=2).compress(m, name="w", step=1)))


def test_bad_warm_starts_raise():
    c = compressors.get("powersgd", rank=2)
    for state, err, words in (([1, 2], TypeError, "dict of name"),
                              ({"w": np.ones(5, np.float32)}, ValueError, "2-D float array"),
                              ({"w": "q"}, ValueError, "2-D float array"),
                              ({"w": np.ones((4, 3), np.int64)}, ValueError, "2-D float"),
                              ({"w": np.ones((4, 3), np.float32)}, ValueError, "rank 3")):
        with pytest.raises(err, match=words):
            c.load_warm_state(state)
    assert c.warm_state() == {}
    c.load_warm_state({"w": np.ones((7, 2), np.float32)})
    with pytest.raises(ValueError, match=r"warm start of 'w' is \[7, 2\].*needs \[12, 2\]"):
        c.compress(gaussian((20, 12)), name="w", step=0)
