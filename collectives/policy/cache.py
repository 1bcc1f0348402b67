"""The automatic policy's measurements on disk, so that their cost is paid once.

What the policy measures (each layer's profile under every candidate, the fixed cost of one
collective per candidate, the cost model fitted on the link) depends on the model's layout,
the world size, the link and the library; :func:`key` hashes exactly those, and the file is
``<dir>/<key>.json``. The directory is ``cache_dir``, else ``$COMPCOLL_CACHE_DIR``, else
``$XDG_CACHE_HOME/compcoll/policy`` (``~/.cache/compcoll/policy``).

Rank 0 alone reads and writes (written to a temporary file, then renamed: a reader never
sees half a file); what it read is broadcast, so every rank plans with the same numbers. A
file that is unreadable, foreign (another key), of another schema, or holds a field out of
range is ignored with a warning naming it and why: it is measured again, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import platform
import warnings
from collections.abc import Mapping
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

import compressors

from ..files import write_atomic
from ..transport.base import share_bytes
from .profile import PER_CANDIDATE

SCHEMA = 2
ENV = "COMPCOLL_CACHE_DIR"


@dataclass(frozen=True)
class Located:
    """A cache file: its key, path and the layout it was keyed by."""

    key: str
    path: Path
    layout: list[list[Any]]


def link(engine: str, fitted: Any) -> str:
    """The link's name in a key: the engine and the decade of the fitted alpha and beta
    (coarse, so that two fits of one link on busy cores mostly name it alike)."""
    decade = [round(math.log10(x)) if x > 0 else None for x in (fitted.alpha, fitted.beta)]
    return f"{engine} alpha~1e{decade[0]} beta~1e{decade[1]}"


def locate(layout: list[list[Any]], world: int, link_name: str, cfg: Any) -> Located:
    """The file of this layout, world size, link and configuration (``cfg``: AutoConfig)."""
    k = key(layout, world, link_name, cfg.candidates, cfg.min_numel)
    return Located(k, directory(cfg.cache_dir) / f"{k}.json", layout)


def directory(cache_dir: str | None = None) -> Path:
    """Where cache files live (see the module doc)."""
    if cache_dir:
        return Path(cache_dir)
    if os.environ.get(ENV):
        return Path(os.environ[ENV])
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "compcoll" / "policy"


def _version() -> str:
    try:
        return metadata.version("compcoll")
    except metadata.PackageNotFoundError:
        return "unknown"


def key(layout: list[list[Any]], world: int, link: str, candidates: tuple[str, ...],
        min_numel: int) -> str:
    """sha256 of everything the measurements depend on: the layout ([bucket, name, shape,
    dtype] in bucket order), world size, link, candidates, the smallest profiled layer,
    this machine's kind and core count (codec times), the library and wire format versions."""
    what = {"schema": SCHEMA, "library": _version(), "format": compressors.FORMAT_VERSION,
            "layout": layout, "world": world, "link": link, "candidates": list(candidates),
            "min_numel": min_numel, "machine": [platform.machine(), os.cpu_count()]}
    text = json.dumps(what, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(text.encode()).hexdigest()


def _seconds(value: Any, cands: tuple[str, ...], what: str) -> dict[str, float]:
    if not (isinstance(value, Mapping) and set(value) == set(cands)):
        raise ValueError(f"{what} must give every candidate a time")
    out = {str(k): float(v) for k, v in value.items()}
    if not all(0 <= v < math.inf for v in out.values()):
        raise ValueError(f"{what} holds a time that is not a finite number >= 0")
    return out


def check(record: Any, want: str, world: int, cands: tuple[str, ...],
          layout: list[list[Any]]) -> dict[str, Any]:
    """The record's table and measured latencies, every field validated; ValueError says
    which field is wrong."""
    if not isinstance(record, Mapping):
        raise ValueError("not a JSON object")
    if record.get("schema") != SCHEMA:
        raise ValueError(f"schema {record.get('schema')!r}, this library reads {SCHEMA}")
    if record.get("key") != want:
        raise ValueError("its key is not this model's, world size and link")
    if record.get("candidates") != list(cands):
        raise ValueError("measured for other candidates")
    numel = {name: int(np.prod(shape)) for _, name, shape, _ in layout}
    table, width = record.get("table"), 1 + PER_CANDIDATE * len(cands)
    if not isinstance(table, Mapping):
        raise ValueError("'table' is not an object")
    rows = {}
    for name, row in table.items():
        if name not in numel:
            raise ValueError(f"layer {name!r} is not in the model")
        arr = np.asarray(row, dtype=np.float64) if isinstance(row, list) else None
        if arr is None or arr.shape != (width,) or not np.isfinite(arr).all() or \
                (arr < 0).any():
            raise ValueError(f"layer {name!r}: the row must be {width} finite numbers >= 0")
        if arr[1:].reshape(-1, PER_CANDIDATE)[:, 5].max() > numel[name]:
            raise ValueError(f"layer {name!r}: keeps more elements than it has")
        rows[str(name)] = arr
    fit = record.get("fit")
    if fit is not None:
        if not (isinstance(fit, Mapping) and set(fit) == {"alpha", "beta", "gamma"}):
            raise ValueError("'fit' must give alpha, beta and gamma")
        fit = {k: float(v) for k, v in fit.items()}
        if not all(0 <= v < math.inf for v in fit.values()):
            raise ValueError("'fit' holds a number that is not finite and >= 0")
    measured = record.get("measured")
    if measured is not None:
        if not (isinstance(measured, Mapping) and measured.get("ranks") == world):
            raise ValueError("'measured' is not for this world size")
        measured = {"ranks": world,
                    "seconds": _seconds(measured.get("seconds"), cands, "'measured.seconds'"),
                    "overhead_s": _seconds(measured.get("overhead_s"), cands,
                                           "'measured.overhead_s'")}
    return {"table": rows, "measured": measured, "fit": fit}


def encode(want: str, cands: tuple[str, ...], table: Mapping[str, np.ndarray],
           measured: Mapping[str, Any] | None, fit: Mapping[str, float] | None) -> bytes:
    record = {"schema": SCHEMA, "key": want, "candidates": list(cands),
              "table": {k: [float(x) for x in v] for k, v in sorted(table.items())},
              "measured": None if measured is None else dict(measured),
              "fit": None if fit is None else dict(fit)}
    return json.dumps(record, sort_keys=True, allow_nan=False).encode()


def read(path: Path, want: str, world: int, cands: tuple[str, ...],
         layout: list[list[Any]]) -> bytes | None:
    """This rank's validated copy of ``path`` (canonical JSON), None when missing or bad (a
    bad file is named in a warning)."""
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"),
                            parse_constant=lambda c: math.nan)  # Infinity/NaN fail the check
        found = check(record, want, world, cands, layout)
        return encode(want, cands, found["table"], found["measured"], found["fit"])
    except (OSError, UnicodeError, ValueError, TypeError) as exc:
        warnings.warn(f"policy cache {path} ignored ({exc}); measuring again", stacklevel=3)
        return None


