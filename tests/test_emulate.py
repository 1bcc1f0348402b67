"""Emulated cluster: the ip/tc commands (pure, no root) and, as root, build/teardown and a run."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from compcoll_bench import emulate
from compcoll_bench.cli import main
from compcoll_bench.commands.emulate import Cluster
from tests.test_cli import compcoll

ROOT = os.geteuid() == 0 and shutil.which("ip") is not None and shutil.which("tc") is not None
needs_root = pytest.mark.skipif(not ROOT, reason="needs root and iproute2 (ip, tc)")


def test_rate_and_duration_parsing() -> None:
    assert emulate.parse_rate("1gbit") == 1e9
    assert emulate.parse_rate("2.5Gbit") == 2.5e9
    assert emulate.parse_rate("100mbit") == 1e8
    assert emulate.parse_duration("2us") == pytest.approx(2e-6)
    assert emulate.parse_duration("0.5ms") == pytest.approx(5e-4)
    for bad in ("1gbps", "fast", "0bit", ""):
        with pytest.raises(ValueError, match="link rate"):
            emulate.parse_rate(bad)
    with pytest.raises(ValueError, match="duration"):
        emulate.parse_duration("2 fortnights")


def test_setup_shapes_both_directions_of_every_link() -> None:
    topo = emulate.Topology(3, 1e9, tag="7")
    cmds = emulate.setup_commands(topo)
    assert cmds[0] == ["ip", "netns", "add", "cc7-br"]
    qdiscs = [c for c in cmds if c[0] == "tc"]
    shaped = {(c[2], c[6]) for c in qdiscs}
    assert shaped == {(f"cc7-{i}", "ccl") for i in range(3)} | {("cc7-br", f"ccp{i}")
                                                                 for i in range(3)}
    assert all("tbf" in c and "1000000000bit" in c for c in qdiscs)
    # nothing is ever done to the root namespace's devices: every link command names a netns
    for c in cmds:
        assert c[:2] == ["ip", "netns"] or c[1] == "-n" or "netns" in c
    assert ["ip", "-n", "cc7-2", "addr", "add", "10.77.0.3/24", "dev", "ccl"] in cmds
    veths = [c for c in cmds if c[:3] == ["ip", "link", "add"]]
    assert len(veths) == 3 and all(c.count("1500") == 2 for c in veths)  # both ends' MTU
    assert emulate.teardown_commands(topo.namespaces)[-1] == ["ip", "netns", "delete", "cc7-2"]


def test_delay_puts_netem_above_tbf_with_half_the_delay_per_hop() -> None:
    cmds = emulate.shaping_commands("ns", "ccl", emulate.Topology(2, 1e9, delay_s=1e-4))
    assert "netem" in cmds[0] and "50.000us" in cmds[0]
    assert cmds[1][cmds[1].index("parent") + 1] == "1:1" and "tbf" in cmds[1]


def test_mpmd_command_runs_one_rank_per_namespace_over_tcp() -> None:
    topo = emulate.Topology(2, 1e9, tag="9")
    cmd = emulate.mpmd_command("mpiexec", topo, ["python", "-m", "compcoll_bench"])
    assert cmd.count(":") == 1 and cmd.count("-n") == 2
    assert cmd[3:7] == ["ip", "netns", "exec", "cc9-0"]
    assert "FI_TCP_IFACE=ccl" in cmd and "MPIR_CVAR_NOLOCAL=1" in cmd


def test_leftovers_are_ours_and_dead_only() -> None:
    names = ["cc999999999-0", "cc999999999-br", f"cc{os.getpid()}-0", "other", "cc12x-0"]
    assert emulate.leftovers(names) == ["cc999999999-0", "cc999999999-br"]
    assert len(emulate.leftovers(names, everything=True)) == 3


def test_bad_topologies_are_refused() -> None:
    with pytest.raises(ValueError, match=">= 2 hosts"):
        emulate.Topology(1, 1e9, ranks_per_host=4)
    with pytest.raises(ValueError, match="250"):
        emulate.Topology(300, 1e9)
    with pytest.raises(ValueError, match=">= 1 rank"):
        emulate.Topology(2, 1e9, ranks_per_host=0)
    with pytest.raises(ValueError, match="MTU"):
        emulate.Topology(2, 1e9, mtu=100)


def test_link_needs_np_and_delay_needs_link(capsys: pytest.CaptureFixture[str]) -> None:
    for argv, says in ((["bench", "allreduce", "--link", "1gbit"], "-np N with N >= 2"),
                       (["bench", "allreduce", "-np", "2", "--delay", "1ms"], "add --link")):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2  # an argument error, before anything is set up
        assert says in capsys.readouterr().err


def _left_behind() -> set[str]:
    """Namespaces left behind: ours by name, their creating process gone (a cluster another
    process is running at the same time does not count)."""
    return set(emulate.leftovers(emulate.existing()))


@needs_root
def test_cluster_builds_and_tears_down() -> None:
    topo = emulate.Topology(2, 1e9)  # named after this process: cleanup finds it if killed
    with Cluster(topo) as cluster:
        assert set(topo.namespaces) <= set(emulate.existing())
        out = subprocess.run(["ip", "netns", "exec", topo.ns(0), "ip", "-o", "addr"],
                             capture_output=True, text=True, check=True).stdout
        assert "10.77.0.1/24" in out
        assert "tbf" in cluster.qdisc_stats()
        cluster.close()
        cluster.close()  # idempotent
    assert not set(topo.namespaces) & set(emulate.existing())


@needs_root
def test_delay_without_netem_fails_clearly_and_leaves_nothing() -> None:
    before = _left_behind()
    res = compcoll("bench", "allreduce", "-np", "2", "--link", "1gbit", "--delay", "50us",
                   "-b", "1K", "-e", "1K", "-n", "1", "-w", "0", timeout=60)
    if res.returncode == 0:
        pytest.skip("this kernel has netem")
    assert "netem" in res.stderr and "does not have" in res.stderr, res.stderr
    assert _left_behind() == before


@needs_root
@pytest.mark.mpi
def test_linked_run_passes_its_check_and_a_failing_one_leaves_nothing() -> None:
    before = _left_behind()
    res = compcoll("bench", "allreduce", "-np", "2", "--link", "1gbit", "-b", "1K", "-e", "64K",
                   "-f", "64", "-n", "2", "-w", "1", timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "auto:" in res.stdout and "FAILED" not in res.stderr, res.stdout + res.stderr
    assert "rate 1Gbit" in res.stderr and "Sent 0 bytes" not in res.stderr, res.stderr
    # a run failing inside the cluster (a corrupted result) tears it down as well
    res = compcoll("bench", "allreduce", "-np", "2", "--link", "1gbit", "-b", "1K", "-e", "1K",
                   "--algo", "ring", "-n", "1", "-w", "0", env={"COMPCOLL_BENCH_CORRUPT": "ring"},
                   timeout=60)
    assert res.returncode != 0, res.stdout + res.stderr
    assert _left_behind() == before, (before, _left_behind())


@needs_root
def test_cleanup_removes_namespaces_of_dead_runs_only() -> None:
    dead = "cc999999999-br"  # above any pid_max: its process cannot be alive
    subprocess.run(["ip", "netns", "add", dead], check=True)
    try:
        res = compcoll("emulate", "cleanup", "--dry-run", timeout=30)
        assert dead in res.stdout and dead in emulate.existing()
        res = compcoll("emulate", "cleanup", timeout=30)
        assert res.returncode == 0 and dead in res.stdout
        assert dead not in emulate.existing()
    finally:
        if dead in emulate.existing():
            subprocess.run(["ip", "netns", "delete", dead])


def test_missing_tools_and_missing_root_are_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(emulate.shutil, "which", lambda tool: None if tool == "tc" else tool)
    with pytest.raises(RuntimeError, match="need tc .iproute2"):
        emulate.check_host()
    monkeypatch.setattr(emulate.shutil, "which", lambda tool: tool)
    monkeypatch.setattr(emulate.os, "geteuid", lambda: 1000)
    with pytest.raises(RuntimeError, match="needs root"):
        emulate.check_host()
