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
    steps = np.ptp(x.reshape(-1, 128), axis=1) / 15
    assert np.all(np.abs(y - x).reshape(-1, 128) <= steps[:, None] / 2 + 1e-6)


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
        assert np.all(yb >= lo - tol) and np.all(yb <= hi + tol)


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
