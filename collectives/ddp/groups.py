"""Fusing a bucket's parameters by compressor: one flat buffer and one collective per group."""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field
from typing import Any

import numpy as np


@dataclass
class Group:
    """Parameters of one bucket that share a compressor (and so a scheme).

    ``ranges`` are element offsets into the bucket's flat buffer. A group whose ranges are
    adjacent is a view of the buffer (zero copy); otherwise its members are concatenated
    into a buffer the group keeps from step to step and copied back after the collective.
    ``copy`` forces that even for adjacent ranges (the group lies inside a span group).

    A span group (``holes`` not empty, see :func:`with_span`) is sent in place over the
    bucket range from its first to its last member, the other groups' ranges inside
    (``holes``) zeroed once those groups have copied them out: no gather, no scatter. Its
    residual is laid out like the span. ``shape`` is set for a single-parameter group of a
    shape-aware compressor (PowerSGD), which needs the matrix, not a flat vector.
    """

    spec: str
    name: str
    members: list[tuple[str, int]]
    ranges: list[tuple[int, int]]
    shape: tuple[int, ...] | None = None
    holes: list[tuple[int, int]] = field(default_factory=list)
    copy: bool = False
    _fused: Any = field(default=None, repr=False, compare=False)

    @property
    def span(self) -> tuple[int, int]:
        """First and last element (exclusive) the group covers in the bucket."""
        return min(a for a, _ in self.ranges), max(b for _, b in self.ranges)

    @property
    def numel(self) -> int:
        """Elements the collective carries (a span group's holes included)."""
        if self.holes:
            lo, hi = self.span
            return hi - lo
        return sum(n for _, n in self.members)

    @property
    def contiguous(self) -> bool:
        return not self.copy and not self.holes and all(
            a[1] == b[0] for a, b in zip(self.ranges, self.ranges[1:], strict=False))

    def view(self, buf: Any) -> Any:
        """The group's input: a view of the bucket buffer, or a fused copy. A span group's
        holes are zeroed here, so the other groups' views must be taken first."""
        if self.holes:
            for a, b in self.holes:
                buf[a:b].zero_()
            lo, hi = self.span
            return buf[lo:hi]
        if self.contiguous:
            x = buf[self.ranges[0][0]:self.ranges[-1][1]]
        else:
            import torch

            x = self._fused
            if x is None or x.numel() != self.numel or x.dtype != buf.dtype \
                    or x.device != buf.device:
                x = self._fused = torch.empty(self.numel, dtype=buf.dtype, device=buf.device)
            torch.cat([buf[a:b] for a, b in self.ranges], out=x)
        return x.view(self.shape) if self.shape is not None else x

    def scatter(self, buf: Any, x: Any) -> None:
        """Copy a fused result back into the bucket (nothing to do for a view or a span)."""
        if self.contiguous or self.holes:
            return
        flat, at = x.reshape(-1), 0
        host = buf.device.type == "cpu" and str(buf.dtype) != "torch.bfloat16"
        if host:  # numpy on the worker thread: a torch copy there may start an OpenMP team
            buf, flat = buf.detach().numpy(), flat.detach().numpy()
        for a, b in self.ranges:
            if host:
                buf[a:b] = flat[at:at + b - a]
            else:
                buf[a:b].copy_(flat[at:at + b - a])
            at += b - a

    def _slots(self) -> list[tuple[str, int, int]]:
        """(parameter, start, end) of each member in the group's residual."""
        out, at = [], 0
        lo = self.span[0] if self.holes else 0
        for (name, n), (a, _) in zip(self.members, self.ranges, strict=True):
            start = a - lo if self.holes else at
            out.append((name, start, start + n))
            at += n
        return out

    def pieces(self, residual: np.ndarray) -> dict[str, np.ndarray]:
        """The group's residual cut into its parameters' pieces."""
        return {name: residual[a:b].copy() for name, a, b in self._slots()}

    def assemble(self, pool: dict[str, np.ndarray], dtype: Any) -> np.ndarray | None:
        """The group's residual from per-parameter pieces (taken out of ``pool``; zeros where
        a piece is missing or the wrong size, and in a span's holes), or None if none is
        there."""
        if not any(name in pool for name, _ in self.members):
            return None
        out = np.zeros(self.numel, dtype)
        for name, a, b in self._slots():
            piece = pool.pop(name, None)
            if piece is not None and piece.size == b - a:
                out[a:b] = piece
        return out


#: A span group's holes may be at most this share of its span: past it, the extra elements
#: its compressor would carry cost more than the copies the span saves.
MAX_HOLE_SHARE = 0.25


def with_span(groups: list[Group], sparse: Any) -> list[Group]:
    """The bucket's groups with at most one span group, first in the list (its collective
    must complete before the groups in its holes copy their results back).

    Candidates: groups that would otherwise be copied, of a compressor for which a zeroed
    element is free and stays zero (``sparse(spec)``: sparsifiers), with holes at most
    ``MAX_HOLE_SHARE`` of the span. The largest wins (it saves the largest copies); every
    group with a range inside its span is then copied (its view would be zeroed). The same
    groups give the same result on every rank.
    """
    def own(g: Group) -> int:
        return sum(b - a for a, b in g.ranges)

    fits = [g for g in groups if not g.contiguous and g.shape is None and sparse(g.spec)
            and g.span[1] - g.span[0] - own(g) <= MAX_HOLE_SHARE * (g.span[1] - g.span[0])]
    if not fits:
        return groups
    best = max(fits, key=own)  # the first of the largest: the same on every rank
    lo, hi = best.span
    order = sorted(range(len(best.ranges)), key=lambda j: best.ranges[j][0])
    holes: list[tuple[int, int]] = []
    rest = []
    for g in groups:
        if g is best:
            continue
        inside = [(a, b) for a, b in g.ranges if a < hi and b > lo]
        holes += inside
        rest.append(Group(g.spec, g.name, g.members, g.ranges, g.shape, copy=True)
                    if inside else g)
    gaps = _gaps(lo, hi, [best.ranges[j] for j in order], holes)
    span = Group(best.spec, best.name + "~span", [best.members[j] for j in order],
                 [best.ranges[j] for j in order], holes=sorted(holes + gaps))
    return [span, *rest]


def _gaps(lo: int, hi: int, own: list[tuple[int, int]],
          holes: list[tuple[int, int]]) -> list[tuple[int, int]]:
    """Elements of [lo, hi) that no range covers (padding between gradients): zeroed too."""
    out, at = [], lo
    for a, b in sorted(own + holes):
        if a > at:
            out.append((at, a))
        at = max(at, b)
    return out + ([(at, hi)] if at < hi else [])


def group_name(names: list[str]) -> str:
    """Error-feedback key of a group: the parameter's name, or a stable name for a fusion."""
    if len(names) == 1:
        return names[0]
    crc = zlib.crc32("\x00".join(names).encode())
    return f"{names[0]}+{len(names) - 1}#{crc:08x}"


def offsets(buf: Any, grads: list[Any]) -> list[tuple[int, int]]:
    """Element ranges of the gradient views in the bucket buffer (sequential if unknown)."""
    base, size = buf.data_ptr(), buf.element_size()
    out, at = [], 0
    for g in grads:
        off = (g.data_ptr() - base) // size
        if not (0 <= off and off + g.numel() <= buf.numel()):
            off = at
        out.append((off, off + g.numel()))
        at = off + g.numel()
    return out
