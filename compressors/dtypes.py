"""The element types compcoll reduces, and their mapping to numpy, torch and the C++ kernels."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class DType:
    """One supported element type.

    ``raw`` is the numpy dtype the bytes are held in on the host: bfloat16 has no numpy type,
    so it travels as its uint16 bit patterns and the kernels know to widen it.
    """

    name: str
    code: int  # the C++ kernels' DType code
    raw: np.dtype
    itemsize: int
    is_float: bool


_ALL = [
    DType("float16", 0, np.dtype(np.float16), 2, True),
    DType("bfloat16", 1, np.dtype(np.uint16), 2, True),
    DType("float32", 2, np.dtype(np.float32), 4, True),
    DType("float64", 3, np.dtype(np.float64), 8, True),
    DType("int8", 4, np.dtype(np.int8), 1, False),
    DType("uint8", 5, np.dtype(np.uint8), 1, False),
    DType("int32", 6, np.dtype(np.int32), 4, False),
    DType("int64", 7, np.dtype(np.int64), 8, False),
]
BY_NAME: dict[str, DType] = {d.name: d for d in _ALL}
BY_CODE: dict[int, DType] = {d.code: d for d in _ALL}
SUPPORTED = tuple(BY_NAME)


def lookup(name: str) -> DType:
    """Return the DType called ``name`` (a numpy/torch dtype name such as ``"float32"``)."""
    name = str(name).removeprefix("torch.")
    aliases = {"half": "float16", "float": "float32", "double": "float64", "long": "int64",
               "int": "int32"}
    name = aliases.get(name, name)
    try:
        return BY_NAME[name]
    except KeyError:
        raise ValueError(
            f"unsupported dtype {name!r}; supported: {', '.join(SUPPORTED)}"
        ) from None


def from_numpy(dt: np.dtype) -> DType:
    """Map a numpy dtype (including ml_dtypes' bfloat16) to its DType.

    The byte order is not part of a DType (the kernels read native numbers): callers holding
    an array of the other order convert it (``collectives.buffers``) or refuse it."""
    return lookup(np.dtype(dt).name)
