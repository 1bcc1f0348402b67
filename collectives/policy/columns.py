"""The columns of the profiler's table, and the table made the same on every rank.

One row per layer: its squared gradient norm (summed over the probe steps), then
``PER_CANDIDATE`` columns per candidate compressor (see the constants). The rows are what the
cache keeps (``cache``) and what a decision prices (``decide``, ``criterion``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

#: Columns per candidate in the shared table: squared error and squared norm of the sent input
#: (sums over the probe steps), compress and decompress seconds, payload bytes, kept elements
#: (sparse payloads), the residual's squared norm over the step gradient's at the last probe
#: step; then the same in Adam's preconditioned space (``moments``), at the last probe step:
#: squared error, squared gradient norm, residual; and the steps whose error could not be
#: bounded there.
(ERR, SQ, COMPRESS, DECOMPRESS, BYTES, KEPT, RESIDUAL, ADAM_ERR, ADAM_SQ, ADAM_RESIDUAL,
 UNBOUNDED) = range(11)
PER_CANDIDATE = 11
SUMS = (ERR, SQ, ADAM_ERR, ADAM_SQ)  # averaged over the ranks; the others: the worst rank's


def combine(comm: Any, rows: np.ndarray) -> np.ndarray:
    """The same table on every rank: sums of squares averaged (``SUMS``); times, sizes,
    residuals and unbounded steps the maximum (the slowest rank paces the collective; the
    worst residual bounds the plan)."""
    flat = np.ascontiguousarray(rows, dtype=np.float64).reshape(-1)
    table = comm.allgather_ints(flat.view(np.int64), collective="policy profile")
    every = np.asarray(table).view(np.float64).reshape(comm.size, *rows.shape)
    out = every.max(axis=0)
    mean = every.mean(axis=0)
    out[:, 0] = mean[:, 0]
    cols = out[:, 1:].reshape(rows.shape[0], -1, PER_CANDIDATE)
    cols[:, :, SUMS] = mean[:, 1:].reshape(cols.shape)[:, :, SUMS]
    return out


def plain_first(rows: np.ndarray, cands: tuple[str, ...]) -> np.ndarray:
    """``rows`` with the identity twin's compress and decompress times at most any other
    candidate's: "none" does no coding, so a time above another's is noise, and pricing it
    above a compressor that sends fewer bytes for the same work would flip decisions."""
    if "none" not in cands or len(cands) < 2:
        return rows
    out = np.array(rows, dtype=np.float64)
    cols = out[:, 1:].reshape(out.shape[0], len(cands), PER_CANDIDATE)
    j = cands.index("none")
    others = np.delete(cols[:, :, 2:4], j, axis=1).min(axis=1)
    cols[:, j, 2:4] = np.minimum(cols[:, j, 2:4], others)
    return out
