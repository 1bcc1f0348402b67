"""Compressor and policy specs: aliases, repeated parameters, auto's parameters, and errors
that list what would work."""

from __future__ import annotations

import pytest

import compressors
from collectives.policy import AutoPolicy, Fixed, Rules, as_policy, auto_parameters


@pytest.mark.parametrize("alias, bits", [("int8", 8), ("int4", 4)])
def test_int_aliases_are_uniform_quantization(alias: str, bits: int) -> None:
    comp = compressors.get(alias)
    assert comp == compressors.get(f"uniform:bits={bits}") == compressors.get("uniform", bits=bits)
    assert compressors.aliases()[alias] == f"uniform:bits={bits}"
    # the other parameters of uniform may be set
    assert compressors.get(f"{alias}:stochastic=false") == compressors.get(
        f"uniform:bits={bits},stochastic=false")
    # a policy and its canonical spec take the alias too
    assert as_policy(alias).spec == Fixed(f"uniform:bits={bits}").spec
    assert Rules([("*", alias)]).rules[0][1] == Fixed(f"uniform:bits={bits}").spec


def test_an_alias_refuses_the_parameter_it_fixes() -> None:
    with pytest.raises(ValueError, match="int8 is 'uniform:bits=8'.*bits"):
        compressors.get("int8:bits=4")
    with pytest.raises(ValueError, match="bits"):
        compressors.get("int4", bits=8)


def test_aliases_are_in_the_backend_settings_and_the_docs() -> None:
    from collectives.backend import BackendConfig

    assert BackendConfig(compressor="int4").compressor == "int4"  # checked, accepted
    from pathlib import Path

    docs = (Path(__file__).parents[1] / "docs" / "concepts" / "compression.md").read_text()
    assert "int8" in docs and "int4" in docs


@pytest.mark.parametrize("spec, key", [("uniform:bits=8,bits=4", "bits"),
                                       ("topk:ratio=0.01, ratio=0.1", "ratio"),
                                       ("int8:stochastic=true,stochastic=false", "stochastic")])
def test_a_repeated_parameter_is_refused(spec: str, key: str) -> None:
    with pytest.raises(ValueError, match=f"parameter '{key}' is given twice"):
        compressors.get(spec)
    with pytest.raises(ValueError, match=f"'{key}' is given twice"):
        as_policy(spec)


def test_a_parameter_in_the_spec_and_as_a_keyword_is_refused() -> None:
    with pytest.raises(ValueError, match=r"\['bits'\] given both"):
        compressors.get("uniform:bits=8", bits=4)


def test_unknown_compressor_lists_compressors_and_aliases() -> None:
    with pytest.raises(ValueError) as err:
        compressors.get("bogus")
    text = str(err.value)
    assert all(name in text for name in ("uniform", "topk", "int8", "int4"))


def test_unknown_policy_lists_policies_compressors_and_autos_parameters() -> None:
    with pytest.raises(ValueError) as err:
        as_policy("bogus:max_error=0.1")
    text = str(err.value)
    for word in ("'auto'", "max_error", "every", "uniform", "topk", "int8", "int4"):
        assert word in text, (word, text)


def test_auto_takes_its_parameters_in_the_spec() -> None:
    pol = as_policy("auto:max_error=0.1,every=200,optimizer=sgd,cache=false")
    assert isinstance(pol, AutoPolicy)
    cfg = pol.config
    assert (cfg.max_error, cfg.every, cfg.optimizer, cfg.cache) == (0.1, 200, "sgd", False)
    assert as_policy(" auto ").config == AutoPolicy().config
    assert "candidates" not in auto_parameters() and "max_error" in auto_parameters()


def test_compression_state_takes_an_auto_spec() -> None:
    pytest.importorskip("torch")
    from collectives.ddp import CompressionState

    state = CompressionState(policy="auto:max_error=0.1")
    assert isinstance(state.policy, AutoPolicy) and state.policy.config.max_error == 0.1


@pytest.mark.parametrize("spec, words", [
    ("auto:foo=1", ["no parameter 'foo'", "max_error"]),
    ("auto:candidates=none", ["candidates", "AutoPolicy(candidates="]),
    ("auto:every=often", ["every must be an integer", "'often'"]),
    ("auto:cache=yes", ["cache must be true or false"]),
    ("auto:max_error=0.1,max_error=0.2", ["'max_error' is given twice"]),
    ("auto:max_error=-1", ["max_error must be"]),
])
def test_bad_auto_parameters_are_named(spec: str, words: list[str]) -> None:
    with pytest.raises(ValueError) as err:
        as_policy(spec)
    assert all(w in str(err.value) for w in words), str(err.value)


def test_policies_describe_themselves_alike_on_every_rank() -> None:
    assert as_policy("int8").describe() == as_policy("uniform:bits=8").describe()
    assert as_policy("auto").describe() == "auto"
    assert as_policy("auto:max_error=0.1").describe() == "auto:max_error=0.1"
    assert as_policy("auto:cache_dir=/tmp/x").describe() == "auto"  # may differ by host
    assert "topk" in as_policy([("numel<100", "none"), ("*", "topk:ratio=0.01")]).describe()
