"""Payload mutation fuzzing shared by tests/compressors/test_fuzz.py and
scripts/fuzz_payloads.py: sample payloads of every compressor, mutate their bytes, classify
what decoding makes of them."""

from __future__ import annotations

import struct
from collections import Counter
from collections.abc import Iterator

import numpy as np

import compressors
from compressors import Payload, PayloadError

from .helpers import CONFIGS, gaussian
from .wire_edit import data_offset, reseal

#: Outcomes: the original output, a refusal, a different but well-formed output (allowed only
#: after an edit whose checksum was recomputed), anything else (a bug).
SAME, REFUSED, DIFFERENT, OTHER = "same", "payload_error", "different", "other"

_INTERESTING = [0, 1, 2, 7, 8, 0x7F, 0x80, 0xFF]
_INTERESTING64 = [0, 1, 2**31 - 1, 2**31, 2**32, 2**62, 2**63 - 1, 2**63, 2**64 - 1]


def samples(name: str) -> list[tuple[bytes, np.ndarray]]:
    """Wire bytes of a few payloads of one compressor and what they decode to."""
    c = compressors.get(name, **CONFIGS[name])
    out = []
    for shape, dtype, seed in (((12, 20), "float32", 0), ((130,), "float64", 1),
                               ((9, 7), "float16", 2), ((0,), "float32", 3)):
        x = gaussian(shape, np.dtype(dtype), seed)
        if x.size > 10:
            x.reshape(-1)[[3, 10]] = [np.nan, -np.inf]
        raw = c.compress(x, name=f"t{seed}", step=seed).to_bytes()
        out.append((raw, np.asarray(compressors.decompress(Payload.from_bytes(raw)))))
    return out


def mutate(raw: bytes, rng: np.random.Generator) -> tuple[bytes, str]:
    """One random mutation of the bytes and its kind."""
    b = bytearray(raw)
    head = max(1, data_offset(raw, _buffer_bytes(raw)))
    kind = ["flip", "byte", "truncate", "extend", "header8", "header64", "splice"][
        int(rng.integers(0, 7))]
    if kind == "flip" or not b:
        for _ in range(int(rng.integers(1, 4))):
            if b:
                pos = int(rng.integers(0, len(b)))
                b[pos] ^= 1 << int(rng.integers(0, 8))
        return bytes(b), "flip"
    if kind == "byte":
        b[int(rng.integers(0, len(b)))] = int(rng.integers(0, 256))
    elif kind == "truncate":
        del b[int(rng.integers(0, len(b))):]
    elif kind == "extend":
        b += rng.integers(0, 256, int(rng.integers(1, 17)), dtype=np.uint8).tobytes()
    elif kind == "header8":
        b[int(rng.integers(0, head))] = _INTERESTING[int(rng.integers(0, len(_INTERESTING)))]
    elif kind == "header64":
        pos = int(rng.integers(0, max(1, head - 8)))
        value = _INTERESTING64[int(rng.integers(0, len(_INTERESTING64)))]
        b[pos:pos + 8] = struct.pack("<Q", value)[:len(b) - pos]
    else:  # splice: a slice of the payload copied over another place
        a, c = sorted(int(v) for v in rng.integers(0, len(b), 2))
        at = int(rng.integers(0, len(b)))
        b[at:at + (c - a)] = raw[a:c]
    return bytes(b), kind


def _buffer_bytes(raw: bytes) -> int:
    try:
        return Payload.from_bytes(raw).nbytes
    except PayloadError:
        return 0


def classify(raw: bytes, expected: np.ndarray) -> tuple[str, str]:
    """(outcome, detail) of decoding raw, which was made from a payload decoding to expected."""
    try:
        p = Payload.from_bytes(memoryview(raw), copy=False)
        y = np.asarray(compressors.decompress(p))
    except PayloadError:
        return REFUSED, ""
    except Exception as e:  # anything but PayloadError is a bug: report it, do not stop
        return OTHER, f"{type(e).__name__}: {e}"
    if y.shape != tuple(p.shape):
        return OTHER, f"decoded shape {y.shape} for a payload of shape {p.shape}"
    if y.dtype == expected.dtype and y.shape == expected.shape and \
            y.tobytes() == expected.tobytes():
        return SAME, ""
    return DIFFERENT, ""


def run(name: str, mutations: int, seed: int = 0, chunk: int = 0
        ) -> Iterator[tuple[bool, str, str, str]]:
    """(resealed, kind, outcome, detail) of ``mutations`` mutations of one compressor's
    payloads, drawn from (seed, compressor, chunk); half of them get their checksum recomputed
    so the field checks behind it are reached too."""
    rng = np.random.default_rng([seed, sorted(compressors.available()).index(name), chunk])
    cases = samples(name)
    for _ in range(mutations):
        raw, expected = cases[int(rng.integers(0, len(cases)))]
        bad, kind = mutate(raw, rng)
        sealed = bool(rng.random() < 0.5)
        if sealed:
            bad = reseal(bad)
        outcome, detail = classify(bad, expected)
        yield sealed, kind, outcome, detail


def tally(name: str, mutations: int, seed: int = 0, chunk: int = 0
          ) -> tuple[Counter, list[str]]:
    """Counts of (resealed, outcome) and the details of every bad outcome: another exception,
    or a different output from bytes whose checksum was not recomputed."""
    counts: Counter = Counter()
    bad: list[str] = []
    for sealed, kind, outcome, detail in run(name, mutations, seed, chunk):
        counts[(sealed, outcome)] += 1
        if outcome == OTHER or (outcome == DIFFERENT and not sealed):
            bad.append(f"{name} {kind} sealed={sealed}: {outcome} {detail}")
    return counts, bad
