"""An emulated cluster on one machine: one network namespace per host, links shaped by ``tc``.

Topology (all inside namespaces this module creates, named ``cc<pid>-<h>`` and ``cc<pid>-br``;
the host's own interfaces, routes and addresses are never touched)::

    cc<pid>-0: lo, ccl (10.77.0.1/24) ==veth== ccp0 -+
    cc<pid>-1: lo, ccl (10.77.0.2/24) ==veth== ccp1 -+- ccbr (bridge, in cc<pid>-br)
    ...

Each namespace is one host of ``ranks_per_host`` ranks (one by default), and every rank of it
runs in a UTS namespace of its own whose hostname is the namespace's name, so host detection
(hostname and boot id) groups the ranks as on a real cluster. Every link is shaped in both
directions: a ``tbf`` qdisc on the egress of the host-side veth (what the host sends) and one
on the egress of the bridge-side veth (what it receives), so a host has one full-duplex port
of the given rate, shared by its ranks, like a host on a switch. With a delay, a ``netem``
qdisc sits above each ``tbf`` and adds half the delay per hop (one way = the delay).

MPICH runs over libfabric's TCP provider on ``ccl`` between hosts. Inside a host its ranks
use shared memory, as on a real node: Hydra starts every rank from one proxy, so MPICH would
count all of them as one node (hostnames do not change that) and use shared memory across
namespaces, past the links; ``MPIR_CVAR_NUM_CLIQUES`` (one clique per host, in blocks of
consecutive ranks) makes it see one node per host. With one rank per host,
``MPIR_CVAR_NOLOCAL`` turns shared memory off altogether. Sockets between ranks of one host
(gloo's) go to the host's own address, which the kernel routes over ``lo``: unshaped.

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
#: compcoll's host override (``collectives.topology.ENV``), unset in the ranks.
HOST_ENV = "COMPCOLL_HOST"
# MPICH between hosts: libfabric's TCP provider on the host's veth (see the module's doc).
MPI_ENV = {"MPIR_CVAR_CH4_NETMOD": "ofi", "FI_PROVIDER": "tcp", "FI_TCP_IFACE": RANK_IF}

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
    """What to build: ``hosts`` namespaces on one bridge, each of ``ranks_per_host`` ranks and
    one link of ``rate_bps`` both ways."""

    hosts: int
    rate_bps: float
    delay_s: float = 0.0
    burst: int | None = None
    queue_s: float = 0.02  # tbf "latency": how long a packet may wait in the bucket's queue
    mtu: int = 1500
    tag: str = field(default_factory=lambda: str(os.getpid()))  # the creating process
    ranks_per_host: int = 1

    def __post_init__(self) -> None:
        if self.hosts < 2:
            raise ValueError(f"an emulated cluster needs >= 2 hosts, got {self.hosts} (on one "
                             "host no traffic crosses a link; run -np N without --link)")
        if self.hosts > 250:
            raise ValueError(f"at most 250 hosts fit in 10.77.0.0/24, got {self.hosts}")
        if self.ranks_per_host < 1:
            raise ValueError(f"a host needs >= 1 rank, got {self.ranks_per_host}")
        if not self.rate_bps > 0 or self.delay_s < 0:
            raise ValueError("the link rate must be > 0 and the delay >= 0")
        if not 1280 <= self.mtu <= 65535:
            raise ValueError(f"the MTU must be in 1280..65535, got {self.mtu}")

    @property
    def ranks(self) -> int:
        return self.hosts * self.ranks_per_host

    def ns(self, h: int | str) -> str:
        """Host ``h``'s namespace (``"br"``: the bridge's); also the host's hostname."""
        return f"{PREFIX}{self.tag}-{h}"

    @property
    def namespaces(self) -> list[str]:
        return [self.ns("br"), *(self.ns(h) for h in range(self.hosts))]


def address(h: int) -> str:
    """Host ``h``'s address on the bridge (the address of every rank on it)."""
    return f"10.77.0.{h + 1}"


def shaping_commands(ns: str, dev: str, topo: Topology) -> list[list[str]]:
    """tc commands limiting the egress of ``dev`` in ``ns`` (netem above tbf with a delay)."""
    burst = topo.burst or default_burst(topo.rate_bps)
    tbf = ["tbf", "rate", f"{int(topo.rate_bps)}bit", "burst", str(burst),
           "latency", f"{int(topo.queue_s * 1e6)}us"]
    tc = ["tc", "-n", ns, "qdisc", "add", "dev", dev]
    if topo.delay_s <= 0:
        return [[*tc, "root", "handle", "1:", *tbf]]
    half = f"{topo.delay_s / 2 * 1e6:.3f}us"  # two shaped hops per direction: host, bridge
    return [[*tc, "root", "handle", "1:", "netem", "delay", half],
            [*tc, "parent", "1:1", "handle", "10:", *tbf]]


