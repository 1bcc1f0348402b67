"""Emulated hosts of several ranks: the commands (pure, no root) and, as root, a 2 x 2 cluster
whose ranks see their hosts as on a real one."""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from compcoll_bench import emulate
from compcoll_bench.commands import emulate as emulated
from compcoll_bench.commands.emulate import Cluster
from tests.test_cli import compcoll, refused

TOOLS = ("ip", "tc", "unshare", "hostname")
ROOT = os.geteuid() == 0 and all(shutil.which(t) is not None for t in TOOLS)
needs_root = pytest.mark.skipif(not ROOT, reason="needs root, iproute2 (ip, tc), unshare and "
                                                 "hostname")

#: Run on every rank of a 2 x 2 cluster: hostnames, compcoll's and MPICH's view of the hosts,
#: and a two-level allreduce whose cross-host step goes over the links.
RANK_SCRIPT = """
import socket, sys
import numpy as np
from mpi4py import MPI
import collectives
from collectives.topology import topology

tag = sys.argv[1]
comm = collectives.as_communicator(None)
rank = comm.rank
assert comm.size == 4, comm.size
assert socket.gethostname() == f"cc{tag}-{rank // 2}", socket.gethostname()
t = topology(comm)
assert t.hosts == ((0, 1), (2, 3)) and t.local_size == 2, t
shared = MPI.COMM_WORLD.Split_type(MPI.COMM_TYPE_SHARED)
assert shared.size == 2, f"MPICH sees {shared.size} ranks on this host"
x = np.full(1 << 18, rank + 1, dtype=np.float32)
out = collectives.allreduce(x, algorithm="two_level")
assert (out == 10).all(), out[:4]
print(f"ok rank {rank} on {socket.gethostname()};", flush=True)
"""


def _args(**kw: object) -> argparse.Namespace:
    base = {"link": "1gbit", "delay": None, "burst": None, "mtu": 1500, "hosts": None,
            "ranks_per_host": None, "np": None}
    return argparse.Namespace(**{**base, **kw})


def test_one_namespace_and_one_shaped_link_per_host() -> None:
    topo = emulate.Topology(2, 1e9, tag="7", ranks_per_host=4)
    assert topo.ranks == 8 and topo.namespaces == ["cc7-br", "cc7-0", "cc7-1"]
    cmds = emulate.setup_commands(topo)
    assert [c[3] for c in cmds if c[:3] == ["ip", "netns", "add"]] == topo.namespaces
    shaped = {(c[2], c[6]) for c in cmds if c[0] == "tc"}
    assert shaped == {("cc7-0", "ccl"), ("cc7-1", "ccl"), ("cc7-br", "ccp0"), ("cc7-br", "ccp1")}
    assert ["ip", "-n", "cc7-1", "addr", "add", "10.77.0.2/24", "dev", "ccl"] in cmds


def test_mpmd_command_starts_each_hosts_ranks_under_its_hostname() -> None:
    topo = emulate.Topology(2, 1e10, tag="9", ranks_per_host=2)
    env = ["env", "-u", "COMPCOLL_HOST", "MPIR_CVAR_NUM_CLIQUES=2", "MPIR_CVAR_CLIQUES_BY_BLOCK=1",
           "MPIR_CVAR_CH4_NETMOD=ofi", "FI_PROVIDER=tcp", "FI_TCP_IFACE=ccl",
           "COMPCOLL_EMULATED_LINK=10000000000", "python", "app.py"]

    def host(h: int) -> list[str]:
        return ["-n", "2", "ip", "netns", "exec", f"cc9-{h}", "unshare", "--uts", "sh", "-c",
                'hostname "$0" && exec "$@"', f"cc9-{h}", *env]

    assert emulate.mpmd_command("mpiexec", topo, ["python", "app.py"]) == [
        "mpiexec", *host(0), ":", *host(1)]
    # one rank per host keeps MPICH off shared memory entirely, as before
    flat = emulate.rank_command(emulate.Topology(3, 1e9, tag="9"), 2, ["app"])
    assert "MPIR_CVAR_NOLOCAL=1" in flat and not any("CLIQUES" in a for a in flat)
    assert flat[flat.index("-c") + 2] == "cc9-2"


def test_the_sh_wrapper_sets_the_hostname_and_passes_arguments_untouched() -> None:
    if shutil.which("sh") is None:
        pytest.skip("needs sh")
    cmd = emulate.rank_command(emulate.Topology(2, 1e9, tag="5"), 1, ["printf", "%s|", "a b",
                                                                      "$HOME", "'q'"])
    wrapper = cmd[cmd.index("sh"):cmd.index("env")]
    # with "hostname" replaced by echo, the wrapper prints the name and runs the program as is
    script = wrapper[2].replace("hostname", "echo")
    out = subprocess.run(["sh", "-c", script, *wrapper[3:], "printf", "%s|", "a b", "$HOME",
                          "'q'"], capture_output=True, text=True, check=True).stdout
    assert out == "cc5-1\na b|$HOME|'q'|"


def test_missing_unshare_is_named_but_cleanup_does_not_need_it(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emulate.shutil, "which", lambda tool: None if tool == "unshare" else tool)
    monkeypatch.setattr(emulate.os, "geteuid", lambda: 0)
    with pytest.raises(RuntimeError, match=r"need unshare \(util-linux\)"):
        emulate.check_host()
    emulate.check_host(launch=False)


