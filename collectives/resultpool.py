"""Host results of collectives called without ``out=``, in memory already mapped.

A fresh result array costs a page fault per 4 KiB page the collective first writes, on the
collective's own time. So a result of at least ``MIN_BYTES`` is a view of a block this pool
keeps, and a block is handed out again, already mapped, once no Python object refers to it.

Safe: anything that refers to a result's memory as a Python object. The result, its views,
slices and reshapes, ``torch.from_numpy`` of it, a ``memoryview`` or any other export of its
buffer each hold a reference to the block; a block is reused only when the pool's own
references are all that is left (``sys.getrefcount``).

Not safe: a raw address. Memory reached only through a pointer (a ``ctypes`` object made
with ``from_address``, ``MPI.buffer.fromaddress``, an address copied from
``__array_interface__`` or ``data_ptr()`` and handed to C code) is overwritten by a later
call once the Python objects above are gone. Keep the result alive while the pointer is in
use, or opt out: pass ``out=`` (the caller's own buffer is never pooled), or turn the pool
off (``collectives.defaults.result_pool_bytes = 0``, ``COMPCOLL_RESULT_POOL_BYTES=0``).

A pooled torch result shares its block through ``torch.from_numpy``, whose storage torch
cannot grow: ``resize_()`` to fewer elements works, to more raises torch's ``RuntimeError``
("Trying to resize storage that is not resizable"); so does a CPU tensor passed as ``out=``
or as the input, which the collective reads and writes through a numpy view (torch marks a
storage it shares with numpy as not resizable). To grow a result, ``clone()`` it.

Free blocks beyond ``defaults.result_pool_bytes`` in all (1 GiB) are released, the least
recently used first.
"""

from __future__ import annotations

import sys
import threading
from typing import Any

import numpy as np

#: Results smaller than this are allocated as usual: their page faults cost microseconds.
MIN_BYTES = 1 << 20
_BLOCKS: list[np.ndarray] = []  # least recently used first
_LOCK = threading.Lock()
#: References to a free block: the pool's list and getrefcount's own argument.
_FREE_REFS = 2


def _free(i: int) -> bool:
    """Whether the pool's block ``i`` is referred to by nothing but the pool."""
    return sys.getrefcount(_BLOCKS[i]) <= _FREE_REFS


def block(nbytes: int) -> np.ndarray | None:
    """A block of ``nbytes`` bytes (uint8) that nothing else refers to, a free one of that
    size if the pool has it; None where the pool does not serve (small, or turned off)."""
    from .config import defaults

    limit = defaults.result_pool_bytes
    if nbytes < MIN_BYTES or nbytes > limit:
        return None
    with _LOCK:
        for i in range(len(_BLOCKS)):
            if _BLOCKS[i].nbytes == nbytes and _free(i):
                found = _BLOCKS.pop(i)
                _BLOCKS.append(found)
                return found
        new = np.empty(nbytes, np.uint8)
        _BLOCKS.append(new)
        _trim(limit)
        return new


def _trim(limit: int) -> None:
    """Release free blocks, oldest first, while the pool holds more than ``limit`` bytes."""
    total = sum(b.nbytes for b in _BLOCKS)
    i = 0
    while total > limit and i < len(_BLOCKS) - 1:  # never the block just handed out
        if _free(i):
            total -= _BLOCKS.pop(i).nbytes
        else:
            i += 1


def held_bytes() -> int:
    """Bytes the pool holds, free or in use."""
    with _LOCK:
        return sum(b.nbytes for b in _BLOCKS)


def clear() -> None:
    """Forget every block (those still in use stay valid: their arrays hold them)."""
    with _LOCK:
        _BLOCKS.clear()


def empty_like_numpy(buf: np.ndarray) -> np.ndarray:
    """``np.empty_like(buf, order="C")``, from the pool where it serves."""
    if type(buf) is not np.ndarray:
        return np.empty_like(buf, order="C")
    b = block(buf.nbytes)
    if b is None:
        return np.empty_like(buf, order="C")
    return b.view(buf.dtype).reshape(buf.shape)


def empty_like_torch(buf: Any) -> Any:
    """``torch.empty_like(buf, memory_format=contiguous)`` for a CPU tensor, from the pool
    where it serves (the tensor shares the block's memory and keeps it referenced)."""
    import torch

    nbytes = buf.numel() * buf.element_size()
    b = None if buf.is_complex() or buf.dtype == torch.bool else block(nbytes)
    if b is None:
        return torch.empty_like(buf, memory_format=torch.contiguous_format)
    return torch.from_numpy(b).view(buf.dtype).reshape(buf.shape)
