"""This machine's codec-speed file under concurrent writers: every update is kept."""

from __future__ import annotations

import json
import multiprocessing

from collectives.policy import machine

WRITERS, UPDATES = 8, 5


def _writer(cache_dir: str, who: int, start: object) -> None:
    start.wait()  # type: ignore[attr-defined]  # all at once: the updates overlap
    for i in range(UPDATES):
        machine.store(cache_dir, {f"writer{who}/update{i}": [1e-5, 1e-9, 2e-5, 2e-9]})


def test_concurrent_writers_lose_no_update(tmp_path) -> None:
    ctx = multiprocessing.get_context("spawn")  # no fork of a process that holds threads
    start = ctx.Barrier(WRITERS)
    procs = [ctx.Process(target=_writer, args=(str(tmp_path), w, start)) for w in range(WRITERS)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(240)
    assert all(p.exitcode == 0 for p in procs), [p.exitcode for p in procs]
    where = machine.path(str(tmp_path))
    held = json.loads(where.read_bytes())["speeds"]
    want = {f"writer{w}/update{i}" for w in range(WRITERS) for i in range(UPDATES)}
    assert set(held) == want, f"{len(want - set(held))} of {len(want)} updates lost"
    assert machine.read(where) == held  # the merged file is a valid one
    assert not [p for p in where.parent.iterdir() if p.name.endswith(".tmp")]
