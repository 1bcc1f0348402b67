"""A keyword a door no longer takes raises a TypeError naming it and where its setting went
(``collectives.moved``), not Python's bare "unexpected keyword argument"."""

from __future__ import annotations

import sys
import types

import numpy as np
import pytest

import collectives
from collectives import Compression, moved

X = np.ones(8, np.float32)
SPARSE = (np.array([1]), np.ones(1, np.float32), 8)


@pytest.mark.parametrize(("call", "words"), [
    (lambda: collectives.allreduce(X, compressor="topk:ratio=0.5", k=3),
     r"allreduce\(\) no longer takes k=: .*sparse_algorithm='gtopk:k=N'"),
    (lambda: collectives.iallreduce(X, compressor="topk:ratio=0.5", k=3),
     r"allreduce\(\) no longer takes k=: .*sparse_algorithm='gtopk:k=N'"),
    (lambda: Compression("topk:ratio=0.5", k=3),
     r"Compression\(\) no longer takes k=: .*sparse_algorithm='gtopk:k=N'"),
    (lambda: Compression("topk:ratio=0.5").at(k=3), r"Compression\(\) no longer takes k="),
    (lambda: collectives.sparse_allreduce(*SPARSE, algorithm="gtopk", k=3),
     r"sparse_allreduce\(\) no longer takes k=: .*algorithm='gtopk:k=N'"),
    (lambda: collectives.isparse_allreduce(*SPARSE, k=3),
     r"sparse_allreduce\(\) no longer takes k="),
])
def test_the_api_names_a_moved_keyword_and_its_new_home(call, words) -> None:
    with pytest.raises(TypeError, match=words):
        call()


def test_the_ddp_state_names_a_moved_keyword_and_its_new_home() -> None:
    pytest.importorskip("torch")
    from collectives.ddp import CompressionState

    with pytest.raises(TypeError, match=r"CompressionState\(\) no longer takes hierarchy=: it "
                                        r"moved to Session\(hierarchy=\.\.\.\)"):
        CompressionState(policy="fp16", hierarchy="flat")
    with pytest.raises(TypeError, match=r"no longer takes comm=: it moved to process_group="):
        CompressionState(comm=object())
    with pytest.raises(TypeError, match="unexpected keyword argument 'bogus'"):
        CompressionState(bogus=1)  # any other keyword: Python's own error


def test_the_optimizers_name_a_moved_keyword_and_its_new_home() -> None:
    torch = pytest.importorskip("torch")
    from collectives.optim import DiLoCo, OneBitAdam

    model = torch.nn.Linear(4, 3)
    with pytest.raises(TypeError, match=r"OneBitAdam\(\) no longer takes warmup_compressor=: "
                                        r"it moved into compressor=, a pair"):
        OneBitAdam(model.parameters(), warmup_compressor="none")
    with pytest.raises(TypeError, match=r"OneBitAdam\(\) no longer takes timeout=: .*"
                                        r"opt\.timeout = 60\.0"):
        OneBitAdam(model.parameters(), timeout=5)
    inner = torch.optim.SGD(model.parameters(), lr=0.1)
    with pytest.raises(TypeError, match=r"DiLoCo\(\) no longer takes timeout=: .*process group"):
        DiLoCo(inner, model, timeout=5)
    with pytest.raises(TypeError, match=r"DiLoCo\(\) no longer takes max_comm_share="):
        DiLoCo(inner, model, max_comm_share=0.1)


def test_the_lightning_callback_passes_the_states_refusal_on(monkeypatch) -> None:
    pytest.importorskip("torch")
    fake = types.ModuleType("pytorch_lightning")
    fake.Callback = type("Callback", (), {})  # what the callback subclasses
    monkeypatch.setitem(sys.modules, "pytorch_lightning", fake)
    from collectives.lightning import CompressionCallback

    with pytest.raises(TypeError, match=r"no longer takes hierarchy=: it moved to Session"):
        CompressionCallback("fp16", hierarchy="flat")


def test_every_door_keeps_its_own_signature() -> None:
    import inspect

    assert "k" not in inspect.signature(collectives.sparse_allreduce).parameters
    assert "algorithm" in inspect.signature(collectives.sparse_allreduce).parameters
    assert set(moved.MOVED) == {"allreduce", "Compression", "sparse_allreduce",
                                "CompressionState", "OneBitAdam", "DiLoCo"}
