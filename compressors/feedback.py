"""Error feedback: keep what compression dropped and add it to the next gradient.

EF-SGD (Seide et al. 2014; Karimireddy et al. 2019): ``compensate`` returns
gamma * g + beta * e, ``update`` sets e = g' - D(C(g')). With beta = gamma = 1 the sum of
everything sent plus the final residual equals the sum of all gradients (telescoping).
``DGCFeedback`` is Deep Gradient Compression's momentum correction and factor masking
(Lin et al. 2018). Residuals live in host numpy arrays keyed by tensor name, kept in float32
(float64 for float64 tensors) so fp16/bf16 rounding does not pile up in them.
"""

from __future__ import annotations

import warnings
from typing import Any

import numpy as np

from ._statecheck import arrays, factor, require
from .arrays import ArrayInfo, from_host, host_f32, to_f32, to_host
from .base import Compressor
from .payload import Payload

__all__ = ["DGCFeedback", "ErrorFeedback", "NoErrorFeedback"]


def _wide(x: Any) -> tuple[np.ndarray, ArrayInfo]:
    host, info = to_host(x)
    flat = host.reshape(-1)
    wide = flat.astype(np.float64) if info.dtype == "float64" else to_f32(flat, info.dtype)
    return wide, info


def _narrow(wide: np.ndarray, info: ArrayInfo) -> Any:
    from .arrays import from_f32, storage_dtype

    if info.kind == "numpy" and wide.dtype.name == info.dtype:
        return wide.reshape(info.shape)  # already a fresh array of the right type: no copy
    out = np.empty(wide.size, storage_dtype(info.dtype))
    from_f32(wide, info.dtype, out)
    return from_host(out.reshape(info.shape), info)


