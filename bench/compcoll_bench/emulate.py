"""An emulated cluster on one machine: one network namespace per rank, links shaped by ``tc``.

Topology (all inside namespaces this module creates, named ``cc<pid>-<i>`` and ``cc<pid>-br``;
the host's own interfaces, routes and addresses are never touched)::

    cc<pid>-0: lo, ccl (10.77.0.1/24) ==veth== ccp0 -+
    cc<pid>-1: lo, ccl (10.77.0.2/24) ==veth== ccp1 -+- ccbr (bridge, in cc<pid>-br)
    ...

Every link is shaped in both directions: a ``tbf`` qdisc on the egress of the rank-side veth
(what the rank sends) and one on the egress of the bridge-side veth (what it receives), so a
rank has a full-duplex port of the given rate, like a host on a switch. With a delay, a
``netem`` qdisc sits above each ``tbf`` and adds half the delay per hop (one way = the delay).

The functions building command lists are pure (unit-testable without root);
``compcoll_bench.commands.emulate.Cluster`` runs them and always tears down.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from dataclasses import dataclass, field

PREFIX = "cc"
RANK_IF, BRIDGE = "ccl", "ccbr"
#: Names of the namespaces this module creates; the number is the creating process's id.
NAME_RE = re.compile(rf"^{PREFIX}(\d+)-(\d+|br)$")
#: Marks a process started inside an emulated cluster (so it does not start another one).
INSIDE = "COMPCOLL_EMULATED_LINK"
# MPICH: no shared memory between ranks, libfabric's TCP provider on the namespace's veth.
MPI_ENV = {"MPIR_CVAR_NOLOCAL": "1", "MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp",
           "FI_TCP_IFACE": RANK_IF}

_RATE_UNITS = {"bit": 1, "kbit": 1e3, "mbit": 1e6, "gbit": 1e9, "tbit": 1e12}
_TIME_UNITS = {"ns": 1e-9, "us": 1e-6, "ms": 1e-3, "s": 1.0}


def parse_rate(text: str) -> float:
    """Bits per second from tc-style text: ``1gbit``, ``100mbit``, ``2.5gbit`` (powers of 1000)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*([a-zA-Z]*)\s*", text)
    unit = m.group(2).lower() if m else ""
    if m is None or unit not in _RATE_UNITS or float(m.group(1)) <= 0:
        raise ValueError(f"{text!r} is not a link rate; use e.g. 100mbit, 1gbit, 100gbit "
                         "(bits per second, as tc writes them)")
    return float(m.group(1)) * _RATE_UNITS[unit]


def parse_duration(text: str) -> float:
    """Seconds from ``2us``, ``0.5ms``, ``1s`` (a bare number is seconds)."""
    m = re.fullmatch(r"\s*(\d+(?:\.\d+)?(?:e-?\d+)?)\s*([a-z]*)\s*", text)
    unit = (m.group(2) or "s") if m else ""
    if m is None or unit not in _TIME_UNITS:
        raise ValueError(f"{text!r} is not a duration; use e.g. 2us, 0.5ms, 1s")
    return float(m.group(1)) * _TIME_UNITS[unit]


def default_burst(rate_bps: float) -> int:
    """tbf bucket: 2 ms at the rate, at least 64 KiB (one GSO packet must fit in the bucket)."""
    return max(64 << 10, int(rate_bps / 8 * 2e-3))


@dataclass(frozen=True)
class Topology:
    """What to build: ``ranks`` namespaces on one bridge, each link ``rate_bps`` both ways."""

    ranks: int
    rate_bps: float
    delay_s: float = 0.0
    burst: int | None = None
    queue_s: float = 0.02  # tbf "latency": how long a packet may wait in the bucket's queue
    mtu: int = 1500
    tag: str = field(default_factory=lambda: str(os.getpid()))  # the creating process

    def __post_init__(self) -> None:
        if self.ranks < 2:
            raise ValueError(f"an emulated cluster needs >= 2 ranks, got {self.ranks}")
        if self.ranks > 250:
            raise ValueError(f"at most 250 ranks fit in 10.77.0.0/24, got {self.ranks}")
        if not self.rate_bps > 0 or self.delay_s < 0:
            raise ValueError("the link rate must be > 0 and the delay >= 0")
        if not 1280 <= self.mtu <= 65535:
            raise ValueError(f"the MTU must be in 1280..65535, got {self.mtu}")

    def ns(self, i: int | str) -> str:
        return f"{PREFIX}{self.tag}-{i}"

    @property
    def namespaces(self) -> list[str]:
        return [self.ns("br"), *(self.ns(i) for i in range(self.ranks))]


