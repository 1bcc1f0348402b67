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


def _fused_and_plain(c, n: int, seed: int, nonfinite: bool):
    """compress_feedback's payload and residual beside compensate, compress and update."""
    x, res = _pair(n, seed)
    if nonfinite and n:
        x[[0, n // 2, n - 1]] = [np.nan, np.inf, -np.inf]
    ef = ErrorFeedback(c)
    ef.residuals["w"] = res.copy()
    xc = ef.compensate(x, "w")
    plain = c.compress(xc, name="w", step=5)
    ef.update("w", xc, plain)
    fused = c.compress_feedback(x, res, name="w", step=5)  # updates res in place
    assert fused is not None and sorted(fused.buffers) == sorted(plain.buffers)
    assert fused.to_bytes() == plain.to_bytes()  # the same payload, bit for bit
    # the new residual is what the payload did not carry, 0 where the input was not finite
    assert np.isfinite(res).all()
    return res, ef.residuals["w"]


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("n", [0, 1, 7, 509, 4099, 100_003])
@pytest.mark.parametrize("stochastic", [True, False])
@pytest.mark.parametrize("nonfinite", [False, True])
def test_fused_feedback_equals_compensate_compress_update(bits, n, stochastic, nonfinite):
    c = compressors.get("uniform", bits=bits, bucket_size=256, stochastic=stochastic)
    fused, plain = _fused_and_plain(c, n, bits * 1000 + n, nonfinite)
    np.testing.assert_allclose(fused, plain, rtol=0, atol=1e-6)  # to the decode's rounding


@pytest.mark.parametrize("n", [0, 1, 7, 509, 4099, 100_003])
@pytest.mark.parametrize("bucket", [8, 256, 2048])
@pytest.mark.parametrize("nonfinite", [False, True])
def test_fused_sign_feedback_equals_compensate_compress_update(n, bucket, nonfinite):
    c = compressors.get("sign", bucket_size=bucket)
    fused, plain = _fused_and_plain(c, n, 7 * n + bucket, nonfinite)
    np.testing.assert_array_equal(fused, plain)  # x - (+-scale): the same floats


def test_fused_feedback_declines_other_dtypes_and_compressors():
    x64 = np.ones(64)
    r = np.zeros(64, np.float32)
    assert compressors.get("uniform").compress_feedback(x64, r, name="w") is None
    assert compressors.get("terngrad").compress_feedback(x64.astype(np.float32), r,
                                                         name="w") is None
    assert not r.any()
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


def test_residual_for_makes_zeros_then_returns_the_same_array():
    ef = ErrorFeedback(compressors.get("uniform"))
    res = ef.residual_for("w", 10)
    assert res.dtype == np.float32 and not res.any()
    res += 1
    assert ef.residual_for("w", 10).sum() == 10
    assert not ef.residual_for("w", 12).any()  # another size: a fresh residual


@pytest.mark.parametrize("spec", ["topk:ratio=0.01", "topk:ratio=0.05,approximate=true",
                                  "threshold:tau=1.5"])
@pytest.mark.parametrize("n", [1, 1009, 50_000])
def test_sparsifier_feedback_equals_compensate_compress_update(spec, n):
    c = compressors.get(spec)
    x, res = _pair(n, n)
    if n > 10:
        x[[2, 9]] = [np.inf, np.nan]
    ef = ErrorFeedback(c)
    ef.residuals["w"] = res.copy()
    xc = ef.compensate(x, "w")
    plain = c.compress(xc, name="w", step=2)
    ef.update("w", xc, plain)
    fused = c.compress_feedback(x, res, name="w", step=2)
    assert fused is not None and fused.to_bytes() == plain.to_bytes()
    np.testing.assert_array_equal(res, ef.residuals["w"])  # exact: values are sent as they are


@pytest.mark.parametrize("spec", ["uniform", "topk", "threshold"])
@pytest.mark.parametrize("residual", [np.zeros(9, np.float32), np.zeros(10),
                                      np.zeros((2, 5), np.float32), [0.0] * 10])
def test_fused_feedback_refuses_a_residual_that_does_not_fit(spec, residual):
    x = np.ones(10, np.float32)
    with pytest.raises(ValueError, match="flat float32 array of 10 elements"):
        compressors.get(spec).compress_feedback(x, residual, name="w")
    assert (x == 1).all()
