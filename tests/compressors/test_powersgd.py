"""PowerSGD's steps as a collective would drive them, without communicating."""

from __future__ import annotations

import numpy as np

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
