"""Hosts and the two-level allreduce: host keys, grouping and sub-communicator plumbing in one
process; the algorithm on hosts emulated through COMPCOLL_HOST under mpiexec."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from collectives.algorithms import REGISTRY, two_level
from collectives.errors import CollectiveTimeout, CommunicatorUnusable
from collectives.topology import Topology, boot_id, digest, host_key
from collectives.transport.base import Communicator, Request
from tests.mpirun import LAUNCHES, Script, passed

TORCHRUN = {"LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "4", "RANK": "5"}


def test_the_override_wins_over_torchrun_and_the_host() -> None:
    assert host_key({"COMPCOLL_HOST": "a", **TORCHRUN, "GROUP_RANK": "1"}) == "override:a"
    assert host_key({"COMPCOLL_HOST": "a"}) != host_key({"COMPCOLL_HOST": "b"})
    blank = host_key({"COMPCOLL_HOST": "  "}, hostname="n1", boot="x")
    assert blank == host_key({}, hostname="n1", boot="x")  # an empty override is no override


def test_torchrun_nodes_come_from_group_rank_or_the_first_rank_of_the_node() -> None:
    node = {**TORCHRUN, "GROUP_RANK": "1"}
    assert host_key(node) == host_key({**node, "LOCAL_RANK": "3", "RANK": "7"})
    assert host_key(node) != host_key({**node, "GROUP_RANK": "2"})
    # Without GROUP_RANK: ranks 4..7 with local ranks 0..3 are one node, rank 8 starts another.
    keys = {host_key({**TORCHRUN, "RANK": str(r), "LOCAL_RANK": str(r % 4)}) for r in range(4, 8)}
    assert len(keys) == 1
    assert host_key({**TORCHRUN, "RANK": "8", "LOCAL_RANK": "0"}) not in keys
    # LOCAL_RANK alone does not say which node: the host decides.
    assert host_key({"LOCAL_RANK": "0"}, hostname="n1", boot="x") == \
        host_key({}, hostname="n1", boot="x")


def test_the_boot_id_keeps_machines_that_share_a_hostname_apart(tmp_path: Path) -> None:
    assert host_key({}, hostname="node", boot="b1") != host_key({}, hostname="node", boot="b2")
    assert host_key({}, hostname="node", boot="b1") == host_key({}, hostname="node", boot="b1")
    assert host_key({}, hostname="n1", boot="b") != host_key({}, hostname="n2", boot="b")
    f = tmp_path / "boot_id"
    f.write_text("3f0c-11\n")
    assert boot_id(f) == "3f0c-11" and boot_id(tmp_path / "absent") == ""
    assert f"boot:{boot_id()}" in host_key({})


def test_digests_are_two_words_and_tell_keys_apart() -> None:
    d = digest("host:a boot:1")
    assert len(d) == 2 and all(isinstance(x, int) for x in d)
    assert d == digest("host:a boot:1") != digest("host:a boot:2")


@pytest.mark.parametrize(("keys", "hosts", "uniform", "contiguous"), [
    ("aabb", ((0, 1), (2, 3)), True, True),
    ("abab", ((0, 2), (1, 3)), True, False),
    ("aaab", ((0, 1, 2), (3,)), False, True),
    ("babba", ((0, 2, 3), (1, 4)), False, False),
    ("aaaa", ((0, 1, 2, 3),), True, True),
    ("abc", ((0,), (1,), (2,)), True, True),
])
def test_ranks_are_grouped_by_key_in_rank_order(keys: str, hosts, uniform: bool,
                                                 contiguous: bool) -> None:
    for rank in range(len(keys)):
        t = Topology.from_keys(list(keys), rank)
        mine = next(h for h in hosts if rank in h)
        assert (t.hosts, t.n_hosts, t.uniform, t.contiguous) == (hosts, len(hosts), uniform,
                                                                 contiguous)
        assert t.host_of_rank == tuple(next(i for i, h in enumerate(hosts) if r in h)
                                       for r in range(len(keys)))
        assert (t.host_index, t.local_rank, t.local_size) == (hosts.index(mine),
                                                              mine.index(rank), len(mine))
        assert t.sizes == tuple(len(h) for h in hosts)


class _Pending(Request):
    def test(self) -> bool:
        return False


class _Fake(Communicator):
    """Posts requests that never complete; enough to see what a sub-communicator reports."""

    engine = "fake"

    def __init__(self, rank: int, size: int) -> None:
        super().__init__()
        self._rank, self._size = rank, size

    rank = property(lambda self: self._rank)
    size = property(lambda self: self._size)

    def isend(self, buf, dest, tag, what="send"):
        self._count_sent(buf.nbytes)
        return self._track(_Pending(dest, what))

    def irecv(self, buf, source, tag, what="recv"):
        return self._track(_Pending(source, what))

    def iallgather_ints(self, values, out):
        raise AssertionError("not used")


def test_a_sub_communicator_names_peers_as_its_parent_and_fails_it() -> None:
    from collectives.transport.waiting import wait_all

    parent, sub = _Fake(3, 6), _Fake(1, 3)
    sub.parent, sub.parent_ranks, sub.label = parent, (1, 3, 5), "cross-host"
    req = sub.isend(np.zeros(4, np.float32), 2, 7, "ring allgather step 0")
    assert (req.peer, req.what) == (5, "cross-host ring allgather step 0")
    assert parent.bytes_sent == sub.bytes_sent == 16
    with pytest.raises(CollectiveTimeout, match="rank 5"):
        wait_all([req], collective="allreduce[two_level]", timeout=0.05)
    with pytest.raises(CommunicatorUnusable):
        parent.check_usable()
    other = _Fake(0, 3)
    other.parent = parent
    with pytest.raises(CommunicatorUnusable):  # a sibling refuses too
        other.check_usable()


def test_an_engine_without_sub_communicators_says_what_works() -> None:
    from collectives.transport.split import split_by

    class _Gather(_Fake):
        def iallgather_ints(self, values, out):
            out[...] = values
            return _Done(None, "allgather")

    with pytest.raises(TypeError, match="mpi4py communicator or a torch.distributed group"):
        split_by(_Gather(0, 1), 0, 0)
    with pytest.raises(ValueError, match="non-negative"):
        split_by(_Gather(0, 1), -2, 0)


class _Done(Request):
    def test(self) -> bool:
        return True


def test_two_level_is_registered_priced_and_refuses_itself_across_hosts(monkeypatch) -> None:
    entry = REGISTRY["two_level"]
    assert entry.ours and entry.cost is two_level.cost  # per link class (costmodel)
    monkeypatch.setattr(two_level, "CROSS", "two_level")
    with pytest.raises(ValueError, match="flat algorithm"):
        two_level.cross_algorithm()


@pytest.mark.parametrize(("hosts", "local"), [(2, 2), (2, 3), (3, 2), (4, 1), (1, 4), (5, 7)])
def test_two_level_sends_what_the_flat_ring_does(hosts: int, local: int) -> None:
    """Inside: 2(L-1)/L n; across: 2(H-1)/H of an n/L shard; together 2(p-1)/p n."""
    n, p = 1 << 20, hosts * local
    parts = 2 * (local - 1) / local * n + 2 * (hosts - 1) / hosts * n / local
    assert two_level.wire_bytes(p, n) == pytest.approx(parts)
    assert two_level.wire_bytes(p, n) == pytest.approx(REGISTRY["ring"].wire_bytes(p, n))


# Layouts: "AxB" A hosts of B ranks, "3+1" consecutive hosts of 3 and 1, "0,1,0,1" the host
# of each rank; "full:" runs every dtype and op (see tests/mpi/two_level.py).
LAYOUTS = {
    4: ("full:2x2", "full:3+1", "0,1,0,1", "--torch", "--timeout"),
    5: ("0,1,1,0,1", "1x5", "5x1"),
    6: ("full:2x3", "3x2"),
}
LAUNCHES.add(*[Script("two_level.py", n, args, timeout=240) for n, args in LAYOUTS.items()])


@pytest.mark.mpi
@pytest.mark.parametrize("np_", sorted(LAYOUTS))
def test_two_level_allreduce_on_emulated_hosts(np_: int) -> None:
    passed(LAUNCHES.result("two_level.py", np_, *LAYOUTS[np_]), "two-level")
