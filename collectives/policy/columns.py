"""The columns of the profiler's table, and the table made the same on every rank.

One row per layer: its squared gradient norm (``NORM``, summed over the probe steps), then
``PER_CANDIDATE`` columns per candidate compressor (see the constants). The rows are what the
cache keeps (``cache``) and what a decision prices (``decide``, ``criterion``). Code reads a
column by its name only: :func:`per_candidate` views a row (or a table of rows) as
(candidate, column), so ``per_candidate(rows)[:, c, BYTES]`` is candidate c's payload bytes.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:
    from ..transport import Communicator

#: Columns per candidate in the shared table: squared error and squared norm of the sent input
#: (sums over the probe steps), compress and decompress seconds, payload bytes, kept elements
#: (sparse payloads), the residual's squared norm over the step gradient's at the last probe
#: step; then the same in Adam's preconditioned space (``moments``), at the last probe step:
#: squared error, squared gradient norm, residual; and the steps whose error could not be
#: bounded there.
(ERR, SQ, COMPRESS, DECOMPRESS, BYTES, KEPT, RESIDUAL, ADAM_ERR, ADAM_SQ, ADAM_RESIDUAL,
 UNBOUNDED) = range(11)
PER_CANDIDATE = 11
#: A row's first column, before the candidates' (the layer's squared gradient norm).
NORM = 0
#: Compress and decompress seconds, side by side (a slice of a candidate's columns).
TIMES = slice(COMPRESS, DECOMPRESS + 1)
SUMS = (ERR, SQ, ADAM_ERR, ADAM_SQ)  # averaged over the ranks; the others: the worst rank's


def width(candidates: int) -> int:
    """Columns of a row of ``candidates`` candidates (the norm, then theirs)."""
    return 1 + PER_CANDIDATE * candidates


def per_candidate(rows: np.ndarray) -> np.ndarray:
    """A row (or rows) viewed as [..., candidate, column], the norm left out: a view, so a
    write through it is a write into ``rows``."""
    k = (rows.shape[-1] - 1) // PER_CANDIDATE
    return rows[..., 1:].reshape(*rows.shape[:-1], k, PER_CANDIDATE)


def combine(comm: Communicator, rows: np.ndarray) -> np.ndarray:
    """The same table on every rank: sums of squares averaged (``SUMS``); times, sizes,
    residuals and unbounded steps the maximum (the slowest rank paces the collective; the
    worst residual bounds the plan)."""
    flat = np.ascontiguousarray(rows, dtype=np.float64).reshape(-1)
    table = comm.allgather_ints(flat.view(np.int64), collective="policy profile")
    every = np.asarray(table).view(np.float64).reshape(comm.size, *rows.shape)
    out = every.max(axis=0)
    mean = every.mean(axis=0)
    out[:, NORM] = mean[:, NORM]
    cols = per_candidate(out)
    cols[:, :, SUMS] = per_candidate(mean)[:, :, SUMS]
    return out


def plain_first(rows: np.ndarray, cands: tuple[str, ...]) -> np.ndarray:
    """``rows`` with the identity twin's compress and decompress times at most any other
    candidate's: "none" does no coding, so a time above another's is noise, and pricing it
    above a compressor that sends fewer bytes for the same work would flip decisions."""
    if "none" not in cands or len(cands) < 2:
        return rows
    out = np.array(rows, dtype=np.float64)
    cols = per_candidate(out)
    j = cands.index("none")
    others = np.delete(cols[:, :, TIMES], j, axis=1).min(axis=1)
    cols[:, j, TIMES] = np.minimum(cols[:, j, TIMES], others)
    return out
