"""``compcoll bench allreduce --compressor``: compressed rows, their checks, and spec lists."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from tests.test_cli import SMALL, compcoll

SPECS = ["none", "uniform:bits=8", "topk:ratio=0.1,approximate=true"]


@pytest.mark.mpi
def test_compressed_rows_beside_the_dense_ones(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    res = compcoll("bench", "allreduce", "-np", "3", "-b", "4K", "-e", "64K", *SMALL,
                   "--algo", "ring,mpi", "--compressor", ",".join(SPECS), "--json", str(out))
    assert res.returncode == 0, res.stdout + res.stderr
    rows = json.loads(out.read_text())["rows"]
    sizes = [4096 << i for i in range(5)]
    assert [(r["size"], r["inplace"], r["algo"], r["compressor"]) for r in rows] == [
        (size, inplace, algo, spec) for size in sizes for inplace in (False, True)
        for algo, spec in [("MPI_Allreduce", "none"), *(("ring", s) for s in SPECS),
                           ("mpi", "none")]]
    assert "skipped (baselines run uncompressed only): mpi with uniform:bits=8" in res.stdout
    for row in rows:
        assert row["wrong"] == 0 and row["ranks_agree"], row
        assert row["p50_us"] <= row["p90_us"] <= row["p99_us"]
        assert row["p50_us"] == row["time_us"]
        assert row["iters"] == 2 and row["spread"] is not None
        assert (row["noisy"] is None) == (row["algo"] == "MPI_Allreduce")
    for size in sizes:
        at = {r["compressor"]: r for r in rows
              if r["size"] == size and r["algo"] == "ring" and not r["inplace"]}
        dense = at["none"]
        assert dense["rel_error"] is None and dense["compress_us"] is None
        assert dense["bytes_sent"] >= 2 * 2 / 3 * size  # ring: 2(p-1)/p of the vector
        for spec in SPECS[1:]:
            row = at[spec]
            assert row["scheme"] and math.isfinite(row["rel_error"])
            assert 0 < row["bytes_sent"] < dense["bytes_sent"]
            assert row["compress_us"] > 0 and row["decompress_us"] >= 0
            assert row["comm_us"] == pytest.approx(max(
                row["time_us"] - row["compress_us"] - row["decompress_us"], 0), abs=1e-6)
            assert row["busbw_GBps"] == pytest.approx(  # effective: the uncompressed bytes
                size / row["time_us"] / 1e3 * 4 / 3)
        assert 1e-3 < at["uniform:bits=8"]["rel_error"] < 0.1  # 8-bit codes: about 2e-2
    assert res.stdout.count("effbusbw") >= 2 and "rel.err" in res.stdout  # both placements
    assert res.stdout.count("time(us) iqr%") == 2


@pytest.mark.mpi
def test_compressed_check_catches_ranks_that_disagree(tmp_path: Path) -> None:
    out = tmp_path / "out.json"
    res = compcoll("bench", "allreduce", "-np", "2", "-b", "4K", "-e", "4K", "-n", "1", "-w",
                   "0", "--algo", "ring", "--compressor", "none,fp16", "--no-feedback",
                   "--json", str(out), env={"COMPCOLL_BENCH_CORRUPT": "ring/fp16"})
    assert res.returncode == 1
    rows = {r["compressor"]: r for r in json.loads(out.read_text())["rows"] if r["algo"] == "ring"}
    assert rows["fp16"]["wrong"] == 1 and not rows["fp16"]["ranks_agree"]
    assert rows["none"]["wrong"] == 0
    assert "FAILED ring with fp16" in res.stderr


def test_integer_dtype_with_a_compressor_is_a_usage_error() -> None:
    res = compcoll("bench", "allreduce", "-np", "3", "--dtype", "int32", "--compressor",
                   "none,uniform:bits=8", timeout=30)
    assert res.returncode == 2
    assert "uniform:bits=8 needs a floating-point --dtype, got int32" in res.stderr
    assert "--dtype float16, bfloat16, float32, float64" in res.stderr
    assert "Traceback" not in res.stderr and res.stdout == ""


def test_bad_compressor_specs_are_usage_errors(capsys: pytest.CaptureFixture[str]) -> None:
    from compcoll_bench.cli import main

    for argv, message in [(["--compressor", "ratio=0.1"], "follows no compressor name"),
                          (["--compressor", "bogus"], "unknown compressor 'bogus'"),
                          (["--compressor", "topk:ratio=0.1", "--scheme", "dense"],
                           "use one of: allgather, sparse"),
                          (["--compressor", "fp16", "--op", "max"], "needs --op sum or avg")]:
        with pytest.raises(SystemExit) as exc:
            main(["bench", "allreduce", *argv])
        assert exc.value.code == 2, argv
        assert message in capsys.readouterr().err


def test_split_specs() -> None:
    from compcoll_bench.commands.bench_compressor import combos, split_specs

    assert split_specs(None) == ["none"]
    assert split_specs(["none,uniform:bits=8,topk:ratio=0.01,approximate=true"]) == [
        "none", "uniform:bits=8", "topk:ratio=0.01,approximate=true"]
    assert split_specs(["topk:ratio=0.01, approximate=true,fp16", "uniform:bits=4",
                        "fp16"]) == ["topk:ratio=0.01,approximate=true", "fp16", "uniform:bits=4"]
    assert split_specs(["uniform,bits=4,bucket_size=512"]) == ["uniform:bits=4,bucket_size=512"]
    with pytest.raises(ValueError, match="follows no compressor name"):
        split_specs(["bits=8,uniform"])
    pairs, skipped = combos(["MPI_Allreduce", "ring", "mpi", "auto"], ["fp16", "none"])
    assert pairs == [("MPI_Allreduce", "none"), ("ring", "fp16"), ("ring", "none"),
                     ("mpi", "none"), ("auto", "fp16"), ("auto", "none")]
    assert skipped == ["mpi with fp16"]
