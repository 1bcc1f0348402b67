"""The automatic policy's measurements on disk, so that their cost is paid once.

What the policy measures (each layer's profile under every candidate, the fixed cost of one
collective per candidate, the cost model fitted on the link) depends on the model's layout,
the world size, the link and the library; :func:`key` hashes exactly those, and the file is
``<dir>/<key>.json``. The directory is ``cache_dir``, else ``$COMPCOLL_CACHE_DIR``, else
``$XDG_CACHE_HOME/compcoll/policy`` (``~/.cache/compcoll/policy``).

Rank 0 alone reads and writes (written to a temporary file, then renamed: a reader never
sees half a file); what it read is validated there and broadcast in canonical form, so every
rank plans with the same numbers and every rank ignores a bad file alike. A file that is not a
small regular file (``files.read_small``), does not parse, is foreign (another key), of another
schema, or holds a field of the wrong type or out of range (:func:`check`) is ignored with a
warning naming it and why: it is measured again, never trusted.

A file that is used is named in a warning too (once per file and process, on rank 0): the
run decides from an earlier run's measurements, not from its own. ``COMPCOLL_POLICY_CACHE=off``
(or ``0``, ``false``, ``no``) ignores the model's files, neither read nor written, so a run
measures afresh; rank 0's setting decides for all ranks. ``AutoConfig(cache=False)`` does the
same and also leaves this machine's codec speeds (``machine``) alone.
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
from typing import TYPE_CHECKING, Any

import numpy as np

import compressors

from ..files import ignored, integer, load_json, number, read_small, write_atomic
from ..transport.base import share_bytes
from . import columns as c

if TYPE_CHECKING:
    from .. import costmodel
    from ..transport import Communicator
    from .config import AutoConfig

SCHEMA = 3  # 3: the Adam-space columns (``columns``)
ENV = "COMPCOLL_CACHE_DIR"
#: The switch: "off" (or 0, false, no) ignores the cache; "on" (1, true, yes, unset) uses it.
SWITCH = "COMPCOLL_POLICY_CACHE"
_OFF, _ON = ("0", "off", "false", "no"), ("", "1", "on", "true", "yes")
#: Seconds past which a measured time (a codec call, one collective) is not believed.
MAX_SECONDS = 3600.0
#: Bound of a fitted parameter: alpha in seconds, beta and gamma in seconds per byte.
MAX_FIT = 1.0
#: Bound of a sum of squares (a float32 gradient's stays below ~1e90).
MAX_SQUARES = 1e300


@dataclass(frozen=True)
class Located:
    """A cache file: its key, path and the layout it was keyed by."""

    key: str
    path: Path
    layout: list[list[Any]]


def link(engine: str, fitted: costmodel.CostParams) -> str:
    """The link's name in a key: the engine and the decade of the fitted alpha and beta
    (coarse, so that two fits of one link on busy cores mostly name it alike)."""
    decade = [round(math.log10(x)) if x > 0 else None for x in (fitted.alpha, fitted.beta)]
    return f"{engine} alpha~1e{decade[0]} beta~1e{decade[1]}"


def locate(layout: list[list[Any]], world: int, link_name: str, cfg: AutoConfig) -> Located:
    """The file of this layout, world size, link and configuration (``cfg``: AutoConfig)."""
    k = key(layout, world, link_name, cfg.candidates, cfg.min_numel)
    return Located(k, directory(cfg.cache_dir) / f"{k}.json", layout)


def switched_off() -> bool:
    """Whether ``$COMPCOLL_POLICY_CACHE`` turns the cache off; ValueError for a value that
    is neither on nor off."""
    value = os.environ.get(SWITCH, "").strip().lower()
    if value not in _OFF + _ON:
        raise ValueError(f"{SWITCH}={os.environ[SWITCH]!r} is not a switch: give off (or 0) to "
                         f"ignore the policy cache, on (or 1, or leave it unset) to use it")
    return value in _OFF


_told: set[str] = set()  # the files named in a warning already (once per process)


def _reused(path: Path) -> None:
    """Say, once per file, that this run decides from an earlier run's measurements."""
    if str(path) in _told:
        return
    _told.add(str(path))
    warnings.warn(f"policy cache: deciding from the measurements an earlier run kept in {path} "
                  f"(this model's layout, world size and link), without measuring again; "
                  f"{SWITCH}=off (or AutoConfig(cache=False)) ignores it", stacklevel=2)


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