def setup_commands(topo: Topology) -> list[list[str]]:
    """Every ``ip``/``tc`` command building ``topo``, in order."""
    br = topo.ns("br")
    cmds = [["ip", "netns", "add", br],
            ["ip", "-n", br, "link", "add", BRIDGE, "type", "bridge"],
            ["ip", "-n", br, "link", "set", BRIDGE, "up"]]
    for h in range(topo.hosts):
        ns, port = topo.ns(h), f"ccp{h}"
        cmds += [["ip", "netns", "add", ns],
                 ["ip", "link", "add", RANK_IF, "mtu", str(topo.mtu), "netns", ns, "type",
                  "veth", "peer", "name", port, "mtu", str(topo.mtu), "netns", br],
                 ["ip", "-n", ns, "link", "set", "lo", "up"],
                 ["ip", "-n", ns, "addr", "add", f"{address(h)}/24", "dev", RANK_IF],
                 ["ip", "-n", ns, "link", "set", RANK_IF, "up"],
                 ["ip", "-n", br, "link", "set", port, "master", BRIDGE],
                 ["ip", "-n", br, "link", "set", port, "up"],
                 *shaping_commands(ns, RANK_IF, topo),
                 *shaping_commands(br, port, topo)]
    return cmds


def teardown_commands(names: list[str]) -> list[list[str]]:
    """Deleting a namespace deletes its veth ends (and so the pairs) and the bridge."""
    return [["ip", "netns", "delete", n] for n in names]


def mpi_env(topo: Topology) -> dict[str, str]:
    """MPICH's settings in every rank: TCP on the link between hosts, shared memory inside
    one (one clique of consecutive ranks per host), none with one rank per host."""
    if topo.ranks_per_host == 1:
        return {"MPIR_CVAR_NOLOCAL": "1", **MPI_ENV}
    return {"MPIR_CVAR_NUM_CLIQUES": str(topo.hosts), "MPIR_CVAR_CLIQUES_BY_BLOCK": "1",
            **MPI_ENV}


def rank_command(topo: Topology, h: int, program: list[str]) -> list[str]:
    """``program`` run as a rank of host ``h``: in its namespace, under the host's hostname (a
    UTS namespace of its own), with MPICH's settings of :func:`mpi_env`."""
    env = [f"{k}={v}" for k, v in {**mpi_env(topo), INSIDE: f"{int(topo.rate_bps)}"}.items()]
    # sh sets the hostname ($0) and becomes the program ("$@"): no quoting of its arguments.
    # An inherited COMPCOLL_HOST would put every rank on one host: the hostname decides here.
    return ["ip", "netns", "exec", topo.ns(h), "unshare", "--uts", "sh", "-c",
            'hostname "$0" && exec "$@"', topo.ns(h), "env", "-u", HOST_ENV, *env, *program]


def mpmd_command(mpiexec: str, topo: Topology, program: list[str]) -> list[str]:
    """One ``mpiexec`` starting ``ranks_per_host`` ranks per host namespace (Hydra's MPMD ``:``
    syntax: host h gets the consecutive ranks h*L .. h*L+L-1).

    Hydra's proxies stay in the root namespace and hand each rank its PMI connection as an
    inherited file descriptor, so the control path needs no route into the namespaces.
    """
    cmd = [mpiexec]
    for h in range(topo.hosts):
        cmd += ([":"] if h else []) + ["-n", str(topo.ranks_per_host),
                                       *rank_command(topo, h, program)]
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


#: The tools building a cluster (and the package each comes in), then those starting ranks.
_TOOLS = {"ip": "iproute2", "tc": "iproute2"}
_LAUNCH_TOOLS = {"unshare": "util-linux", "hostname": "hostname"}


def check_host(launch: bool = True) -> None:
    """Raise ``RuntimeError`` saying what is missing to build namespaces here (and, with
    ``launch``, to start ranks under their hosts' hostnames)."""
    tools = {**_TOOLS, **(_LAUNCH_TOOLS if launch else {})}
    missing = [tool for tool in tools if shutil.which(tool) is None]
    if missing:
        packages = " ".join(dict.fromkeys(tools[t] for t in missing))
        raise RuntimeError(f"emulated links need {' and '.join(missing)} ({packages}); install "
                           f"it, e.g. apt-get install {packages}")
    if os.geteuid() != 0:
        raise RuntimeError("emulated links create network namespaces and tc qdiscs, which "
                           "needs root (CAP_NET_ADMIN); run as root or with sudo")
