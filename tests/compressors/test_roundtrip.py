"""Generic contract of every registered compressor: shapes, dtypes, sizes, edge values."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compressors
from compressors import Payload

from .helpers import CONFIGS, gaussian

SHAPES = [(0,), (1,), (7,), (100,), (13, 17), (4, 5, 6)]


def all_compressors():
    return [compressors.get(n, **CONFIGS[n]) for n in sorted(CONFIGS)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("dtype", [np.float16, np.float32, np.float64])
def test_numpy_round_trip(comp, shape, dtype):
    x = gaussian(shape, dtype)
    p = comp.compress(x, name="w", step=3)
    y = comp.decompress(p)
    assert isinstance(y, np.ndarray) and y.shape == x.shape and y.dtype == x.dtype
    assert np.all(np.isfinite(y))
    assert p.nbytes == comp.payload_nbytes(shape, np.dtype(dtype).name) or \
        comp.payload_nbytes(shape, np.dtype(dtype).name) is None
    back = Payload.from_bytes(p.to_bytes())
    np.testing.assert_array_equal(compressors.decompress(back), y)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16, torch.float64])
def test_torch_round_trip(comp, dtype):
    x = torch.randn(9, 31, generator=torch.Generator().manual_seed(0)).to(dtype)
    p = comp.compress(x, name="w", step=0)
    y = comp.decompress(p)
    assert isinstance(y, torch.Tensor) and y.dtype == dtype and y.shape == x.shape
    out = torch.full_like(x, 7.0)
    assert comp.decompress(p, out=out) is out
    assert torch.equal(out, y)
    assert p.nbytes == comp.payload_nbytes(tuple(x.shape), str(dtype).split(".")[1]) or \
        comp.payload_nbytes(tuple(x.shape)) is None


def test_none_is_exact():
    c = compressors.get("none")
    for x in (gaussian((5, 7), np.float64), np.array([np.nan, np.inf, -0.0, 1e-40], np.float32)):
        y = c.decompress(c.compress(x, name="a", step=0))
        np.testing.assert_array_equal(y.view(np.uint8), x.view(np.uint8))
    t = torch.randn(33).to(torch.bfloat16)
    assert torch.equal(c.decompress(c.compress(t, name="a", step=0)), t)


@pytest.mark.parametrize("numel", [1000, 4096, 12345])
def test_payload_size_matches_declared_formula(comp, numel):
    p = comp.compress(gaussian(numel), name="x", step=0)
    declared = comp.payload_nbytes(numel, "float32")
    if comp.capabilities.same_size_on_all_ranks:
        assert declared == p.nbytes
        assert comp.bits_per_element(numel) == pytest.approx(8 * p.nbytes / numel)
    else:
        assert declared is None


def test_known_bit_widths():
    n = 1 << 20
    u8, u2 = (compressors.get("uniform", bits=b, bucket_size=512) for b in (8, 2))
    assert u8.payload_nbytes(n) == n + 8 * n // 512
    assert u2.payload_nbytes(n) == n // 4 + 8 * n // 512
    assert compressors.get("sign", bucket_size=1024).payload_nbytes(n) == n // 8 + 4 * n // 1024
    assert compressors.get("topk", ratio=0.01).payload_nbytes(n) == round(0.01 * n) * 8
    assert compressors.get("fp16").bits_per_element(n) == 16
    assert compressors.get("powersgd", rank=4).payload_nbytes((1024, 256)) == 4 * 4 * (1024 + 256)


def test_deterministic_for_seed_name_step(comp):
    x = gaussian((50, 40))
    a = comp.compress(x, name="layer", step=5).to_bytes()
    assert type(comp)(**comp.params).compress(x, name="layer", step=5).to_bytes() == a
    if "seed" in comp.params and comp.name in ("uniform", "qsgd", "terngrad", "randomk"):
        assert comp.compress(x, name="layer", step=6).to_bytes() != a
        assert comp.compress(x, name="other", step=5).to_bytes() != a


def test_zeros_give_zeros(comp):
    for shape in [(1,), (64,), (10, 12)]:
        y = comp.decompress(comp.compress(np.zeros(shape, np.float32), name="z", step=0))
        np.testing.assert_array_equal(y, 0)


def test_one_element(comp):
    x = np.array([2.5], np.float32)
    y = comp.decompress(comp.compress(x, name="one", step=0))
    assert y.shape == (1,)
    if comp.name not in ("qsgd", "terngrad", "randomk", "threshold"):
        assert y[0] == pytest.approx(2.5, rel=1e-2)


@pytest.mark.parametrize("dtype", [np.float32, np.float16, np.float64])
def test_nan_inf_pass_through(comp, dtype):
    x = gaussian((16, 16), dtype)
    flat = x.reshape(-1)
    specials = {3: np.nan, 77: np.inf, 200: -np.inf}
    for i, v in specials.items():
        flat[i] = v
    y = comp.decompress(comp.compress(x, name="nan", step=0)).reshape(-1)
    if comp.name == "randomk":  # only the shared random coordinates are sent at all
        return
    for i, v in specials.items():
        if np.isnan(v):
            assert np.isnan(y[i]), (comp.name, i)
        else:
            assert y[i] == v, (comp.name, i, y[i])
    finite = np.ones(x.size, bool)
    finite[list(specials)] = False
    assert np.all(np.isfinite(y[finite]))


def test_preallocated_out_and_payload_reuse():
    c = compressors.get("uniform", bits=8)
    x = gaussian(10_000)
    p = c.compress(x, name="a", step=0)
    codes = p.buffers["codes"]
    p2 = c.compress(x * 2, name="a", step=1, out=p)
    assert p2.buffers["codes"] is codes
    out = np.empty_like(x)
    assert c.decompress(p2, out=out) is out
    np.testing.assert_allclose(out, 2 * x, atol=0.1)


def test_wrong_out_rejected():
    c = compressors.get("fp16")
    p = c.compress(gaussian(10), name="a", step=0)
    with pytest.raises(ValueError, match="out is"):
        c.decompress(p, out=np.empty(11, np.float32))
    with pytest.raises(ValueError, match="out is"):
        c.decompress(p, out=np.empty(10, np.float64))


def test_foreign_payload_rejected():
    p = compressors.get("topk", ratio=0.1).compress(gaussian(100), name="a", step=0)
    with pytest.raises(compressors.PayloadError):
        compressors.get("topk", ratio=0.2).decompress(p)
    with pytest.raises(compressors.PayloadError):
        compressors.get("randomk", ratio=0.1).decompress(p)