#: The fit's flat link and reduction speed (required) and its link classes and hosts
#: (optional: a fit on several hosts, ``costparams``).
FIT_KEYS, FIT_CLASSES = ("alpha", "beta", "gamma"), ("intra", "cross")


def _fit(fit: Any, world: int) -> dict[str, Any]:
    """A saved fit, checked: alpha, beta and gamma in range; "intra"/"cross" each null or
    [alpha, beta] in range; "hosts" a list of positive rank counts adding up to the world."""
    if not (isinstance(fit, Mapping) and set(FIT_KEYS) <= set(fit)
            and set(fit) <= {*FIT_KEYS, *FIT_CLASSES, "hosts"}):
        raise ValueError("'fit' must give alpha, beta and gamma (and may give intra, cross "
                         "and hosts)")
    out: dict[str, Any] = {k: _in(fit[k], f"'fit.{k}'", 0.0, MAX_FIT) for k in FIT_KEYS}
    for k in FIT_CLASSES:
        link = fit.get(k)
        if link is not None:
            if not (isinstance(link, list) and len(link) == 2):
                raise ValueError(f"'fit.{k}' must be null or [alpha, beta]")
            out[k] = [_in(v, f"'fit.{k}'", 0.0, MAX_FIT) for v in link]
    hosts = fit.get("hosts", [])
    if not (isinstance(hosts, list) and len(hosts) <= world):
        raise ValueError("'fit.hosts' must be a list of rank counts")
    hosts = [integer(h, "'fit.hosts'") for h in hosts]
    if hosts and (min(hosts) < 1 or sum(hosts) != world):
        raise ValueError(f"'fit.hosts' must be positive rank counts adding up to {world}")
    out["hosts"] = hosts
    return out


def _in(value: Any, what: str, low: float, high: float, *, above: bool = False) -> float:
    """``value`` as a float in [low, high] ((low, high] when ``above``); ValueError says why."""
    x = number(value, what)
    if x > high or x < low or (above and x == low):
        raise ValueError(f"{what} is {x!r}, outside {'(' if above else '['}{low}, {high}]")
    return x


def _seconds(value: Any, cands: tuple[str, ...], what: str, *,
             above: bool) -> dict[str, float]:
    if not (isinstance(value, Mapping) and set(value) == set(cands)):
        raise ValueError(f"'{what}' must give every candidate a time")
    return {str(k): _in(v, f"'{what}.{k}'", 0.0, MAX_SECONDS, above=above)
            for k, v in value.items()}


def _row(name: str, row: Any, cands: tuple[str, ...], numel: int) -> np.ndarray:
    """One layer's row (see ``columns``), every number typed and in range."""
    wide = c.width(len(cands))
    if not (isinstance(row, list) and len(row) == wide):
        raise ValueError(f"layer {name!r}: the row must be a list of {wide} numbers")
    arr = np.array([number(x, f"layer {name!r} column {i}") for i, x in enumerate(row)])
    _in(arr[c.NORM], f"layer {name!r}: its squared norm", 0.0, MAX_SQUARES)
    most = 64.0 * max(numel, 1) + (1 << 20)  # any payload's bytes, a header included
    bounds = {c.ERR: ("squared error", 0.0, MAX_SQUARES, False),
              c.SQ: ("squared sum", 0.0, MAX_SQUARES, False),
              c.COMPRESS: ("compress seconds", 0.0, MAX_SECONDS, True),
              c.DECOMPRESS: ("decompress seconds", 0.0, MAX_SECONDS, True),
              c.BYTES: ("payload bytes", 0.0, most, True),
              c.KEPT: ("kept elements", 0.0, float(numel), False),
              c.RESIDUAL: ("residual", 0.0, MAX_SQUARES, False),
              c.ADAM_ERR: ("Adam-scaled squared error", 0.0, MAX_SQUARES, False),
              c.ADAM_SQ: ("Adam-scaled squared sum", 0.0, MAX_SQUARES, False),
              c.ADAM_RESIDUAL: ("Adam-scaled residual", 0.0, MAX_SQUARES, False),
              c.UNBOUNDED: ("unbounded steps", 0.0, 1e9, False)}
    cols = c.per_candidate(arr)
    for spec, col in zip(cands, cols, strict=True):
        for j, (what, low, high, above) in bounds.items():
            _in(col[j], f"layer {name!r}, {spec}: {what}", low, high, above=above)
    plain = cols[cands.index("none")] if "none" in cands else None
    if plain is not None and (plain[c.ERR] != 0 or plain[c.RESIDUAL] != 0
                              or plain[c.ADAM_ERR] != 0):
        raise ValueError(f"layer {name!r}: 'none' (the identity) shows an error")
    return arr


