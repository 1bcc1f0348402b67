from __future__ import annotations

import pytest

import _compcoll
import compressors

from .helpers import CONFIGS


@pytest.fixture(params=sorted(CONFIGS))
def comp(request) -> compressors.Compressor:
    return compressors.get(request.param, **CONFIGS[request.param])


@pytest.fixture(params=[1, 2])
def threads(request):
    """Run a kernel test with 1 and 2 kernel threads (results must not depend on them)."""
    old = _compcoll.num_threads()
    _compcoll.set_num_threads(request.param)
    yield request.param
    _compcoll.set_num_threads(old)
