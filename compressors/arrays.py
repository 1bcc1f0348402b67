"""The one array adapter layer: numpy, torch (CPU, CUDA), CuPy and bare
``__cuda_array_interface__`` arrays in, the caller's type out.

Compressors work on flat host numpy arrays, and so do the collectives' host paths
(``collectives.buffers`` stages device buffers and places results, through these functions).
numpy has no bfloat16, so bf16 data is held as its uint16 bit patterns with the logical dtype
carried next to it (``"bfloat16"``, see ``compressors.dtypes``). torch and CuPy are imported
lazily: only when the caller hands over one of their arrays.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

import numpy as np

from . import kernels
from .dtypes import BY_NAME

__all__ = ["FLOAT_DTYPES", "ArrayInfo", "cai_contiguous", "cuda_interface", "device_empty_like",
           "from_f32", "from_host", "is_cupy", "is_torch", "storage_dtype", "to_f32", "to_host",
           "torch_from_raw", "torch_raw"]

#: Logical dtypes a compressor accepts, with the numpy dtype that stores them.
FLOAT_DTYPES: dict[str, np.dtype] = {d.name: d.raw for d in BY_NAME.values() if d.is_float}

#: Logical dtype of a numpy array by its dtype: a dict lookup, where str(dtype) costs
#: microseconds on every compress and decompress call.
_NUMPY_NAMES: dict[np.dtype, str] = {dt: name for name, dt in FLOAT_DTYPES.items()
                                     if name != "bfloat16"}


@dataclass(frozen=True)
class ArrayInfo:
    """Where an array came from, so a result can be handed back in the same form.

    Example::

        >>> import numpy as np
        >>> from compressors.arrays import to_host, from_host
        >>> host, info = to_host(np.ones(3, np.float16))
        >>> assert info.kind == "numpy" and info.dtype == "float16"
        >>> assert from_host(host, info).dtype == np.float16
    """

    kind: str  # "numpy", "torch" or "cupy"
    dtype: str  # a key of FLOAT_DTYPES
    shape: tuple[int, ...]
    device: Any = None
    byteorder: str = "="  # numpy: ">" or "<" for an array of the other byte order


def storage_dtype(dtype: str) -> np.dtype:
    """numpy dtype that holds a logical dtype (uint16 for bfloat16)."""
    try:
        return FLOAT_DTYPES[dtype]
    except KeyError:
        raise ValueError(f"dtype must be one of {sorted(FLOAT_DTYPES)}, got {dtype!r}") from None


def is_torch(x: Any) -> bool:
    """Whether x is a torch tensor (without importing torch)."""
    torch = sys.modules.get("torch")
    return torch is not None and isinstance(x, torch.Tensor)


def torch_raw(t: Any) -> np.ndarray:
    """Zero-copy numpy view of a contiguous CPU tensor's elements, in its shape: bfloat16,
    which numpy lacks, as its uint16 bit patterns. The one place torch and numpy meet (the
    collectives' buffers, the compressors' inputs and the DDP hook all come here)."""
    import torch

    t = t.detach()
    if t.dtype == torch.bfloat16:
        return t.view(torch.int16).numpy().view(np.uint16)
    return t.numpy()


def torch_from_raw(arr: np.ndarray, dtype: str) -> Any:
    """The CPU tensor sharing ``arr``'s memory, of logical ``dtype`` (uint16 bit patterns
    become bfloat16): the inverse of :func:`torch_raw`."""
    import torch

    if dtype == "bfloat16":
        return torch.from_numpy(arr.view(np.int16)).view(torch.bfloat16)
    return torch.from_numpy(arr)


def is_cupy(x: Any) -> bool:
    """Whether x is a CuPy array (without importing CuPy)."""
    cupy = sys.modules.get("cupy")
    return cupy is not None and isinstance(x, cupy.ndarray)


def cuda_interface(obj: Any) -> dict | None:
    """The object's ``__cuda_array_interface__`` dict, or None for host objects."""
    return getattr(obj, "__cuda_array_interface__", None)


