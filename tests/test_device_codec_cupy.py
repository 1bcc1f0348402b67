"""The CuPy codec's glue (buffer order, feedback arithmetic, NaN/Inf side list, decoding) run on
the host: a stand-in ``cupy`` module over numpy, and the CUDA kernels' C++ twins in place of
``compressors.cuda``'s functions. What it cannot check is the CUDA kernels themselves (their
own tests compare them with the C++ kernels where a GPU is) and the streams."""

from __future__ import annotations

import contextlib
import ctypes
import types

import numpy as np
import pytest

import compressors
from compressors import cuda, kernels
from compressors.cuda import codec as cupy_codec
from compressors.cuda import topk as cuda_topk
from compressors.device import DeviceArray
from tests.mpi.fake_cuda import FakeDeviceArray, HostCodec, host_view

# inf - inf in numpy warns where CuPy does not
pytestmark = pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")


class HostNdarray(np.ndarray):
    """numpy with CuPy's ``.data.ptr``."""

    @property
    def data(self) -> types.SimpleNamespace:  # type: ignore[override]
        return types.SimpleNamespace(ptr=self.ctypes.data)


def _h(a: np.ndarray) -> HostNdarray:
    return np.asarray(a).view(HostNdarray)


def _asarray(obj: object) -> HostNdarray:
    cai = getattr(obj, "__cuda_array_interface__", None)
    if cai is None:
        return _h(np.array(obj))
    dt, shape = np.dtype(cai["typestr"]), tuple(cai["shape"])
    n = int(np.prod(shape)) * dt.itemsize
    if n == 0:
        return _h(np.empty(shape, dt))
    raw = (ctypes.c_uint8 * n).from_address(cai["data"][0])
    return _h(np.frombuffer(raw, np.uint8).view(dt).reshape(shape))


def fake_cupy() -> types.ModuleType:
    cp = types.ModuleType("cupy")
    null = contextlib.nullcontext()
    cp.cuda = types.SimpleNamespace(  # type: ignore[attr-defined]
        Stream=types.SimpleNamespace(null=null, ptds=null),
        ExternalStream=lambda ptr: contextlib.nullcontext(),
        runtime=types.SimpleNamespace(
            getDeviceCount=lambda: 1,
            pointerGetAttributes=lambda ptr: types.SimpleNamespace(type=2)))
    cp.ndarray = type("ndarray", (), {})  # nothing here is a real CuPy array
    cp.float32 = np.float32  # type: ignore[attr-defined]
    cp.asarray = _asarray  # type: ignore[attr-defined]
    cp.asnumpy = lambda a: np.array(a)  # type: ignore[attr-defined]
    for name in ("empty", "zeros", "ascontiguousarray", "isfinite", "flatnonzero", "where"):
        setattr(cp, name, _wrapped(getattr(np, name)))
    return cp


def _wrapped(fn):
    return lambda *a, **k: _h(fn(*a, **k))


