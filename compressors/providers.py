"""Which device codec runs a compressor on a device array: providers asked in turn.

A provider is a function ``(compressor, array) -> DeviceCodec | None``. ``codec_for`` asks the
providers, the last registered first, then the CuPy codec of ``compressors.cuda.codec``; it
returns the first codec, or None where none has a twin of this compressor for this array (the
caller then stages the whole buffer through host memory). This registry sits above both the
device interfaces (``compressors.device``) and their CuPy implementation, so neither imports
the other's user.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .base import Compressor
from .device import DeviceCodec

__all__ = ["Provider", "codec_for", "register_provider", "unregister_provider"]

Provider = Callable[[Compressor, Any], "DeviceCodec | None"]
_providers: list[Provider] = []


def register_provider(provider: Provider) -> None:
    """Add a provider; it is asked before those registered earlier."""
    if provider not in _providers:
        _providers.append(provider)


def unregister_provider(provider: Provider) -> None:
    """Remove a provider (no error if it was not registered)."""
    if provider in _providers:
        _providers.remove(provider)


def codec_for(compressor: Compressor, array: Any) -> DeviceCodec | None:
    """The device twin of ``compressor`` for ``array`` (a device array), or None."""
    if getattr(array, "__cuda_array_interface__", None) is None:
        return None
    from .cuda.codec import provider as cupy  # on first use: nothing of CUDA's at import

    for p in (*reversed(_providers), cupy):
        codec = p(compressor, array)
        if codec is not None:
            return codec
    return None