class ErrorFeedback:
    """Residual memory around a compressor: compensate -> compress -> update.

    Example::

        >>> import numpy as np, compressors
        >>> x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
        >>> comp = compressors.get("topk:ratio=0.01")
        >>> ef = compressors.ErrorFeedback(comp)
        >>> c = ef.compensate(x, "w")  # x + what was held back
        >>> y = comp.decompress(comp.compress(c, name="w", step=0))
        >>> ef.update_sent("w", c, y)  # the residual keeps c - y for the next step
        >>> assert np.allclose(ef.residuals["w"].reshape(-1), (c - y).reshape(-1))
    """

    def __init__(self, compressor: Compressor, beta: float = 1.0, gamma: float = 1.0) -> None:
        owner = type(self).__name__
        self.compressor = compressor
        self.beta, self.gamma = factor(owner, "beta", beta), factor(owner, "gamma", gamma)
        self.residuals: dict[str, np.ndarray] = {}
        self._loaded: set[str] = set()  # loaded residuals not used yet
        self._seen: set[str] = set()  # names used since the load

    def _claim(self, name: str, size: int, dtype: np.dtype) -> None:
        """Check loaded state at its first use: a residual that does not fit the tensor raises;
        once a name comes round again (a new step), loaded names still unused are warned
        about, once."""
        if name in self._loaded:
            self._loaded.discard(name)
            for kind, store in (("residual", self.residuals),
                                ("velocity", getattr(self, "velocities", {}))):
                res = store.get(name)
                if res is not None and (res.size != size or res.dtype != dtype):
                    raise ValueError(
                        f"{type(self).__name__}: the loaded {kind} of {name!r} is "
                        f"{res.dtype}[{res.size}], the tensor needs {dtype}[{size}] "
                        f"(float64 for float64 tensors, float32 otherwise); load a state "
                        f"saved for this model")
        elif name in self._seen and self._loaded:
            warnings.warn(f"{type(self).__name__}: loaded residuals {sorted(self._loaded)} "
                          f"match no tensor used since; they are kept but unused",
                          RuntimeWarning, stacklevel=3)
            self._loaded.clear()
        self._seen.add(name)
        if not self._loaded:
            self._seen.clear()

    def compensate(self, x: Any, name: str, out: np.ndarray | None = None) -> Any:
        """gamma * x + beta * residual[name], in x's type.

        ``out``: a flat numpy array of x's (float32/float64) dtype to write the sum into,
        reused from step to step by callers on the hot path (fresh memory costs page faults).
        """
        wide, info = _wide(x)
        if self._loaded:
            self._claim(name, wide.size, wide.dtype)
        res = self.residuals.get(name)
        if self.gamma != 1.0:
            wide = wide * wide.dtype.type(self.gamma)
        if res is not None and res.size == wide.size:
            if self.beta != 1.0:
                res = res * res.dtype.type(self.beta)
            usable = (out is not None and info.kind == "numpy" and out.dtype == wide.dtype
                      and out.size == wide.size and not np.shares_memory(out, wide))
            wide = np.add(wide, res, out=out.reshape(-1) if usable else None)
        return _narrow(wide, info)

    def update(self, name: str, compensated: Any, payload: Payload) -> None:
        """residual[name] = compensated - decompress(payload)."""
        self.update_sent(name, compensated, self.compressor.decompress(payload))

    def update_sent(self, name: str, compensated: Any, sent: Any) -> None:
        """residual[name] = compensated - sent, for schemes that know what was sent without
        one payload (chunked compression, PowerSGD's local P Q^T, global top-k's survivors)."""
        wide, _ = _wide(compensated)
        sent, _ = _wide(sent)
        res = self.residuals.get(name)
        if res is None or res.shape != wide.shape or res.dtype != wide.dtype or \
                np.shares_memory(res, wide):
            res = np.empty_like(wide)
        with np.errstate(invalid="ignore", over="ignore"):  # inf - inf: zeroed just below
            np.subtract(wide, sent, out=res)  # reuses the residual's memory: no page faults
        # NaN/Inf went out with the payload (so the step can be skipped); keeping them would
        # poison every later step. One cheap reduction tells whether there are any.
        with np.errstate(invalid="ignore", over="ignore"):  # inf + -inf in the sum
            finite = np.isfinite(np.add.reduce(res))  # an overflowing sum costs the full test
        if not finite:
            res[~np.isfinite(res)] = 0
        self.residuals[name] = res

    def fusable(self, x: Any) -> bool:
        """Whether compressors may fold this feedback into their kernels (``compress_feedback``):
        plain feedback (beta = gamma = 1) on a contiguous float32 numpy array."""
        return (type(self) is ErrorFeedback and self.beta == 1.0 and self.gamma == 1.0
                and host_f32(x))

    def residual_for(self, name: str, n: int) -> np.ndarray:
        """The flat float32 residual of ``name`` for a fused kernel to update in place (zeros
        when there is none, or one of another size)."""
        if self._loaded:
            self._claim(name, n, np.dtype(np.float32))
        res = self.residuals.get(name)
        if res is None or res.size != n or res.dtype != np.float32 or \
                not res.flags.c_contiguous or not res.flags.writeable:
            res = np.zeros(n, np.float32)
            self.residuals[name] = res
        return res.reshape(-1)

    def step(self, x: Any, name: str, step: int = 0) -> Payload:
        """compensate, compress and update in one call."""
        comp = self.compensate(x, name)
        payload = self.compressor.compress(comp, name=name, step=step)
        self.update(name, comp, payload)
        return payload

    def state_dict(self) -> dict[str, Any]:
        """Residuals as plain numpy arrays (no process group, picklable, rank-independent)."""
        return {"beta": self.beta, "gamma": self.gamma,
                "residuals": {k: v.copy() for k, v in self.residuals.items()}}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore :meth:`state_dict`, validated: a bad field raises ValueError or TypeError
        naming it and leaves this object unchanged."""
        owner = type(self).__name__
        require(owner, state, ("beta", "gamma", "residuals"))
        beta, gamma = factor(owner, "beta", state["beta"]), factor(owner, "gamma", state["gamma"])
        residuals = arrays(owner, "residuals", state["residuals"])
        self.beta, self.gamma, self.residuals = beta, gamma, residuals
        self._loaded, self._seen = set(residuals), set()


class NoErrorFeedback(ErrorFeedback):
    """Identity twin: no memory, compensate returns x itself.

    Example::

        >>> import numpy as np, compressors
        >>> x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
        >>> ef = compressors.NoErrorFeedback(compressors.get("sign"))
        >>> assert np.array_equal(ef.compensate(x, "w"), x)  # nothing is ever held back
    """

    def compensate(self, x: Any, name: str, out: np.ndarray | None = None) -> Any:
        """x itself: nothing is kept, so there is nothing to add (``out`` is not needed)."""
        return x

    def update(self, name: str, compensated: Any, payload: Payload) -> None:
        pass

    def update_sent(self, name: str, compensated: Any, sent: Any) -> None:
        pass

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Validated like ErrorFeedback's; residuals in it are dropped with a warning (the
        identity twin keeps none)."""
        super().load_state_dict(state)
        if self.residuals:
            warnings.warn(f"NoErrorFeedback keeps no residuals: {sorted(self.residuals)} "
                          f"dropped (load them into an ErrorFeedback to use them)",
                          RuntimeWarning, stacklevel=2)
        self.residuals, self._loaded = {}, set()


