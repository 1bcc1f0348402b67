"""The C++ reduction kernels against numpy oracles (bit for bit)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import _compcoll
from collectives import ops
from compressors import dtypes

OPS = {"sum": np.add, "prod": np.multiply, "min": np.minimum, "max": np.maximum}


def _bf16_bits(x: np.ndarray) -> np.ndarray:
    t = torch.from_numpy(x.astype(np.float32)).to(torch.bfloat16)
    return t.view(torch.int16).numpy().view(np.uint16)


def _bf16_to_f32(b: np.ndarray) -> np.ndarray:
    return (b.astype(np.uint32) << 16).view(np.float32)


@pytest.mark.parametrize("op", list(OPS))
@pytest.mark.parametrize("name", ["float32", "float64", "int8", "uint8", "int32", "int64"])
def test_native_types_match_numpy(name: str, op: str) -> None:
    rng = np.random.default_rng(1)
    dt = dtypes.lookup(name)
    if dt.is_float:
        a, b = rng.standard_normal(100_003).astype(name), rng.standard_normal(100_003).astype(name)
    else:
        info = np.iinfo(name)
        a = rng.integers(info.min, info.max, 100_003, endpoint=True).astype(name)
        b = rng.integers(info.min, info.max, 100_003, endpoint=True).astype(name)
    want = OPS[op](a, b)  # numpy wraps integer overflow, like the kernel
    got = a.copy()
    ops.combine(got, b, dt, op)
    assert np.array_equal(got, want)


@pytest.mark.parametrize("op", list(OPS))
def test_float16_accumulates_in_fp32_and_rounds_once(op: str) -> None:
    rng = np.random.default_rng(2)
    a = (rng.standard_normal(65_537) * 100).astype(np.float16)
    b = (rng.standard_normal(65_537) * 100).astype(np.float16)
    want = OPS[op](a.astype(np.float32), b.astype(np.float32)).astype(np.float16)
    got = a.copy()
    ops.combine(got, b, dtypes.lookup("float16"), op)
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


@pytest.mark.parametrize("op", list(OPS))
def test_bfloat16_matches_torch_rounding(op: str) -> None:
    rng = np.random.default_rng(3)
    a, b = _bf16_bits(rng.standard_normal(10_001)), _bf16_bits(rng.standard_normal(10_001))
    want = _bf16_bits(OPS[op](_bf16_to_f32(a), _bf16_to_f32(b)))
    got = a.copy()
    ops.combine(got, b, dtypes.lookup("bfloat16"), op)
    assert np.array_equal(got, want)


def test_half_conversions_keep_nan_inf_and_round_to_even() -> None:
    x = np.array([np.nan, np.inf, -np.inf, 0.0, -0.0, 65504.0, 65520.0, 1e-8, 3.14159],
                 dtype=np.float32)
    h = np.empty(x.size, np.uint16)
    _compcoll.float_to_half(x, h, dtypes.lookup("float16").code)
    assert np.array_equal(h, x.astype(np.float16).view(np.uint16))
    bh = np.empty(x.size, np.uint16)
    _compcoll.float_to_half(x, bh, dtypes.lookup("bfloat16").code)
    back = np.empty(x.size, np.float32)
    _compcoll.half_to_float(bh, back, dtypes.lookup("bfloat16").code)
    assert np.isnan(back[0]) and np.isinf(back[1]) and back[2] == -np.inf
    assert np.array_equal(bh[1:], _bf16_bits(x[1:]))


def test_fp16_conversions_match_numpy_for_every_half_and_a_wide_float_sample() -> None:
    # Every fp16 bit pattern widens exactly; floats round to nearest even across the normal,
    # subnormal and overflow ranges, whatever the length (vector body and scalar tail).
    code = dtypes.lookup("float16").code
    halves = np.arange(1 << 16, dtype=np.uint16)
    wide = np.empty(halves.size, np.float32)
    _compcoll.half_to_float(halves, wide, code)
    want = halves.view(np.float16).astype(np.float32)
    nan = np.isnan(want)
    assert np.array_equal(wide[~nan].view(np.uint32), want[~nan].view(np.uint32))
    assert np.isnan(wide[nan]).all()
    rng = np.random.default_rng(4)
    bits = np.concatenate([rng.integers(0, 1 << 32, 1 << 20, dtype=np.uint64).astype(np.uint32),
                           np.arange(0x33000000, 0x38900000, 97, dtype=np.uint32),  # subnormals
                           np.arange(0x477FE000, 0x47800100, dtype=np.uint32)])  # to inf
    x = bits.view(np.float32)
    finite = ~np.isnan(x)
    with np.errstate(over="ignore"):
        want16 = x.astype(np.float16).view(np.uint16)
    for n in (x.size, 1, 7, 8, 9, 1001):
        h = np.empty(n, np.uint16)
        _compcoll.float_to_half(x[:n].copy(), h, code)
        assert np.array_equal(h[finite[:n]], want16[:n][finite[:n]])
        assert np.isnan(h[~finite[:n]].view(np.float16)).all()


def test_nan_propagates_through_min_and_max_from_either_side() -> None:
    a = np.array([np.nan, 1.0, 2.0], np.float32)
    b = np.array([0.0, np.nan, 1.0], np.float32)
    for op in ("min", "max"):
        got = a.copy()
        ops.combine(got, b, dtypes.lookup("float32"), op)
        assert np.isnan(got[0]) and np.isnan(got[1])


@settings(derandomize=True, max_examples=60, deadline=None)
@given(n=st.integers(0, 3000), threads=st.sampled_from([1, 2]),
       name=st.sampled_from(["float16", "float32", "int32"]))
def test_any_length_and_thread_count(n: int, threads: int, name: str) -> None:
    rng = np.random.default_rng(n)
    a = rng.integers(-9, 9, n).astype(name)
    b = rng.integers(-9, 9, n).astype(name)
    old = _compcoll.num_threads()
    _compcoll.set_num_threads(threads)
    try:
        got = a.copy()
        ops.combine(got, b, dtypes.lookup(name), "sum")
    finally:
        _compcoll.set_num_threads(old)
    assert np.array_equal(got, a + b)


def test_kernel_rejects_mismatched_buffers() -> None:
    with pytest.raises(ValueError, match="same whole number"):
        _compcoll.reduce_into(np.zeros(3, np.float32), np.zeros(4, np.float32), 2, 0)
    with pytest.raises(ValueError, match="num_threads"):
        _compcoll.set_num_threads(0)


@pytest.mark.parametrize("name", ["float16", "bfloat16", "float32", "float64"])
@pytest.mark.parametrize("n", [0, 1, 7, 8, 9, 100_003])
def test_sum_squares_in_double(name: str, n: int) -> None:
    x = torch.from_numpy(np.random.default_rng(n).standard_normal(n)).to(
        getattr(torch, name))
    raw = x.view(torch.int16).numpy().view(np.uint16) if name == "bfloat16" else x.numpy()
    want = float((x.double() ** 2).sum())
    assert ops.sum_squares(raw, dtypes.lookup(name)) == pytest.approx(want, rel=1e-12, abs=0)


def test_sum_squares_propagates_nonfinite() -> None:
    f32 = dtypes.lookup("float32")
    assert np.isnan(ops.sum_squares(np.array([1, np.nan, 2], np.float32), f32))
    assert ops.sum_squares(np.array([1, -np.inf], np.float32), f32) == np.inf


def test_sum_squares_refuses_integers() -> None:
    with pytest.raises(ValueError, match="floating-point"):
        ops.sum_squares(np.arange(4, dtype=np.int32), dtypes.lookup("int32"))
