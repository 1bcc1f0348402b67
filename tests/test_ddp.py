"""DDP compression hook: multi-rank checks under mpiexec (gloo process group, 2-3 ranks)."""

from __future__ import annotations

import subprocess

import pytest

from tests.mpirun import LAUNCHES, Script
from tests.test_mpi import _passed

pytestmark = pytest.mark.mpi

LAUNCHES.add(*[Script(name, n, timeout=120) for n in (2, 3)
               for name in ("ddp_hook.py", "ddp_checkpoint.py", "ddp_fastpath.py")],
             *[Script("ddp_two_level.py", 4, (layout,), timeout=150)
               for layout in ("2x2", "2x2-interleaved")])


def run(script: str, np_: int, *args: str,
        timeout: float) -> subprocess.CompletedProcess:
    """The script's part of its process count's launch (its timeout is the one added)."""
    return LAUNCHES.result(script, np_, *args)


@pytest.mark.parametrize("np_", [2, 3])
def test_hook_matches_ddp_and_follows_policy(np_: int) -> None:
    _passed(run("ddp_hook.py", np_, timeout=120), "ddp hook")


@pytest.mark.parametrize("np_", [2, 3])
def test_checkpoint_resumes_exactly(np_: int) -> None:
    _passed(run("ddp_checkpoint.py", np_, timeout=120), "ddp checkpoint")


def test_bad_state_arguments_raise_value_error() -> None:
    import collectives.ddp as cddp

    for kwargs, words in (({"policy": "zip"}, "zip"), ({"policy": [("size<3", "none")]},
                                                     "size<3"),
                          ({"start_step": -1}, "start_step"), ({"error_feedback": 1},
                                                               "error_feedback"),
                          ({"policy": 3}, "policy")):
        with pytest.raises(ValueError, match=words):
            cddp.CompressionState(**kwargs)


def test_state_pickles_without_process_group() -> None:
    import pickle

    import collectives.ddp as cddp

    state = cddp.CompressionState(policy="uniform:bits=4", process_group=object())
    back = pickle.loads(pickle.dumps(state))
    assert back.process_group is None and back.policy.spec.startswith("uniform:bits=4")


def test_bench_train_smoke(tmp_path) -> None:
    import json
    import os
    import signal
    import subprocess
    import sys

    out = tmp_path / "train.json"
    cmd = [sys.executable, "-m", "compcoll_bench", "bench", "train", "-np", "2", "--steps", "12",
           "--model", "cnn", "--runs", "ddp,int8+ef,auto", "--json", str(out),
           "--timeout", "60"]  # a stalled step prints every thread's stack and fails
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    try:
        text, _ = proc.communicate(timeout=240)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        text, _ = proc.communicate()
        raise AssertionError(f"bench train hung past its watchdog\n{text[-6000:]}") from None
    assert proc.returncode == 0, text[-6000:]
    rows = json.loads(out.read_text())["rows"]
    assert [r["run"] for r in rows] == ["ddp", "int8+ef", "auto"]
    for r in rows:
        assert r["ranks_agree"] and r["step_ms"] > 0 and len(r["losses"]) == 12
    assert rows[1]["payload_kb"] < rows[0]["payload_kb"] / 3  # int8 sends a quarter
    assert rows[1]["overlap"] is not None and "total relative error" in rows[2]["decisions"]


def test_init_from_mpi_names_a_bad_host_on_every_rank() -> None:
    from collectives.ddp import init_from_mpi

    class OneRank:  # the two calls init_from_mpi makes of an mpi4py communicator
        rank, size, sent = 0, 1, []

        def bcast(self, obj):
            self.sent.append(obj)
            return obj

    comm = OneRank()
    with pytest.raises(RuntimeError, match="cannot open a TCP store on 203.0.113.1"):
        init_from_mpi(comm, host="203.0.113.1", timeout=1)
    assert comm.sent == [None]  # the others are told, not left waiting for a port
    with pytest.raises(ValueError, match="timeout must be > 0"):
        init_from_mpi(comm, timeout=0)


@pytest.mark.parametrize("np_", [2, 3])
def test_16_bit_buckets_take_the_fast_path_bit_for_bit_with_pytorchs_hooks(np_: int) -> None:
    _passed(run("ddp_fastpath.py", np_, timeout=120), "ddp fast path")


@pytest.mark.parametrize("layout", ["2x2", "2x2-interleaved"])
def test_on_two_hosts_16_bit_and_8_bit_buckets_cross_hosts_two_level(layout: str) -> None:
    _passed(run("ddp_two_level.py", 4, layout, timeout=150), f"ddp two-level {layout}")
