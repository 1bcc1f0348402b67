"""scripts/gpu_check.sh on the host at tiny sizes: every section prints its lines, every
correctness check passes, and the result files hold the command line and the same lines.
No timing is asserted (on a CPU the speed targets are named, not judged)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytestmark = pytest.mark.timeout(300)

ROOT = Path(__file__).resolve().parents[1]
SECTIONS = ("codecs", "speed", "topk", "ranks", "nccl")
HEADER = re.compile(r"^# (\d)\. (\w+): ")


@pytest.fixture(scope="module")
def quick(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path, list[str]]:
    out = tmp_path_factory.mktemp("gpu_check")
    cmd = ["bash", "scripts/gpu_check.sh", "--cpu", "--quick", "--out", str(out)]
    proc = subprocess.run(cmd, cwd=ROOT, env={**os.environ, "PYTHON": sys.executable},
                          capture_output=True, text=True, timeout=240)
    return proc, out, proc.stdout.splitlines()


def by_section(lines: list[str]) -> dict[str, list[str]]:
    """The result lines under each section's heading."""
    found: dict[str, list[str]] = {}
    current = None
    for line in lines:
        if m := HEADER.match(line):
            current = m.group(2)
            found[current] = []
        elif current and not line.startswith("#") and ": " in line:
            found[current].append(line)
    return found


def test_every_section_prints_and_every_correctness_check_passes(quick) -> None:
    proc, _, lines = quick
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    sections = by_section(lines)
    assert list(sections) == list(SECTIONS)
    for key, found in sections.items():
        assert found, f"section {key} printed no result line"
    judged = [ln for ln in lines if re.search(r" (PASS|FAIL) \(target .+\)$", ln)]
    assert len(judged) >= 10 and not [ln for ln in judged if " FAIL (" in ln]
    assert any("codec uniform:bits=8 bits: identical" in ln for ln in sections["codecs"])
    assert any(ln.startswith("codec sign error:") for ln in sections["codecs"])
    speed = [ln for ln in sections["speed"] + sections["topk"] if "target >=" in ln]
    assert len(speed) == 2 and all("not applicable on CPU" in ln for ln in speed)
    assert sections["nccl"] == ["nccl: skipped: no CUDA"]
    assert lines[-1].startswith("# result: ") and ", 0 failed;" in lines[-1]


def test_the_result_files_hold_the_command_and_the_printed_lines(quick) -> None:
    _, out, lines = quick
    text = (out / "gpu_check_cpu_quick.txt").read_text().splitlines()
    command = f"bash scripts/gpu_check.sh --cpu --quick --out {out}"
    assert text[0] == f"# command: {command}"
    assert text == lines[lines.index(text[0]):]
    data = json.loads((out / "gpu_check_cpu_quick.json").read_text())
    assert data["command"] == command and data["correctness_failed"] == 0
    assert [ln["name"] for ln in data["lines"]][-1] == "nccl"


def test_on_the_host_a_codec_compared_with_itself_is_no_check(quick) -> None:
    """--cpu: the fake device's codec is the compressor's own host path; its bits against the
    CPU twin are printed but neither judged nor counted."""
    _, out, lines = quick
    bits = [ln for ln in lines if re.match(r"codec \S+ bits: ", ln)]
    assert bits and all("not a check on CPU" in ln for ln in bits)
    assert not [ln for ln in bits if re.search(r" (PASS|FAIL)\b", ln)]
    counted = [ln for ln in json.loads((out / "gpu_check_cpu_quick.json").read_text())["lines"]
               if ln["correctness"]]
    assert counted and not [ln for ln in counted if ln["name"].endswith(" bits")]
    assert any(ln["name"].endswith(" error") for ln in counted)  # the numpy bounds still count
    m = re.match(r"# result: (\d+) correctness checks", lines[-1])
    assert m and int(m.group(1)) == len(counted)