def _momentum(v: Any) -> float:
    if factor("DGCFeedback", "momentum", v, hi=1.0) == 1.0:
        raise ValueError(f"DGCFeedback: momentum must be a number in [0, 1), got {v!r}")
    return float(v)


class DGCFeedback(ErrorFeedback):
    """DGC momentum correction: u = m u + g, v = v + u; send from v, then zero u and v where
    values were sent (momentum factor masking) and keep v's remainder.

    Example::

        >>> import numpy as np, compressors
        >>> x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
        >>> ef = compressors.DGCFeedback(compressors.get("topk:ratio=0.01"), momentum=0.9)
        >>> c = ef.compensate(x, "w")  # momentum-corrected accumulation
        >>> assert c.shape == x.shape
    """

    def __init__(self, compressor: Compressor, momentum: float = 0.9) -> None:
        super().__init__(compressor)
        self.momentum = _momentum(momentum)
        self.velocities: dict[str, np.ndarray] = {}

    def compensate(self, x: Any, name: str, out: np.ndarray | None = None) -> Any:
        """v + (m u + x), in x's type (``out`` is accepted like ErrorFeedback's, not used)."""
        wide, info = _wide(x)
        if self._loaded:
            self._claim(name, wide.size, wide.dtype)
        u = self.velocities.get(name)
        # a copy, never x itself: update_sent zeroes the velocity in place
        u = wide.copy() if u is None or u.size != wide.size else \
            u * u.dtype.type(self.momentum) + wide
        self.velocities[name] = u
        v = self.residuals.get(name)
        return _narrow(u if v is None or v.size != u.size else v + u, info)

    def update_sent(self, name: str, compensated: Any, sent: Any) -> None:
        super().update_sent(name, compensated, sent)
        mask = _wide(sent)[0] != 0
        u = self.velocities[name]
        u[mask] = 0
        self.residuals[name][mask] = 0
        # NaN/Inf an unsent coordinate kept (random-k) would stay in the velocity for good
        with np.errstate(invalid="ignore", over="ignore"):
            finite = np.isfinite(np.add.reduce(u))
        if not finite:
            u[~np.isfinite(u)] = 0

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["momentum"] = self.momentum
        state["velocities"] = {k: v.copy() for k, v in self.velocities.items()}
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        require("DGCFeedback", state, ("beta", "gamma", "residuals", "momentum", "velocities"))
        momentum = _momentum(state["momentum"])
        velocities = arrays("DGCFeedback", "velocities", state["velocities"])
        super().load_state_dict(state)
        self.momentum, self.velocities = momentum, velocities
        self._loaded |= set(velocities)
