"""Unbiasedness where claimed, and error bounds of the deterministic parts."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import compressors
from compressors.topk import k_of

from .helpers import gaussian

TRIALS = 400


@pytest.mark.parametrize("spec", ["uniform:bits=2,bucket_size=64", "uniform:bits=1,bucket_size=64",
                                  "qsgd:levels=3,bucket_size=64", "terngrad:bucket_size=64",
                                  "randomk:ratio=0.25,rescale=true"])
def test_unbiased_over_seeds(spec):
    c = compressors.get(spec)
    x = gaussian(256, seed=3)
    decoded = np.stack([c.decompress(c.compress(x, name="u", step=s)) for s in range(TRIALS)])
    mean, sd = decoded.mean(axis=0), decoded.std(axis=0)
    # each coordinate's mean lies within 5 standard errors (+ float rounding) of x; a rare event
    # (p ~ 1e-3 of being sent) shows sd = 0 in a sample, so the typical sd is a floor
    bound = 5 * np.maximum(sd, np.median(sd)) / np.sqrt(TRIALS) + 1e-4
    assert np.all(np.abs(mean - x) <= bound), np.abs(mean - x).max()


def test_uniform_error_within_one_step():
    c = compressors.get("uniform", bits=4, bucket_size=128, stochastic=False)
    x = gaussian(4096, seed=1)
    y = c.decompress(c.compress(x, name="e", step=0))
    # every bucket spans zero: 14 steps over its range, shifted so that zero is a grid point
    assert np.all((x.reshape(-1, 128).min(axis=1) < 0) & (x.reshape(-1, 128).max(axis=1) > 0))
    steps = np.ptp(x.reshape(-1, 128), axis=1) / 14
    assert np.all(np.abs(y - x).reshape(-1, 128) <= steps[:, None] / 2 + 1e-6)


@pytest.mark.parametrize("bits", [4, 8])
@pytest.mark.parametrize("stochastic", [True, False])
def test_uniform_sends_exact_zeros_as_zero(bits, stochastic):
    # A dead unit's gradient, or an embedding row no sample used, is exactly zero inside a
    # bucket of other values: it arrives as zero (not as rounding noise an Adam-type
    # optimizer would turn into a full step), with error feedback too (its residual stays 0).
    rng = np.random.default_rng(bits)
    x = rng.standard_normal(64 * 129).astype(np.float32)
    x[rng.random(x.size) < 0.3] = 0.0
    x[64:128] = -np.abs(x[64:128])  # a bucket whose largest value is 0
    x[128:192] = np.abs(x[128:192])  # one whose smallest is 0
    x[192:256] = 0.0
    zero = x == 0
    spec = dict(bits=bits, bucket_size=64, stochastic=stochastic)
    for step in range(3):
        y = compressors.get("uniform", **spec).decompress(
            compressors.get("uniform", **spec).compress(x, name="z", step=step))
        assert np.all(y[zero] == 0)
    comp = compressors.get("uniform", **spec)
    fb, residual = compressors.ErrorFeedback(comp), np.zeros(x.size, np.float32)
    for step in range(3):
        y = comp.decompress(fb.step(x, "z", step))
        assert np.all(y[zero] == 0) and np.all(fb.residuals["z"].reshape(-1)[zero] == 0)
        fused = comp.decompress(comp.compress_feedback(x, residual, name="z", step=step))
        assert np.all(fused[zero] == 0) and np.all(residual[zero] == 0)


def test_topk_keeps_largest():
    x = gaussian(10_000, seed=2)
    y = compressors.get("topk", ratio=0.01).decompress(
        compressors.get("topk", ratio=0.01).compress(x, name="t", step=0))
    kept = np.flatnonzero(y)
    assert kept.size == 100 and np.all(y[kept] == x[kept])
    assert np.abs(x[kept]).min() >= np.sort(np.abs(x))[-100]


@settings(derandomize=True, max_examples=60, deadline=None)
@given(hnp.arrays(np.float32, st.integers(0, 300),
                  elements=st.floats(-1e6, 1e6, width=32, allow_subnormal=False)),
       st.sampled_from([1, 2, 4, 8]))
def test_property_uniform_decodes_within_bucket_range(x, bits):
    c = compressors.get("uniform", bits=bits, bucket_size=16)
    y = c.decompress(c.compress(x, name="p", step=0))
    for b in range(0, x.size, 16):
        xb, yb = x[b:b + 16], y[b:b + 16]
        lo, hi = xb.min(), xb.max()
        tol = 1e-6 * max(abs(lo), abs(hi), 1.0)
        # 4 bits and up, a range across zero is a grid shifted to hold zero, at one level
        # fewer: a value rounds to at most one step past the range
        shifted = bits >= 4 and lo < 0 <= hi
        step = (float(hi) - float(lo)) / (2**bits - 2) if shifted else 0.0
        assert np.all(yb >= lo - step - tol) and np.all(yb <= hi + step + tol)


@settings(derandomize=True, max_examples=60, deadline=None)
@given(hnp.arrays(np.float32, st.integers(1, 500),
                  elements=st.floats(-1e3, 1e3, width=32, allow_subnormal=False)),
       st.floats(0.001, 1.0))
def test_property_topk_round_trip(x, ratio):
    c = compressors.get("topk", ratio=ratio)
    p = c.compress(x, name="p", step=0)
    y = c.decompress(compressors.Payload.from_bytes(p.to_bytes()))
    kept = p.buffers["indices"]
    assert kept.size == k_of(x.size, ratio)
    np.testing.assert_array_equal(y[kept], x[kept])
    rest = np.setdiff1d(np.arange(x.size), kept)
    assert np.all(y[rest] == 0)
    if rest.size and kept.size:
        assert np.abs(x[kept]).min() >= np.abs(x[rest]).max()
