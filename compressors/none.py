"""Identity compressor: the tensor itself is the payload, the exact path others are measured by."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from ._util import numel_of
from .arrays import storage_dtype
from .base import Capabilities, Compressor, Layout, register
from .payload import Payload

__all__ = ["NoCompression"]


@register("none")
@dataclass(frozen=True)
class NoCompression(Compressor):
    """Send the tensor unchanged (NaN/Inf included, bit for bit).

    Example::

        >>> import numpy as np, compressors
        >>> comp = compressors.get("none")
        >>> x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
        >>> payload = comp.compress(x, name="layer1.weight", step=0)
        >>> y = comp.decompress(payload)  # x's shape and dtype; the error is the compressor's
        >>> assert y.shape == x.shape and payload.nbytes <= x.nbytes + 64
    """

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(summable=True, sparse=False, same_size_on_all_ranks=True,
                            needs_shared_seed=False)

    def layout(self, shape: tuple[int, ...], dtype: str) -> Layout:
        return {"values": (storage_dtype(dtype), numel_of(shape))}

    def _encode(self, flat: np.ndarray, dtype: str, seed: int, bufs: dict[str, np.ndarray],
                **where: Any) -> None:
        bufs["values"][...] = flat

    def _decode(self, payload: Payload, out: np.ndarray) -> None:
        out[...] = payload.buffers["values"]