def address(i: int) -> str:
    return f"10.77.0.{i + 1}"


def shaping_commands(ns: str, dev: str, topo: Topology) -> list[list[str]]:
    """tc commands limiting the egress of ``dev`` in ``ns`` (netem above tbf with a delay)."""
    burst = topo.burst or default_burst(topo.rate_bps)
    tbf = ["tbf", "rate", f"{int(topo.rate_bps)}bit", "burst", str(burst),
           "latency", f"{int(topo.queue_s * 1e6)}us"]
    tc = ["tc", "-n", ns, "qdisc", "add", "dev", dev]
    if topo.delay_s <= 0:
        return [[*tc, "root", "handle", "1:", *tbf]]
    half = f"{topo.delay_s / 2 * 1e6:.3f}us"  # two shaped hops per direction: rank, bridge
    return [[*tc, "root", "handle", "1:", "netem", "delay", half],
            [*tc, "parent", "1:1", "handle", "10:", *tbf]]


def setup_commands(topo: Topology) -> list[list[str]]:
    """Every ``ip``/``tc`` command building ``topo``, in order."""
    br = topo.ns("br")
    cmds = [["ip", "netns", "add", br],
            ["ip", "-n", br, "link", "add", BRIDGE, "type", "bridge"],
            ["ip", "-n", br, "link", "set", BRIDGE, "up"]]
    for i in range(topo.ranks):
        ns, port = topo.ns(i), f"ccp{i}"
        cmds += [["ip", "netns", "add", ns],
                 ["ip", "link", "add", RANK_IF, "mtu", str(topo.mtu), "netns", ns, "type",
                  "veth", "peer", "name", port, "mtu", str(topo.mtu), "netns", br],
                 ["ip", "-n", ns, "link", "set", "lo", "up"],
                 ["ip", "-n", ns, "addr", "add", f"{address(i)}/24", "dev", RANK_IF],
                 ["ip", "-n", ns, "link", "set", RANK_IF, "up"],
                 ["ip", "-n", br, "link", "set", port, "master", BRIDGE],
                 ["ip", "-n", br, "link", "set", port, "up"],
                 *shaping_commands(ns, RANK_IF, topo),
                 *shaping_commands(br, port, topo)]
    return cmds


def teardown_commands(names: list[str]) -> list[list[str]]:
    """Deleting a namespace deletes its veth ends (and so the pairs) and the bridge."""
    return [["ip", "netns", "delete", n] for n in names]


def rank_command(topo: Topology, i: int, program: list[str]) -> list[str]:
    """``program`` run as rank ``i``: inside its namespace, MPI forced onto TCP over the link."""
    env = [f"{k}={v}" for k, v in {**MPI_ENV, INSIDE: f"{int(topo.rate_bps)}"}.items()]
    return ["ip", "netns", "exec", topo.ns(i), "env", *env, *program]


def mpmd_command(mpiexec: str, topo: Topology, program: list[str]) -> list[str]:
    """One ``mpiexec`` starting one rank per namespace (Hydra's MPMD ``:`` syntax).

    Hydra's proxies stay in the root namespace and hand each rank its PMI connection as an
    inherited file descriptor, so the control path needs no route into the namespaces.
    """
    cmd = [mpiexec]
    for i in range(topo.ranks):
        cmd += ([":"] if i else []) + ["-n", "1", *rank_command(topo, i, program)]
    return cmd


def existing() -> list[str]:
    """Namespaces on this machine (``ip netns list``), names only."""
    out = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True, check=True)
    return [line.split()[0] for line in out.stdout.splitlines() if line.strip()]


def leftovers(names: list[str], everything: bool = False) -> list[str]:
    """Our namespaces among ``names`` whose creating process is gone (all of ours with
    ``everything``)."""
    mine = [(n, int(m.group(1))) for n in names if (m := NAME_RE.match(n))]
    return [n for n, pid in mine if everything or not _alive(pid)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def check_host() -> None:
    """Raise ``RuntimeError`` saying what is missing to build namespaces here."""
    missing = [tool for tool in ("ip", "tc") if shutil.which(tool) is None]
    if missing:
        raise RuntimeError(f"emulated links need {' and '.join(missing)} (iproute2); install "
                           "it, e.g. apt-get install iproute2")
    if os.geteuid() != 0:
        raise RuntimeError("emulated links create network namespaces and tc qdiscs, which "
                           "needs root (CAP_NET_ADMIN); run as root or with sudo")
