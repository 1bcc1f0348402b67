"""Hostile or broken cache files: read defensively, ignored with a warning that names them.

Covers the shared reader (collectives.files), the crossover table's file (collectives.tuning)
and what the planner is given once the policy cache validated a file; the policy cache's own
runs over broken files are in test_policy_cache.py.
"""

from __future__ import annotations

import json
import os
import re
import warnings

import numpy as np
import pytest

import collectives
from collectives import files, tuning
from collectives.algorithms import modeled
from collectives.policy import cache, plan
from collectives.transport import CommCache
from collectives.tuning import Crossovers
from tests.test_policy_cache import Ranks, decided, drive, model, policy

MB = 1 << 20
NAMES = [a.name for a in modeled()]


# -- the shared reader ---------------------------------------------------------------------
def test_a_regular_file_is_read_and_a_missing_one_is_none(tmp_path) -> None:
    (tmp_path / "t.json").write_bytes(b'{"a": 1}')
    assert files.read_small(tmp_path / "t.json") == b'{"a": 1}'
    assert files.read_small(tmp_path / "missing.json") is None
    assert files.read_small(tmp_path / "no dir" / "t.json") is None


@pytest.mark.timeout(30)  # a reader blocked on the pipe fails the test instead of hanging
def test_a_named_pipe_is_refused_without_waiting_for_a_writer(tmp_path) -> None:
    os.mkfifo(tmp_path / "t.json")
    with pytest.raises(ValueError, match="not a regular file"):
        files.read_small(tmp_path / "t.json")


@pytest.mark.timeout(30)
def test_a_pipe_swapped_in_after_the_check_is_refused_by_the_open_file(tmp_path,
                                                                       monkeypatch) -> None:
    os.mkfifo(tmp_path / "t.json")
    real = os.stat
    monkeypatch.setattr(files.os, "stat", lambda p, *a, **kw: real(__file__))  # "regular"
    with pytest.raises(ValueError, match="not a regular file"):
        files.read_small(tmp_path / "t.json")


@pytest.mark.parametrize("how,why", [("empty", "empty"), ("large", "larger than the 64"),
                                     ("directory", "not a regular file"),
                                     ("device", "not a regular file")])
def test_a_file_that_cannot_be_a_cache_is_refused(tmp_path, how, why) -> None:
    where = tmp_path / "t.json"
    if how == "empty":
        where.write_bytes(b"")
    elif how == "large":
        where.write_bytes(b" " * 65)
    elif how == "directory":
        where.mkdir()
    else:
        where = "/dev/zero"  # endless: only a bound on the bytes read would stop a reader
    with pytest.raises(ValueError, match=why):
        files.read_small(where, limit=64)


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads any file")
def test_an_unreadable_file_is_refused(tmp_path) -> None:
    where = tmp_path / "t.json"
    where.write_bytes(b"{}")
    where.chmod(0)
    with pytest.raises(ValueError, match="cannot be opened"):
        files.read_small(where)


@pytest.mark.parametrize("data,why", [
    (b"[" * 100_000, "nested deeper"), (b'{"a":' * 100_000, "nested deeper"),
    (b"[" * (files.DEPTH + 1) + b"]" * (files.DEPTH + 1), "nested deeper"),
    (b"\xff\xfe{}", "not UTF-8"), (b'{"a": NaN}', "NaN"), (b"[-Infinity]", "Infinity"),
    (b"1" * 5000, "not valid JSON"), (b'{"a": ', "not valid JSON"), (b"{} {}", "not valid")])
def test_json_that_would_break_the_parser_or_is_not_json_is_a_value_error(data, why) -> None:
    with pytest.raises(ValueError, match=why):
        files.load_json(data)


def test_brackets_inside_strings_are_no_nesting() -> None:
    text = json.dumps({"k": "[" * 1000 + '"{\\' * 100, "v": [[1.5]]}).encode()
    assert files.depth(text) == 3
    assert files.load_json(text)["v"] == [[1.5]]
    deep = b"[" * files.DEPTH + b"]" * files.DEPTH
    assert files.depth(deep) == files.DEPTH and files.load_json(deep) == \
        json.loads(deep)


@pytest.mark.parametrize("value,why", [(True, "a bool"), ("1.0", "a string"), (None, "null"),
                                       ([1.0], "a list"), (10 ** 400, "too large"),
                                       (float("nan"), "not finite")])
def test_a_number_is_a_json_number_and_only_that(value, why) -> None:
    with pytest.raises(ValueError, match=why):
        files.number(value, "x")
    if value != 10 ** 400:  # an integer, if not one a float holds
        with pytest.raises(ValueError):
            files.integer(value, "x")
    assert files.number(3, "x") == 3.0 and isinstance(files.number(3, "x"), float)
    assert files.integer(3, "x") == 3
    with pytest.raises(ValueError, match="a float, not an integer"):
        files.integer(3.0, "x")


