"""Error-feedback residuals kept in device memory, next to the tensors they belong to.

A device codec updates the residual in place while it compresses; the residuals are stored
per ``ErrorFeedback`` object and tensor name, outside its host ``residuals`` dict. A host
residual the store has not seen yet (a loaded state, or one left by host calls) is copied to
the device once; ``export_residuals`` copies the device residuals back, for ``state_dict`` and
before a policy change moves a tensor's residual to another compressor's feedback, and
``forget`` drops those whose tensor left.
"""

from __future__ import annotations

import weakref

import numpy as np

from .device import DeviceArray, DeviceCodec
from .feedback import ErrorFeedback

__all__ = ["device_residual", "export_residuals", "forget"]

#: Device residuals per feedback object: name -> (residual, the host array it was seeded from
#: or exported to, the codec that made it)
_residuals: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def device_residual(codec: DeviceCodec, feedback: ErrorFeedback, name: str,
                    n: int) -> tuple[DeviceArray, bool]:
    """The float32 device residual of ``name`` (n elements) and whether it is fresh (zeros).

    A host residual of the right size that this store has not seen yet (a loaded state, or one
    left by host calls) is copied in once."""
    store: dict = _residuals.setdefault(feedback, {})
    host = feedback.residuals.get(name)
    if host is not None and (host.size != n or host.dtype != np.float32):
        host = None
    entry = store.get(name)
    if entry is not None and entry[0].size == n and entry[1] is host:
        return entry[0], False
    if host is not None:
        store[name] = (codec.upload(np.ascontiguousarray(host).reshape(-1)), host, codec)
        return store[name][0], False
    store[name] = (codec.zeros(n), None, codec)
    return store[name][0], True


def export_residuals(feedback: ErrorFeedback, names: list[str] | None = None) -> None:
    """Copy the device residuals of ``names`` (all, for None) of ``feedback`` into
    ``feedback.residuals`` (host), so its ``state_dict`` holds them."""
    store: dict = _residuals.get(feedback, {})
    for name in list(store) if names is None else [n for n in names if n in store]:
        res, _, codec = store[name]
        host = codec.download(res)
        feedback.residuals[name] = host
        store[name] = (res, host, codec)


def forget(feedback: ErrorFeedback, names: list[str] | None = None) -> None:
    """Drop the device residuals of ``names`` (all, for None) of ``feedback``: their tensor
    left the feedback (a policy change moved it, or it went out in full). Call
    ``export_residuals`` first to keep what they held."""
    store: dict = _residuals.get(feedback, {})
    for name in list(store) if names is None else names:
        store.pop(name, None)
