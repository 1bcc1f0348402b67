"""Device codecs: the provider registry, the routing decision, and the staged wire bytes."""

from __future__ import annotations

import numpy as np
import pytest

import compressors
from collectives.compressed import ondevice
from compressors import DGCFeedback, ErrorFeedback, NoErrorFeedback
from compressors import device as cdevice
from compressors import providers as cdev
from compressors.cuda import codec as cupy_codec
from compressors.device import DeviceArray, DevicePayload
from tests.mpi.fake_cuda import FakeDeviceArray, HostCodec, fake_provider, host_view
from tests.mpirun import LAUNCHES, Script, passed


@pytest.fixture
def fake():
    cdev.register_provider(fake_provider)
    yield
    cdev.unregister_provider(fake_provider)


def dev(n: int = 64, dtype: type = np.float32) -> FakeDeviceArray:
    return FakeDeviceArray(np.arange(n, dtype=dtype))


class Strided(FakeDeviceArray):
    """Every other column of a 4x8 float32 matrix: strides that are not C-contiguous."""

    def __init__(self) -> None:
        super().__init__(np.ones((4, 8), np.float32))

    @property
    def __cuda_array_interface__(self) -> dict:
        return {**super().__cuda_array_interface__, "shape": (4, 4), "strides": (32, 8)}


def test_host_arrays_have_no_codec(fake) -> None:
    assert cdev.codec_for(compressors.get("uniform"), np.ones(8, np.float32)) is None


def test_the_last_provider_registered_is_asked_first(fake) -> None:
    asked: list[str] = []

    def other(comp, array):
        asked.append(comp.name)
        return None

    cdev.register_provider(other)
    try:
        assert isinstance(cdev.codec_for(compressors.get("sign"), dev()), HostCodec)
        assert asked == ["sign"]
    finally:
        cdev.unregister_provider(other)
    cdev.unregister_provider(other)  # removing twice is harmless


def test_no_twin_means_no_codec(fake) -> None:
    assert cdev.codec_for(compressors.get("qsgd"), dev()) is None
    assert cdev.codec_for(compressors.get("uniform:bits=1"), dev()) is None


def test_cupy_provider_declines_without_cupy_or_a_gpu() -> None:
    # no GPU on this kind of machine: the real provider must say "no twin", not fail
    try:
        import cupy

        if cupy.cuda.runtime.getDeviceCount() > 0:
            pytest.skip("a GPU is present")
    except Exception:  # noqa: BLE001 - no CuPy or no driver: what this test is about
        pass
    assert cupy_codec.provider(compressors.get("uniform"), dev()) is None


@pytest.mark.parametrize("case", ["float16", "strided", "dgc", "scaled", "out shape", "qsgd"])
def test_route_falls_back_to_staging(fake, case: str) -> None:
    uniform, buf, out, fb = compressors.get("uniform"), dev(), None, None
    if case == "float16":
        buf = dev(dtype=np.float16)
    elif case == "strided":
        buf = Strided()
    elif case == "dgc":
        fb = DGCFeedback(uniform)
    elif case == "scaled":
        fb = ErrorFeedback(uniform, beta=0.5)
    elif case == "out shape":
        out = dev(32)
    else:
        uniform = compressors.get("qsgd")
    assert ondevice.route(buf, out, uniform, fb) is None


@pytest.mark.parametrize("fb", [None, "plain", "none"])
def test_route_takes_the_codec(fake, fb: str | None) -> None:
    comp = compressors.get("uniform:bits=4")
    feedback = {None: None, "plain": ErrorFeedback(comp), "none": NoErrorFeedback(comp)}[fb]
    buf = dev()
    assert isinstance(ondevice.route(buf, buf, comp, feedback), HostCodec)
    assert isinstance(ondevice.route(buf, dev(), comp, feedback), HostCodec)


def test_device_array_views() -> None:
    a = DeviceArray.of(dev(10))
    part = a[2:6]
    assert (part.size, part.ptr - a.ptr, part.shape) == (4, 8, (4,))
    assert part.reshape(-1) is part
    assert part.__cuda_array_interface__["data"][0] == a.ptr + 8
    assert list(host_view(part)) == [2, 3, 4, 5]
    with pytest.raises(ValueError, match="flat"):
        a.reshape(2, 5)
    with pytest.raises(ValueError, match="C-contiguous"):
        DeviceArray.of(Strided())


@pytest.mark.parametrize("spec", ["uniform:bits=8", "uniform:bits=2", "sign"])
def test_staged_wire_bytes_are_the_host_payloads(spec: str) -> None:
    comp = compressors.get(spec)
    x = np.random.default_rng(3).standard_normal(1000).astype(np.float32)
    x[7] = np.nan  # the side list travels too
    host = comp.compress(x, name="t", step=2)
    payload = HostCodec(comp).compress(DeviceArray.of(FakeDeviceArray(x)), name="t", step=2)
    assert isinstance(payload, DevicePayload)
    wire = np.empty(cdevice.wire_nbytes(payload), np.uint8)
    head = np.frombuffer(payload.header(), np.uint8)
    wire[:head.size] = head
    pos = head.size
    for b in payload.buffers.values():
        wire[pos:pos + b.nbytes] = host_view(b).view(np.uint8)
        pos += b.nbytes
    cdevice.seal(wire)
    assert wire.tobytes() == host.to_bytes()


LAUNCHES.add(*[Script("device_codec.py", n, timeout=300) for n in (2, 3)])


@pytest.mark.mpi
@pytest.mark.parametrize("np_", [2, 3])
def test_device_codec_ranks(np_: int) -> None:
    passed(LAUNCHES.result("device_codec.py", np_), "device codec")


def test_route_leaves_cpu_tensors_to_staging(fake) -> None:
    torch = pytest.importorskip("torch")
    t = torch.ones(16, requires_grad=True)
    assert ondevice.route(t, None, compressors.get("uniform"), None) is None
