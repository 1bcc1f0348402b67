"""Fused kernels: quantization with error feedback in one pass, and decode-and-add."""

from __future__ import annotations

import numpy as np
import pytest

import compressors
from compressors import ErrorFeedback


def _pair(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    return (rng.standard_normal(n).astype(np.float32),
            (0.1 * rng.standard_normal(n)).astype(np.float32))


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("n", [0, 1, 7, 509, 4099, 100_003])
@pytest.mark.parametrize("stochastic", [True, False])
def test_fused_feedback_equals_compensate_compress_update(bits, n, stochastic):
    c = compressors.get("uniform", bits=bits, bucket_size=256, stochastic=stochastic)
    x, res = _pair(n, bits * 1000 + n)
    out = np.full(n, np.nan, np.float32)
    fused = c.compress_feedback(x, res, out, name="w", step=5)
    ef = ErrorFeedback(c)
    ef.residuals["w"] = res.copy()
    xc = ef.compensate(x, "w")
    plain = c.compress(xc, name="w", step=5)
    ef.update("w", xc, plain)
    assert fused is not None and sorted(fused.buffers) == sorted(plain.buffers)
    for key in plain.buffers:  # the same payload, bit for bit
        np.testing.assert_array_equal(fused.buffers[key], plain.buffers[key], err_msg=key)
    assert fused.to_bytes() == plain.to_bytes()
    # the new residual is what the payload did not carry (to rounding of the decode)
    np.testing.assert_allclose(out, ef.residuals["w"], rtol=0, atol=1e-6)


def test_fused_feedback_refuses_nonfinite_and_leaves_the_residual():
    c = compressors.get("uniform", bits=8)
    x, res = _pair(1000, 1)
    x[17] = np.inf
    before = res.copy()
    assert c.compress_feedback(x, res, np.empty_like(res), name="w") is None
    np.testing.assert_array_equal(res, before)


def test_fused_feedback_declines_other_dtypes_and_compressors():
    x64 = np.ones(64)
    r = np.zeros(64, np.float32)
    assert compressors.get("uniform").compress_feedback(x64, r, r.copy(), name="w") is None
    assert compressors.get("sign").compress_feedback(x64.astype(np.float32), r, r.copy(),
                                                     name="w") is None
    assert not ErrorFeedback(compressors.get("uniform"), beta=0.5).fusable(x64.astype(np.float32))
    assert not ErrorFeedback(compressors.get("uniform")).fusable(x64)


@pytest.mark.parametrize("bits", [1, 4, 8])
def test_decompress_add_equals_decompress_then_add(bits):
    c = compressors.get("uniform", bits=bits)
    x, acc = _pair(10_007, bits)
    p = c.compress(x, name="w")
    want = acc + c.decompress(p)
    assert c.decompress_add(p, acc)
    np.testing.assert_array_equal(acc, want)


def test_decompress_add_declines_payloads_with_nonfinite_values():
    c = compressors.get("uniform", bits=8)
    x, acc = _pair(300, 2)
    x[3] = np.nan
    assert not c.decompress_add(c.compress(x, name="w"), acc)
    assert not compressors.get("sign").decompress_add(
        compressors.get("sign").compress(x, name="w"), acc)


def test_residual_pair_alternates_two_arrays():
    ef = ErrorFeedback(compressors.get("uniform"))
    res, spare = ef.residual_pair("w", 10)
    assert not res.any() and not np.shares_memory(res, spare)
    ef.swap_in("w", spare)
    res2, spare2 = ef.residual_pair("w", 10)
    assert np.shares_memory(res2, spare) and np.shares_memory(spare2, res)
