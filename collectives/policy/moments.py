"""A compressor's error as an Adam-type optimizer sees it: in its preconditioned space.

Adam (and AdamW, Adagrad, RMSprop) divides each coordinate of the update by the root of a
running mean of its squared gradient, v. Every coordinate then moves by about the learning
rate whatever its gradient's size, so noise a compressor adds to a small coordinate moves
that weight as far as a large gradient would; an error small in the gradient's norm (top-k
keeping the few large coordinates) can be large in the step the optimizer takes. So the
profiler keeps v per sampled coordinate, as Adam does (an exponential mean with beta2 =
0.999, ``tunables.beta2``, bias-corrected: over a few profiled steps, the mean of g^2), and
measures

    error    = ||g_sent / d_sent - g / d|| / ||g / d||
    residual = ||r / d_sent||^2 / ||g / d||^2      (error feedback's residual r)

    d = sqrt(v) + eps (Adam's eps, 1e-8),   d_sent = sqrt(v + (g_sent - g)^2) + eps

with g_sent what the candidate sends (its error feedback included) and g the gradient, at the
layer's last probe step. Adam divides what it receives by the second moment of what it
receives: a compressor's noise enters v too (``d_sent``: its square, this step's estimate of
its mean), so a coordinate whose gradient drowns in that noise moves by about the learning
rate at random, not by noise over the gradient's own small root. That is still an error of
the whole step's size on that coordinate, and a compressor that drowns many coordinates
(8 bits where a bucket's range dwarfs most of its values, top-k's zeros) is still ruled out.
The residual is what error feedback sends later, and Adam divides it by the same d_sent when
it arrives: a quantizer's residual on a drowned coordinate is one step of it, at most, not
noise over the gradient's tiny root, while top-k's residual on the coordinates it does not
send (there g_sent - g = -g, so d_sent is about the gradient's own scale) still counts the
steps of gradient it withholds, and keeps growing.
v is over all the probe steps: the first steps' v, one or two squares, is
near zero wherever a gradient happened to be, which Adam's v over many steps is not (so
``probe_steps`` of 5 or more measure this well). A coordinate whose v is zero (no gradient
seen there) where the candidate sends something is a step Adam would take at full size out of
nothing: that error cannot be bounded, and such a step is counted (:meth:`Moments.measure`).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from compressors.dtypes import lookup

from .. import ops
from .tunables import DEFAULTS

F64 = lookup("float64")


def _sum_squares(x: np.ndarray) -> float:
    """One single-threaded pass over a contiguous double array (NaN and Inf propagate)."""
    return ops.sum_squares(x, F64)


class Moments:
    """Running second moments of the gradients seen, per array (a layer's sample)."""

    def __init__(self, beta2: float = DEFAULTS.beta2, eps: float = DEFAULTS.eps) -> None:
        self.beta2, self.eps = beta2, eps  # Adam's (``tunables``)
        self.v: dict[str, np.ndarray] = {}  # the exponential mean of g^2 (not corrected)
        self.t: dict[str, int] = {}  # gradients folded in
        self.last: dict[str, int] = {}  # the step of the last one
        #: This step's gradient, the root of v, g in Adam's space, its squared norm and
        #: where v is zero, by key (None: a non-finite step, measured as nothing).
        self.now: dict[str, tuple[np.ndarray, np.ndarray, np.ndarray, float, np.ndarray]
                       | None] = {}

    @staticmethod
    def key(name: str, g: np.ndarray) -> str:
        """The moments of ``g`` (a layer's sample, or all of it): by name and size."""
        return f"{name}#{g.size}"

    def add(self, key: str, g: np.ndarray, step: int) -> None:
        """Fold ``step``'s gradient into v (once a step; a non-finite one is left out, as a
        mixed-precision optimizer skips that step)."""
        if self.last.get(key) == step:
            return
        self.last[key] = step
        g64 = np.asarray(g, np.float64).reshape(-1)
        g2 = np.square(g64)
        if not np.isfinite(g2.sum()):
            self.now[key] = None
            return
        v = self.v.get(key)
        beta2 = self.beta2
        v = self.v[key] = (1 - beta2) * g2 if v is None else beta2 * v + (1 - beta2) * g2
        self.t[key] = self.t.get(key, 0) + 1
        root = np.sqrt(v / (1 - beta2 ** self.t[key]))
        d = root + self.eps
        scaled = g64 / d
        self.now[key] = g64, root, scaled, float(np.square(scaled).sum()), root == 0

    def scale(self, key: str) -> np.ndarray | None:
        """sqrt of the bias-corrected v (None before any gradient)."""
        v = self.v.get(key)
        return None if v is None else np.sqrt(v / (1 - self.beta2 ** self.t[key]))

    def measure(self, key: str, sent: np.ndarray,
                residual: np.ndarray) -> tuple[float, float, float, bool]:
        """In the preconditioned space, at the step last added: the squared error of
        ``sent`` against the gradient, the gradient's squared norm, the residual's squared
        norm over it, and whether ``sent`` is nonzero where v is zero (unbounded). Zeros
        for a non-finite step."""
        now = self.now.get(key)
        if now is None:
            return 0.0, 0.0, 0.0, False
        g64, root, scaled, sq, zero = now
        s64 = np.asarray(sent, np.float64).reshape(-1)
        with np.errstate(over="ignore", invalid="ignore"):
            # In place, in two buffers: this runs for every candidate and sampled element.
            d_sent = np.subtract(s64, g64)
            np.square(d_sent, out=d_sent)
            d_sent += np.square(root)
            np.sqrt(d_sent, out=d_sent)
            d_sent += self.eps
            work = np.divide(s64, d_sent)
            work -= scaled
            err = _sum_squares(work)
            np.divide(np.asarray(residual, np.float64).reshape(-1), d_sent, out=work)
            res = _sum_squares(work)
        if not (np.isfinite(err) and np.isfinite(res)):
            return 0.0, 0.0, 0.0, False
        unbounded = bool(zero.any() and (s64[zero] != 0).any())
        return err, sq, res / sq if sq > 0 else 0.0, unbounded

    def state_dict(self) -> dict[str, Any]:
        return {"v": {k: v.copy() for k, v in self.v.items()}, "t": dict(self.t),
                "last": dict(self.last)}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.v = {k: np.array(v, dtype=np.float64) for k, v in state["v"].items()}
        self.t, self.last = dict(state["t"]), dict(state["last"])
