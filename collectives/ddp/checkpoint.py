"""Saving and resuming a CompressionState, also at another world size.

Saved: the step counter, the policy's state (its decisions), PowerSGD's warm-start Q of
every tensor, and this rank's error-feedback residuals, cut into one array per parameter
(so they survive a different bucketing or a different fusion of parameters into groups).
Owner-side (second-level) residuals of the reduce-scatter/allgather scheme belong to a
chunk of a group and are kept only when the grouping and the world size are the same; so are
a two-level call's shard residuals (``name@shard<i>``), which also need the same hosts.

Loading at the same world size restores each rank's own residuals (each rank loads the dict
it saved, or one list of every rank's dicts indexed by rank, which ``gather_state_dict()``
gives every rank for a checkpoint written by rank 0 alone). A single dict saved by another
rank (rank 0's ``state_dict()`` loaded everywhere) keeps the step, decisions and warm starts
but not that rank's residuals: they start from zero, with a RuntimeWarning. At another
world size the residuals are reset to zero (they are per-rank memories with no meaning on a
rank that did not make them) and everything else is kept: the step, the decisions, the warm
starts (Q is the allreduced factor, identical on every rank).

Loading validates every field first: a bad dict raises ValueError or TypeError naming the
field and changes nothing. Residuals that do not fit the bound model's parameters raise;
those of parameters the model does not have are left out with a warning, and so is a PowerSGD
warm start holding NaN/Inf (that tensor starts again from the seeded Q).

The order of the parameters in DDP's rebuilt buckets (``layout``, the canonical order of the
zero-slot layouts of ``groups.with_zero_slots``) is saved too, so that the resumed run's first
iteration, on DDP's initial buckets, lays those groups out as the uninterrupted run does
(dicts without it are accepted: the order is then recorded again).

Exactness: a resumed run repeats the uninterrupted one bit for bit when the parameters are
fused into the same groups as before. Fused members are ordered by ``layout`` (DDP's rebuilt
buckets, saved), not by the current bucket, but DDP's first iteration after a restart uses
its initial buckets: with several buckets, a group can hold other parameters for that one
iteration, and blockwise quantizers (uniform, qsgd) then round differently. Per-parameter
and elementwise compressors (PowerSGD, fp16, none) and models in one bucket resume exactly.
"""

from __future__ import annotations

import pickle
import warnings
from collections.abc import Mapping
from typing import Any

import numpy as np

VERSION = 1
KEYS = ("version", "step", "world_size", "rank", "policy", "residuals", "owner_residuals",
        "owner_layout", "powersgd_q")


def state_dict(st: Any) -> dict[str, Any]:
    comm = st.communicator()
    per_param, owners = st.residuals()
    return {"version": VERSION, "step": st.step, "world_size": comm.size, "rank": comm.rank,
            "policy": st.policy.state_dict(), "residuals": per_param,
            "owner_residuals": owners, "owner_layout": _owner_layout(comm),
            "powersgd_q": st.warm_starts(),
            "layout": sorted(st.layout, key=st.layout.__getitem__)}


def gather(st: Any) -> list[dict[str, Any]]:
    """Every rank's state_dict in rank order, on every rank (pickled, one gather of bytes)."""
    from ..validation import gather_bytes

    comm = st.communicator()
    mine = pickle.dumps(state_dict(st), protocol=pickle.HIGHEST_PROTOCOL)
    table = gather_bytes(comm, [mine], "CompressionState.gather_state_dict", st.deadline)
    return [pickle.loads(row[0]) for row in table]  # bytes from this job's own ranks


def _owner_layout(comm: Any) -> list[int]:
    """What fixes the order of an owner-side residual: the elements a rank owns are listed
    segment by segment, and the segments follow from these settings (``rsag.segment_count``);
    a two-level call's shard residuals follow the hosts' sizes, where they are known."""
    from ..compressed import rsag
    from ..config import defaults

    topo = comm.cache.topology
    hosts = [len(h) for h in topo.hosts] if topo is not None else []
    return [int(defaults.compressed_segment_bytes), int(rsag.MAX_SEGMENTS),
            int(comm.matches_by_tag), *hosts]


def _int(key: str, v: Any, lo: int) -> int:
    if isinstance(v, bool) or not isinstance(v, int | np.integer) or v < lo:
        raise ValueError(f"CompressionState state_dict: {key} must be an integer >= {lo}, "
                         f"got {v!r}")
    return int(v)


def _arrays(key: str, value: Any) -> dict[str, np.ndarray]:
    """name -> finite float32/float64 array (flat copies), as state_dict saves them."""
    if not isinstance(value, Mapping):
        raise TypeError(f"CompressionState state_dict: {key} must be a dict of name -> array, "
                        f"got {type(value).__name__}")
    out = {}
    for name, v in value.items():
        arr = np.asarray(v)
        if not isinstance(name, str) or arr.dtype not in (np.float32, np.float64) or \
                not np.isfinite(arr).all():
            raise ValueError(f"CompressionState state_dict: {key}[{name!r}] must be a finite "
                             f"float32/float64 array under a str name, got "
                             f"{arr.dtype}{list(arr.shape)}")
        out[name] = arr.reshape(-1).copy()
    return out


