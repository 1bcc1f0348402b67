"""``compcoll bench fsdp``: FSDP2 training with its own reduce-scatter and ours, end to end on
two hosts of two ranks (emulated by ``COMPCOLL_HOST``, one value per pair of ranks)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from compcoll_bench.commands.bench_fsdp import RUNS, ratios
from tests.test_cli import refused


def test_ratios_are_taken_to_plain_and_to_the_faster_torch_run() -> None:
    rows = [{"model": "m", "run": r, "step_ms": ms}
            for r, ms in (("plain", 300.0), ("bf16", 200.0), ("int8", 100.0))]
    ratios(rows)
    assert [r["vs_plain"] for r in rows] == [1.0, 1.5, 3.0]
    assert [r["vs_torch"] for r in rows] == [200 / 300, 1.0, 2.0]
    alone = [{"model": "m", "run": "int8", "step_ms": 100.0}]
    ratios(alone)
    assert alone[0]["vs_plain"] is None and alone[0]["vs_torch"] is None


def test_bench_fsdp_refuses_what_cannot_work(capsys) -> None:
    assert "choose from" in refused("bench", "fsdp", "-np", "2", "--runs", "int8,fp8",
                                    capsys=capsys)
    assert "--steps >= 10" in refused("bench", "fsdp", "-np", "2", "--steps", "6",
                                      capsys=capsys)


@pytest.mark.mpi
def test_bench_fsdp_on_two_hosts_of_two_ranks(tmp_path: Path) -> None:
    from compcoll_bench.commands.launch import find_mpiexec

    pytest.importorskip("matplotlib")
    out = {ext: tmp_path / f"fsdp.{ext}" for ext in ("json", "png", "txt")}
    argv = [sys.executable, "-m", "compcoll_bench", "bench", "fsdp", "--model", "cnn",
            "--steps", "10", "--batch", "8", "--timeout", "120", "--json", str(out["json"]),
            "--plot", str(out["png"]), "--txt", str(out["txt"])]
    cmd = [find_mpiexec()]
    for host in ("a", "b"):  # ranks 0, 1 on host a; 2, 3 on host b
        cmd += [":"] if host == "b" else []
        cmd += ["-n", "2", "-env", "COMPCOLL_HOST", f"bench-fsdp-{host}", *argv]
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PMI_", "PMIX_", "HYDRA_", "COMPCOLL_"))}
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        stdout, stderr = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        pytest.fail("bench fsdp ran past 300 s")
    assert proc.returncode == 0, stdout[-3000:] + stderr[-6000:]
    data = json.loads(out["json"].read_text())
    meta, rows = data["meta"], data["rows"]
    assert meta["ranks"] == 4 and meta["command"][:3] == ["compcoll", "bench", "fsdp"]
    assert [r["run"] for r in rows] == RUNS
    by = {r["run"]: r for r in rows}
    for r in rows:
        assert r["step_ms"] > 0 and len(r["step_times_ms"]) == len(r["losses"]) == 10
        assert 0.0 <= r["metric"] <= 1.0 and r["final_loss"] > 0
        assert r["vs_plain"] == pytest.approx(by["plain"]["step_ms"] / r["step_ms"])
    # the digits CNN: four fully_shard blocks with parameters (two conv, two linear), the
    # root holding none; each reduce-scatters once a step, fc1 (32832 elements) compressed,
    # the three under min_numel exact; two-level unless the hierarchy is flat
    for name in ("exact", "int8", "int8-flat"):
        r = by[name]
        assert (r["compressed"], r["plain_calls"]) == (10, 30), r
        assert r["two_level"] == (0 if name == "int8-flat" else 10), r
    assert by["plain"]["compressed"] is None and by["bf16"]["two_level"] is None
    # the same start, the same batches: every run learns (the loss falls from its first)
    for r in rows:
        assert r["losses"][-1] < r["losses"][0]
    assert out["png"].read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    table = out["txt"].read_text()
    assert table.splitlines()[1].startswith("# command: compcoll bench fsdp ")
    assert "vs torch" in table and "two-level" in table