def share(comm: Any, data: bytes | None) -> bytes | None:
    """Rank 0's ``data`` on every rank (collective; None where rank 0 has none)."""
    return share_bytes(comm, data, collective="policy cache")


def load(data: bytes) -> dict[str, Any]:
    """The table, measured latencies and fit of :func:`share`'s bytes (validated)."""
    record = json.loads(data)
    return {"table": {k: np.asarray(v, dtype=np.float64) for k, v in record["table"].items()},
            "measured": record["measured"], "fit": record["fit"]}


def fetch(comm: Any, found: Located, cands: tuple[str, ...]) -> dict[str, Any] | None:
    """The table and measured latencies in ``found``, read by rank 0 and validated, on every
    rank (collective); None on every rank when rank 0 has none."""
    world = comm.size
    mine = read(found.path, found.key, world, cands, found.layout) if comm.rank == 0 else None
    data = share(comm, mine)
    return None if data is None else load(data)


def store(found: Located, cands: tuple[str, ...], table: Mapping[str, np.ndarray],
          measured: Mapping[str, Any] | None, fit: Mapping[str, float] | None) -> None:
    """Write the measurements to ``found`` (rank 0 only); a non-finite one is not kept."""
    try:
        data = encode(found.key, cands, table, measured, fit)
    except ValueError:  # a non-finite measurement is not worth keeping
        return
    write(found.path, data)


def write(path: Path, data: bytes) -> None:
    """Write atomically (a temporary file renamed over ``path``); a failure is a warning."""
    write_atomic(path, data, "policy cache")
