"""Byte format: round trips, validation, and fuzzing with truncations and bit flips."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import compressors
from compressors import Payload, PayloadError

from .helpers import CONFIGS, gaussian


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


def test_length_field_cannot_force_allocation():
    p = compressors.get("none").compress(gaussian(4), name="w", step=0)
    raw = bytearray(p.to_bytes())
    # the u64 length of the only buffer sits right before the 16 raw bytes
    raw[-24:-16] = (2**60).to_bytes(8, "little")
    with pytest.raises(PayloadError, match="declare"):
        Payload.from_bytes(bytes(raw))


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
    _decode_or_payload_error(b"CCPL\x01" + data)


@settings(derandomize=True, max_examples=150, deadline=None)
@given(st.sampled_from(sorted(CONFIGS)), st.integers(0, 400), st.integers(0, 2**31))
def test_fuzz_structured(name, pos, flip):
    x = gaussian(50, seed=flip % 7)
    raw = bytearray(compressors.get(name, **CONFIGS[name]).compress(x, name="f", step=0).to_bytes())
    if pos < len(raw):
        raw[pos] ^= (flip % 255) + 1
    _decode_or_payload_error(bytes(raw))
