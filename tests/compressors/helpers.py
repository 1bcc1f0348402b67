"""Configurations and inputs shared by the compressor tests."""

from __future__ import annotations

import numpy as np

#: One small configuration per registered compressor, exercised by the generic tests.
CONFIGS = {
    "none": {},
    "fp16": {},
    "bf16": {},
    "uniform": {"bits": 4, "bucket_size": 64},
    "qsgd": {"levels": 15, "bucket_size": 64},
    "terngrad": {"bucket_size": 64},
    "sign": {"bucket_size": 64},
    "topk": {"ratio": 0.1},
    "chunktopk": {"ratio": 0.1, "chunk": 64},
    "randomk": {"ratio": 0.1},
    "threshold": {"tau": 0.5},
    "powersgd": {"rank": 2},
}


def gaussian(shape, dtype=np.float32, seed=0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(dtype)
