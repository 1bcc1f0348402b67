"""``comm=None`` under torchrun and under mpiexec: the job the caller is in, decided per call."""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.mpirun import run

pytestmark = pytest.mark.mpi
HERE = Path(__file__).resolve().parent


def _summary(out: str, name: str) -> tuple[int, int]:
    m = re.search(rf"{name}: np=\d+ cases=(\d+) FAILURES (\d+)", out)
    assert m, f"no summary line from {name}:\n{out[-4000:]}"
    return int(m.group(1)), int(m.group(2))


def torchrun(script: str, nproc: int, *args: str, timeout: float) -> tuple[int, str]:
    """Run tests/torchrun/<script> under torchrun (standalone rendezvous, gloo); the whole
    process group is killed if it outlives ``timeout``."""
    exe = Path(sys.executable).with_name("torchrun")
    cmd = [str(exe), "--standalone", "--nproc-per-node", str(nproc),
           str(HERE / "torchrun" / script), *args]
    env = {**os.environ, "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env=env, start_new_session=True)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
        raise AssertionError(f"torchrun {script} hung past {timeout} s\n{out[-4000:]}") from None
    return proc.returncode, out


def test_comm_none_follows_torch_distributed_under_torchrun(tmp_path) -> None:
    rc, out = torchrun("default_comm.py", 2, str(tmp_path / "store"), timeout=180)
    cases, failures = _summary(out, "torchrun default comm")
    assert rc == 0 and failures == 0 and cases > 0, out[-6000:]


def test_comm_none_is_the_mpi_world_under_mpiexec_and_refuses_a_different_torch_size() -> None:
    res = run("default_comm.py", 2, timeout=120)
    cases, failures = _summary(res.stdout, "mpi default comm")
    assert res.returncode == 0 and failures == 0 and cases > 0, res.stdout[-6000:]
