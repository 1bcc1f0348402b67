"""The CUDA kernels compile (they run through CuPy on GPU machines; none here)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

SOURCES = sorted((Path(__file__).resolve().parents[2] / "csrc" / "cuda").glob("*.cu"))


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not installed")
@pytest.mark.parametrize("src", SOURCES, ids=[s.name for s in SOURCES])
def test_nvcc_compiles(src, tmp_path):
    res = subprocess.run(["nvcc", "-c", "-O2", "-std=c++17", str(src), "-o",
                          str(tmp_path / (src.stem + ".o"))], capture_output=True, text=True,
                         timeout=300)
    assert res.returncode == 0, res.stderr


def test_sources_present():
    assert {s.name for s in SOURCES} >= {"quantize.cu", "sign.cu", "sparse.cu"}


def test_loader_names_every_source():
    from compressors import cuda

    assert set(cuda.SOURCES) == {s.name for s in SOURCES}
    assert all((cuda.source_dir() / s).is_file() for s in cuda.SOURCES)


@pytest.mark.skipif(__import__("importlib").util.find_spec("cupy") is not None,
                    reason="CuPy is installed")
def test_without_cupy_a_clear_error():
    from compressors import cuda

    with pytest.raises(RuntimeError, match="CuPy"):
        cuda.quantize(np.zeros(8, np.float32), 8, 512, 0, True)


@pytest.mark.parametrize("call, needle", [
    (lambda c: c.quantize(np.zeros(8, np.float32), 3, 512, 0, True), "bits must be one of"),
    (lambda c: c.quantize(np.zeros(8, np.float32), 8, 100, 0, True), "multiple of 8"),
    (lambda c: c.dequantize(None, None, None, 8, 5, 512), "bits must be one of"),
    (lambda c: c.sign_pack(np.zeros(8, np.float32), 0), "positive multiple of 8"),
])
def test_bad_parameters_named_before_cupy_is_needed(call, needle):
    from compressors import cuda

    with pytest.raises(ValueError, match=needle):
        call(cuda)
