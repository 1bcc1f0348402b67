"""Saving and resuming a CompressionState, also at another world size.

Saved: the step counter, the policy's state (its decisions), PowerSGD's warm-start Q of
every tensor, and this rank's error-feedback residuals, cut into one array per parameter
(so they survive a different bucketing or a different fusion of parameters into groups).
Owner-side (second-level) residuals of the reduce-scatter/allgather scheme belong to a
chunk of a group and are kept only when the grouping and the world size are the same.

Loading at the same world size restores each rank's own residuals (each rank loads the dict
it saved, or one list of every rank's dicts indexed by rank). At another world size the
residuals are reset to zero (they are per-rank memories with no meaning on a rank that did
not make them) and everything else is kept: the step, the decisions, the warm starts (Q is
the allreduced factor, identical on every rank).

Exactness: a resumed run repeats the uninterrupted one bit for bit when the parameters are
fused into the same groups as before. Fused members are ordered by the model (reverse
registration order), not by the bucket, but DDP's first iteration after a restart uses its
initial buckets: with several buckets, a group can hold other parameters for that one
iteration, and blockwise quantizers (uniform, qsgd) then round differently. Per-parameter
and elementwise compressors (PowerSGD, fp16, none) and models in one bucket resume exactly.
"""

from __future__ import annotations

from typing import Any

import numpy as np

VERSION = 1


def state_dict(st: Any) -> dict[str, Any]:
    comm = st.communicator()
    per_param = {k: np.array(v) for k, v in st._pool.items()}
    owners: dict[str, np.ndarray] = {}
    for _, groups in st._groups.values():
        for g in groups:
            fb = st._feedback.get(g.spec)
            if fb is None:
                continue
            res = fb.residuals.get(g.name)
            if res is not None:
                per_param.update(g.pieces(res))
            own = fb.residuals.get(f"{g.name}@owner")
            if own is not None:
                owners[f"{g.spec}|{g.name}"] = own.copy()
    warm = {spec: {k: np.array(v) for k, v in comp._warm.items()}
            for spec, comp in st._comps.items() if getattr(comp, "_warm", None)}
    return {"version": VERSION, "step": st.step, "world_size": comm.size, "rank": comm.rank,
            "policy": st.policy.state_dict(), "residuals": per_param,
            "owner_residuals": owners, "owner_layout": _owner_layout(comm),
            "powersgd_q": warm}


def _owner_layout(comm: Any) -> list[int]:
    """What fixes the order of an owner-side residual: the elements a rank owns are listed
    segment by segment, and the segments follow from these settings (``rsag.segment_count``)."""
    from ..compressed import rsag
    from ..config import defaults

    return [int(defaults.compressed_segment_bytes), int(rsag.MAX_SEGMENTS),
            int(comm.matches_by_tag)]


def load_state_dict(st: Any, state: Any) -> None:
    comm = st.communicator()
    if isinstance(state, list | tuple):
        same = len(state) == comm.size
        mine = state[comm.rank] if same else state[0]
    else:
        mine = state
        same = mine.get("world_size") == comm.size and mine.get("rank") == comm.rank
    if not isinstance(mine, dict) or mine.get("version") != VERSION:
        raise ValueError(f"not a CompressionState state_dict of version {VERSION}")
    st.step = st.current = int(mine["step"])
    st.policy.load_state_dict(mine["policy"])
    st.version += 1
    st._groups.clear()
    for fb in st._feedback.values():
        fb.residuals.clear()
    st._pool = {k: np.array(v).reshape(-1) for k, v in mine["residuals"].items()} \
        if same else {}
    # Owner-side residuals list the owned elements segment by segment: restored only where
    # the segments are cut the same way (same settings), else they start from zero.
    if same and st.error_feedback and list(mine.get("owner_layout", [])) == _owner_layout(comm):
        for key, res in mine["owner_residuals"].items():
            spec, _, name = key.partition("|")
            st.feedback(spec).residuals[f"{name}@owner"] = np.array(res)
    for spec, warm in mine["powersgd_q"].items():
        st.compressor(spec)._warm.update({k: np.array(v) for k, v in warm.items()})
    st.residuals_restored = same