def test_a_file_too_large_to_read_back_is_not_written(tmp_path, monkeypatch) -> None:
    monkeypatch.setattr(files, "LIMIT", 8)
    with pytest.warns(UserWarning, match=re.escape(f"{tmp_path / 't.json'} not written")):
        files.write_atomic(tmp_path / "t.json", b"[1, 2, 3, 4]", "crossover table")
    assert not list(tmp_path.iterdir())


# -- the crossover table -------------------------------------------------------------------
class Root:
    """Rank ``rank`` of ``size`` ranks; rank 0's allgathered rows are recorded, and another
    rank replays them: what ``share_bytes`` gives it on a live communicator."""

    engine = "mpi"

    def __init__(self, rank: int = 0, size: int = 2, rows: list | None = None) -> None:
        self.rank, self.size, self.cache = rank, size, CommCache()
        self.rows = [] if rows is None else rows

    def allgather_ints(self, values, collective="", timeout=None):
        if self.rank == 0:
            self.rows.append(np.asarray(values).reshape(1, -1).copy())
            row = self.rows[-1]
        else:
            row = self.rows.pop(0)
        return np.tile(row, (self.size, 1))


@pytest.fixture
def table_file(tmp_path, monkeypatch):
    """Where the crossover table of key "k" lives, in a fresh cache directory."""
    monkeypatch.setenv(tuning.ENV_CACHE, str(tmp_path))
    monkeypatch.setattr(tuning, "key", lambda comm, timeout=None: "k")
    where = tuning.path("k")
    where.parent.mkdir(parents=True)
    return where


def good() -> Crossovers:
    return Crossovers((MB, 4 * MB), {a: (1e-3 * (i + 1), 2e-3) for i, a in enumerate(NAMES)})


def hostile(where, how: str) -> None:
    """Write the table of key "k" broken in the way ``how`` names."""
    record = json.loads(good().to_json("k"))
    first = NAMES[0]
    raw = {"empty": b"", "deep": b"[" * 100_000, "deep object": b'{"a":' * 100_000,
           "not utf-8": b'{"schema": 1, "key": "\xff"}', "truncated": good().to_json("k")[:30],
           "huge": good().to_json("k") + b" " * files.LIMIT, "nan": b'{"schema": NaN}',
           "huge digits": b'{"schema": 1, "key": "k", "sizes": [' + b"9" * 5000 + b"]}"}
    if how in raw:
        where.write_bytes(raw[how])
        return
    if how == "fifo":
        os.mkfifo(where)
        return
    if how == "directory":
        where.mkdir()
        return
    if how == "not an object":
        where.write_text(json.dumps([record]))
        return
    changes = {
        "schema as bool": lambda r: r.update(schema=True),
        "schema as string": lambda r: r.update(schema="1"),
        "sizes as object": lambda r: r.update(sizes={"a": MB}),
        "times as list": lambda r: r.update(times=list(r["times"].values())),
        "size as float": lambda r: r["sizes"].__setitem__(0, float(MB)),
        "size as bool": lambda r: r["sizes"].__setitem__(0, True),
        "size as string": lambda r: r["sizes"].__setitem__(0, str(MB)),
        "size too large": lambda r: r["sizes"].__setitem__(1, 1 << 80),
        "time as string": lambda r: r["times"][first].__setitem__(0, "0.001"),
        "time as bool": lambda r: r["times"][first].__setitem__(0, True),
        "time of 400 digits": lambda r: r["times"][first].__setitem__(0, int("9" * 400)),
        "zero times": lambda r: r.update(times={a: [0.0, 0.0] for a in NAMES}),
        "times as object": lambda r: r["times"].__setitem__(first, {"0": 1.0}),
        "short times": lambda r: r["times"].__setitem__(first, r["times"][first][:1]),
        "sizes unsorted": lambda r: r.update(sizes=r["sizes"][::-1]),
        "another key": lambda r: r.update(key="other"),
    }
    changes[how](record)
    where.write_text(json.dumps(record))


HOSTILE = ["empty", "deep", "deep object", "not utf-8", "truncated", "huge", "nan",
           "huge digits", "fifo", "directory", "not an object", "schema as bool",
           "schema as string", "sizes as object", "times as list", "size as float",
           "size as bool", "size as string", "size too large", "time as string", "time as bool",
           "time of 400 digits", "zero times", "times as object", "short times",
           "sizes unsorted", "another key"]


@pytest.mark.timeout(30)
@pytest.mark.parametrize("how", HOSTILE)
def test_a_hostile_crossover_table_is_ignored_on_every_rank_with_a_warning(table_file,
                                                                           how) -> None:
    hostile(table_file, how)
    root = Root()
    with pytest.warns(UserWarning, match=re.escape(f"crossover table {table_file} ignored")):
        assert tuning.load(root) is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # another rank reads nothing: it says nothing
        assert tuning.load(Root(rank=1, rows=root.rows)) is None


