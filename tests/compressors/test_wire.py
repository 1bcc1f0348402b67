"""Byte format: round trips, validation, and fuzzing with truncations and bit flips."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import compressors
from compressors import Payload, PayloadError
from compressors.payload import set_checksum

from .helpers import CONFIGS, gaussian
from .wire_edit import data_offset, reseal


def payloads():
    x = gaussian((12, 20))
    x[0, 3] = np.nan
    return [compressors.get(n, **CONFIGS[n]).compress(x, name="w", step=1) for n in sorted(CONFIGS)]


def test_round_trip_all():
    for p in payloads():
        q = Payload.from_bytes(p.to_bytes())
        assert (q.compressor, q.dtype, q.shape) == (p.compressor, p.dtype, p.shape)
        assert q.params == p.params
        for k in p.buffers:
            np.testing.assert_array_equal(q.buffers[k], p.buffers[k])
        assert q.to_bytes() == p.to_bytes()


def test_header_is_small():
    p = compressors.get("uniform").compress(gaussian(1 << 16), name="w", step=0)
    assert len(p.to_bytes()) - p.nbytes < 200


@pytest.mark.parametrize("data,match", [
    (b"", "truncated"),
    (b"XXXX" + bytes(40), "magic"),
    (b"CCPL\x09" + bytes(40), "version"),
    (b"\x80\x04\x95" + bytes(40), "magic"),  # a pickle is foreign bytes too
])
def test_foreign_bytes(data, match):
    with pytest.raises(PayloadError, match=match):
        Payload.from_bytes(data)


def test_trailing_and_oversized():
    raw = compressors.get("fp16").compress(gaussian(100), name="w", step=0).to_bytes()
    with pytest.raises(PayloadError):
        Payload.from_bytes(raw + b"\x00")
    with pytest.raises(PayloadError):
        Payload.from_bytes(raw[:-1])


def test_huge_shape_rejected_before_decoding():
    p = compressors.get("threshold", tau=0.5).compress(gaussian(100), name="w", step=0)
    p.shape = (2**50,)
    with pytest.raises(PayloadError, match="too large"):
        compressors.decompress(p)


def _decode_or_payload_error(raw: bytes) -> None:
    try:
        p = Payload.from_bytes(raw)
        y = compressors.decompress(p)
    except PayloadError:
        return
    assert y.size == p.numel


def test_fuzz_truncations_and_bit_flips():
    rng = np.random.default_rng(0)
    for p in payloads():
        raw = p.to_bytes()
        for cut in rng.integers(0, len(raw), 30):
            _decode_or_payload_error(raw[:cut])
        header_end = len(raw) - p.nbytes
        for _ in range(60):
            b = bytearray(raw)
            # mostly the header, where a flip can change meaning; sometimes the data
            pos = int(rng.integers(0, header_end if rng.random() < 0.8 else len(raw)))
            b[pos] ^= 1 << int(rng.integers(0, 8))
            _decode_or_payload_error(bytes(b))


@settings(derandomize=True, max_examples=150, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_random_bytes(data):
    _decode_or_payload_error(b"CCPL\x02" + data)


@settings(derandomize=True, max_examples=150, deadline=None)
@given(st.sampled_from(sorted(CONFIGS)), st.integers(0, 400), st.integers(0, 2**31))
def test_fuzz_structured(name, pos, flip):
    x = gaussian(50, seed=flip % 7)
    raw = bytearray(compressors.get(name, **CONFIGS[name]).compress(x, name="f", step=0).to_bytes())
    if pos < len(raw):
        raw[pos] ^= (flip % 255) + 1
    _decode_or_payload_error(bytes(raw))


def test_checksum_catches_every_single_byte_change_of_the_data():
    p = compressors.get("uniform", bits=4, bucket_size=64).compress(gaussian(300), name="w")
    raw = p.to_bytes()
    for pos in range(data_offset(raw, p.nbytes), len(raw)):
        b = bytearray(raw)
        b[pos] ^= 0x10
        with pytest.raises(PayloadError, match="checksum"):
            Payload.from_bytes(bytes(b))


def test_checksum_can_be_turned_off_and_sizes_follow():
    c = compressors.get("sign", bucket_size=64)
    x = gaussian((8, 40))
    with_sum = c.compress(x, name="w").to_bytes()
    assert len(with_sum) == c.wire_nbytes(x.shape)
    set_checksum(False)
    try:
        without = c.compress(x, name="w").to_bytes()
        assert len(without) == c.wire_nbytes(x.shape) == len(with_sum) - 4
    finally:
        set_checksum(True)
    for raw in (with_sum, without):
        np.testing.assert_array_equal(compressors.decompress(Payload.from_bytes(raw)),
                                      c.decompress(c.compress(x, name="w")))


def test_version_1_payloads_are_refused_by_name():
    v1 = b"CCPL\x01\x04none\x02\x01" + (4).to_bytes(8, "little") + b"\x00\x01\x06values\x07" + \
        (4).to_bytes(8, "little") + bytes(16)
    with pytest.raises(PayloadError, match="version 1.*encode it again"):
        Payload.from_bytes(v1)


def test_length_field_cannot_force_allocation():
    p = compressors.get("none").compress(gaussian(4), name="w", step=0)
    raw = bytearray(p.to_bytes())
    at = data_offset(bytes(raw), p.nbytes)
    # the u64 length of the only buffer sits before the padding byte(s) and the 16 raw bytes
    lpos = bytes(raw).rindex((4).to_bytes(8, "little"), 0, at)
    raw[lpos:lpos + 8] = (2**60).to_bytes(8, "little")
    with pytest.raises(PayloadError, match="declare"):
        Payload.from_bytes(reseal(raw))


def test_header_is_padded_so_buffers_start_aligned():
    for p in payloads():
        raw = p.to_bytes()
        assert data_offset(raw, p.nbytes) % 8 == 0


@pytest.mark.parametrize("name", sorted(CONFIGS))
def test_views_of_misaligned_bytes_are_aligned(name):
    c = compressors.get(name, **CONFIGS[name])
    x = gaussian((16, 33))
    p = c.compress(x, name="w", step=1)
    raw = p.to_bytes()
    for shift in range(1, 8):
        store = np.zeros(len(raw) + 8, np.uint8)
        view = store[shift:shift + len(raw)]
        view[...] = np.frombuffer(raw, np.uint8)
        q = Payload.from_bytes(memoryview(view), copy=False)
        assert all(b.flags.aligned for b in q.buffers.values())
        np.testing.assert_array_equal(c.decompress(q), c.decompress(p))


def _threshold_payload(indices: list[int], idx_dtype) -> Payload:
    idx = np.array(indices, dtype=idx_dtype)
    return Payload("threshold", "float32", (100,), {"tau": 0.5},
                   {"indices": idx, "values": np.ones(idx.size, np.float32)})


@pytest.mark.parametrize("indices", [
    [0, 2**31 - 1, -5, 7],  # the difference -5 - (2**31 - 1) wraps to a positive int32
    [0, -(2**31)],
    [-(2**31), 3],
])
def test_index_checks_do_not_overflow(indices):
    with pytest.raises(PayloadError, match="ascending"):
        compressors.decompress(_threshold_payload(indices, np.int32))


def test_nonfinite_index_checks_do_not_overflow():
    c = compressors.get("sign", bucket_size=64)
    p = c.compress(gaussian(100), name="w")
    p.buffers["nf_idx"] = np.array([0, 2**63 - 1, -5, 7], np.int64)  # -5 - (2**63 - 1) wraps
    p.buffers["nf_val"] = np.full(4, np.nan, np.float32)
    with pytest.raises(PayloadError, match="ascending"):
        c.decompress(p)


@pytest.mark.parametrize("key,value", [("bits", 1.0), ("bits", True), ("bucket_size", 64.0),
                                       ("stochastic", 1), ("seed", "0")])
def test_parameters_of_the_wrong_type_are_refused(key, value):
    c = compressors.get("uniform", bits=1, bucket_size=64)
    p = c.compress(gaussian(100), name="w")
    p.params = {**p.params, key: value}
    raw = p.to_bytes()
    with pytest.raises(PayloadError):
        compressors.decompress(Payload.from_bytes(raw))
    with pytest.raises(PayloadError):
        c.decompress(Payload.from_bytes(raw))


def test_small_payload_cannot_claim_a_huge_output():
    p = compressors.get("threshold", tau=0.5).compress(gaussian(100, np.float64), name="w")
    p.shape = (2**28,)
    raw = p.to_bytes()
    assert len(raw) < 2000
    with pytest.raises(PayloadError, match="too large"):
        compressors.decompress(Payload.from_bytes(raw))
    # a caller that knows the size decodes into its own array
    out = np.empty(2**20, np.float64)
    p.shape = (2**20,)
    compressors.decompress(Payload.from_bytes(p.to_bytes()), out=out)
    assert np.count_nonzero(out) == p.buffers["values"].size