def check(record: Any, want: str, world: int, cands: tuple[str, ...],
          layout: list[list[Any]]) -> dict[str, Any]:
    """The record's table and measured latencies, every field typed and in range (numbers
    are JSON numbers, never bools or strings; times positive, "none" error-free);
    ValueError says which field is wrong."""
    if not isinstance(record, Mapping):
        raise ValueError("not a JSON object")
    schema = record.get("schema")
    if isinstance(schema, bool) or not isinstance(schema, int) or schema != SCHEMA:
        raise ValueError(f"schema {schema!r}, this library reads {SCHEMA}")
    if record.get("key") != want:
        raise ValueError("its key is not this model's, world size and link")
    if record.get("candidates") != list(cands):
        raise ValueError("measured for other candidates")
    numel = {name: int(np.prod(shape)) for _, name, shape, _ in layout}
    table = record.get("table")
    if not isinstance(table, Mapping):
        raise ValueError("'table' is not an object")
    rows = {}
    for name, row in table.items():
        if name not in numel:
            raise ValueError(f"layer {name!r} is not in the model")
        rows[str(name)] = _row(name, row, cands, numel[name])
    fit = record.get("fit")
    if fit is not None:
        fit = _fit(fit, world)
    measured = record.get("measured")
    if measured is not None:
        if not isinstance(measured, Mapping):
            raise ValueError("'measured' is not an object")
        ranks = integer(measured.get("ranks"), "'measured.ranks'")
        if ranks != world:
            raise ValueError("'measured' is not for this world size")
        measured = {"ranks": world,
                    "seconds": _seconds(measured.get("seconds"), cands, "measured.seconds",
                                        above=True),
                    "overhead_s": _seconds(measured.get("overhead_s"), cands,
                                           "measured.overhead_s", above=False),
                    # (optional: the engine's allreduce against ours, kept since 2026-12)
                    **{k: _in(measured[k], f"'measured.{k}'", 0.0, MAX_SECONDS, above=True)
                       for k in ("engine_s", "ours_s") if measured.get(k) is not None}}
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
    try:
        data = read_small(path)
        if data is None:
            return None
        found = check(load_json(data), want, world, cands, layout)
        return encode(want, cands, found["table"], found["measured"], found["fit"])
    except ValueError as exc:
        ignored("policy cache", path, exc, "measuring again")
        return None


def share(comm: Communicator, data: bytes | None) -> bytes | None:
    """Rank 0's ``data`` on every rank (collective; None where rank 0 has none)."""
    return share_bytes(comm, data, collective="policy cache")


def load(data: bytes) -> dict[str, Any]:
    """The table, measured latencies and fit of :func:`share`'s bytes (validated)."""
    record = json.loads(data)
    return {"table": {k: np.asarray(v, dtype=np.float64) for k, v in record["table"].items()},
            "measured": record["measured"], "fit": record["fit"]}


def fetch(comm: Communicator, found: Located, cands: tuple[str, ...]) -> dict[str, Any] | None:
    """The table and measured latencies in ``found``, read by rank 0 and validated, on every
    rank (collective); None on every rank when rank 0 has none or its switch is off."""
    world = comm.size
    off = switched_off()  # on every rank: a bad value fails on every rank alike
    mine = read(found.path, found.key, world, cands, found.layout) \
        if comm.rank == 0 and not off else None
    data = share(comm, mine)
    if data is None:
        return None
    if comm.rank == 0:
        _reused(found.path)
    return load(data)


def store(found: Located, cands: tuple[str, ...], table: Mapping[str, np.ndarray],
          measured: Mapping[str, Any] | None, fit: Mapping[str, float] | None) -> None:
    """Write the measurements to ``found`` (rank 0 only); a non-finite one is not kept, and
    nothing is with the switch off."""
    if switched_off():
        return
    try:
        data = encode(found.key, cands, table, measured, fit)
    except ValueError:  # a non-finite measurement is not worth keeping
        return
    write(found.path, data)


def write(path: Path, data: bytes) -> None:
    """Write atomically (a temporary file renamed over ``path``); a failure is a warning."""
    write_atomic(path, data, "policy cache")
