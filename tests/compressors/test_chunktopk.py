"""Chunked top-k with low-bit values against a numpy oracle, bit for bit; sizes, error
feedback, zeros, NaN/Inf, parameters and damaged payloads."""

from __future__ import annotations

import numpy as np
import pytest
import torch

import compressors
from compressors import ErrorFeedback, Payload, PayloadError

from .helpers import gaussian
from .oracles import abs_keys, pack

SPEC = "chunktopk:ratio=0.02,bits=2,chunk=4096"
SIZES = [0, 1, 7, 4095, 4097, 10007]


def oracle(x32: np.ndarray, ratio: float, bits: int, chunk: int):
    """(indices, packed values, scales, decoded) of the encoding, one chunk at a time."""
    x32 = np.where(np.isfinite(x32), x32, np.float32(0)).astype(np.float32)
    top = 1 << (bits - 1)
    idx, codes, scales = [], [], []
    out = np.zeros(x32.size, np.float32)
    for start in range(0, x32.size, chunk):
        c = x32[start:start + chunk]
        k = min(c.size, max(1, round(ratio * c.size)))
        order = np.lexsort((np.arange(c.size), -abs_keys(c).astype(np.int64)))
        kept = np.sort(order[:k])
        nz = [int(o) for o in kept if c[o] != 0]
        offs = nz + [nz[-1] if nz else 0] * (k - len(nz)) if nz else [int(kept[0])] * k
        vals = [c[o] for o in nz] + [np.float32(0)] * (k - len(nz))
        s = np.float32(max(abs(v) for v in vals))
        for j, (o, v) in enumerate(zip(offs, vals, strict=True)):
            t = np.float32(np.float32(abs(v)) / (s if s > 0 else np.float32(1))) * np.float32(top)
            m = int(min(max(np.floor(t + np.float32(0.5)), 1), top)) - 1
            codes.append((int(np.signbit(v)) << (bits - 1)) | m)
            if j == 0 or o != offs[j - 1]:
                mag = s * np.float32((m + 1) / top)
                out[start + o] = -mag if np.signbit(v) else mag
        idx += offs
        scales.append(s)
    packed = pack(np.array(codes, np.uint8), bits)
    return (np.array(idx, np.uint16), packed, np.array(scales, np.float32), out)


def _check_against_oracle(comp, x, x32):
    p = comp.compress(x, name="w", step=3)
    idx, vals, scales, dense = oracle(x32, comp.ratio, comp.bits, comp.chunk)
    np.testing.assert_array_equal(p.buffers["indices"], idx)
    np.testing.assert_array_equal(p.buffers["values"], vals)
    assert p.buffers["scales"].tobytes() == scales.tobytes()
    y = np.asarray(comp.decompress(p), dtype=np.float32).reshape(-1)
    want = dense if x.dtype == np.float32 else dense.astype(x.dtype).astype(np.float32)
    assert y.tobytes() == want.tobytes()
    assert p.nbytes == comp.payload_nbytes(x.size, str(x.dtype))
    back = compressors.decompress(Payload.from_bytes(p.to_bytes()))
    assert np.asarray(back).tobytes() == np.asarray(comp.decompress(p)).tobytes()


@pytest.mark.parametrize("n", SIZES)
@pytest.mark.parametrize("dtype", [np.float32, np.float64, np.float16])
def test_matches_numpy_oracle_bit_for_bit(n, dtype):
    comp = compressors.get(SPEC)
    x = gaussian(n, dtype, seed=n)
    _check_against_oracle(comp, x, x.astype(np.float32))


@pytest.mark.parametrize("bits", [1, 2, 4, 8])
@pytest.mark.parametrize("chunk,ratio", [(2, 0.5), (64, 0.1), (1000, 0.013), (65536, 0.01)])
def test_every_width_and_chunk_matches_the_oracle(bits, chunk, ratio):
    comp = compressors.get("chunktopk", ratio=ratio, bits=bits, chunk=chunk)
    x = gaussian(3 * chunk + 5, seed=bits)
    x[::7] = np.round(x[::7])  # ties at the threshold: the lower index wins
    x[chunk:2 * chunk - 1] = 0  # one non-zero, then padding
    x[2 * chunk:3 * chunk] = 0
    _check_against_oracle(comp, x, x)


