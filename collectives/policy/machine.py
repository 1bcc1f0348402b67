"""This machine's codec speeds on disk, for any model: profiling a new model times no codec
it has timed before.

A model's cache file (``cache``) keeps everything measured for that model, its world size
and its link. Codec speeds depend on none of these, only on the machine: its kind, its cores,
the kernels' threads, the library and the wire format, which :func:`key` hashes. The file is
``<cache dir>/machine/<key>.json`` and holds, per dense candidate, compress and decompress
time as a line in the layer's elements, a fixed cost per call plus seconds per element,
fitted to every layer some model profiled here (:func:`rates`). Written by rank 0 after a
profile that timed a codec (merged with what the file held), read when a model's own cache
is empty (rank 0 reads, every rank gets its copy).
A file that is not a small regular file, does not parse, is foreign or holds a field of the
wrong type or out of range is ignored with a warning naming it, as a model's cache file is.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

import compressors

from ..files import ignored, load_json, locked, number, read_small, write_atomic
from ..transport.base import share_bytes
from . import cache
from .columns import COMPRESS, DECOMPRESS, PER_CANDIDATE, per_candidate

if TYPE_CHECKING:
    from ..transport import Communicator

SCHEMA = 1
#: Seconds per call, and per element, past which a codec speed is not believed.
MAX_CALL, MAX_RATE = 1.0, 1e-3


def key() -> str:
    """sha256 of what codec speeds depend on: this machine's kind, cores and kernel threads,
    the library and the wire format versions."""
    what = {"schema": SCHEMA, "library": cache._version(), "format": compressors.FORMAT_VERSION,
            "machine": [platform.machine(), os.cpu_count(), os.environ.get("OMP_NUM_THREADS")]}
    return hashlib.sha256(json.dumps(what, sort_keys=True).encode()).hexdigest()


def path(cache_dir: str | None) -> Path:
    """This machine's file (see the module doc)."""
    return cache.directory(cache_dir) / "machine" / f"{key()}.json"


def line(numel: np.ndarray, seconds: np.ndarray) -> list[float]:
    """[seconds per call, seconds per element] of the line through (numel, seconds) of least
    relative error (both at least 0; one point: through the origin)."""
    u = 1.0 / seconds
    a = np.stack([u, numel * u], axis=1)
    if len(numel) > 1:
        (call, each), *_ = np.linalg.lstsq(a, np.ones(len(u)), rcond=None)
        if call >= 0 and each > 0:
            return [float(call), float(each)]
    return [0.0, float(a[:, 1].sum() / np.square(a[:, 1]).sum())]


def rates(rows: Mapping[str, np.ndarray], numel: Mapping[str, int], cands: tuple[str, ...],
          timed: set[str]) -> dict[str, list[float]]:
    """The compress and decompress lines (:func:`line`, four numbers) of each candidate in
    ``timed``, over the profiled layers."""
    names = [n for n in rows if numel.get(n, 0) > 0]
    sizes = np.array([float(numel[n]) for n in names])
    cols = np.stack([per_candidate(rows[n]) for n in names]) \
        if names else np.zeros((0, len(cands), PER_CANDIDATE))
    out = {}
    for c, spec in enumerate(cands):
        times = [cols[:, c, j] for j in (COMPRESS, DECOMPRESS)]
        if spec in timed and names and all(np.isfinite(t).all() and (t > 0).all()
                                           for t in times):
            out[spec] = line(sizes, times[0]) + line(sizes, times[1])
    return out


def seconds(speed: list[float], numel: int) -> tuple[float, float]:
    """Compress and decompress seconds of ``numel`` elements under ``speed``."""
    return speed[0] + speed[1] * numel, speed[2] + speed[3] * numel


def check(record: Any) -> dict[str, list[float]]:
    """The speeds of a record, every field typed and in range; ValueError says which not."""
    if not isinstance(record, Mapping):
        raise ValueError("not a JSON object")
    if record.get("schema") != SCHEMA or isinstance(record.get("schema"), bool):
        raise ValueError(f"schema {record.get('schema')!r}, this library reads {SCHEMA}")
    if record.get("key") != key():
        raise ValueError("its key is not this machine's")
    speeds = record.get("speeds")
    if not isinstance(speeds, Mapping):
        raise ValueError("'speeds' is not an object")
    out = {}
    for spec, four in speeds.items():
        if not (isinstance(four, list) and len(four) == 4):
            raise ValueError(f"'speeds.{spec}' must be four numbers: compress seconds a "
                             f"call and an element, decompress the same")
        for x, most in zip(four, (MAX_CALL, MAX_RATE) * 2, strict=True):
            if not 0 <= number(x, f"'speeds.{spec}'") <= most:
                raise ValueError(f"'speeds.{spec}' holds {x!r}, outside [0, {most}]")
        if not (four[0] + four[1] > 0 and four[2] + four[3] > 0):
            raise ValueError(f"'speeds.{spec}' gives no time")
        out[str(spec)] = [float(x) for x in four]
    return out


def read(where: Path) -> dict[str, list[float]]:
    """This rank's validated speeds in ``where`` ({} when missing or bad: a bad file is
    named in a warning)."""
    try:
        data = read_small(where)
        return {} if data is None else check(load_json(data))
    except ValueError as exc:
        ignored("codec speeds", where, exc, "timing the codecs")
        return {}


def fetch(comm: Communicator, cache_dir: str | None, cands: tuple[str, ...]
          ) -> dict[str, list[float]]:
    """The speeds of ``cands`` that rank 0's file holds, on every rank (collective)."""
    mine = None
    if comm.rank == 0:
        mine = json.dumps(read(path(cache_dir)), sort_keys=True).encode()
    data = share_bytes(comm, mine, collective="codec speeds")
    speeds = {} if data is None else json.loads(data)
    return {spec: speeds[spec] for spec in cands if spec in speeds}


def store(cache_dir: str | None, speeds: Mapping[str, list[float]]) -> None:
    """Add ``speeds`` to this machine's file (rank 0 only; others it holds are kept).

    Jobs on one machine share the file: the read, merge and write run under a lock on it
    (``files.locked``), so that concurrent writers each add their speeds and none is lost."""
    mine = {k: [float(x) for x in v] for k, v in speeds.items()}
    try:
        check({"schema": SCHEMA, "key": key(), "speeds": mine})
    except ValueError:  # a time out of range (a descheduled run) is not worth keeping
        return
    where = path(cache_dir)
    with locked(where):
        try:  # (a bad file was named when it was read: it is replaced)
            data = read_small(where)
            held = {} if data is None else check(load_json(data))
        except ValueError:
            held = {}
        record = {"schema": SCHEMA, "key": key(), "speeds": {**held, **mine}}
        write_atomic(where, json.dumps(record, sort_keys=True).encode(), "codec speeds")