def _quantize(x, bits, bucket, seed, stochastic):
    n = x.size
    codes = np.zeros(-(-n * bits // 8), np.uint8)
    mins, scales = np.zeros(-(-n // bucket), np.float32), np.zeros(-(-n // bucket), np.float32)
    kernels.quantize(np.asarray(x), codes, mins, scales, bits, bucket, seed, stochastic)
    return _h(codes), _h(mins), _h(scales)


def _dequantize(codes, mins, scales, n, bits, bucket):
    out = np.empty(n, np.float32)
    kernels.dequantize(np.asarray(codes), np.asarray(mins), np.asarray(scales), out, bits, bucket)
    return _h(out)


def _sign_pack(x, bucket):
    bits = np.zeros(-(-x.size // 8), np.uint8)
    scales = np.zeros(-(-x.size // bucket), np.float32)
    kernels.sign_pack(np.asarray(x), bits, scales, bucket)
    return _h(bits), _h(scales)


def _sign_unpack(bits, scales, n, bucket):
    out = np.empty(n, np.float32)
    kernels.sign_unpack(np.asarray(bits), np.asarray(scales), out, bucket)
    return _h(out)


def _topk(x, k):
    return _h(cuda_topk.exact_topk(np, np.asarray(x), k, cuda_topk.host_histogram,
                                   cuda_topk.host_select_above))


@pytest.fixture
def on_host(monkeypatch):
    monkeypatch.setitem(__import__("sys").modules, "cupy", fake_cupy())
    for name, fn in (("quantize", _quantize), ("dequantize", _dequantize),
                     ("sign_pack", _sign_pack), ("sign_unpack", _sign_unpack)):
        monkeypatch.setattr(cuda, name, fn)
    monkeypatch.setattr(cuda_topk, "topk", _topk)


def darr(x: np.ndarray) -> DeviceArray:
    return DeviceArray.of(FakeDeviceArray(x.copy()))


def payload_bytes(p) -> list[bytes]:
    return [p.header()] + [host_view(b).tobytes() for b in p.buffers.values()]


@pytest.mark.parametrize("spec", ["uniform:bits=8", "uniform:bits=4", "uniform:bits=2", "sign",
                                  "topk:ratio=0.05", "topk:ratio=1.0"])
def test_cupy_codec_matches_the_host_path(on_host, spec: str) -> None:
    comp = compressors.get(spec)
    gpu = cupy_codec.provider(comp, FakeDeviceArray(np.ones(4, np.float32)))
    assert isinstance(gpu, cupy_codec.CupyCodec)
    host = HostCodec(comp)
    rng = np.random.default_rng(5)
    res_g, res_h = darr(np.zeros(3000, np.float32)), darr(np.zeros(3000, np.float32))
    for step in range(3):
        x = rng.standard_normal(3000).astype(np.float32)
        x[[10, 2000]] = [np.inf, np.nan] if step == 1 else [x[10], x[2000]]
        for residual in (None, "ef"):
            fresh = step == 0
            kw = {} if residual is None else {"fresh": fresh}
            pg = gpu.compress(darr(x), name="t", step=step,
                              residual=res_g if residual else None, **kw)
            ph = host.compress(darr(x), name="t", step=step,
                               residual=res_h if residual else None, **kw)
            assert payload_bytes(pg) == payload_bytes(ph), (step, residual)
        assert host_view(res_g).tobytes() == host_view(res_h).tobytes(), step
        outs = [darr(np.full(3000, np.nan, np.float32)) for _ in range(2)]
        gpu.decode_into(pg, outs[0])
        host.decode_into(ph, outs[1])
        gpu.decode_add(pg, outs[0])
        host.decode_add(ph, outs[1])
        gpu.scale(outs[0], 1 / 3)
        host.scale(outs[1], 1 / 3)
        assert host_view(outs[0]).tobytes() == host_view(outs[1]).tobytes()


def test_cupy_provider_declines_what_it_has_no_twin_for(on_host) -> None:
    arr = FakeDeviceArray(np.ones(4, np.float32))
    assert cupy_codec.provider(compressors.get("uniform:bits=1"), arr) is None
    assert cupy_codec.provider(compressors.get("topk:approximate=True"), arr) is None
    assert cupy_codec.provider(compressors.get("threshold"), arr) is None
    assert cupy_codec.provider(compressors.get("uniform"),
                               FakeDeviceArray(np.ones(4, np.float64))) is None


@pytest.mark.parametrize("kind", [0, 1])  # unregistered and pinned host memory
def test_cupy_provider_declines_host_memory(on_host, kind: int) -> None:
    import sys

    runtime = sys.modules["cupy"].cuda.runtime
    runtime.pointerGetAttributes = lambda ptr: types.SimpleNamespace(type=kind)
    assert cupy_codec.provider(compressors.get("uniform"),
                               FakeDeviceArray(np.ones(4, np.float32))) is None