def test_ties_go_to_the_lower_index():
    comp = compressors.get("chunktopk", ratio=0.1, bits=2, chunk=100)
    x = np.where(np.arange(1050) % 2, 1.5, -1.5).astype(np.float32)  # one magnitude
    x[[250, 260]] = 3.0  # a chunk whose ties fill the last 8 places
    _check_against_oracle(comp, x, x)
    offs = comp.compress(x, name="w", step=0).buffers["indices"].reshape(-1)
    np.testing.assert_array_equal(offs[:10], np.arange(10))
    np.testing.assert_array_equal(offs[20:30], [0, 1, 2, 3, 4, 5, 6, 7, 50, 60])


def test_bfloat16_matches_the_oracle():
    comp = compressors.get(SPEC)
    t = torch.randn(10007, generator=torch.Generator().manual_seed(1)).to(torch.bfloat16)
    y = comp.decompress(comp.compress(t, name="w", step=0))
    assert y.dtype == torch.bfloat16
    dense = oracle(t.float().numpy(), 0.02, 2, 4096)[3]
    assert torch.equal(y, torch.from_numpy(dense).to(torch.bfloat16))


def test_exactly_k_per_chunk_at_the_largest_magnitudes():
    comp = compressors.get(SPEC)
    x = gaussian(10007, seed=5)
    y = comp.decompress(comp.compress(x, name="w", step=0))
    for start, k in ((0, 82), (4096, 82), (8192, 36)):  # 1815 elements: round(36.3)
        c, d = x[start:start + 4096], y[start:start + 4096]
        top = np.sort(np.argsort(-np.abs(c), kind="stable")[:k])
        np.testing.assert_array_equal(np.flatnonzero(d), top)
        assert np.all(np.sign(d[top]) == np.sign(c[top]))
        assert np.max(np.abs(d)) == np.max(np.abs(c))  # the scale is sent exactly


def test_sizes_are_the_same_for_the_same_numel():
    comp = compressors.get(SPEC)
    shape = (37, 281)
    data = [gaussian(shape, seed=s) for s in range(3)] + [np.zeros(shape, np.float32)]
    data.append(np.where(gaussian(shape) > 2, 1.0, 0.0).astype(np.float32))  # sparse chunks
    sizes = {len(comp.compress(x, name="w", step=0).to_bytes()) for x in data}
    assert sizes == {comp.wire_nbytes(shape)}
    assert comp.capabilities.same_size_on_all_ranks and not comp.capabilities.sparse


