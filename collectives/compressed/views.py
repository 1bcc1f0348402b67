"""The compressor's view of a host working buffer, and the rounding of a sum back into it."""

from __future__ import annotations

from typing import Any

import numpy as np

from compressors import kernels
from compressors.arrays import torch_from_raw


def input_view(work: np.ndarray, dtype: Any, shape: tuple[int, ...]) -> Any:
    """The compressor's view of the buffer: numpy, or a torch tensor for bfloat16."""
    if dtype.name == "bfloat16":
        return torch_from_raw(work, "bfloat16").reshape(shape)
    return work.reshape(shape)


def store(result: np.ndarray, work: np.ndarray, dtype: Any) -> None:
    """Round the fp32/fp64 sum into the caller's dtype, in place."""
    if dtype.itemsize == 2:
        kernels.float_to_half(np.ascontiguousarray(result, np.float32), work, dtype.code)
    else:
        np.copyto(work, result, casting="same_kind")
