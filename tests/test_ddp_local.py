"""DDP compression hook in one process (a gloo group of one rank): what the hook does with its
state, its session and its model, before and around the collectives."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

torch = pytest.importorskip("torch")
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402

import collectives.ddp as cddp  # noqa: E402
from collectives import Session  # noqa: E402

pytestmark = pytest.mark.timeout(120)

SPEC = "uniform:bits=4"


@pytest.fixture(autouse=True)
def group() -> Iterator[None]:
    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


def _model(width: int = 64) -> torch.nn.Module:
    torch.manual_seed(0)  # the same weights in every call: the same parameter names too
    return torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.Linear(width, 4))


def _grads(model: DDP, seed: int, width: int = 64) -> list[torch.Tensor]:
    """One backward pass on data drawn from ``seed``; the averaged gradients."""
    x = torch.randn(8, width, generator=torch.Generator().manual_seed(seed))
    model.zero_grad()
    model(x).sum().backward()
    return [p.grad.clone() for p in model.parameters()]


def _hooked(state: cddp.CompressionState, width: int = 64) -> DDP:
    model = DDP(_model(width))
    model.register_comm_hook(state.bind(model), cddp.compression_hook)
    return model


def test_two_states_sharing_a_session_keep_their_residuals_apart() -> None:
    shared = Session(SPEC, min_numel=0)
    one, two = cddp.CompressionState(policy=shared), cddp.CompressionState(policy=shared)
    _grads(_hooked(one), seed=1)  # leaves residuals under the same parameter names
    got = _grads(_hooked(two), seed=2)
    alone = _grads(_hooked(cddp.CompressionState(policy=Session(SPEC, min_numel=0))), seed=2)
    for g, want in zip(got, alone, strict=True):  # nothing of the first model's error
        assert torch.equal(g, want)
    assert (one.scope, two.scope) == ("", "ddp#1")
    assert one.feedbacks() and two.feedbacks() and one.feedbacks() != two.feedbacks()
    assert set(one.residuals()[0]) == set(two.residuals()[0])  # the same names, two stores


def _sent(state: cddp.CompressionState) -> set[str]:
    """The specs the hook's groups went out in."""
    return {spec for rec in state.timeline for _, spec, _ in rec.get("groups", [])}


@pytest.mark.parametrize(("min_numel", "compressed"), [(10**9, False), (4421, False),
                                                       (4420, True), (0, True)])
def test_the_hook_leaves_groups_under_the_sessions_min_numel_uncompressed(
        min_numel: int, compressed: bool) -> None:
    plain = DDP(_model())
    state = cddp.CompressionState(policy=Session(SPEC, min_numel=min_numel))
    hooked = _hooked(state)
    # one bucket: 64*64 + 64 + 4*64 + 4 = 4420 elements in one 4-bit group, else none
    for seed in (1, 2):  # DDP's initial buckets, then its rebuilt ones
        want, got = _grads(plain, seed), _grads(hooked, seed)
    assert _sent(state) == ({Session(SPEC).spec} if compressed else {"none"})
    if not compressed:  # DDP's average, bit for bit (one rank)
        assert all(torch.equal(g, w) for g, w in zip(got, want, strict=True))


def test_a_policy_given_without_a_session_compresses_small_groups() -> None:
    state = cddp.CompressionState(policy=SPEC)
    _grads(_hooked(state), seed=1)
    assert state.session.min_numel == 0 and _sent(state) == {Session(SPEC).spec}


def test_a_layer_sent_alone_is_measured_alone_against_min_numel() -> None:
    state = cddp.CompressionState(policy=Session("powersgd:rank=1", min_numel=300))
    _grads(_hooked(state), seed=1)
    spec = Session("powersgd:rank=1").spec
    went = {member: sp for rec in state.timeline for _, sp, members in rec.get("groups", [])
            for member in members}
    # the 64x64 matrix alone; the 4x64 one (256) and the biases together (68) under 300
    assert went == {"0.weight": spec, "1.weight": "none", "0.bias": "none", "1.bias": "none"}


@pytest.mark.parametrize("policy", ["auto", SPEC])
def test_a_state_never_bound_stops_at_the_first_hook_call(policy: str) -> None:
    model = DDP(_model(width=512))
    state = cddp.CompressionState(policy=policy)
    model.register_comm_hook(state, cddp.compression_hook)  # bind(model) forgotten
    with pytest.raises(RuntimeError, match=r"never bound .* Call state\.bind\(model\)"):
        _grads(model, seed=1, width=512)
    assert state.step == 0 and not state.timeline  # nothing was sent, nothing counted


def test_a_state_unpickled_is_bound_again() -> None:
    import pickle

    state = cddp.CompressionState(policy=SPEC)
    model = DDP(_model())
    assert not state.bound and state.bind(model).bound
    back = pickle.loads(pickle.dumps(state))
    assert not back.bound and back.bind(model).bound