def cai_contiguous(cai: dict) -> bool:
    """Whether a ``__cuda_array_interface__`` describes a C-contiguous array: no strides, or
    the C strides of its shape (a dimension of one element may have any stride; an empty
    array is contiguous)."""
    strides = cai.get("strides")
    shape = tuple(cai["shape"])
    if strides is None or 0 in shape:
        return True
    step = np.dtype(cai["typestr"]).itemsize
    for n, s in reversed(list(zip(shape, strides, strict=True))):
        if n != 1 and s != step:
            return False
        step *= n
    return True


def device_empty_like(buf: Any) -> Any:
    """A new, uninitialised device array of ``buf``'s type, shape and dtype: a torch CUDA
    tensor, a CuPy array, or what the type's ``__compcoll_empty_like__`` returns (how an
    array type known only by its ``__cuda_array_interface__`` says how to allocate one)."""
    if is_torch(buf):
        import torch

        return torch.empty_like(buf)
    if is_cupy(buf):
        import cupy

        return cupy.empty_like(buf)
    empty_like = getattr(type(buf), "__compcoll_empty_like__", None)
    if empty_like is None:
        raise TypeError(f"cannot allocate a result like {type(buf).__name__}; pass out= (a "
                        "device array of the same shape and dtype, or the input for in place)")
    return empty_like(buf)


def host_f32(x: Any) -> bool:
    """Whether x is a C-contiguous float32 numpy array (what the fused kernels take)."""
    return isinstance(x, np.ndarray) and x.dtype == np.float32 and x.flags.c_contiguous


def to_host(x: Any) -> tuple[np.ndarray, ArrayInfo]:
    """Host numpy view of x (zero-copy for numpy and CPU torch) and where it came from."""
    if is_torch(x):
        name = str(x.dtype).removeprefix("torch.")
        storage_dtype(name)
        t = x.detach()
        device = t.device
        if device.type != "cpu":
            t = t.cpu()  # device tensors are staged through host memory
        return torch_raw(t.contiguous()), ArrayInfo("torch", name, tuple(x.shape), device)
    if is_cupy(x):
        storage_dtype(str(x.dtype))
        return x.get(), ArrayInfo("cupy", str(x.dtype), tuple(x.shape), x.device)
    arr = np.asarray(x)
    order = "="
    if not arr.dtype.isnative:  # the kernels read native numbers: convert, hand back alike
        order = arr.dtype.byteorder
        arr = arr.astype(arr.dtype.newbyteorder("="))
    if arr.dtype == np.uint16:
        raise ValueError("uint16 arrays are ambiguous: pass bfloat16 data as a torch tensor")
    name = _NUMPY_NAMES.get(arr.dtype)
    if name is None:
        storage_dtype(str(arr.dtype))  # raises, naming the dtypes accepted
    return arr, ArrayInfo("numpy", name, tuple(arr.shape), None, order)


def from_host(arr: np.ndarray, info: ArrayInfo) -> Any:
    """Hand a host array back in the caller's type, dtype and device."""
    if info.kind == "torch":
        t = torch_from_raw(arr, info.dtype)
        return t if info.device is None or info.device.type == "cpu" else t.to(info.device)
    if info.kind == "cupy":
        import cupy

        with cupy.cuda.Device(info.device):
            return cupy.asarray(arr)
    if info.byteorder != "=":
        return arr.astype(arr.dtype.newbyteorder(info.byteorder))
    return arr


def to_f32(flat: np.ndarray, dtype: str) -> np.ndarray:
    """float32 working copy of a flat array (no copy when it is float32 already)."""
    if dtype == "float32":
        return np.ascontiguousarray(flat)
    if dtype == "bfloat16":
        return (flat.astype(np.uint32) << 16).view(np.float32)
    return flat.astype(np.float32)


def from_f32(x32: np.ndarray, dtype: str, out: np.ndarray) -> None:
    """Round a float32 array into out's storage dtype (nearest even; NaN stays NaN)."""
    if dtype == "bfloat16":
        kernels.float_to_half(np.ascontiguousarray(x32), out, 1)
    elif out is not x32:
        out[...] = x32
