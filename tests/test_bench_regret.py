"""``compcoll bench allreduce``'s regret of ``auto``: its pick's time over the best algorithm's."""

from __future__ import annotations

import doctest

from bench.commands import bench_report as report

MB = 1 << 20


def _rows(size: int, inplace: bool, times: dict[str, float], choice: str,
          auto_time: float) -> list[dict]:
    rows = [{"size": size, "inplace": inplace, "compressor": "none", "algo": a,
             "time_us": t, "auto_choice": None} for a, t in times.items()]
    rows.append({"size": size, "inplace": inplace, "compressor": "none", "algo": "auto",
                 "time_us": auto_time, "auto_choice": choice})
    return rows


def test_regret_is_the_picks_time_over_the_best_per_size_and_placement() -> None:
    rows = (_rows(MB, False, {"ring": 300.0, "tree": 200.0, "MPI_Allreduce": 50.0}, "ring", 330.0)
            + _rows(MB, True, {"ring": 100.0, "tree": 200.0}, "ring", 95.0)
            + _rows(4 * MB, False, {"ring": 100.0, "tree": 100.0}, "tree", 110.0))
    table = report.regret(rows, ("ring", "tree"))
    # MPI_Allreduce is not among auto's candidates: the best is tree, not the baseline
    assert [(r["size"], r["inplace"], r["best"], r["pick"], r["own"]) for r in table] == [
        (MB, False, "tree", 1.5, 1.65), (MB, True, "ring", 1.0, 0.95),
        (4 * MB, False, "ring", 1.0, 1.1)]  # a tie costs nothing, whichever is picked
    line, = report.regret_lines(table)
    assert "median 1.000, max 1.500 (ring against tree at 1048576 B out of place)" in line
    assert "3 cells" in line


def test_regret_leaves_out_small_sizes_compressed_rows_and_runs_without_auto() -> None:
    small = _rows(MB // 2, False, {"ring": 300.0, "tree": 100.0}, "ring", 300.0)
    squeezed = [dict(r, compressor="uniform:bits=8") for r in _rows(MB, False, {"ring": 1.0},
                                                                     "ring", 1.0)]
    no_auto = [r for r in _rows(2 * MB, False, {"ring": 1.0, "tree": 2.0}, "ring", 1.0)
               if r["algo"] != "auto"]
    assert report.regret(small + squeezed + no_auto, ("ring", "tree")) == []
    assert report.regret_lines([]) == []


def test_the_docstring_example_runs() -> None:
    result = doctest.testmod(report, verbose=False)
    assert result.failed == 0 and result.attempted >= 1
