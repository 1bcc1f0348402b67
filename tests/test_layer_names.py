"""Layer names as PyTorch gives them: a tied parameter is one layer under its
``named_parameters()`` name with its first owner's kind, DDP's ``module.`` and torch.compile's
``_orig_mod.`` are dropped, and a rule or table key may use any of a parameter's names."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

torch = pytest.importorskip("torch")

import collectives.ddp as cddp  # noqa: E402
from collectives.policy import Rules, Table, as_policy, model_layers  # noqa: E402
from tests.wrapped import wrapped  # noqa: E402


class TiedLM(torch.nn.Module):
    """nanoGPT's tying: the token embedding's weight is the output layer's."""

    def __init__(self, vocab: int = 50, dim: int = 8) -> None:
        super().__init__()
        self.transformer = torch.nn.ModuleDict({
            "wte": torch.nn.Embedding(vocab, dim), "wpe": torch.nn.Embedding(16, dim),
            "h": torch.nn.Linear(dim, dim)})
        self.lm_head = torch.nn.Linear(dim, vocab, bias=False)
        self.transformer.wte.weight = self.lm_head.weight

    def forward(self, idx):
        x = self.transformer.wte(idx) + self.transformer.wpe(torch.arange(idx.shape[-1]))
        return self.lm_head(self.transformer.h(x))


def _layers(model):
    return {name: lay for name, (_, lay) in model_layers(model).items()}


def test_a_tied_embedding_is_one_layer_under_its_first_name_and_kind() -> None:
    model = TiedLM()
    layers = _layers(wrapped(model))
    assert list(layers) == [n for n, _ in model.named_parameters()]  # one per parameter
    wte = layers["transformer.wte.weight"]
    assert (wte.kind, wte.aliases, wte.numel) == ("embedding", ("lm_head.weight",), 400)
    assert "lm_head.weight" not in layers
    assert layers["transformer.wpe.weight"].kind == "embedding"


def test_rules_and_tables_reach_a_tied_parameter_under_any_of_its_names() -> None:
    layers = list(_layers(wrapped(TiedLM())).values())
    by_kind = Rules([("kind=embedding", "none"), ("*", "uniform:bits=8")])
    by_kind.bind(layers)
    wte = next(lay for lay in layers if lay.name == "transformer.wte.weight")
    assert by_kind.choose(wte) == "none"  # the documented rule no longer misses it
    by_alias = Rules([("name~^lm_head", "fp16"), ("*", "none")])
    by_alias.bind(layers)
    assert by_alias.choose(wte) == "fp16"
    for key in ("transformer.wte.weight", "lm_head.weight"):
        table = as_policy({key: "topk:ratio=0.1", "*": "none"})
        table.bind(layers)
        assert table.choose(wte).startswith("topk")
    both = Table({"transformer.wte.weight": "fp16", "lm_head.weight": "none"}, default="none")
    with pytest.raises(ValueError, match="different compressors under its names"):
        both.bind(layers)  # at bind, not at the first step
    with pytest.raises(ValueError, match="does not have"):
        Table({"lm_head.bias": "fp16"}).bind(layers)


def test_compiled_models_keep_the_plain_names() -> None:
    model = TiedLM()
    plain = _layers(wrapped(model))
    compiled = torch.compile(model)  # lazy: nothing compiles until the first call
    assert "_orig_mod" in "".join(n for n, _ in compiled.named_parameters())
    assert _layers(wrapped(compiled)) == plain
    # torch.compile around a submodule, too
    model.transformer.h = torch.compile(model.transformer.h)
    assert list(_layers(wrapped(model))) == list(plain)
    table = as_policy({"transformer.h.weight": "fp16", "*": "none"})
    table.bind(list(_layers(wrapped(compiled)).values()))


def compiled_run_state(model: torch.nn.Module, steps: int) -> dict:
    """The hook's state after ``steps`` steps of ``model`` under torch.compile and DDP, on a
    torch.distributed world of one (every layer compressed, so every one has a residual)."""
    from datetime import timedelta

    import torch.distributed as dist

    from collectives import Session

    dist.init_process_group("gloo", store=dist.HashStore(), rank=0, world_size=1,
                            timeout=timedelta(seconds=60))
    try:
        ddp = torch.nn.parallel.DistributedDataParallel(torch.compile(model, backend="eager"))
        state = cddp.CompressionState(policy=Session("uniform:bits=8", min_numel=0)).bind(ddp)
        ddp.register_comm_hook(state, cddp.compression_hook)
        for step in range(steps):
            idx = torch.randint(0, 50, (4, 16), generator=torch.Generator().manual_seed(step))
            ddp(idx).square().mean().backward()
        state.close()
        return state.state_dict()
    finally:
        dist.destroy_process_group()


def test_a_state_saved_with_compile_loads_without_it() -> None:
    """What a compiled model's hook saved (its residuals named by the hook, not by this test)
    loads into the same model's state without torch.compile, every residual restored."""
    from mpi4py import MPI

    torch.manual_seed(0)
    model = TiedLM()
    saved = compiled_run_state(model, steps=2)
    plain = sorted(n for n, _ in model.named_parameters())
    assert sorted(saved["residuals"]) == plain  # no "_orig_mod." in what was saved
    assert all(np.any(r != 0) for r in saved["residuals"].values())
    off = cddp.CompressionState(MPI.COMM_SELF, policy="uniform:bits=8").bind(wrapped(TiedLM()))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # no residual left out as unknown
        off.load_state_dict(saved)
    assert off.residuals_restored
    restored, _ = off.residuals()
    assert sorted(restored) == plain
    for name in plain:
        np.testing.assert_array_equal(restored[name], saved["residuals"][name])


def test_bind_refuses_a_bare_module_and_says_what_to_wrap() -> None:
    with pytest.raises(TypeError, match="DistributedDataParallel"):
        cddp.CompressionState().bind(TiedLM())


def test_loading_another_ranks_state_alone_warns_that_residuals_start_from_zero() -> None:
    from mpi4py import MPI

    model = TiedLM()
    st = cddp.CompressionState(MPI.COMM_SELF, policy="uniform:bits=8").bind(wrapped(model))
    other = st.state_dict()
    other["rank"] = 1  # what rank 1 saved at this world size (as rank 0's file is elsewhere)
    with pytest.warns(RuntimeWarning, match="gather_state_dict"):
        st.load_state_dict(other)
    assert not st.residuals_restored
    every = st.gather_state_dict()  # one rank here: a list of one
    assert [d["rank"] for d in every] == [0]
    st.load_state_dict(every)
    assert st.residuals_restored
