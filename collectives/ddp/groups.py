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

    ``pads``: zero elements after each member in the fused buffer (see :func:`with_zero_slots`),
    the slots of the parameters between members in the canonical order.
    """

    spec: str
    name: str
    members: list[tuple[str, int]]
    ranges: list[tuple[int, int]]
    shape: tuple[int, ...] | None = None
    holes: list[tuple[int, int]] = field(default_factory=list)
    copy: bool = False
    pads: tuple[int, ...] = ()
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
        return sum(n for _, n in self.members) + sum(self.pads)

    def starts(self) -> list[int]:
        """Where each member starts in the fused buffer (after the pads before it)."""
        out, at = [], 0
        for k, (_, n) in enumerate(self.members):
            out.append(at)
            at += n + (self.pads[k] if self.pads else 0)
        return out

    @property
    def contiguous(self) -> bool:
        return not self.copy and not self.holes and not any(self.pads) and all(
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
            if any(self.pads):
                for at, (a, b), pad in zip(self.starts(), self.ranges, self.pads, strict=True):
                    x[at:at + b - a].copy_(buf[a:b])
                    x[at + b - a:at + b - a + pad].zero_()
            else:
                torch.cat([buf[a:b] for a, b in self.ranges], out=x)
        return x.view(self.shape) if self.shape is not None else x

    def scatter(self, buf: Any, x: Any) -> None:
        """Copy a fused result back into the bucket (nothing to do for a view or a span)."""
        if self.contiguous or self.holes:
            return
        flat = x.reshape(-1)
        host = buf.device.type == "cpu" and str(buf.dtype) != "torch.bfloat16"
        if host:  # numpy on the worker thread: a torch copy there may start an OpenMP team
            buf, flat = buf.detach().numpy(), flat.detach().numpy()
        for at, (a, b) in zip(self.starts(), self.ranges, strict=True):
            if host:
                buf[a:b] = flat[at:at + b - a]
            else:
                buf[a:b].copy_(flat[at:at + b - a])

    def _slots(self) -> list[tuple[str, int, int]]:
        """(parameter, start, end) of each member in the group's residual."""
        out = []
        lo = self.span[0] if self.holes else 0
        for (name, n), (a, _), at in zip(self.members, self.ranges, self.starts(), strict=True):
            start = a - lo if self.holes else at
            out.append((name, start, start + n))
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
#: its compressor would carry cost more than the copies the span saves. A sparsifier's holes
#: are free (zeros are not selected), so that share is about the work of a larger input.
MAX_HOLE_SHARE = 0.25
#: A dense quantizer with an exact zero (uniform at 4 and 8 bits) pays each zero slot its
#: code's bytes on the wire. Copying a group in and back reads and writes its elements twice
#: (about 2.4 ns an element here); one 8-bit code crosses a 1 Gbit/s ring in about 12 ns:
#: slots pay up to a fifth of the layout at 1 Gbit/s, a fiftieth at 10. Kept at the faster
#: link's share: a bucket's small layers (biases, norms) are well under it.
MAX_SLOT_SHARE = 0.02


def with_span(groups: list[Group], sparse: Any) -> list[Group]:
    """The bucket's groups with at most one span group, first in the list (its collective
    must complete before the groups in its holes copy their results back).

    Candidates: groups that would otherwise be copied, of a compressor for which a zeroed
    element is free and stays zero (``sparse(spec)``: sparsifiers), with holes at most
    ``MAX_HOLE_SHARE`` of the span. The largest wins (it saves the largest copies); every
    group with a range inside its span is then copied (its view would be zeroed). The same
    groups give the same result on every rank.
    """
    fits = [g for g in groups if not g.contiguous and g.shape is None and sparse(g.spec)
            and g.span[1] - g.span[0] - _own(g) <= MAX_HOLE_SHARE * (g.span[1] - g.span[0])]
    if not fits:
        return groups
    best = max(fits, key=_own)  # the first of the largest: the same on every rank
    order = sorted(range(len(best.ranges)), key=lambda j: best.ranges[j][0])
    members, ranges = [best.members[j] for j in order], [best.ranges[j] for j in order]
    return _spanned(groups, best, members, ranges, [], "~span")


def with_zero_slots(groups: list[Group], canon: list[tuple[str, int]],
                    exact_zero: Any) -> list[Group]:
    """The bucket's groups with the fused layout of a dense quantizer with an exact zero
    (``exact_zero(spec)``) given zero slots: its members in the canonical order (``canon``,
    the bucket's (parameter, numel) in the order of DDP's rebuilt buckets, as recorded in
    ``CompressionState.layout``), each followed by as many zeros as the parameters between
    it and the next member hold, if those are at most ``MAX_SLOT_SHARE`` of the layout. The
    layout so depends on the bucket's parameters only, not on where DDP put them: before and
    after DDP rebuilds its buckets, and after a resume, the quantizer's blocks see the same
    vector.

    Where the bucket holds the members at exactly those distances (DDP's order once rebuilt,
    for most models), the group is a span group instead (see :func:`with_span`): sent in place
    over the bucket with the slots zeroed, no copy in, none back. At most one span group per
    bucket; a sparsifier's, made first, keeps its place.
    """
    pos = {name: k for k, (name, _) in enumerate(canon)}
    sizes = [n for _, n in canon]
    out, padded = [], []
    for g in groups:
        idx = [pos.get(name, -1) for name, _ in g.members]
        if not exact_zero(g.spec) or g.shape is not None or g.holes or len(idx) < 2 \
                or min(idx) < 0 or any(b <= a for a, b in zip(idx, idx[1:], strict=False)):
            out.append(g)
            continue
        pads = tuple(sum(sizes[a + 1:b]) for a, b in zip(idx, idx[1:], strict=False)) + (0,)
        if not any(pads) or sum(pads) > MAX_SLOT_SHARE * (_own(g) + sum(pads)):
            out.append(g)
            continue
        g = Group(g.spec, g.name, g.members, g.ranges, copy=g.copy, pads=pads)
        out.append(g)
        padded.append(g)
    fits = [g for g in padded if not g.copy and all(
        a - g.ranges[0][0] == at for (a, _), at in zip(g.ranges, g.starts(), strict=True))]
    if not fits or any(g.holes for g in out):
        return out
    best = max(fits, key=_own)
    holes = [(a + n, a + n + pad) for (_, n), (a, _), pad in
             zip(best.members, best.ranges, best.pads, strict=True) if pad]
    # the padded layout's name: the same vector, the same residual and rounding seeds
    return _spanned(out, best, best.members, best.ranges, holes, "")


def _own(g: Group) -> int:
    return sum(b - a for a, b in g.ranges)


def _spanned(groups: list[Group], best: Group, members: list[tuple[str, int]],
             ranges: list[tuple[int, int]], zeroed: list[tuple[int, int]],
             suffix: str) -> list[Group]:
    """``groups`` with ``best`` sent as a span over its members (in bucket order) and with
    ``zeroed`` (ranges that must read zero) among its holes, first in the list and named with
    ``suffix``; the other groups with a range inside the span copied."""
    lo, hi = best.span
    holes: list[tuple[int, int]] = []
    rest = []
    for g in groups:
        if g is best:
            continue
        inside = [(a, b) for a, b in g.ranges if a < hi and b > lo]
        holes += inside
        rest.append(Group(g.spec, g.name, g.members, g.ranges, g.shape, copy=True,
                          pads=g.pads) if inside else g)
    gaps = _gaps(lo, hi, ranges, holes)
    span = Group(best.spec, best.name + suffix, members, ranges,
                 holes=sorted(set(holes + gaps + zeroed)))
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
