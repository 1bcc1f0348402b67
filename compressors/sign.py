"""Sign compression: one bit per value plus a float32 scale per bucket.

signSGD (Bernstein et al. 2018) sends signs only; EF-signSGD (Karimireddy et al. 2019) and
1-bit Adam (Tang et al. 2021) scale them by the mean magnitude, here per bucket of
``bucket_size`` values, and rely on error feedback for convergence (the estimate is biased).
Zeros count as positive; an all-zero bucket has scale 0 and decodes to zeros. NaN/Inf entries
are left out of the scale and sent exactly in a side list that is empty for finite input.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from . import kernels
from ._util import (
    check_bucket,
    check_nonfinite,
    decode_dense,
    nonfinite_layout,
    numel_of,
    split_nonfinite,
)
from .arrays import storage_dtype, to_f32
from .base import Capabilities, Compressor, Layout, register
from .payload import Payload

__all__ = ["Sign"]

F32 = np.dtype(np.float32)


@register("sign")
@dataclass(frozen=True)
class Sign(Compressor):
    """1-bit sign with a per-bucket mean-|x| scale.

    Example::

        >>> import numpy as np, compressors
        >>> comp = compressors.get("sign")
        >>> x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
        >>> payload = comp.compress(x, name="layer1.weight", step=0)
        >>> y = comp.decompress(payload)  # x's shape and dtype; the error is the compressor's
        >>> assert y.shape == x.shape and payload.nbytes <= x.nbytes + 64
    """

    bucket_size: int = 2048

    def __post_init__(self) -> None:
        check_bucket(self)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(summable=False, sparse=False, same_size_on_all_ranks=True,
                            needs_shared_seed=False)

    def layout(self, shape: tuple[int, ...], dtype: str) -> Layout:
        n = numel_of(shape)
        lay: Layout = {"bits": (np.dtype(np.uint8), -(-n // 8)),
                       "scales": (F32, -(-n // self.bucket_size))}
        return nonfinite_layout(lay, storage_dtype(dtype))

    def _encode(self, flat: np.ndarray, dtype: str, seed: int, bufs: dict[str, np.ndarray],
                **where: Any) -> None:
        x32 = to_f32(flat, dtype)
        bad = kernels.sign_pack(x32, bufs["bits"], bufs["scales"], self.bucket_size)
        split_nonfinite(x32, flat, bad, bufs)

    def _decode(self, payload: Payload, out: np.ndarray) -> None:
        b = payload.buffers
        decode_dense(payload, out,
                     lambda x32: kernels.sign_unpack(b["bits"], b["scales"], x32, self.bucket_size))

    def _check(self, payload: Payload) -> None:
        check_nonfinite(payload)
