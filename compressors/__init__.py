"""compressors: what is sent. Compressors, error feedback and the payload wire format.

Example::

    import compressors
    c = compressors.get("topk:ratio=0.01")
    ef = compressors.ErrorFeedback(c)
    g = ef.compensate(grad, "layer1.weight")
    payload = c.compress(g, name="layer1.weight", step=step)
    ef.update("layer1.weight", g, payload)
    wire = payload.to_bytes()
    approx = compressors.decompress(compressors.Payload.from_bytes(wire))

Compressors never communicate; their ``capabilities`` tell the collective what it may do
with their payloads.
"""

from __future__ import annotations

from typing import Any

from . import (  # _openmp first: it configures the OpenMP runtime before the extension loads
    _openmp,  # noqa: F401
    chunktopk,
    halfprec,
    none,
    powersgd,
    qsgd,
    randomk,
    sign,
    terngrad,
    threshold,
    topk,
    uniform,
)
from .arrays import ArrayInfo
from .base import Capabilities, Compressor, aliases, available, derive_seed, get, register
from .chunktopk import ChunkTopK
from .errors import PayloadError
from .feedback import DGCFeedback, ErrorFeedback, NoErrorFeedback
from .halfprec import BF16, FP16
from .none import NoCompression
from .payload import FORMAT_VERSION, Payload, set_checksum
from .powersgd import PowerSGD, PowerSGDContext
from .qsgd import QSGD
from .randomk import RandomK
from .sign import Sign
from .terngrad import TernGrad
from .threshold import Threshold
from .topk import TopK
from .uniform import Uniform

del chunktopk, halfprec, none, powersgd, qsgd, randomk, sign, terngrad, threshold, topk, uniform

__all__ = [
    "BF16", "ChunkTopK", "DGCFeedback", "FORMAT_VERSION", "FP16", "QSGD", "ArrayInfo",
    "Capabilities", "Compressor", "ErrorFeedback", "NoCompression", "NoErrorFeedback", "Payload",
    "PayloadError", "PowerSGD", "PowerSGDContext", "RandomK", "Sign", "TernGrad", "Threshold",
    "TopK", "Uniform", "aliases", "available", "compressor_for", "decompress", "derive_seed",
    "get", "register", "set_checksum",
]


def compressor_for(payload: Payload) -> Compressor:
    """The compressor a payload names, configured with its parameters.

    Example::

        >>> import numpy as np, compressors
        >>> x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
        >>> payload = compressors.get("uniform:bits=4").compress(x, name="w", step=0)
        >>> assert compressors.compressor_for(payload) == compressors.get("uniform:bits=4")
    """
    try:
        return get(payload.compressor, **dict(payload.params))
    except (ValueError, TypeError) as e:
        raise PayloadError(f"payload names an unusable compressor: {e}") from None


def decompress(payload: Payload, out: Any = None) -> Any:
    """Decode any payload with the compressor it names.

    Example::

        >>> import numpy as np, compressors
        >>> x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
        >>> wire = compressors.get("sign").compress(x, name="w", step=0).to_bytes()
        >>> y = compressors.decompress(compressors.Payload.from_bytes(wire))
        >>> assert y.shape == x.shape
    """
    return compressor_for(payload).decompress(payload, out)
