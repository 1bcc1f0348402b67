"""Whether a compressed allreduce of a device buffer runs its codec steps on the device.

The input must be a C-contiguous float32 device array (a CUDA torch tensor, a CuPy array, or
any object exposing __cuda_array_interface__), the feedback none or plain, the scheme one of
``SCHEMES``, and a provider must have a device twin of the compressor
(``compressors.providers.codec_for``). Otherwise the whole buffer is staged through host memory.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from compressors import ErrorFeedback, providers
from compressors.arrays import cai_contiguous, cuda_interface, is_torch
from compressors.device import DeviceCodec
from compressors.feedback import NoErrorFeedback

__all__ = ["SCHEMES", "plain", "plain_array", "route"]

#: The schemes whose codec steps run on the device.
SCHEMES = ("allgather", "reduce_scatter_allgather")
F32 = np.dtype(np.float32)


def route(buf: Any, out: Any, comp: Any, feedback: ErrorFeedback | None) -> DeviceCodec | None:
    """The device codec for this call, or None for the whole-buffer staging path: the input
    must be a C-contiguous float32 device array, ``out`` None, the input, or another such
    array, the feedback none or plain (beta = gamma = 1), and a provider must have a twin."""
    cai = cuda_interface(plain_array(buf))
    if cai is None or np.dtype(cai["typestr"]) != F32 or not cai_contiguous(cai):
        return None
    if out is not None and out is not buf:
        ocai = cuda_interface(plain_array(out))
        if ocai is None or np.dtype(ocai["typestr"]) != F32 or not cai_contiguous(ocai) or \
                tuple(ocai["shape"]) != tuple(cai["shape"]):
            return None  # staging raises the clear error for a bad out
    if feedback is not None and not plain(feedback):
        return None
    return providers.codec_for(comp, plain_array(buf))


def plain_array(obj: Any) -> Any:
    """The array itself, or a torch tensor detached from autograd (a tensor that requires
    grad refuses __cuda_array_interface__); None for a CPU tensor."""
    if is_torch(obj):
        return obj.detach() if getattr(obj, "is_cuda", False) else None
    return obj


def stream_of(obj: Any) -> int | None:
    """The CUDA stream the device work on ``obj`` goes on, as ``__cuda_array_interface__`` v3
    numbers it (None: no synchronization needed, 1: the legacy default stream, else a
    handle). torch's interface names no stream: for a torch tensor it is torch's current
    stream on the tensor's device, where torch queued the work that wrote it."""
    if is_torch(obj) and getattr(obj, "is_cuda", False):
        import torch

        handle = torch.cuda.current_stream(obj.device).cuda_stream
        return handle or 1  # (0 is the legacy default stream, which v3 numbers 1)
    cai = cuda_interface(plain_array(obj))
    return None if cai is None else cai.get("stream")


def plain(feedback: ErrorFeedback) -> bool:
    """Feedback a device codec can keep: none at all, or residual = compensated - sent."""
    return type(feedback) is NoErrorFeedback or (
        type(feedback) is ErrorFeedback and feedback.beta == 1.0 and feedback.gamma == 1.0)
