"""Fusing a bucket's parameters by compressor: one flat buffer and one collective per group."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Group:
    """Parameters of one bucket that share a compressor (and so a scheme).

    ``ranges`` are element offsets into the bucket's flat buffer. A group whose ranges are
    adjacent is a view of the buffer (zero copy); otherwise its members are concatenated
    and copied back after the collective. ``shape`` is set for a single-parameter group of a
    shape-aware compressor (PowerSGD), which needs the matrix, not a flat vector.
    """

    spec: str
    name: str
    members: list[tuple[str, int]]
    ranges: list[tuple[int, int]]
    shape: tuple[int, ...] | None = None

    @property
    def numel(self) -> int:
        return sum(n for _, n in self.members)

    @property
    def contiguous(self) -> bool:
        return all(a[1] == b[0] for a, b in zip(self.ranges, self.ranges[1:], strict=False))

    def view(self, buf: Any) -> Any:
        """The group's input: a view of the bucket buffer, or a fused copy."""
        if self.contiguous:
            x = buf[self.ranges[0][0]:self.ranges[-1][1]]
        else:
            import torch

            x = torch.cat([buf[a:b] for a, b in self.ranges])
        return x.view(self.shape) if self.shape is not None else x

    def scatter(self, buf: Any, x: Any) -> None:
        """Copy a fused result back into the bucket (nothing to do for a view)."""
        if self.contiguous:
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


def split(residual: np.ndarray, members: list[tuple[str, int]]) -> dict[str, np.ndarray]:
    """A group's residual cut into its parameters' pieces."""
    out, at = {}, 0
    for name, n in members:
        out[name] = residual[at:at + n].copy()
        at += n
    return out


def assemble(pool: dict[str, np.ndarray], members: list[tuple[str, int]],
             dtype: Any) -> np.ndarray | None:
    """The group's residual from per-parameter pieces (taken out of ``pool``), or None."""
    if not any(name in pool for name, _ in members):
        return None
    parts = []
    for name, n in members:
        piece = pool.pop(name, None)
        parts.append(piece if piece is not None and piece.size == n else np.zeros(n, dtype))
    return np.concatenate(parts)
