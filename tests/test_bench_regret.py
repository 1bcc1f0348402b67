"""``compcoll bench allreduce``'s regret of ``auto``: its pick's time over the best algorithm's."""

from __future__ import annotations

import doctest

from compcoll_bench.commands import bench_report as report

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


def _run(ranks: int, times: dict[int, dict[str, float]], picks: dict[int, str]) -> dict:
    """A bench allreduce JSON: out-of-place rows at each size, auto's pick per size."""
    rows = []
    for size, by in times.items():
        rows += _rows(size, False, by, picks[size], by[picks[size]])
    return {"ranks": ranks, "modeled": ["ring", "tree"], "rows": rows}


def test_regret_over_runs_judges_each_runs_pick_against_the_median_times() -> None:
    from compcoll_bench.commands import bench_regret

    # tree is faster in two of three runs; auto picked ring twice and tree once
    runs = [_run(3, {MB: {"ring": 100.0, "tree": 80.0}}, {MB: "ring"}),
            _run(3, {MB: {"ring": 100.0, "tree": 90.0}}, {MB: "ring"}),
            _run(3, {MB: {"ring": 100.0, "tree": 200.0}}, {MB: "tree"})]
    cell, = bench_regret.cells(runs)
    assert cell["median_us"] == {"ring": 100.0, "tree": 90.0} and cell["best"] == "tree"
    assert cell["picks"] == {"ring": 2, "tree": 1}
    assert cell["regret"] == round(100.0 / 90.0, 4)  # the median of 1.111, 1.111 and 1.0
    summ = bench_regret.summary([cell])
    assert summ["over_goal"] == 1 and summ["per_ranks"]["3"]["max"] == cell["regret"]


def test_bench_regret_command_writes_its_files_and_refuses_other_json(tmp_path) -> None:
    import json

    from compcoll_bench.cli import main

    path = tmp_path / "run.json"
    path.write_text(json.dumps(_run(2, {MB: {"ring": 1.0, "tree": 2.0},
                                        2 * MB: {"ring": 3.0, "tree": 2.0}},
                                    {MB: "ring", 2 * MB: "ring"})))
    md, js = tmp_path / "r.md", tmp_path / "r.json"
    assert main(["bench", "regret", str(path), "--md", str(md), "--json", str(js)]) == 0
    data = json.loads(js.read_text())
    assert data["command"][:3] == ["compcoll", "bench", "regret"]
    assert [c["regret"] for c in data["cells"]] == [1.0, 1.5]
    assert "| 2 | 2 | 1.250 | 1.500 | 1 |" in md.read_text()
    other = tmp_path / "other.json"
    other.write_text("{}")
    try:
        main(["bench", "regret", str(other)])
    except SystemExit as exc:
        assert exc.code == 2
    else:
        raise AssertionError("a JSON without rows was accepted")


def test_reference_runs_join_the_medians_but_their_picks_are_not_judged() -> None:
    from compcoll_bench.commands import bench_regret

    judged = [_run(3, {MB: {"ring": 100.0, "tree": 90.0}}, {MB: "ring"})]
    reference = [_run(3, {MB: {"ring": 100.0, "tree": 200.0}}, {MB: "tree"}),
                 _run(3, {MB: {"ring": 100.0, "tree": 300.0}}, {MB: "tree"})]
    cell, = bench_regret.cells(judged, reference=reference)
    assert cell["picks"] == {"ring": 1} and cell["runs"] == 1
    assert cell["median_us"] == {"ring": 100.0, "tree": 200.0} and cell["regret"] == 1.0