def test_payload_is_at_least_50x_smaller_than_float32():
    n = 1 << 24
    for ratio in (0.02, 0.01):
        comp = compressors.get("chunktopk", ratio=ratio, bits=2, chunk=4096)
        k = round(ratio * 4096)
        chunks = n // 4096  # uint16 offsets, 2-bit codes packed over the tensor, a scale each
        assert comp.payload_nbytes(n) == chunks * (2 * k + 4) + -(-chunks * k * 2 // 8)
        assert 4 * n / comp.payload_nbytes(n) >= 50
    assert 4 * n / compressors.get(SPEC).payload_nbytes(n) == pytest.approx(86.9, abs=0.1)


def test_error_feedback_sends_the_whole_vector_over_time():
    comp = compressors.get("chunktopk", ratio=0.1, bits=2, chunk=512)
    ef = ErrorFeedback(comp)
    v = gaussian(10007, seed=7)
    sent = np.zeros(v.size, np.float64)
    worst = 0.0
    for step in range(50):
        sent += comp.decompress(ef.step(v, "w", step))
        res = ef.residuals["w"].reshape(-1)
        worst = max(worst, float(np.abs(res).max()))
        # Telescoping: what was sent plus what is held back is everything given.
        np.testing.assert_allclose(sent + res, (step + 1) * v.astype(np.float64), atol=1e-3)
    assert worst <= 20 * np.abs(v).max()  # bounded: about 1 / ratio steps of the input
    rel = np.linalg.norm(sent - 50 * v) / np.linalg.norm(50 * v)
    assert rel < 0.25, rel


def test_zero_input_and_sparse_chunks_decode_without_noise():
    comp = compressors.get(SPEC)
    p = comp.compress(np.zeros(10007, np.float32), name="z", step=0)
    y = comp.decompress(p)
    assert np.all(y == 0) and not np.isnan(y).any() and np.all(p.buffers["scales"] == 0)
    x = np.zeros(10007, np.float32)
    x[[5, 4100, 4200]] = [3.0, -1.0, 2.0]  # fewer non-zeros than k: the rest is padding
    y = comp.decompress(comp.compress(x, name="s", step=0))
    np.testing.assert_array_equal(y, x)
    ef = ErrorFeedback(comp)
    ef.step(x, "s", 0)
    assert np.count_nonzero(ef.residuals["s"]) == 0


def test_nan_and_inf_pass_through_exactly():
    comp = compressors.get(SPEC)
    x = gaussian(10007, seed=3)
    bad = {10: np.nan, 4500: np.inf, 9000: -np.inf}
    for i, v in bad.items():
        x[i] = v
    p = comp.compress(x, name="w", step=0)
    y = comp.decompress(p)
    assert np.isnan(y[10]) and y[4500] == np.inf and y[9000] == -np.inf
    others = np.delete(y, list(bad))
    assert np.all(np.isfinite(others)) and np.all(np.isfinite(p.buffers["scales"]))
    clean = x.copy()
    clean[list(bad)] = 0  # not candidates: every chunk still keeps k finite values
    assert np.count_nonzero(others) == 82 + 82 + 36
    np.testing.assert_array_equal(np.delete(y, list(bad)),
                                  np.delete(comp.decompress(comp.compress(clean, name="w")),
                                            list(bad)))
    ef = ErrorFeedback(comp)
    ef.step(x, "w", 0)
    assert np.all(np.isfinite(ef.residuals["w"]))  # the step after is finite again


@pytest.mark.parametrize("params,match", [
    ({"ratio": 0}, "ratio"), ({"ratio": 1.5}, "ratio"), ({"ratio": float("nan")}, "ratio"),
    ({"bits": 3}, "bits"), ({"bits": 16}, "bits"), ({"chunk": 1}, "chunk"),
    ({"chunk": 70000}, "chunk"), ({"chunk": 512.0}, "chunk"),
])
def test_bad_parameters_raise_value_error(params, match):
    with pytest.raises(ValueError, match=match):
        compressors.get("chunktopk", **params)
    compressors.get("chunktopk", ratio=1.0, chunk=65536)  # the bounds themselves are fine


def test_damaged_and_foreign_payloads_raise_payload_error():
    comp = compressors.get(SPEC)
    p = comp.compress(gaussian(10007), name="w", step=0)
    raw = p.to_bytes()
    with pytest.raises(PayloadError):
        Payload.from_bytes(raw[:-7])

    def edited(key, value):
        bufs = {**p.buffers, key: value}
        return Payload(p.compressor, p.dtype, p.shape, p.params, bufs)

    idx, scales = p.buffers["indices"], p.buffers["scales"]
    with pytest.raises(PayloadError, match="indices"):
        comp.decompress(edited("indices", idx[:-1]))
    with pytest.raises(PayloadError, match="values"):
        comp.decompress(edited("values", p.buffers["values"][:-1]))
    with pytest.raises(PayloadError, match="chunk"):
        comp.decompress(edited("indices", np.where(np.arange(idx.size) == 3, 4096, idx)
                               .astype(np.uint16)))
    with pytest.raises(PayloadError, match="descend"):
        comp.decompress(edited("indices", idx[::-1].copy()))
    with pytest.raises(PayloadError, match="scales"):
        comp.decompress(edited("scales", -scales))
    with pytest.raises(PayloadError):
        compressors.get("chunktopk:ratio=0.01").decompress(p)
    with pytest.raises(PayloadError):
        comp.decompress(compressors.get("topk:ratio=0.02").compress(gaussian(10007), name="w"))
