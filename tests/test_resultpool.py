"""Results of calls without out=: pooled blocks, never one the caller still refers to."""

from __future__ import annotations

import gc

import numpy as np
import pytest
import torch

import collectives
from collectives import resultpool

N = resultpool.MIN_BYTES // 4 * 3  # float32 elements: 3 MiB, over the pool's minimum


def address(a) -> int:
    return a.__array_interface__["data"][0] if isinstance(a, np.ndarray) else a.data_ptr()


@pytest.fixture(autouse=True)
def _empty_pool():
    resultpool.clear()
    yield
    resultpool.clear()
    collectives.defaults.result_pool_bytes = 1 << 30


def test_a_dropped_result_s_block_is_handed_out_again() -> None:
    x = np.ones(N, np.float32)
    a = resultpool.empty_like_numpy(x)
    first = address(a)
    b = resultpool.empty_like_numpy(x)
    assert address(b) != first  # a is still held
    del a
    gc.collect()
    c = resultpool.empty_like_numpy(x)
    assert address(c) == first and c.shape == x.shape and c.dtype == x.dtype
    assert resultpool.held_bytes() == 2 * x.nbytes


@pytest.mark.parametrize("keep", ["view", "reshape", "torch", "slice of torch"])
def test_a_block_is_not_reused_while_anything_made_from_it_lives(keep: str) -> None:
    x = np.ones(N, np.float32)
    a = resultpool.empty_like_numpy(x)
    a[:] = 7.0
    first = address(a)
    if keep == "view":
        held = a[5:]
    elif keep == "reshape":
        held = a.reshape(3, -1)
    else:
        held = torch.from_numpy(a) if keep == "torch" else torch.from_numpy(a)[1:]
    del a
    gc.collect()
    b = resultpool.empty_like_numpy(x)
    b[:] = 0.0
    assert address(b) != first
    assert float(held.reshape(-1)[0]) == 7.0  # untouched


def test_torch_results_come_from_the_pool_in_the_input_s_dtype_and_shape() -> None:
    for dtype in (torch.float32, torch.float64, torch.bfloat16, torch.float16, torch.int32):
        x = torch.ones((3, N // 3), dtype=dtype)
        t = resultpool.empty_like_torch(x)
        assert t.dtype == dtype and t.shape == x.shape and t.is_contiguous()
        first = t.data_ptr()
        del t
        gc.collect()
        assert resultpool.empty_like_torch(x).data_ptr() == first


def test_small_results_and_a_pool_turned_off_are_plain_allocations() -> None:
    small = np.ones(1000, np.float32)
    assert resultpool.empty_like_numpy(small).base is None
    collectives.defaults.result_pool_bytes = 0
    assert resultpool.empty_like_numpy(np.ones(N, np.float32)).base is None
    assert resultpool.held_bytes() == 0


def test_free_blocks_beyond_the_limit_are_released_oldest_first() -> None:
    x = np.ones(N, np.float32)
    collectives.defaults.result_pool_bytes = 2 * x.nbytes
    sizes = [np.ones(N + k * 1024, np.float32) for k in range(4)]
    for s in sizes:  # each dropped at once: free, of a size no later call asks for
        resultpool.empty_like_numpy(s)
    assert resultpool.held_bytes() <= 2 * sizes[-1].nbytes
    # blocks in use are never released, whatever the limit
    kept = [resultpool.empty_like_numpy(s) for s in sizes]
    assert all(k.base is not None for k in kept)
    assert len({address(k) for k in kept}) == len(kept)


def test_the_limit_is_a_setting_of_its_own(monkeypatch) -> None:
    monkeypatch.setenv("COMPCOLL_RESULT_POOL_BYTES", "12345")
    from collectives.config import from_env
    assert from_env("result_pool_bytes") == 12345
    with pytest.raises(ValueError, match="whole number of bytes"):
        collectives.defaults.result_pool_bytes = -1


@pytest.mark.parametrize("compressor", [None, "uniform:bits=8", "topk:ratio=0.01"])
def test_allreduce_without_out_returns_fresh_results_equal_to_out(compressor) -> None:
    """Through the real call (one rank): each result equals the same call with ``out=``, a
    result still held is never written by a later call, and a dropped one's block is reused."""
    from mpi4py import MPI

    x = np.random.default_rng(0).standard_normal(N).astype(np.float32)
    kw = {"comm": MPI.COMM_SELF, "op": "sum"}
    if compressor is not None:
        kw["compressor"] = compressor
    want = np.empty_like(x)
    collectives.allreduce(x, out=want, **kw)
    first = collectives.allreduce(x, **kw)
    np.testing.assert_array_equal(first, want)
    second = collectives.allreduce(x, **kw)
    assert address(second) != address(first)
    np.testing.assert_array_equal(first, want)  # untouched by the second call
    spot = address(first)
    del first
    gc.collect()
    other = (x + 1.0).astype(np.float32)  # other bits: a stale block would still hold want
    want_other = np.empty_like(x)
    collectives.allreduce(other, out=want_other, **kw)
    assert not np.array_equal(want_other, want)
    third = collectives.allreduce(other, **kw)
    assert address(third) == spot
    np.testing.assert_array_equal(third, want_other)
    t = collectives.allreduce(torch.from_numpy(x), **kw)
    assert isinstance(t, torch.Tensor)
    np.testing.assert_array_equal(t.numpy(), want)


def test_memory_reached_only_through_a_raw_address_is_handed_out_again() -> None:
    """What the module doc says is not safe, and its two ways out."""
    import ctypes

    x = np.ones(N, np.float32)
    a = resultpool.empty_like_numpy(x)
    a[:] = 7.0
    raw = (ctypes.c_float * N).from_address(address(a))  # no reference to a
    del a
    gc.collect()
    b = resultpool.empty_like_numpy(x)
    b[:] = 0.0
    assert address(b) == ctypes.addressof(raw) and raw[0] == 0.0  # overwritten
    kept = memoryview(b)  # an export of the buffer is a reference: the block stays
    del b
    gc.collect()
    assert address(resultpool.empty_like_numpy(x)) != ctypes.addressof(raw)
    del kept
    mine = np.empty_like(x)  # out=: the caller's own buffer
    assert collectives.allreduce(x, out=mine, comm=_self()) is mine
    collectives.defaults.result_pool_bytes = 0
    assert resultpool.empty_like_numpy(x).base is None  # the pool turned off


def test_a_pooled_torch_result_shrinks_but_refuses_to_grow() -> None:
    x = torch.ones(N)
    t = resultpool.empty_like_torch(x)
    with pytest.raises(RuntimeError, match="not resizable"):
        t.resize_(2 * N)
    first = t.data_ptr()
    t.resize_(N // 2)  # the block stays referenced while the shrunk tensor lives
    assert resultpool.empty_like_torch(x).data_ptr() != first
    y = collectives.allreduce(x, comm=_self())
    with pytest.raises(RuntimeError, match="not resizable"):
        y.resize_(2 * N)
    grown = y.clone().resize_(2 * N)  # the way the module doc gives
    assert grown.numel() == 2 * N and torch.equal(grown[:N], x)


def test_the_module_doc_says_what_is_safe_and_how_to_opt_out() -> None:
    doc = resultpool.__doc__
    for words in ("from_address", "MPI.buffer.fromaddress", "__array_interface__",
                  "out=", "result_pool_bytes = 0", "resize_()", "clone()"):
        assert words in doc, words
    assert "ever reused" not in doc and "40 ms" not in doc


def _self():
    from mpi4py import MPI

    return MPI.COMM_SELF
