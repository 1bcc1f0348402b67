"""Plain numpy references for the C++ kernels (the test oracles)."""

from __future__ import annotations

import numpy as np

M32 = np.uint32


def mix32(h: np.ndarray) -> np.ndarray:
    h = h.astype(M32)
    h ^= h >> M32(16)
    h *= M32(0x85EBCA6B)
    h ^= h >> M32(13)
    h *= M32(0xC2B2AE35)
    h ^= h >> M32(16)
    return h


def counter_uniform(seed: int, idx: np.ndarray) -> np.ndarray:
    """The kernels' RNG: per 2^32 block a Weyl sequence add + i * mul through mix32."""
    idx = idx.astype(np.uint64)
    lo = (idx & np.uint64(0xFFFFFFFF)).astype(M32)
    hi = (idx >> np.uint64(32)).astype(M32)
    add = mix32(M32(seed & 0xFFFFFFFF) ^ mix32(M32(seed >> 32) ^ (hi * M32(0x9E3779B9))))
    mul = mix32(add + M32(0x6A09E667)) | M32(1)
    h = mix32(add + lo * mul)
    return (h >> M32(8)).astype(np.float32) * np.float32(1.0 / 16777216.0)


def pack(codes: np.ndarray, bits: int) -> np.ndarray:
    per = 8 // bits
    c = np.zeros(-(-codes.size // per) * per, np.uint8)
    c[:codes.size] = codes
    shifts = (np.arange(per) * bits).astype(np.uint8)
    return (c.reshape(-1, per) << shifts).sum(axis=1, dtype=np.uint8)


def grid(mn: np.float32, mx: np.float32, top: int) -> tuple[np.float32, np.float32, int]:
    """A bucket's first value, step and zero code (-1: none): where its range spans zero
    (4 bits and up), one level fewer and shifted so that zero is a grid point."""
    scale = np.float32((np.float64(mx) - np.float64(mn)) / top)
    out = (np.float32(mn), scale, 0 if mn == 0 else -1)
    if mn < 0 <= mx and top >= 15:
        step = -np.float64(mn) / top if mx == 0 else (np.float64(mx) - np.float64(mn)) / (top - 1)
        scale = np.float32(step)
        k = top if mx == 0 else min(max(int(np.ceil(-np.float64(mn) / step)), 1), top - 1)
        with np.errstate(over="ignore"):
            kscale = np.float32(k) * scale
        if np.isfinite(kscale) and scale > 0:
            out = (-kscale, scale, k)
    return out


def quantize(x: np.ndarray, bits: int, bucket: int, seed: int, stochastic: bool):
    n = x.size
    top = np.float32(2**bits - 1)
    codes = np.zeros(n, np.uint8)
    nb = -(-n // bucket)
    mins = np.zeros(nb, np.float32)
    scales = np.zeros(nb, np.float32)
    for b in range(nb):
        xb = x[b * bucket:(b + 1) * bucket]
        fin = np.isfinite(xb)
        mn = xb[fin].min() if fin.any() else np.float32(0)
        mx = xb[fin].max() if fin.any() else np.float32(0)
        mn, scale, zc = grid(mn, mx, 2**bits - 1)
        with np.errstate(over="ignore"):
            inv = np.float32(1) / scale if scale > 0 else np.float32(0)
        inv = min(inv, np.float32(np.finfo(np.float32).max))
        with np.errstate(invalid="ignore"):
            v = (xb - mn) * inv
            v = np.minimum(np.where(v > 0, v, np.float32(0)), top)  # NaN -> 0, as the kernel
            f = np.floor(v)
            if stochastic:
                u = counter_uniform(seed, np.arange(b * bucket, b * bucket + xb.size))
                up = (u < v - f).astype(np.float32)
            else:
                up = (v - f >= np.float32(0.5)).astype(np.float32)
            c = np.clip(f + up, 0, top)
        c[~fin] = 0
        if zc >= 0:
            c[xb == 0] = zc
        codes[b * bucket:b * bucket + xb.size] = c.astype(np.uint8)
        mins[b], scales[b] = mn, scale
    return pack(codes, bits), mins, scales


def sign_pack(x: np.ndarray, bucket: int):
    bits = pack(np.signbit(x).astype(np.uint8), 1)
    nb = -(-x.size // bucket)
    scales = np.zeros(nb, np.float32)
    for b in range(nb):
        xb = x[b * bucket:(b + 1) * bucket]
        xb = xb[np.isfinite(xb)]
        scales[b] = np.abs(xb).mean(dtype=np.float64) if xb.size else 0.0
    return bits, scales


def finite_abs(x: np.ndarray) -> np.ndarray:
    """|x| with NaN/Inf replaced by 0 (the kernels leave them out of every scale)."""
    return np.where(np.isfinite(x), np.abs(x), np.float32(0))


def per_value(per_bucket: np.ndarray, bucket: int, n: int) -> np.ndarray:
    return per_bucket.repeat(bucket)[:n]


def terngrad(x: np.ndarray, bucket: int, seed: int):
    n, a = x.size, finite_abs(x)
    padded = np.zeros(-(-n // bucket) * bucket, np.float32)
    padded[:n] = a
    scales = padded.reshape(-1, bucket).max(axis=1, initial=np.float32(0))
    safe = per_value(np.where(scales > 0, scales, np.float32(1)), bucket, n)
    keep = counter_uniform(seed, np.arange(n)) < a / safe
    codes = keep * np.where(np.signbit(x), np.uint8(2), np.uint8(1))
    return pack(codes.astype(np.uint8), 2), scales


def qsgd_codes(x: np.ndarray, norms: np.ndarray, bucket: int, levels: int, seed: int):
    """The codes QSGD must send given its bucket norms (float64 sums may differ in order)."""
    n, a = x.size, finite_abs(x)
    safe = per_value(np.where(norms > 0, norms, np.float32(1)), bucket, n)
    v = a / safe * np.float32(levels)
    low = np.minimum(np.floor(v), np.float32(levels))
    q = np.minimum(low + (counter_uniform(seed, np.arange(n)) < v - low), levels)
    return np.where(np.signbit(x), -q, q)


def abs_keys(x: np.ndarray) -> np.ndarray:
    return x.astype(np.float32).view(np.uint32) & np.uint32(0x7FFFFFFF)


def topk(x: np.ndarray, k: int) -> np.ndarray:
    """Ascending indices of the k largest |x| keys, ties to the lower index."""
    keys = abs_keys(x).astype(np.int64)
    order = np.lexsort((np.arange(x.size), -keys))
    return np.sort(order[:k])
