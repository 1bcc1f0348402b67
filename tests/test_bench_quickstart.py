"""``make bench``'s compressed part (``compcoll_bench.quickstart``): across emulated hosts
where this machine allows it, else one line saying why and the cost model's forecast."""

from __future__ import annotations

import io
import json
import subprocess
from pathlib import Path

import pytest

from compcoll_bench import emulate, quickstart


def test_without_root_the_blocker_is_check_hosts_reason(monkeypatch) -> None:
    monkeypatch.setattr(emulate.os, "geteuid", lambda: 1000)
    monkeypatch.setattr(emulate.shutil, "which", lambda tool: f"/usr/bin/{tool}")
    why = quickstart.blocker()
    assert why is not None and "needs root" in why


def test_a_namespace_that_cannot_be_made_is_the_blocker(monkeypatch) -> None:
    calls = []

    def run(cmd, **kw):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "mount --make-shared: Permission denied")

    monkeypatch.setattr(emulate, "check_host", lambda: None)
    monkeypatch.setattr(quickstart.subprocess, "run", run)
    why = quickstart.blocker()
    assert why is not None and "Permission denied" in why and "network namespaces" in why
    assert calls[0][:3] == ["ip", "netns", "add"]
    assert emulate.NAME_RE.match(calls[0][3])  # a name 'compcoll emulate cleanup' removes


def test_where_hosts_cannot_be_emulated_it_says_why_in_one_line_and_forecasts(
        tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(quickstart, "blocker", lambda: "emulated links need root")
    code = quickstart.main(["-np", "4", "--link", "1gbit", "-s", "1M", "--out", str(tmp_path)])
    assert code == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0] == ("# compressed allreduce across emulated hosts skipped: emulated links "
                      "need root")
    assert "forecast for 4 hosts at 1gbit" in out[1]
    assert any("compcoll model: link 1gbit" in line for line in out)
    summary = out[-1]
    assert summary.startswith("# forecast: compressed allreduce against the best dense one")
    for spec in quickstart.COMPRESSORS:
        assert f"{spec} " in summary and "x" in summary
    doc = json.loads((tmp_path / "compressed_link1g_np4_forecast.json").read_text())
    assert doc["nodes"][0]["nodes"] == 4 and doc["size"] == 1 << 20
    text = (tmp_path / "compressed_link1g_np4_forecast.txt").read_text()
    assert text.startswith("# compcoll model --nodes 4 --link 1gbit") and summary in text


class FakeRun:
    """``bench compressed`` as Popen sees it: two lines of table, exit code 0."""

    argv: list[str] = []

    def __init__(self, argv, stdout=None, text=None) -> None:
        FakeRun.argv = argv
        self.stdout = io.StringIO("# compcoll bench compressed: 4 ranks\nMPI_Allreduce 1.00\n")

    def wait(self) -> int:
        return 0


def test_where_hosts_can_be_emulated_it_measures_and_writes_beside_the_sweep(
        tmp_path, monkeypatch, capsys) -> None:
    monkeypatch.setattr(quickstart, "blocker", lambda: None)
    monkeypatch.setattr(quickstart.subprocess, "Popen", FakeRun)
    assert quickstart.main(["--out", str(tmp_path)]) == 0
    json_path = tmp_path / "compressed_link1g_np4.json"
    assert FakeRun.argv[1:] == ["-m", "compcoll_bench", "bench", "compressed", "-np", "4",
                                "--link", "1gbit", "-s", str(64 << 20), "--json",
                                str(json_path)]
    txt = (tmp_path / "compressed_link1g_np4.txt").read_text().splitlines()
    assert txt[0].startswith("# command: compcoll bench compressed -np 4 --link 1gbit")
    assert txt[1:] == ["# compcoll bench compressed: 4 ranks", "MPI_Allreduce 1.00"]
    assert "MPI_Allreduce 1.00" in capsys.readouterr().out


@pytest.mark.parametrize("argv, says", [
    (["-np", "1"], "at least 2 ranks"),
    (["--link", "fast"], "not a link rate"),
    (["--latency", "soon"], "not a duration"),
])
def test_bad_arguments_are_refused_before_anything_runs(argv, says, capsys, tmp_path) -> None:
    with pytest.raises(SystemExit) as exc:
        quickstart.main([*argv, "--out", str(tmp_path / "never")])
    assert exc.value.code == 2 and says in capsys.readouterr().err
    assert not Path(tmp_path / "never").exists()
