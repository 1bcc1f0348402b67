"""Running commands on an emulated cluster (``--link``) and ``compcoll emulate cleanup``."""

from __future__ import annotations

import argparse
import atexit
import os
import signal
import subprocess
import sys
from types import FrameType
from typing import Any

from .. import emulate
from ..registry import UsageError, command
from . import checks
from .launch import find_mpiexec, without_np

NETEM_MISSING = ("--delay needs the kernel's netem qdisc (sch_netem), which this kernel ({}) "
                 "does not have: 'tc qdisc add ... netem' says the qdisc kind is unknown. Load "
                 "it (modprobe sch_netem) or use a kernel built with CONFIG_NET_SCH_NETEM; "
                 "--link without --delay works here")


#: Said under compressed rows timed without ``--link``: where compression pays.
SHARED_MEMORY_HINT = ("compressed rows ran on this machine's shared memory, where moving a byte "
                      "costs about what compressing it does; compression pays across hosts: "
                      "try --link 1gbit (emulated hosts: root, ip, tc)")


class SetupError(RuntimeError):
    """A command building the emulated cluster failed."""


class Cluster:
    """Context manager: build ``topo`` on enter, delete every namespace of it on exit.

    Teardown is idempotent and also runs on SIGTERM/SIGHUP (turned into ``SystemExit``) and at
    interpreter exit, so an interrupted run leaves nothing behind; ``compcoll emulate cleanup``
    removes what a killed (SIGKILL) run could not.
    """

    def __init__(self, topo: emulate.Topology) -> None:
        self.topo = topo
        self._created: list[str] = []
        self._saved: dict[int, object] = {}

    def __enter__(self) -> Cluster:
        emulate.check_host()
        clash = set(self.topo.namespaces) & set(emulate.existing())
        if clash:
            raise SetupError(f"namespace(s) {sorted(clash)} already exist; run 'compcoll "
                             "emulate cleanup'")
        atexit.register(self.close)
        for sig in (signal.SIGTERM, signal.SIGHUP):
            self._saved[sig] = signal.signal(sig, _exit_on_signal)
        try:
            for cmd in emulate.setup_commands(self.topo):
                if cmd[:3] == ["ip", "netns", "add"]:
                    self._created.append(cmd[3])
                res = subprocess.run(cmd, capture_output=True, text=True)
                if res.returncode != 0:
                    raise SetupError(_explain(cmd, res.stderr.strip()))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Delete the namespaces created so far (their veths and qdiscs go with them)."""
        names, self._created = self._created, []
        present = set(emulate.existing()) if names else set()
        for cmd in emulate.teardown_commands([n for n in names if n in present]):
            subprocess.run(cmd, capture_output=True, text=True)
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)  # type: ignore[arg-type]
        self._saved.clear()
        atexit.unregister(self.close)

    def qdisc_stats(self) -> str:
        """``tc -s qdisc`` of every host's link (bytes sent through each shaper)."""
        out = []
        for h in range(self.topo.hosts):
            res = subprocess.run(["tc", "-s", "-n", self.topo.ns(h), "qdisc", "show", "dev",
                                  emulate.RANK_IF], capture_output=True, text=True)
            out.append(f"# host {h} {emulate.RANK_IF}: " + " ".join(res.stdout.split()))
        return "\n".join(out)


