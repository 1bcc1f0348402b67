"""The GPU top-k's selection logic (compressors/cuda/topk.py), run on numpy with host twins of
its two kernels, against the C++ kernel's exact top-k: the same index set for any input."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from compressors import kernels
from compressors.cuda import topk as gpu_topk


def select(x: np.ndarray, k: int) -> np.ndarray:
    return gpu_topk.exact_topk(np, x, k, gpu_topk.host_histogram, gpu_topk.host_select_above)


def check(x: np.ndarray, k: int) -> None:
    got = select(x, k)
    want = kernels.topk_indices(x, k)
    assert got.dtype == np.int64
    assert np.array_equal(got, np.sort(got)), "indices must come back ascending"
    assert np.array_equal(got, want)


@pytest.mark.parametrize("n", [1, 2, 7, 1000, 65537, 1 << 20])
@pytest.mark.parametrize("share", [0.001, 0.01, 0.3])
def test_gaussian(n: int, share: float) -> None:
    x = np.random.default_rng(n).standard_normal(n).astype(np.float32)
    check(x, max(1, int(n * share)))


@pytest.mark.parametrize("k", [0, 1, 5, 99, 100, 101, 1000, 5000])
def test_ties_zeros_and_specials(k: int) -> None:
    rng = np.random.default_rng(k)
    x = np.zeros(5000, np.float32)
    x[rng.choice(5000, 100, replace=False)] = rng.choice([-2.0, 2.0, 1.5], 100)
    x[7], x[11], x[4000] = np.nan, -np.inf, np.inf
    x[13] = -0.0
    x[17] = np.float32(1e-42)  # a denormal: in the zero bin's neighbourhood
    check(x, k)


def test_all_equal_takes_lowest_indices() -> None:
    x = np.full(10001, -3.0, np.float32)
    assert np.array_equal(select(x, 37), np.arange(37))


def test_k_bounds() -> None:
    x = np.arange(9, dtype=np.float32)
    assert select(x, 9).tolist() == list(range(9))
    assert select(x, 50).tolist() == list(range(9))
    assert select(np.zeros(0, np.float32), 3).size == 0
    with pytest.raises(ValueError, match="k must be"):
        select(x, -1)


def test_bad_compaction_raises() -> None:
    x = np.arange(100, dtype=np.float32)
    with pytest.raises(RuntimeError, match="candidates"):
        gpu_topk.exact_topk(np, x, 5, gpu_topk.host_histogram, lambda v, key, c: np.arange(3))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from([0.0, -0.0, 1.0, -1.0, 0.5, 3e-39, 1e30, -7.25, np.inf,
                                 np.nan, 2.0, 2.0000002]), min_size=1, max_size=300),
       st.integers(0, 320))
def test_fuzz_against_cpp(values: list[float], k: int) -> None:
    check(np.asarray(values, np.float32), k)
