from __future__ import annotations

import pytest

import compressors

from .helpers import CONFIGS


@pytest.fixture(params=sorted(CONFIGS))
def comp(request) -> compressors.Compressor:
    return compressors.get(request.param, **CONFIGS[request.param])
