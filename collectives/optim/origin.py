"""The check both optimizers make of a saved state's origin: the same compressor, the same
number of ranks and the same rank (each rank's residuals, and DiLoCo's local progress, are
its own)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any


def check_origin(kind: str, saved: Mapping[str, Any], compressor: str, comm: Any) -> None:
    """ValueError naming what in ``saved`` (a ``kind`` state) was saved elsewhere than this
    optimizer (``compressor``, ``comm``) runs; a state without a rank (older) passes that
    check."""
    if saved.get("compressor") != compressor:
        raise ValueError(f"{kind} state_dict was saved with compressor "
                         f"{saved.get('compressor')!r}, this optimizer sends {compressor!r}")
    if saved.get("world_size") != comm.size:
        raise ValueError(f"{kind} state_dict was saved on {saved.get('world_size')} ranks, "
                         f"this run has {comm.size}: the residuals are per rank")
    if saved.get("rank", comm.rank) != comm.rank:
        raise ValueError(f"{kind} state_dict was saved by rank {saved['rank']}, this is rank "
                         f"{comm.rank}: each rank loads the state it saved (its residuals are "
                         "its own)")