def _exit_on_signal(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _explain(cmd: list[str], err: str) -> str:
    if "netem" in cmd and "unknown" in err.lower():
        return NETEM_MISSING.format(os.uname().release)
    return f"{' '.join(cmd)} failed: {err or 'no message'}"


def check_arguments(args: argparse.Namespace) -> None:
    """Refuse emulation options that need ``--link`` without it (``UsageError``)."""
    if args.link:
        return
    if args.delay or args.burst or args.mtu != 1500:
        raise UsageError("--delay, --burst and --mtu shape an emulated link; add --link RATE")
    if args.hosts or args.ranks_per_host:
        raise UsageError("--hosts and --ranks-per-host lay out an emulated cluster; add --link "
                         "RATE (e.g. --link 10gbit)")


def _layout(args: argparse.Namespace) -> tuple[int, int]:
    """(hosts, ranks per host) from ``--hosts``, ``--ranks-per-host`` and ``-np``."""
    hosts, per, np_ = args.hosts, args.ranks_per_host, args.np
    if hosts is None and per is None:
        if not np_ or np_ < 2:
            raise UsageError("--link needs -np N with N >= 2 (one host of one rank each), or "
                             "--hosts H [--ranks-per-host L]")
        return np_, 1
    if hosts is None:
        if not np_ or np_ % per:
            raise UsageError(f"--ranks-per-host {per} needs --hosts H (or -np N, a multiple "
                             f"of {per})")
        return np_ // per, per
    if per is None:
        if np_ and np_ % hosts:
            raise UsageError(f"-np {np_} ranks do not fill --hosts {hosts} evenly; give -np "
                             f"as a multiple of {hosts}, or --ranks-per-host")
        return hosts, np_ // hosts if np_ else 1
    if np_ and np_ != hosts * per:
        raise UsageError(f"-np {np_} but --hosts {hosts} x --ranks-per-host {per} is "
                         f"{hosts * per} ranks; drop -np or make it {hosts * per}")
    return hosts, per


def topology(args: argparse.Namespace) -> emulate.Topology:
    """The cluster asked for by ``--link``/``--delay``/``--burst``/``--mtu``, ``--hosts``,
    ``--ranks-per-host`` and ``-np``."""
    hosts, per = _layout(args)
    try:
        return emulate.Topology(hosts, emulate.parse_rate(args.link),
                                emulate.parse_duration(args.delay) if args.delay else 0.0,
                                args.burst, mtu=args.mtu, ranks_per_host=per)
    except ValueError as exc:
        raise UsageError(str(exc)) from None


def describe(args: argparse.Namespace, ranks: int) -> dict[str, Any] | None:
    """The emulated cluster a run of ``ranks`` ranks ran on, for result files (None without
    ``--link``: the machine's own interconnect)."""
    if not args.link:
        return None
    rate = emulate.parse_rate(args.link)
    per = args.ranks_per_host or (ranks // args.hosts if args.hosts else 1)
    return {"rate": args.link, "rate_bps": rate, "hosts": ranks // per, "ranks_per_host": per,
            "delay_s": emulate.parse_duration(args.delay) if args.delay else 0.0,
            "burst_bytes": args.burst or emulate.default_burst(rate), "mtu": args.mtu,
            "transport": "one veth per host, tc tbf both ways; MPICH ch4 ofi tcp between "
                         "hosts" + ("; inside a host MPICH shared memory, sockets (gloo) over lo"
                                    if per > 1 else "")}


def label(args: argparse.Namespace, ranks: int) -> str:
    """``2 hosts x 2 ranks, 1gbit links`` (with the delay if any); "" without ``--link``."""
    link = describe(args, ranks)
    if link is None:
        return ""
    delay = f", {args.delay} delay" if args.delay else ""
    return (f"{link['hosts']} hosts x {link['ranks_per_host']} rank"
            f"{'s' if link['ranks_per_host'] > 1 else ''}, {args.link} links{delay}")


def inside() -> bool:
    """True in a rank started by ``run_on_cluster``."""
    return emulate.INSIDE in os.environ


def run_on_cluster(topo: emulate.Topology, argv: list[str], stats: bool = True) -> int:
    """Run ``python -m compcoll_bench argv`` on ``topo``: its ranks per host namespace."""
    mpiexec = find_mpiexec()
    if mpiexec is None:
        raise SystemExit("compcoll: --link needs MPICH's mpiexec (Hydra); pip install mpich")
    try:
        with Cluster(topo) as cluster:
            cmd = emulate.mpmd_command(mpiexec, topo,
                                       [sys.executable, "-m", "compcoll_bench", *without_np(argv)])
            proc = subprocess.Popen(cmd)
            try:
                code = proc.wait()
            finally:
                if proc.poll() is None:
                    proc.terminate()
                    try:
                        proc.wait(timeout=10)
                    except subprocess.TimeoutExpired:
                        proc.kill()
                        proc.wait()
            if stats:
                print(cluster.qdisc_stats(), file=sys.stderr)
            return code
    except (RuntimeError, ValueError) as exc:
        raise SystemExit(f"compcoll: {exc}") from None


def add_link_arguments(p: argparse.ArgumentParser) -> None:
    g = p.add_argument_group("emulated cluster (root, iproute2, unshare; MPICH over TCP "
                             "between hosts)")
    g.add_argument("--link", metavar="RATE",
                   help="run each host (one rank, or --ranks-per-host) in its own network "
                        "namespace with its own hostname, behind a RATE link (e.g. 1gbit) "
                        "shaped with tc tbf both ways")
    g.add_argument("--hosts", type=checks.positive_int, metavar="H",
                   help="emulated hosts (default: -np of them, one rank each); -np may be "
                        "left out, or must be H x L")
    g.add_argument("--ranks-per-host", type=checks.positive_int, metavar="L",
                   help="ranks on each host, talking through shared memory (MPI) or the "
                        "host's loopback (sockets); they share the host's link (default 1)")
    g.add_argument("--delay", metavar="TIME",
                   help="one-way link delay (e.g. 50us); needs the kernel's netem qdisc")
    g.add_argument("--burst", type=checks.positive_int, metavar="BYTES",
                   help="tbf bucket size (default: 2 ms at the rate, at least 64 KiB)")
    g.add_argument("--mtu", type=checks.positive_int, default=1500,
                   help="MTU of every link (default 1500; 9000 for jumbo frames)")


def _cleanup_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--all", action="store_true",
                   help="also remove namespaces of emulated clusters still running")
    p.add_argument("--dry-run", action="store_true", help="list what would be removed")


@command("emulate cleanup", arguments=_cleanup_arguments)
def cleanup(args: argparse.Namespace) -> int:
    try:
        emulate.check_host(launch=False)
    except RuntimeError as exc:
        raise SystemExit(f"compcoll: {exc}") from None
    names = emulate.leftovers(emulate.existing(), everything=args.all)
    for cmd in emulate.teardown_commands(names):
        if not args.dry_run:
            subprocess.run(cmd, capture_output=True, text=True)
    verb = "would remove" if args.dry_run else "removed"
    print(f"{verb} {len(names)} namespace(s){': ' + ' '.join(names) if names else ''}")
    return 0
