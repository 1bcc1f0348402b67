"""Each C++ kernel against its plain numpy oracle (bit exact for integer outputs)."""

from __future__ import annotations

import numpy as np
import pytest

import _compcoll
from compressors import kernels

from . import oracles
from .helpers import gaussian


def with_specials(x: np.ndarray) -> np.ndarray:
    x = x.copy()
    x[5], x[6], x[-1] = np.nan, np.inf, -np.inf
    x[100:164] = 0.0  # a constant bucket
    return x


def test_counter_uniform_is_uniform():
    u = oracles.counter_uniform(123, np.arange(1 << 16))
    assert u.dtype == np.float32 and np.all((u >= 0) & (u < 1))
    assert abs(u.mean() - 0.5) < 0.01 and abs(np.histogram(u, 16)[0] / u.size - 1 / 16).max() < 0.01


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("stochastic", [True, False])
@pytest.mark.parametrize("n", [1, 37, 1000, 200_003])
def test_quantize_bit_exact(bits, stochastic, n, threads):
    x = gaussian(n, seed=n) * 3
    if n > 200:
        x = with_specials(x)
    bucket, seed = 64, (1 << 40) + 977
    nb = -(-n // bucket)
    codes = np.empty(-(-n * bits // 8), np.uint8)
    mins, scales = np.empty(nb, np.float32), np.empty(nb, np.float32)
    bad = kernels.quantize(x, codes, mins, scales, bits, bucket, seed, stochastic)
    ref_codes, ref_mins, ref_scales = oracles.quantize(x, bits, bucket, seed, stochastic)
    assert bad == np.count_nonzero(~np.isfinite(x))
    np.testing.assert_array_equal(codes, ref_codes)
    np.testing.assert_array_equal(mins, ref_mins)
    np.testing.assert_array_equal(scales, ref_scales)
    out = np.empty(n, np.float32)
    kernels.dequantize(codes, mins, scales, out, bits, bucket)
    per = 8 // bits
    c = (codes.repeat(per) >> np.tile(np.arange(per, dtype=np.uint8) * bits, codes.size)) & (
        2**bits - 1)
    expect = mins.repeat(bucket)[:n] + c[:n].astype(np.float32) * scales.repeat(bucket)[:n]
    np.testing.assert_allclose(out, expect, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
def test_quantize_buckets_of_several_tiles(bits, threads):
    # buckets longer than the kernels' 256-value tiles, not a multiple of them, and a ragged
    # last bucket: codes of every tile land where the oracle puts them
    n, bucket = 10_001, 520
    x = with_specials(gaussian(n, seed=bits))
    nb = -(-n // bucket)
    codes = np.empty(-(-n * bits // 8), np.uint8)
    mins, scales = np.empty(nb, np.float32), np.empty(nb, np.float32)
    kernels.quantize(x, codes, mins, scales, bits, bucket, 12345, True)
    ref_codes, ref_mins, ref_scales = oracles.quantize(x, bits, bucket, 12345, True)
    np.testing.assert_array_equal(codes, ref_codes)
    np.testing.assert_array_equal(mins, ref_mins)
    bits_, sc = np.empty(-(-n // 8), np.uint8), np.empty(nb, np.float32)
    kernels.sign_pack(x, bits_, sc, bucket)
    np.testing.assert_array_equal(bits_, oracles.sign_pack(x, bucket)[0])
    out = np.empty(n, np.float32)
    kernels.sign_unpack(bits_, sc, out, bucket)
    np.testing.assert_array_equal(np.signbit(out), np.signbit(x))


def test_quantize_thread_count_independent():
    x = gaussian(1 << 18)
    results = []
    for t in (1, 2):
        _compcoll.set_num_threads(t)
        codes = np.empty(x.size, np.uint8)
        mins, scales = np.empty(x.size // 512, np.float32), np.empty(x.size // 512, np.float32)
        kernels.quantize(x, codes, mins, scales, 8, 512, 99, True)
        results.append(codes)
    _compcoll.set_num_threads(1)
    np.testing.assert_array_equal(*results)


def test_quantize_rejects_bad_arguments():
    x = gaussian(64)
    with pytest.raises(ValueError, match="bits"):
        kernels.quantize(x, np.empty(64, np.uint8), np.empty(1, np.float32),
                         np.empty(1, np.float32), 3, 64, 0, True)
    with pytest.raises(ValueError, match="bucket_size"):
        kernels.quantize(x, np.empty(64, np.uint8), np.empty(1, np.float32),
                         np.empty(1, np.float32), 8, 60, 0, True)
    with pytest.raises(ValueError, match="elements"):
        kernels.quantize(x, np.empty(63, np.uint8), np.empty(1, np.float32),
                         np.empty(1, np.float32), 8, 64, 0, True)


@pytest.mark.parametrize("n", [1, 9, 1000, 200_001])
def test_sign_pack_matches_oracle(n, threads):
    x = gaussian(n, seed=n)
    if n > 200:
        x = with_specials(x)
        x[300] = -0.0
    bucket = 128
    bits = np.empty(-(-n // 8), np.uint8)
    scales = np.empty(-(-n // bucket), np.float32)
    bad = kernels.sign_pack(x, bits, scales, bucket)
    ref_bits, ref_scales = oracles.sign_pack(x, bucket)
    assert bad == np.count_nonzero(~np.isfinite(x))
    np.testing.assert_array_equal(bits, ref_bits)
    np.testing.assert_allclose(scales, ref_scales, rtol=1e-5)
    out = np.empty(n, np.float32)
    kernels.sign_unpack(bits, scales, out, bucket)
    s = scales.repeat(bucket)[:n]
    np.testing.assert_array_equal(out, np.where(np.signbit(x), -s, s))


@pytest.mark.parametrize("n", [1, 9, 1000, 200_003])
def test_terngrad_matches_oracle(n, threads):
    x = gaussian(n, seed=n)
    if n > 200:
        x = with_specials(x)
    bucket, seed = 64, (1 << 40) + 5
    codes = np.empty(-(-n // 4), np.uint8)
    scales = np.empty(-(-n // bucket), np.float32)
    bad = kernels.terngrad_encode(x, codes, scales, bucket, seed)
    ref_codes, ref_scales = oracles.terngrad(x, bucket, seed)
    assert bad == np.count_nonzero(~np.isfinite(x))
    np.testing.assert_array_equal(codes, ref_codes)
    np.testing.assert_array_equal(scales, ref_scales)
    out = np.empty(n, np.float32)
    kernels.terngrad_decode(codes, scales, out, bucket)
    c = (codes.repeat(4) >> np.tile(np.arange(4, dtype=np.uint8) * 2, codes.size))[:n] & 3
    s = oracles.per_value(scales, bucket, n)
    np.testing.assert_array_equal(out, np.where(c == 1, s, np.float32(0)) - np.where(c == 2, s, 0))


@pytest.mark.parametrize("levels", [1, 127, 128, 32767])
@pytest.mark.parametrize("n", [1, 1000, 200_003])
def test_qsgd_matches_oracle(levels, n, threads):
    x = gaussian(n, seed=n) * 5
    if n > 200:
        x = with_specials(x)
    bucket, seed = 128, 31
    codes = np.empty(n, np.int8 if levels <= 127 else np.int16)
    norms = np.empty(-(-n // bucket), np.float32)
    bad = kernels.qsgd_encode(x, codes, norms, bucket, levels, seed)
    assert bad == np.count_nonzero(~np.isfinite(x))
    a = np.zeros(norms.size * bucket)
    a[:n] = oracles.finite_abs(x)
    np.testing.assert_allclose(norms, np.sqrt((a.reshape(-1, bucket) ** 2).sum(axis=1)),
                               rtol=1e-6)
    np.testing.assert_array_equal(codes, oracles.qsgd_codes(x, norms, bucket, levels, seed))
    out = np.empty(n, np.float32)
    kernels.qsgd_decode(codes, norms, out, bucket, levels)
    step = oracles.per_value(norms / np.float32(levels), bucket, n)
    np.testing.assert_array_equal(out, codes.astype(np.float32) * step)


def test_qsgd_rejects_codes_of_the_wrong_width():
    x = gaussian(64)
    with pytest.raises(ValueError, match="qsgd_encode codes"):
        kernels.qsgd_encode(x, np.empty(64, np.int8), np.empty(1, np.float32), 64, 300, 0)
    with pytest.raises(ValueError, match="levels"):
        kernels.qsgd_encode(x, np.empty(64, np.int8), np.empty(1, np.float32), 64, 0, 0)


@pytest.mark.parametrize("n,k", [(1, 1), (10, 3), (1000, 1000), (5000, 50), (300_000, 3000),
                                 (300_000, 1), (300_000, 150_000)])
def test_topk_exact_matches_oracle(n, k, threads):
    x = gaussian(n, seed=k)
    if n > 1000:
        x[::7] = np.round(x[::7], 1)  # many ties
        x[17], x[99] = np.nan, -np.inf
    np.testing.assert_array_equal(kernels.topk_indices(x, k), oracles.topk(x, k))


def test_topk_all_equal_ties_to_lower_index():
    x = np.ones(200_000, np.float32)
    np.testing.assert_array_equal(kernels.topk_indices(x, 10), np.arange(10))


def test_topk_sampled_recall():
    x = gaussian(1 << 20, seed=5)
    k = 1 << 14
    idx = kernels.topk_sampled_indices(x, k, 42)
    truth = oracles.topk(x, k)
    assert np.all(np.diff(idx) > 0) and idx.size <= 2 * k
    recall = np.intersect1d(idx, truth).size / k
    assert recall >= 0.9 and 0.8 * k <= idx.size <= 1.2 * k
    np.testing.assert_array_equal(idx, kernels.topk_sampled_indices(x, k, 42))


@pytest.mark.parametrize("tau", [0.0, 0.5, 2.0])
def test_select_above_matches_numpy(tau, threads):
    x = with_specials(gaussian(150_000))
    expect = np.flatnonzero(~(np.abs(x) <= np.float32(tau)))
    np.testing.assert_array_equal(kernels.select_above(x, tau), expect)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
def test_gather_scatter(dtype, idx_dtype, threads):
    x = gaussian(100_000, dtype)
    idx = np.sort(np.random.default_rng(1).choice(x.size, 70_000, replace=False)).astype(idx_dtype)
    np.testing.assert_array_equal(kernels.gather(x, idx), x[idx])
    out = np.zeros_like(x)
    kernels.scatter(out, idx, x[idx])
    expect = np.zeros_like(x)
    expect[idx] = x[idx]
    np.testing.assert_array_equal(out, expect)
    dup = np.array([3, 3, 5, 3], idx_dtype)
    vals = np.array([1, 2, 3, 4], dtype)
    kernels.scatter(out, dup, vals, accumulate=True)
    for i, v in zip(dup, vals, strict=True):  # list order, one rounding per addition
        expect[i] += v
    np.testing.assert_array_equal(out, expect)
    with pytest.raises(IndexError):
        kernels.gather(x, np.array([x.size], idx_dtype))


def _misaligned(a: np.ndarray, shift: int = 1) -> np.ndarray:
    """A copy of a whose data starts ``shift`` bytes past an aligned address."""
    store = np.zeros(a.nbytes + 16, np.uint8)
    view = store[shift:shift + a.nbytes].view(a.dtype)
    view[...] = a
    assert not view.flags.aligned
    return view


@pytest.mark.parametrize("call", [
    lambda m: _compcoll.dequantize(np.zeros(64, np.uint8), m(np.zeros(1, np.float32)),
                                   np.zeros(1, np.float32), np.empty(64, np.float32), 8, 64,
                                   False),
    lambda m: _compcoll.sign_unpack(np.zeros(8, np.uint8), np.zeros(1, np.float32),
                                    m(np.zeros(64, np.float32)), 64),
    lambda m: _compcoll.qsgd_decode(np.zeros(64, np.int8), m(np.zeros(1, np.float32)),
                                    np.empty(64, np.float32), 64, 7),
    lambda m: _compcoll.scatter_dense(np.empty(64, np.float32), m(np.arange(4, dtype=np.int32)),
                                      np.ones(4, np.float32)),
    lambda m: _compcoll.gather(np.ones(64, np.float32), np.arange(4, dtype=np.int32),
                               m(np.zeros(4, np.float32))),
    lambda m: _compcoll.topk_indices(m(np.ones(64, np.float32)), 3),
])
def test_kernels_refuse_misaligned_arrays(call):
    call(lambda a: a)  # aligned: fine
    with pytest.raises(ValueError, match="aligned"):
        call(_misaligned)


@pytest.mark.parametrize("dtype,code", [(np.float32, 2), (np.float64, 3), (np.int32, 6)])
def test_reductions_through_misaligned_views(dtype, code):
    a, b = (np.arange(1000) * 3).astype(dtype), (np.arange(1000) % 7).astype(dtype)
    dst, src = _misaligned(a, 3), _misaligned(b, 5)
    _compcoll.reduce_into(dst, src, code, 0)
    np.testing.assert_array_equal(dst, a + b)
    half = _misaligned(np.arange(10, dtype=np.float16).view(np.uint16), 1)
    wide = np.empty(10, np.float32)
    _compcoll.half_to_float(half, wide, 0)
    np.testing.assert_array_equal(wide, np.arange(10, dtype=np.float32))


@pytest.mark.parametrize("idx", [[0, -1], [2**31 - 1], [-(2**31)], [3, 64]])
def test_sparse_kernels_bounds_check_indices(idx):
    ix = np.array(idx, np.int32)
    vals = np.ones(ix.size, np.float32)
    out = np.zeros(64, np.float32)
    for call in (lambda: _compcoll.gather(out, ix, vals.copy()),
                 lambda: _compcoll.scatter(out, ix, vals, False),
                 lambda: _compcoll.scatter(out, ix, vals, True),
                 lambda: _compcoll.scatter_dense(out, ix, vals)):
        with pytest.raises(IndexError, match="out of range"):
            call()


def test_feedback_selection_of_an_empty_tensor():
    empty = np.zeros(0, np.float32)
    for idx, val in (kernels.topk_feedback(empty, np.zeros(0, np.float32), 0),
                     kernels.topk_feedback(empty, np.zeros(0, np.float32), 0, True, 7),
                     kernels.select_above_feedback(empty, np.zeros(0, np.float32), 0.5)):
        assert idx.size == 0 and val.size == 0 and idx.dtype == np.int32


def _crc32c_reference(data: bytes) -> int:
    c = 0xFFFFFFFF
    for byte in data:
        c ^= byte
        for _ in range(8):
            c = (c >> 1) ^ (0x82F63B78 & -(c & 1))
    return c ^ 0xFFFFFFFF


@pytest.mark.parametrize("n", [0, 1, 7, 9, 4095, 12288, 12289, 3 * 12288 + 13])
def test_crc32c_matches_the_reference(n):
    data = np.random.default_rng(n).integers(0, 256, n + 3, dtype=np.uint8)
    view = data[3:]  # any alignment
    assert _compcoll.crc32c(view) == _crc32c_reference(view.tobytes())
    # continued over pieces: the same value
    c = 0
    for i in range(0, n, 5000):
        c = _compcoll.crc32c(view[i:i + 5000], c)
    assert c == _compcoll.crc32c(view)
    assert _compcoll.crc32c(np.frombuffer(b"123456789", np.uint8)) == 0xE3069283


def test_merges_and_wrappers_take_sets_received_at_odd_offsets():
    ia, va = np.array([1, 4, 9], np.int64), np.array([1.0, 2.0, 3.0])
    ib, vb = np.array([4, 5], np.int64), np.array([10.0, 20.0])
    io, vo = np.empty(5, np.int64), np.empty(5)
    k = _compcoll.merge_sorted(_misaligned(ia, 4), _misaligned(va, 4), ib, _misaligned(vb, 2),
                               io, vo)
    assert io[:k].tolist() == [1, 4, 5, 9] and vo[:k].tolist() == [1.0, 12.0, 20.0, 3.0]
    dense = np.empty(12)
    _compcoll.merge_dense(dense, [_misaligned(ia, 1), ib], [_misaligned(va, 3), vb])
    assert dense[[1, 4, 5, 9]].tolist() == [1.0, 12.0, 20.0, 3.0] and dense.sum() == 36.0
    out = np.empty(12)
    kernels.scatter_dense(out, _misaligned(ia, 4), _misaligned(va, 4))
    assert out[[1, 4, 9]].tolist() == [1.0, 2.0, 3.0] and out.sum() == 6.0
    assert kernels.gather(_misaligned(out, 2), _misaligned(ia, 4)).tolist() == [1.0, 2.0, 3.0]


def test_sign_scales_sum_in_the_order_the_cuda_twin_sums() -> None:
    """A bucket's scale is the mean |x| of its finite values summed in 16 lanes (lane l takes
    the values at i = l mod 16, in index order), the lanes added as a fixed tree: the order
    csrc/cuda/sign.cu sums in, so a GPU's scales are the same bits, on any CPU build."""
    import compressors

    def reference(bucket: np.ndarray) -> np.float32:
        lanes = np.zeros(16, np.float32)
        for i, v in enumerate(np.abs(bucket)):
            if np.isfinite(v):
                lanes[i % 16] = np.float32(lanes[i % 16] + v)
        width = 8
        while width:
            lanes[:width] = lanes[:width] + lanes[width:2 * width]
            width //= 2
        good = np.isfinite(bucket).sum()
        return np.float32(lanes[0] / np.float32(good)) if good else np.float32(0)

    rng = np.random.default_rng(7)
    comp = compressors.get("sign:bucket_size=512")
    for n in (1, 17, 512, 1500):
        x = (rng.standard_normal(n) * rng.uniform(1e-3, 1e3, n)).astype(np.float32)
        x[::97] = np.inf
        scales = comp.compress(x, name="s", step=0).buffers["scales"]
        want = np.array([reference(x[a:a + 512]) for a in range(0, n, 512)], np.float32)
        assert np.array_equal(scales.view(np.uint32), want.view(np.uint32)), n
