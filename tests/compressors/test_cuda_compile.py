"""The CUDA twins compile to PTX through nvcc and through NVRTC, with no GPU.

NVRTC is what a pip-only CuPy install compiles with, and it ships no standard headers. Both
compilers get exactly ``compressors.cuda.sources()`` and ``compressors.cuda.OPTIONS`` (what
``module()`` hands CuPy), and every kernel the wrappers launch must be an entry of the PTX.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import re
import shutil
import site
import subprocess
import sys
import types
from pathlib import Path

import pytest

from compressors import cuda

ARCH = "compute_80"
LAUNCHED = sorted(set(re.findall(r'get_function\("(\w+)"\)', Path(cuda.__file__).read_text())))
_NVRTC_NAME = re.compile(r"libnvrtc\.so(\.\d+)*$")  # not libnvrtc-builtins, not libnvrtc.alt


def _entries(ptx: str) -> set[str]:
    return set(re.findall(r"\.entry\s+(\w+)", ptx))


def _nvrtc_libraries() -> tuple[list[str], str]:
    """Every libnvrtc found (toolkit or pip wheels), and where it was looked for."""
    found = [name] if (name := ctypes.util.find_library("nvrtc")) else []
    roots = {Path(p) for p in (*site.getsitepackages(), site.getusersitepackages(), *sys.path)}
    globs = [(r, "nvidia/*/lib/libnvrtc.so*") for r in sorted(roots)]
    globs += [(Path("/usr/local"), p) for p in ("cuda*/lib64/libnvrtc.so*",
                                                 "cuda*/targets/*/lib/libnvrtc.so*")]
    seen = set()
    for root, pattern in globs:
        for lib in sorted(root.glob(pattern)) if root.is_dir() else ():
            if _NVRTC_NAME.search(lib.name) and lib.resolve() not in seen:
                seen.add(lib.resolve())
                found.append(str(lib))
    where = ('ctypes.util.find_library("nvrtc"), nvidia/*/lib under site-packages and sys.path '
             "(pip install nvidia-cuda-nvrtc-cu12), /usr/local/cuda*/lib64")
    return found, where


def _nvrtc_ptx(path: str, code: str, options: list[str]) -> str:
    if Path(path).is_absolute():  # wheels without a RUNPATH find their builtins only if loaded
        for builtins in sorted(Path(path).parent.glob("libnvrtc-builtins.so*")):
            ctypes.CDLL(str(builtins), mode=ctypes.RTLD_GLOBAL)
    lib = ctypes.CDLL(path)
    prog, size = ctypes.c_void_p(), ctypes.c_size_t()
    lib.nvrtcGetErrorString.restype = ctypes.c_char_p
    assert lib.nvrtcCreateProgram(ctypes.byref(prog), code.encode(), b"compcoll.cu", 0, None,
                                  None) == 0
    try:
        argv = (ctypes.c_char_p * len(options))(*(o.encode() for o in options))
        rc = lib.nvrtcCompileProgram(prog, len(options), argv)
        if rc:
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            pytest.fail(f"NVRTC ({path}): {lib.nvrtcGetErrorString(rc).decode()}\n"
                        f"{log.value.decode()}")
        assert lib.nvrtcGetPTXSize(prog, ctypes.byref(size)) == 0
        ptx = ctypes.create_string_buffer(size.value)
        assert lib.nvrtcGetPTX(prog, ptx) == 0
        return ptx.value.decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def test_every_wrapper_launches_its_kernel():
    wrappers = set(cuda.__all__) - {"module", "sources"}
    assert {f"compcoll_{w}" for w in wrappers} == set(LAUNCHED)


@pytest.mark.skipif(shutil.which("nvcc") is None, reason="nvcc is not on PATH")
def test_nvcc_compiles_the_module_sources(tmp_path):
    src, ptx = tmp_path / "compcoll.cu", tmp_path / "compcoll.ptx"
    src.write_text(cuda.sources())
    res = subprocess.run(["nvcc", "-ptx", f"-arch={ARCH}", *cuda.OPTIONS, str(src), "-o",
                          str(ptx)], capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr
    assert set(LAUNCHED) <= _entries(ptx.read_text())


_LIBS, _SEARCHED = _nvrtc_libraries()


@pytest.mark.parametrize("lib", _LIBS or [None], ids=[Path(p).name for p in _LIBS] or ["none"])
def test_nvrtc_compiles_the_module_sources(lib):
    if lib is None:
        pytest.skip(f"no libnvrtc found; searched {_SEARCHED}")
    ptx = _nvrtc_ptx(lib, cuda.sources(), [f"--gpu-architecture={ARCH}", *cuda.OPTIONS])
    assert set(LAUNCHED) <= _entries(ptx)


class _FakeRawModule:
    """cupy.RawModule as far as module() uses it; compiles lazily, failing for ``broken``."""

    broken: set[str] = set()
    made: list[dict] = []

    def __init__(self, *, code: str, backend: str, options: tuple[str, ...]) -> None:
        self.backend = backend
        self.made.append({"code": code, "backend": backend, "options": options})

    def get_function(self, name: str) -> str:
        if self.backend in self.broken:
            raise RuntimeError(f"{self.backend} failed")
        return name


@pytest.fixture
def fake_cupy(monkeypatch):
    monkeypatch.setitem(sys.modules, "cupy", types.SimpleNamespace(RawModule=_FakeRawModule))
    monkeypatch.setattr(_FakeRawModule, "broken", set())
    monkeypatch.setattr(_FakeRawModule, "made", [])
    cuda.module.cache_clear()
    yield _FakeRawModule
    cuda.module.cache_clear()


def test_module_compiles_through_nvrtc(fake_cupy):
    assert cuda.module().backend == "nvrtc"
    assert fake_cupy.made == [{"code": cuda.sources(), "backend": "nvrtc",
                               "options": cuda.OPTIONS}]


def test_module_falls_back_to_nvcc(fake_cupy, monkeypatch):
    fake_cupy.broken = {"nvrtc"}
    monkeypatch.setattr(shutil, "which", lambda name: "/bin/nvcc" if name == "nvcc" else None)
    assert cuda.module().backend == "nvcc"
    assert [m["backend"] for m in fake_cupy.made] == ["nvrtc", "nvcc"]


def test_module_without_nvrtc_or_nvcc_names_both(fake_cupy, monkeypatch):
    fake_cupy.broken = {"nvrtc"}
    monkeypatch.setattr(shutil, "which", lambda name: None)
    with pytest.raises(RuntimeError, match=r"NVRTC \(nvrtc failed\).*nvcc is not on PATH"):
        cuda.module()


def test_module_when_both_compilers_fail_names_both(fake_cupy, monkeypatch):
    fake_cupy.broken = {"nvrtc", "nvcc"}
    monkeypatch.setattr(shutil, "which", lambda name: "/bin/nvcc")
    with pytest.raises(RuntimeError, match=r"NVRTC \(nvrtc failed\) nor through nvcc \(nvcc"):
        cuda.module()
