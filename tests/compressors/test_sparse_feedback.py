"""Selection with error feedback in one pass (topk_feedback, select_above_feedback) against
the separate passes it replaces, and the one-pass dense scatter against fill + assignment."""

from __future__ import annotations

import numpy as np
import pytest

import compressors
from compressors import kernels

from . import oracles
from .helpers import gaussian


def _separate(x: np.ndarray, residual: np.ndarray, select) -> tuple[np.ndarray, ...]:
    """The passes the fused kernels replace: sum, select, gather, zero sent and non-finite."""
    v = residual + x
    idx = select(v)
    vals = v[idx]
    v[idx] = 0
    v[~np.isfinite(v)] = 0
    return idx.astype(np.int32), vals, v


def _check(x: np.ndarray, residual: np.ndarray, select, fused) -> None:
    want_idx, want_vals, want_res = _separate(x, residual, select)
    res = residual.copy()
    idx, vals = fused(x, res)
    assert idx.dtype == np.int32 and vals.dtype == np.float32
    np.testing.assert_array_equal(idx, want_idx)
    assert vals.tobytes() == want_vals.tobytes()  # bit for bit, NaN payloads and -0 included
    assert res.tobytes() == want_res.tobytes()


def _data(n: int, seed: int, ties: bool = False, specials: bool = False):
    x = gaussian(n, seed=seed)
    res = 0.3 * gaussian(n, seed=seed + 1)
    if ties:
        x = np.round(x, 1)
        res[::2] = 0
    if specials and n > 20:
        x[[3, n // 2, n - 1]] = [np.nan, np.inf, -np.inf]
        res[[7, n // 3]] = [np.inf, -np.nan]
        x[10:14] = -0.0
        res[10:14] = -0.0
    return x, res


SIZES = [0, 1, 2, 7, 16, 17, 509, 4099, 65_537, 300_007]


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("ratio", [0.01, 0.3, 1.0])
@pytest.mark.parametrize("kind", ["plain", "ties", "specials"])
def test_topk_feedback_equals_sum_then_topk(n, ratio, kind, threads):
    x, res = _data(n, n + 7, ties=kind == "ties", specials=kind == "specials")
    k = 0 if n == 0 else min(n, max(1, round(ratio * n)))
    _check(x, res, lambda v: kernels.topk_indices(v, k),
           lambda a, r: kernels.topk_feedback(a, r, k))
    if n:  # and the oracle: ties to the lower index, NaN > Inf > finite
        _check(x, res, lambda v: oracles.topk(v, k), lambda a, r: kernels.topk_feedback(a, r, k))


@pytest.mark.parametrize("n", [1, 17, 4099, 300_007])
@pytest.mark.parametrize("k", [0, 1, "n-1", "n", "2n"])
def test_topk_feedback_extreme_k(n, k):
    x, res = _data(n, 3, specials=True)
    kk = {"n-1": n - 1, "n": n, "2n": 2 * n}.get(k, k)
    _check(x, res, lambda v: kernels.topk_indices(v, kk) if kk else np.zeros(0, np.int64),
           lambda a, r: kernels.topk_feedback(a, r, kk))


def test_topk_feedback_all_equal_ties_to_lower_index():
    x = np.ones(200_003, np.float32)
    res = np.zeros_like(x)
    idx, vals = kernels.topk_feedback(x, res, 10)
    np.testing.assert_array_equal(idx, np.arange(10))
    assert (vals == 1).all() and (res[:10] == 0).all() and (res[10:] == 1).all()


def test_topk_feedback_many_nonfinite():
    # More NaN than k: the threshold itself is a NaN key, Inf are not candidates and must still
    # leave the residual (as 0), like every NaN that is not sent.
    n = 100_003
    x, res = _data(n, 11)
    x[::2] = np.nan
    x[1::10] = np.inf
    _check(x, res, lambda v: kernels.topk_indices(v, 1000),
           lambda a, r: kernels.topk_feedback(a, r, 1000))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("kind", ["plain", "ties", "specials"])
@pytest.mark.parametrize("seed", [0, 42])
def test_topk_sampled_feedback_equals_sum_then_sampled(n, kind, seed, threads):
    x, res = _data(n, n + 9, ties=kind == "ties", specials=kind == "specials")
    k = 0 if n == 0 else max(1, n // 100)
    _check(x, res, lambda v: kernels.topk_sampled_indices(v, k, seed),
           lambda a, r: kernels.topk_feedback(a, r, k, approximate=True, seed=seed))


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("tau", [0.0, 0.5, 2.5, 3e38])
def test_select_above_feedback_equals_sum_then_select(n, tau, threads):
    x, res = _data(n, n + 5, specials=True)
    _check(x, res, lambda v: kernels.select_above(v, tau),
           lambda a, r: kernels.select_above_feedback(a, r, tau))


def test_feedback_kernels_check_their_arguments():
    x = np.ones(10, np.float32)
    with pytest.raises(ValueError, match="residual"):
        kernels.topk_feedback(x, np.zeros(9, np.float32), 2)
    with pytest.raises(ValueError, match="float32"):
        kernels.topk_feedback(x.astype(np.float64), np.zeros(10, np.float32), 2)
    with pytest.raises(ValueError, match="tau"):
        kernels.select_above_feedback(x, np.zeros(10, np.float32), float("nan"))


@pytest.mark.parametrize("spec", ["topk:ratio=0.01", "topk:ratio=0.2,approximate=true",
                                  "threshold:tau=1.5"])
@pytest.mark.parametrize("shape", [(0,), (1,), (13, 7), (300_007,)])
def test_compress_feedback_equals_numpy_passes(spec, shape):
    c = compressors.get(spec)
    n = int(np.prod(shape))
    x, res = _data(n, 17, specials=True)
    x = x.reshape(shape)
    res_fused, res_numpy = res.copy(), res.copy()
    fused = c.compress_feedback(x, res_fused, name="w", step=3)
    plain = c._compress_feedback_numpy(x, res_numpy, name="w", step=3)
    assert fused.to_bytes() == plain.to_bytes()
    assert fused.shape == shape and c.decompress(fused).shape == shape
    assert res_fused.tobytes() == res_numpy.tobytes()


def test_compress_feedback_with_a_strided_residual():
    c = compressors.get("topk", ratio=0.1)
    x, res = _data(1000, 4, specials=True)
    big = np.zeros(2000, np.float32)
    big[::2] = res
    fused = c.compress_feedback(x, big[::2], name="w")  # not contiguous: the numpy passes
    plain = c._compress_feedback_numpy(x, res, name="w")
    assert fused.to_bytes() == plain.to_bytes() and big[::2].tobytes() == res.tobytes()
    assert not big[1::2].any()


def test_compress_feedback_with_x_as_its_own_residual():
    c = compressors.get("topk", ratio=0.1)
    a = gaussian(1000, seed=2)
    b = a.copy()
    fused = c.compress_feedback(a, a, name="w")  # aliasing: the numpy passes
    plain = c._compress_feedback_numpy(b, b, name="w")
    assert fused.to_bytes() == plain.to_bytes() and np.array_equal(a, b)


@pytest.mark.parametrize("dtype", [np.float32, np.float64])
@pytest.mark.parametrize("idx_dtype", [np.int32, np.int64])
@pytest.mark.parametrize("n", [0, 1, 7, 4099, 65_537, 300_007])
@pytest.mark.parametrize("order", ["ascending", "duplicates", "shuffled"])
@pytest.mark.parametrize("offset", [0, 3])
def test_scatter_dense_equals_fill_then_assign(dtype, idx_dtype, n, order, offset, threads):
    rng = np.random.default_rng(n)
    if n == 0:
        idx = np.zeros(0, idx_dtype)
    elif order == "ascending":
        idx = np.flatnonzero(rng.random(n) < 0.05).astype(idx_dtype)
    elif order == "duplicates":
        idx = np.sort(rng.integers(0, n, max(1, n // 10))).astype(idx_dtype)
    else:
        idx = rng.integers(0, n, max(1, n // 10)).astype(idx_dtype)
    vals = rng.standard_normal(idx.size).astype(dtype)
    if vals.size:
        vals[0] = -0.0
    want = np.full(n, 7, dtype)
    want.fill(0)
    want[idx] = vals  # the last of equal indices wins
    out = np.full(n + offset, 7, dtype)[offset:]  # stale contents must all go
    kernels.scatter_dense(out, idx, vals)
    assert out.tobytes() == want.tobytes()


def test_scatter_dense_rejects_bad_indices():
    out = np.ones(10, np.float32)
    for bad in ([3, 10], [-1, 2]):
        with pytest.raises(IndexError):
            kernels.scatter_dense(out, np.array(bad, np.int64), np.ones(2, np.float32))
    with pytest.raises(ValueError):
        kernels.scatter_dense(out, np.array([1], np.int64), np.ones(2, np.float32))


def _mix32(h: np.ndarray) -> np.ndarray:
    h = h.astype(np.uint64)
    m = np.uint64(0xFFFFFFFF)
    h ^= h >> np.uint64(16)
    h = (h * np.uint64(0x85EBCA6B)) & m
    h ^= h >> np.uint64(13)
    h = (h * np.uint64(0xC2B2AE35)) & m
    h ^= h >> np.uint64(16)
    return h


def test_topk_feedback_when_the_sample_overshoots():
    # The exact selection's threshold comes from one value per stratum (16384 strata, a hashed
    # place in each): make exactly the sampled places large, so the threshold keeps fewer than
    # k candidates and every element has to be taken instead. The result must not change.
    n, k, s = 100_003, 1000, 16384
    seed = 0x243F6A8885A308D3
    salt = np.uint64((seed & 0xFFFFFFFF) ^ (seed >> 32))
    j = np.arange(s, dtype=np.uint64)
    lo = j * np.uint64(n) // np.uint64(s)
    width = (j + np.uint64(1)) * np.uint64(n) // np.uint64(s) - lo
    pos = (lo + _mix32(j ^ salt) % width).astype(np.int64)
    x = np.ones(n, np.float32)
    x[pos[:600]] = 10.0  # 600 > the sample rank, < k
    x[pos[600:]] = 0.5
    res = np.zeros(n, np.float32)
    res[pos[-1]] = np.nan  # and a NaN among them (it ranks first)
    _check(x, res, lambda v: kernels.topk_indices(v, k),
           lambda a, r: kernels.topk_feedback(a, r, k))


@pytest.mark.parametrize("n, nonzero, k", [(300_007, 1_000, 3_000), (70_001, 0, 700),
                                            (4_099, 40, 41), (4_099, 41, 41)])
def test_topk_of_a_gradient_sparser_than_k(n, nonzero, k):
    """An embedding's gradient: fewer nonzeros than k. Every nonzero is sent, and the
    lowest-index zeros (-0 among them) make up k, as the tie rule says."""
    rng = np.random.default_rng(n + nonzero)
    x = np.zeros(n, np.float32)
    x[rng.choice(n, nonzero, replace=False)] = rng.standard_normal(nonzero)
    x[5:9] = -0.0
    res = np.zeros(n, np.float32)
    _check(x, res, lambda v: oracles.topk(v, k), lambda a, r: kernels.topk_feedback(a, r, k))
    np.testing.assert_array_equal(kernels.topk_indices(x, k), oracles.topk(x, k))
