"""PowerSGD: rank-r power-iteration compression (Vogels et al. 2019, "PowerSGD: Practical
Low-Rank Gradient Compression for Distributed Optimization").

A tensor of shape (d0, ...) is viewed as an n x m matrix M (n = d0). One power iteration with
the warm-started Q (m x r) of the previous step gives M ~ P Q^T::

    P = M Q            -> allreduce P   (step "p")
    P = orth(P)
    Q = M^T P          -> allreduce Q   (step "q")
    M ~ P Q^T          (and Q is kept as the next warm start)

The compressor never communicates: ``p_step``, ``q_step`` and ``reconstruct`` are the pieces a
collective runs around its two allreduces. ``compress`` runs the same iteration for one
process and sends P and Q. 1-D tensors, and matrices where rank r would not save bytes, are
sent uncompressed. The first Q is drawn from (seed, tensor name), identical on every rank.
NaN/Inf: ``compress`` zeroes them in M and sends them exactly in a side list; the
collective steps let them spread through P and Q, so every rank sees a non-finite result.
A non-finite Q is never kept as the warm start (the next step starts again from the seeded
one), so one bad step does not spoil every later one.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ._util import (
    check_nonfinite,
    check_range,
    nonfinite_layout,
    numel_of,
    restore_nonfinite,
    split_nonfinite,
)
from .arrays import from_f32, storage_dtype, to_f32
from .base import Capabilities, Compressor, Layout, derive_seed, register
from .payload import Payload

__all__ = ["PowerSGD", "PowerSGDContext", "orthogonalize"]

F32 = np.dtype(np.float32)


def orthogonalize(p: np.ndarray, eps: float = 1e-30) -> np.ndarray:
    """Gram-Schmidt on the columns, in float64; a column with (almost) no norm becomes zero
    instead of dividing by zero, so a zero gradient yields zeros, never NaN."""
    q = p.astype(np.float64)
    with np.errstate(invalid="ignore", over="ignore"):  # NaN/Inf pass through, unremarked
        for i in range(q.shape[1]):
            col = q[:, i]
            col -= q[:, :i] @ (q[:, :i].T @ col)
            norm = np.sqrt(col @ col)
            col *= (1.0 / norm) if norm > eps else 0.0
        return q.astype(np.float32)


@dataclass
class PowerSGDContext:
    """What stays local between the steps of one tensor: M, the orthogonalized P, the shape.

    Example::

        >>> import numpy as np, compressors
        >>> x = np.random.default_rng(0).standard_normal((64, 32)).astype(np.float32)
        >>> comp = compressors.get("powersgd:rank=2")
        >>> assert comp.decompress(comp.compress(x, name="w", step=0)).shape == x.shape
    """

    m: np.ndarray
    shape: tuple[int, ...]
    dtype: str
    p: np.ndarray | None = None


@register("powersgd")
@dataclass(frozen=True)
class PowerSGD(Compressor):
    """Rank-``rank`` low-rank approximation by one warm-started power iteration per step.

    Example::

        >>> import numpy as np, compressors
        >>> comp = compressors.get("powersgd:rank=2")
        >>> x = np.random.default_rng(0).standard_normal((64, 64)).astype(np.float32)
        >>> payload = comp.compress(x, name="layer1.weight", step=0)
        >>> y = comp.decompress(payload)  # x's shape and dtype; the error is the compressor's
        >>> assert y.shape == x.shape and payload.nbytes <= x.nbytes + 64
    """

    rank: int = 1
    seed: int = 0
    _warm: dict[str, np.ndarray] = field(default_factory=dict, init=False, repr=False,
                                         compare=False)
    #: warm starts loaded from a checkpoint and not yet used (their shape is checked at use)
    _loaded: set[str] = field(default_factory=set, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        check_range(self, "rank", 1, 2**20, integer=True)

    @property
    def capabilities(self) -> Capabilities:
        return Capabilities(summable=False, sparse=False, same_size_on_all_ranks=True,
                            needs_shared_seed=True, allreduce_steps=("p", "q"))

    def matrix_shape(self, shape: tuple[int, ...]) -> tuple[int, int, int] | None:
        """(n, m, r) of the low-rank view, or None when the tensor is sent uncompressed."""
        if len(shape) < 2 or numel_of(shape) == 0:
            return None
        n = shape[0]
        m = numel_of(shape) // n
        r = min(self.rank, n, m)
        return (n, m, r) if (n + m) * r < n * m else None

    def layout(self, shape: tuple[int, ...], dtype: str) -> Layout:
        dims = self.matrix_shape(shape)
        if dims is None:
            return {"values": (storage_dtype(dtype), numel_of(shape))}
        n, m, r = dims
        return nonfinite_layout({"p": (F32, n * r), "q": (F32, m * r)}, storage_dtype(dtype))

    def warm_q(self, name: str, m: int, r: int) -> np.ndarray:
        """The Q to start from: the last step's, else one drawn from (seed, name)."""
        q = self._warm.get(name)
        if name in self._loaded:
            self._loaded.discard(name)
            if q is not None and q.shape != (m, r):
                raise ValueError(f"PowerSGD: the loaded warm start of {name!r} is "
                                 f"{list(q.shape)}, the tensor needs {[m, r]} (a checkpoint of "
                                 f"another model or rank)")
        if q is None or q.shape != (m, r):
            q = np.random.default_rng(derive_seed(self.seed, name, 0)).standard_normal(
                (m, r), dtype=np.float32)
        return q

    def _keep_warm(self, name: str, q: np.ndarray) -> None:
        """Keep Q as the next warm start unless it holds NaN/Inf: then the next step starts
        from the seeded Q again. Every rank has the same allreduced Q, so every rank decides
        the same way."""
        if np.isfinite(q).all():  # Q is small (m x rank): the full check costs little
            self._warm[name] = q
        else:
            self._warm.pop(name, None)

    def warm_state(self) -> dict[str, np.ndarray]:
        """The warm starts by tensor name (copies; identical on every rank)."""
        return {k: v.copy() for k, v in self._warm.items()}

    def load_warm_state(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`warm_state`. A non-finite Q is dropped with a warning (that tensor
        starts again from the seeded Q); anything that is not a 2-D float array raises."""
        if not isinstance(state, Mapping):
            raise TypeError(f"PowerSGD warm starts must be a dict of name -> 2-D array, "
                            f"got {type(state).__name__}")
        checked: dict[str, np.ndarray] = {}
        for name, q in state.items():
            arr = np.asarray(q) if not isinstance(q, str | bytes | Mapping) else None
            if not isinstance(name, str) or arr is None or arr.ndim != 2 or \
                    arr.dtype.kind != "f":
                raise ValueError(f"PowerSGD warm start {name!r}: expected a 2-D float array "
                                 f"(m x rank), got {type(q).__name__} "
                                 f"{getattr(arr, 'dtype', '')}{list(getattr(arr, 'shape', []))}")
            if arr.shape[1] > self.rank:
                raise ValueError(f"PowerSGD warm start {name!r} has rank {arr.shape[1]}, this "
                                 f"compressor's rank is {self.rank}")
            arr = np.array(arr, dtype=np.float32)
            if not np.isfinite(arr).all():
                warnings.warn(f"PowerSGD warm start {name!r} holds NaN/Inf: dropped, the "
                              f"tensor starts again from the seeded Q", RuntimeWarning,
                              stacklevel=2)
                continue
            checked[name] = arr
        self._warm.update(checked)
        self._loaded.update(checked)

    def p_step(self, x: np.ndarray, name: str, shape: tuple[int, ...], dtype: str
               ) -> tuple[np.ndarray, PowerSGDContext]:
        """P = M Q for the flat host tensor x (the buffer to allreduce first)."""
        dims = self.matrix_shape(shape)
        if dims is None:
            raise ValueError(f"PowerSGD: shape {shape} is sent uncompressed, not in two steps")
        n, m, r = dims
        mat = to_f32(x.reshape(-1), dtype).reshape(n, m)
        return mat @ self.warm_q(name, m, r), PowerSGDContext(mat, shape, dtype)

    def q_step(self, ctx: PowerSGDContext, p_sum: np.ndarray) -> np.ndarray:
        """Orthogonalize the allreduced P, return Q = M^T P (the buffer to allreduce second)."""
        ctx.p = orthogonalize(p_sum)
        return ctx.m.T @ ctx.p

    def reconstruct(self, ctx: PowerSGDContext, q_sum: np.ndarray, name: str,
                    out: np.ndarray | None = None) -> np.ndarray:
        """M ~ P Q^T from the allreduced Q; keeps Q as the warm start of the next step."""
        if ctx.p is None:
            raise ValueError("PowerSGD: reconstruct needs q_step first")
        self._keep_warm(name, np.array(q_sum, dtype=np.float32))
        res = ctx.p @ q_sum.T
        out = np.empty(res.size, storage_dtype(ctx.dtype)) if out is None else out
        from_f32(res.reshape(-1), ctx.dtype, out)
        return out

    def _encode(self, flat: np.ndarray, dtype: str, seed: int, bufs: dict[str, np.ndarray],
                **where: Any) -> None:
        shape, name = where["shape"], where["name"]
        if "values" in bufs:
            bufs["values"][...] = flat
            return
        x32 = to_f32(flat, dtype)
        finite = np.isfinite(x32)
        bad = int(x32.size - np.count_nonzero(finite))
        clean = np.where(finite, x32, np.float32(0)) if bad else x32
        p, ctx = self.p_step(clean, name, shape, "float32")
        q = self.q_step(ctx, p)
        self._keep_warm(name, q)  # finite M can still overflow float32
        bufs["p"][...] = ctx.p.reshape(-1)
        bufs["q"][...] = q.reshape(-1)
        split_nonfinite(x32, flat, bad, bufs)

    def _decode(self, payload: Payload, out: np.ndarray) -> None:
        b = payload.buffers
        if "values" in b:
            out[...] = b["values"]
            return
        n, m, r = self.matrix_shape(payload.shape)  # type: ignore[misc]
        res = b["p"].reshape(n, r) @ b["q"].reshape(m, r).T
        from_f32(res.reshape(-1), payload.dtype, out)
        restore_nonfinite(payload, out)

    def _check(self, payload: Payload) -> None:
        if "nf_idx" in payload.buffers:
            check_nonfinite(payload)