def test_a_valid_table_is_shared_as_rank_0_validated_it(table_file) -> None:
    text = good().to_json("k").decode()
    table_file.write_text(" " + text.replace("\n", "\n  "))  # another layout, the same table
    root = Root()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuning.load(root) == good()
        shared = bytes(np.concatenate([r.reshape(-1) for r in root.rows[1:]])
                       .view(np.uint8))[:int(root.rows[0][0, 0])]
        assert shared == good().to_json("k")  # canonical: what the other ranks parse
        assert tuning.load(Root(rank=1, rows=root.rows)) == good()


@pytest.mark.parametrize("how", ["empty", "deep", "time as string"])
def test_lookup_falls_back_to_the_model_once_and_says_so(table_file, monkeypatch, how) -> None:
    monkeypatch.setattr(collectives.defaults, "tune", True)
    hostile(table_file, how)
    root = Root()
    with pytest.warns(UserWarning, match=re.escape(str(table_file))):
        assert tuning.lookup(root) is None
    assert root.cache.crossovers_looked_up and root.cache.crossovers is None
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert tuning.lookup(root) is None  # looked for once


@pytest.mark.parametrize("data", [b"[" * 100_000, b'{"schema": 1, "sizes": [' + b"9" * 400 +
                                  b'], "key": "k", "times": {}}', b"", b"\x80", b"[]", b"7"])
def test_from_json_raises_only_value_errors(data) -> None:
    with pytest.raises(ValueError):
        Crossovers.from_json(data, "k")


# -- what the planner is given -------------------------------------------------------------
def test_the_planner_refuses_measurements_where_no_plan_fits_with_a_value_error() -> None:
    with pytest.raises(ValueError, match="no plan fits the error budget"):
        plan.plan(("none", "fp16"), [[1.0, 0.5]], [[1.0, 1.0]], budget=0.01, bins=16,
                  fixed=[0.0, 0.0], buckets=[0])


def _bounds(record, extreme: str) -> None:
    """Every number of ``record`` at the bound of its range that ``extreme`` names."""
    cands, top = record["candidates"], extreme == "largest"
    tiny = 5e-324  # the least float above 0
    numel = {"fc1.weight": 1024 * 128, "fc2.weight": 128 * 128}
    for name in record["table"]:
        most = 64.0 * numel[name] + (1 << 20)
        cols = [cache.MAX_SQUARES if top else 0.0]
        for spec in cands:
            err = 0.0 if spec == "none" else (cache.MAX_SQUARES if top else 0.0)
            cols += [err, 0.0 if top else cache.MAX_SQUARES,
                     cache.MAX_SECONDS if top else tiny, cache.MAX_SECONDS if top else tiny,
                     most if top else tiny, float(numel[name]) if top else 0.0,
                     0.0 if spec == "none" else (cache.MAX_SQUARES if top else 0.0),
                     0.0 if spec == "none" else (cache.MAX_SQUARES if top else 0.0),
                     0.0 if top else cache.MAX_SQUARES,
                     0.0 if spec == "none" else (cache.MAX_SQUARES if top else 0.0),
                     1e9 if top else 0.0]
        record["table"][name] = cols
    record["fit"] = {k: cache.MAX_FIT if top else 0.0 for k in ("alpha", "beta", "gamma")}
    record["measured"] = {"ranks": 4,
                          "seconds": {c: cache.MAX_SECONDS if top else tiny for c in cands},
                          "overhead_s": {c: cache.MAX_SECONDS if top else 0.0 for c in cands}}


@pytest.mark.parametrize("extreme", ["largest", "smallest"])
def test_any_file_the_cache_accepts_is_planned_without_an_error(tmp_path, extreme) -> None:
    """The bounds of every field together: what validation lets through, the planner can
    price and plan (no overflow to inf or NaN, no plan-less budget)."""
    drive(policy(tmp_path), Ranks(), range(6), model())
    (where,) = tmp_path.glob("*.json")
    record = json.loads(where.read_text())
    _bounds(record, extreme)
    where.write_text(json.dumps(record))
    pol = policy(tmp_path, cost=None, latency=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", UserWarning)  # no file ignored
        warnings.filterwarnings("ignore", "policy cache: deciding from")  # the reuse notice
        warnings.simplefilter("ignore", RuntimeWarning)  # an error ratio of inf: ruled out
        assert drive(pol, Ranks(), range(6), model()) == []  # read, not measured
    assert pol.cached and decided(pol)[0] == (1, "decided (first, from the cache)")
    assert set(pol.decisions) == {lay.name for layers in model() for lay in layers}
    if extreme == "largest":  # every compressor's error is unbounded: all send as they are
        assert set(pol.decisions.values()) == {"none"}