@pytest.mark.parametrize(("given", "layout"), [
    ({"hosts": 2, "ranks_per_host": 3}, (2, 3)),
    ({"hosts": 2, "ranks_per_host": 3, "np": 6}, (2, 3)),
    ({"hosts": 3, "np": 6}, (3, 2)),
    ({"hosts": 3}, (3, 1)),
    ({"ranks_per_host": 2, "np": 8}, (4, 2)),
    ({"np": 4}, (4, 1)),
])
def test_layout_from_hosts_ranks_per_host_and_np(given: dict, layout: tuple[int, int]) -> None:
    topo = emulated.topology(_args(**given))
    assert (topo.hosts, topo.ranks_per_host) == layout


def test_layouts_that_cannot_work_are_refused(capsys: pytest.CaptureFixture[str]) -> None:
    base = ["-b", "1K", "-e", "1K"]
    says = refused("bench", "allreduce", "--link", "1gbit", "--hosts", "2", "--ranks-per-host",
                   "2", "-np", "3", *base, capsys=capsys)
    assert "-np 3" in says and "4 ranks" in says
    says = refused("bench", "allreduce", "--link", "1gbit", "--hosts", "1", "--ranks-per-host",
                   "4", *base, capsys=capsys)
    assert ">= 2 hosts" in says
    says = refused("bench", "allreduce", "--link", "1gbit", "--ranks-per-host", "2", *base,
                   capsys=capsys)
    assert "needs --hosts" in says
    for cmd in (["bench", "allreduce", *base], ["bench", "compressed", "-s", "1K"],
                ["bench", "tta", "--steps", "10"]):
        says = refused(*cmd, "--hosts", "2", "--ranks-per-host", "2", capsys=capsys)
        assert "add --link" in says, cmd


def test_results_record_hosts_ranks_per_host_and_rate() -> None:
    args = _args(hosts=2, ranks_per_host=2)
    info = emulated.describe(args, 4)
    assert info is not None
    assert (info["hosts"], info["ranks_per_host"], info["rate_bps"]) == (2, 2, 1e9)
    assert "inside a host MPICH shared memory" in info["transport"]
    assert emulated.label(args, 4) == "2 hosts x 2 ranks, 1gbit links"
    # in a rank, -np is gone from the command line: the layout follows from the world size
    assert emulated.label(_args(hosts=3), 6) == "3 hosts x 2 ranks, 1gbit links"
    assert emulated.label(_args(np=3), 3) == "3 hosts x 1 rank, 1gbit links"
    assert emulated.describe(_args(link=None), 4) is None and emulated.label(_args(link=None),
                                                                              4) == ""


def _run(cmd: list[str], timeout: float, env: dict[str, str]) -> subprocess.CompletedProcess:
    """``cmd`` in its own process group, killed whole past ``timeout`` seconds."""
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("PMI_", "PMIX_",
                                                                         "HYDRA_"))}
    environ.update(env)
    proc = subprocess.Popen(cmd, env=environ, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)  # mpiexec, its proxy and the ranks
        proc.communicate()
        pytest.fail(f"{' '.join(cmd[:3])} ... ran past {timeout} s")
    return subprocess.CompletedProcess(cmd, proc.returncode, out, err)


@needs_root
@pytest.mark.mpi
def test_two_hosts_of_two_ranks_look_like_two_hosts(tmp_path: Path) -> None:
    from compcoll_bench.commands.launch import find_mpiexec

    mpiexec = find_mpiexec()
    if mpiexec is None:
        pytest.skip("needs MPICH's mpiexec")
    script = tmp_path / "ranks.py"
    script.write_text(RANK_SCRIPT)
    topo = emulate.Topology(2, 1e10, ranks_per_host=2)  # named after this process
    try:
        with Cluster(topo) as cluster:
            res = _run(emulate.mpmd_command(mpiexec, topo, [sys.executable, str(script),
                                                            topo.tag]), timeout=90,
                       env={"COMPCOLL_HOST": "one-for-all"})  # the hostnames must win
            assert res.returncode == 0, res.stdout + res.stderr
            # the ranks' lines may interleave in mpiexec's output: each ends with ";"
            seen = sorted(re.findall(r"ok rank (\d+) on ([\w-]+);", res.stdout))
            assert seen == [(str(r), topo.ns(r // 2)) for r in range(4)], res.stdout
            stats = cluster.qdisc_stats()
            assert "rate 10Gbit" in stats and "Sent 0 bytes" not in stats, stats
    finally:
        assert not set(topo.namespaces) & set(emulate.existing())


@needs_root
@pytest.mark.mpi
def test_bench_allreduce_runs_on_hosts_and_records_them(tmp_path: Path) -> None:
    before = set(emulate.leftovers(emulate.existing()))
    out = tmp_path / "out.json"
    res = compcoll("bench", "allreduce", "--hosts", "2", "--ranks-per-host", "2", "--link",
                   "10gbit", "-b", "64K", "-e", "64K", "--algo", "two_level", "-n", "1", "-w",
                   "0", "--json", str(out), timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "4 ranks, 2 hosts x 2 ranks, 10gbit links" in res.stdout, res.stdout
    link = json.loads(out.read_text())["link"]
    assert (link["hosts"], link["ranks_per_host"], link["rate"]) == (2, 2, "10gbit")
    assert set(emulate.leftovers(emulate.existing())) == before
