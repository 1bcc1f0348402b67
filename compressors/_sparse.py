"""Shared encode/decode of (indices, values) payloads."""

from __future__ import annotations

import numpy as np

from . import kernels
from ._util import check_indices, index_dtype
from .arrays import storage_dtype, to_host
from .base import Compressor, Layout
from .payload import Payload


def sparse_layout(numel: int, dtype: str, k: int | None) -> Layout:
    return {"indices": (index_dtype(numel), k), "values": (storage_dtype(dtype), k)}


def fill_sparse(flat: np.ndarray, idx: np.ndarray, bufs: dict[str, np.ndarray]) -> None:
    """Store indices (narrowed to the layout's dtype) and the exact original values."""
    dt = index_dtype(flat.size)
    if "indices" in bufs and bufs["indices"].size == idx.size:
        bufs["indices"][...] = idx
    else:
        bufs["indices"] = idx.astype(dt)
    if "values" in bufs and bufs["values"].size == idx.size:
        kernels.gather(flat, bufs["indices"], bufs["values"])
    else:
        bufs["values"] = kernels.gather(flat, bufs["indices"])


def decode_sparse(payload: Payload, out: np.ndarray) -> None:
    """out = 0 everywhere except out[indices] = values."""
    kernels.scatter_dense(out, payload.buffers["indices"], payload.buffers["values"])


def check_sparse(payload: Payload) -> None:
    b = payload.buffers
    check_indices(b["indices"], b["values"], payload.numel, "indices")


class SparsifierFeedback:
    """Mixin: error feedback folded into a sparsifier whose payload keeps exact values.

    The residual becomes x + residual in place, the payload is taken from it, and the sent
    entries are zeroed: exactly compensate / compress / update. A compressor whose
    ``_select_feedback`` has a kernel does it all in one pass over the data (the sum formed,
    filtered and written back together); otherwise numpy passes around ``compress`` do it
    (still no compensated copy, no decoded tensor, no subtraction)."""

    fuses_feedback = True

    def _select_feedback(self, flat: np.ndarray, residual: np.ndarray,
                         seed: int) -> tuple[np.ndarray, np.ndarray] | None:
        """(indices, values) that ``compress(flat + residual)`` would send, with residual left
        as flat + residual less them (and 0 where not finite); None where no kernel does it."""
        return None

    def compress_feedback(self: Compressor, x: np.ndarray, residual: np.ndarray, *, name: str,
                          step: int = 0, rank: int = 0) -> Payload | None:
        if not self._feedback_args(x, residual):
            return None
        flat = x.reshape(-1)
        if flat.size < 2**31 and residual.flags.c_contiguous and \
                not np.may_share_memory(flat, residual):
            seed = self.draw_seed(name, step, rank)
            picked = self._select_feedback(flat, residual, seed)  # type: ignore[attr-defined]
            if picked is not None:
                _, info = to_host(x)
                return Payload(self.name, info.dtype, info.shape, self.params,
                               {"indices": picked[0], "values": picked[1]}, origin=info)
        return self._compress_feedback_numpy(  # type: ignore[attr-defined]
            x, residual, name=name, step=step, rank=rank)

    def _compress_feedback_numpy(self: Compressor, x: np.ndarray, residual: np.ndarray, *,
                                 name: str, step: int = 0, rank: int = 0) -> Payload:
        np.add(residual, x.reshape(-1), out=residual)
        payload = self.compress(residual.reshape(x.shape), name=name, step=step, rank=rank)
        residual[payload.buffers["indices"]] = 0
        if not np.isfinite(np.add.reduce(residual)):  # NaN/Inf went out (or were not sent):
            residual[~np.isfinite(residual)] = 0  # keeping them would poison later steps
        return payload