def _mine(st: Any, state: Any) -> tuple[Mapping[str, Any], bool]:
    """This rank's dict, and whether it was saved by this rank at this world size."""
    comm = st.communicator()
    if isinstance(state, list | tuple):
        if not state:
            raise ValueError("CompressionState state_dict: an empty list; expected this rank's "
                             "dict or a list of every rank's")
        same = len(state) == comm.size
        mine = state[comm.rank] if same else state[0]
    else:
        mine = state
        same = isinstance(mine, Mapping) and mine.get("world_size") == comm.size and \
            mine.get("rank") == comm.rank
        if isinstance(mine, Mapping) and mine.get("world_size") == comm.size and not same:
            warnings.warn(f"CompressionState.load_state_dict: rank {comm.rank} was given the "
                          f"state rank {mine.get('rank')} saved; error-feedback residuals are "
                          f"per rank, so this rank's start from zero. Save "
                          f"gather_state_dict() (every rank's) to resume them",
                          RuntimeWarning, stacklevel=4)
    if not isinstance(mine, Mapping) or mine.get("version") != VERSION:
        raise ValueError(f"not a CompressionState state_dict of version {VERSION}")
    missing = [k for k in KEYS if k not in mine]
    if missing:
        raise ValueError(f"CompressionState state_dict: missing {missing}")
    return mine, same


def check_pool(st: Any, pool: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Per-parameter residuals against the bound model: a piece of another size raises, names
    of no parameter are warned about and left out (they would never be used)."""
    sizes = st.parameter_sizes()
    if not sizes:
        return pool  # not bound yet: bind() checks
    wrong = [(k, v.size, sizes[k]) for k, v in pool.items() if k in sizes and v.size != sizes[k]]
    if wrong:
        raise ValueError(f"CompressionState: saved residuals do not fit the model's parameters "
                         f"(name, saved, parameter): {wrong}; load a state saved for this model")
    unknown = sorted(set(pool) - set(sizes))
    if unknown:
        warnings.warn(f"CompressionState: saved residuals {unknown} match no parameter of the "
                      f"model (renamed or removed?); they are not used", RuntimeWarning,
                      stacklevel=3)
    return {k: v for k, v in pool.items() if k in sizes}


def load_state_dict(st: Any, state: Any) -> None:
    """Validate everything, then restore (a bad dict raises and changes nothing)."""
    comm = st.communicator()
    mine, same = _mine(st, state)
    step = _int("step", mine["step"], 0)
    _int("world_size", mine["world_size"], 1)
    _int("rank", mine["rank"], 0)
    pool = _arrays("residuals", mine["residuals"])
    pool = check_pool(st, pool) if same else {}
    owners = _arrays("owner_residuals", mine["owner_residuals"])
    if any("|" not in k for k in owners):
        raise ValueError("CompressionState state_dict: owner_residuals keys must be 'spec|name'")
    warm = mine["powersgd_q"]
    if not isinstance(warm, Mapping) or not all(
            isinstance(spec, str) and hasattr(st.compressor(spec), "load_warm_state")
            for spec in warm):
        raise ValueError(f"CompressionState state_dict: powersgd_q must map PowerSGD specs to "
                         f"warm starts, got {warm!r:.200}")
    layout = mine["owner_layout"]
    if not isinstance(layout, list | tuple) or not all(
            isinstance(v, int | np.integer) and not isinstance(v, bool) for v in layout):
        raise ValueError(f"CompressionState state_dict: owner_layout must be a list of "
                         f"integers, got {layout!r:.200}")
    order = mine.get("layout", [])
    if not isinstance(order, list | tuple) or not all(isinstance(v, str) for v in order):
        raise ValueError(f"CompressionState state_dict: layout must be a list of parameter "
                         f"names, got {order!r:.200}")
    if not isinstance(mine["policy"], Mapping):
        raise TypeError(f"CompressionState state_dict: policy must be a dict, "
                        f"got {type(mine['policy']).__name__}")
    for spec, qs in warm.items():
        st.compressor(spec).load_warm_state(qs)
    st.policy.load_state_dict(dict(mine["policy"]))
    st.step = st.current = step
    st.version += 1
    st.layout = {name: i for i, name in enumerate(order)}
    # Owner-side residuals list the owned elements segment by segment: restored only where
    # the segments are cut the same way (same settings), else they start from zero.
    kept = same and st.error_feedback and [int(v) for v in layout] == _owner_layout(comm)
    st.restore_residuals(pool, owners if kept else {})
    st.residuals_restored = same
