"""The compressor interface, its declared capabilities, and the registry by name."""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import numbers
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

import numpy as np

from .arrays import ArrayInfo, from_host, host_f32, storage_dtype, to_host
from .errors import PayloadError
from .payload import Payload

__all__ = ["ALIASES", "Capabilities", "Compressor", "aliases", "available", "derive_seed", "get",
           "parse_spec", "register"]

Layout = dict[str, tuple[np.dtype, int | None]]
#: Layout length of a buffer that is empty for finite input (non-finite values go there).
NONFINITE = -1
#: A payload decoded without ``out`` may claim at most max(its buffer bytes, 4 KiB) <<
#: MAX_EXPANSION_BITS bytes of output (64 MiB for a small payload): a damaged shape cannot make
#: decompress allocate more. Sparse payloads of larger tensors decode into the caller's ``out``.
MAX_EXPANSION_BITS = 14


@dataclass(frozen=True)
class Capabilities:
    """What a compressor's payloads allow; collectives choose the algorithm from this.

    ``allreduce_steps`` names the summable allreduce rounds of a multi-step method such as
    PowerSGD (empty for single-payload methods). ``exact_zero``: a zero input element decodes
    to exactly zero and, under error feedback, leaves a zero residual (sparsifiers, and the
    quantizers whose grid holds zero): a run of zeros sent with the rest changes nothing but
    the bytes it takes.

    Example::

        >>> import numpy as np, compressors
        >>> caps = compressors.get("topk:ratio=0.01").capabilities
        >>> assert caps.sparse and not caps.summable
    """

    summable: bool
    sparse: bool
    same_size_on_all_ranks: bool
    needs_shared_seed: bool
    allreduce_steps: tuple[str, ...] = ()
    exact_zero: bool = False


def derive_seed(seed: int, name: str, step: int, rank: int = 0) -> int:
    """64-bit seed from (seed, tensor name, step, rank), identical in every process.

    Choices every rank must share (random-k's indices, PowerSGD's first Q) leave ``rank`` at
    0; independent draws (stochastic rounding) pass the caller's rank, so the rounding errors
    of different ranks are independent and average out in the sum. Rank 0 draws as a call
    without a rank: the rank enters the text only when it is not 0. blake2b rather than
    Python's ``hash()``, which is salted per process and would give every rank different
    random choices.

    Example::

        >>> import numpy as np, compressors
        >>> s = compressors.derive_seed(0, "layer1.weight", 5)
        >>> assert s == compressors.derive_seed(0, "layer1.weight", 5)  # every rank alike
        >>> assert s != compressors.derive_seed(0, "layer1.weight", 6)
        >>> assert s != compressors.derive_seed(0, "layer1.weight", 5, rank=1)
    """
    if isinstance(rank, bool) or not isinstance(rank, numbers.Integral) or rank < 0:
        raise ValueError(f"derive_seed: rank must be an integer >= 0, got {rank!r}")
    text = f"{seed}\x00{name}\x00{step}" + (f"\x00{int(rank)}" if rank else "")
    h = hashlib.blake2b(text.encode(), digest_size=8)
    return int.from_bytes(h.digest(), "little")


@functools.cache
def _init_fields(cls: type) -> tuple[str, ...]:
    """The configuration fields of a compressor class (looked up once: params is on the hot
    path of every compress and decompress)."""
    return tuple(f.name for f in dataclasses.fields(cls) if f.init)


class Compressor:
    """Base class: ``compress(x, name=, step=) -> Payload`` and ``decompress(payload)``.

    Subclasses are frozen dataclasses (their fields are the configuration, validated in
    ``__post_init__``) and implement ``capabilities``, ``layout``, ``_encode`` and ``_decode``
    on flat host arrays. The base class handles array types, dtypes and buffer checks.

    Example::

        >>> import numpy as np, compressors
        >>> x = np.random.default_rng(0).standard_normal(4096).astype(np.float32)
        >>> comp = compressors.get("uniform:bits=8")
        >>> y = comp.decompress(comp.compress(x, name="w", step=0))
        >>> assert np.abs(y - x).max() <= (x.max() - x.min()) / 255
    """

    name: ClassVar[str] = ""

    @property
    def capabilities(self) -> Capabilities:
        raise TypeError(f"{type(self).__name__} does not declare its capabilities")

    @property
    def params(self) -> dict[str, Any]:
        return {name: getattr(self, name) for name in _init_fields(type(self))}

    def layout(self, shape: tuple[int, ...], dtype: str) -> Layout:
        """Wire buffers as name -> (dtype, length).

        Length None: depends on the data; NONFINITE: empty unless the input has NaN/Inf.
        """
        raise TypeError(f"{type(self).__name__} does not declare its layout")

    def payload_nbytes(self, numel: int | tuple[int, ...], dtype: str = "float32") -> int | None:
        """Wire bytes for a finite tensor (a flat numel or a shape); None when data dependent."""
        shape = (numel,) if isinstance(numel, int) else tuple(numel)
        lay = self.layout(shape, dtype)
        if any(n is None for _, n in lay.values()):
            return None
        return sum(dt.itemsize * n for dt, n in lay.values() if n is not None and n > 0)

    def wire_nbytes(self, shape: tuple[int, ...], dtype: str = "float32") -> int | None:
        """Exact wire size (header included) of this compressor's payload for a finite tensor
        of ``shape`` and ``dtype``, the same on every rank; None when it depends on the data.
        Collectives use it to skip exchanging sizes (NaN/Inf side lists make a payload longer;
        the exchanges handle that as an exception)."""
        lay = self.layout(tuple(shape), dtype)
        if any(n is None for _, n in lay.values()):
            return None
        empty = {key: np.empty(0, dt) for key, (dt, _) in lay.items()}
        head = Payload(self.name, dtype, tuple(shape), self.params, empty).header_nbytes()
        return head + sum(dt.itemsize * n for dt, n in lay.values() if n is not None and n > 0)

    def bits_per_element(self, numel: int | tuple[int, ...],
                         dtype: str = "float32") -> float | None:
        """Wire bits per input element, or None when the size depends on the data."""
        nbytes = self.payload_nbytes(numel, dtype)
        count = numel if isinstance(numel, int) else int(np.prod(numel))
        return None if nbytes is None or count == 0 else 8.0 * nbytes / count

    def _fixed_buffers(self, info: ArrayInfo, out: Payload | None) -> dict[str, np.ndarray]:
        """The payload buffers whose size the layout fixes: ``out``'s where they fit."""
        bufs: dict[str, np.ndarray] = {}
        for key, (dt, n) in self.layout(info.shape, info.dtype).items():
            if n is None or n < 0:
                continue
            old = out.buffers.get(key) if out is not None else None
            ok = old is not None and old.dtype == dt and old.size == n and old.flags.writeable
            bufs[key] = old if ok else np.empty(n, dtype=dt)
        return bufs

    def draw_seed(self, name: str, step: int, rank: int = 0) -> int:
        """The seed of this compressor's random draws for tensor ``name`` at ``step`` on
        ``rank``: from (seed, name, step) when its capabilities declare a shared seed (every
        rank must draw alike), else from (seed, name, step, rank), so that independent draws
        such as stochastic rounding are independent across ranks. Either way every rank
        decodes the same payloads, so results stay bit-identical on every rank."""
        shared = self.capabilities.needs_shared_seed
        return derive_seed(getattr(self, "seed", 0), name, step, 0 if shared else rank)

    def compress(self, x: Any, *, name: str, step: int = 0, out: Payload | None = None,
                 rank: int = 0) -> Payload:
        """Compress x; reuse ``out``'s buffers when given (no page faults on the hot path).
        ``rank``: the caller's rank, which seeds independent draws (:meth:`draw_seed`)."""
        host, info = to_host(x)
        bufs = self._fixed_buffers(info, out)
        seed = self.draw_seed(name, step, rank)
        self._encode(host.reshape(-1), info.dtype, seed, bufs, name=name, shape=info.shape)
        return Payload(self.name, info.dtype, info.shape, self.params, bufs, origin=info)

    #: Whether ``compress_feedback`` has a fused kernel (else it returns None).
    fuses_feedback: ClassVar[bool] = False

    def compress_feedback(self, x: np.ndarray, residual: np.ndarray, *, name: str,
                          step: int = 0, rank: int = 0) -> Payload | None:
        """Fast path for plain error feedback, in one pass over the data: returns
        ``compress(x + residual)`` and leaves ``x + residual - decompress(payload)`` in
        ``residual`` (updated in place; NaN/Inf travel in the payload and leave 0 behind).

        x is a contiguous float32 numpy array, ``residual`` a flat float32 array of its size.
        Returns None, touching nothing, when this compressor has no such kernel."""
        return None

    @staticmethod
    def _feedback_args(x: Any, residual: np.ndarray) -> bool:
        """Whether the fused path applies to x; a residual that cannot be x's raises."""
        if not host_f32(x):
            return False
        if not (isinstance(residual, np.ndarray) and residual.dtype == np.float32
                and residual.ndim == 1 and residual.size == x.size):
            raise ValueError(f"compress_feedback: the residual must be a flat float32 array of "
                             f"{x.size} elements (x's size), got "
                             f"{getattr(residual, 'dtype', type(residual).__name__)}"
                             f"{list(getattr(residual, 'shape', []))}")
        return True

    def decompress_add(self, payload: Payload, out: np.ndarray) -> bool:
        """``out += decompress(payload)`` without a temporary, for a flat contiguous float32
        ``out``; False (nothing done) where this compressor has no such kernel."""
        return False

    def decompress(self, payload: Payload, out: Any = None) -> Any:
        """Decode a payload; into ``out`` when given, else a new array of the caller's type
        (at most ``MAX_EXPANSION_BITS`` times the payload's size: pass ``out`` beyond)."""
        self.check(payload, expect=None if out is None else _numel_of(out))
        st = storage_dtype(payload.dtype)
        if out is None:
            flat = np.empty(payload.numel, dtype=st)
            self._decode(payload, flat)
            info = payload.origin or ArrayInfo("numpy", payload.dtype, payload.shape)
            if info.kind == "numpy" and payload.dtype == "bfloat16":
                info = ArrayInfo("numpy", "bfloat16", payload.shape)  # bit patterns, uint16
            return from_host(flat.reshape(payload.shape), info)
        if isinstance(out, np.ndarray) and not out.flags.writeable:
            raise ValueError("out is read-only; pass a writable array (or out=None for a new "
                             "one)")
        host, info = to_host(out)
        if info.dtype != payload.dtype or host.size != payload.numel:
            raise ValueError(f"out is {info.dtype} with {host.size} elements, payload is "
                             f"{payload.dtype} with {payload.numel}")
        flat = host.reshape(-1)
        if not np.shares_memory(flat, host) and host.size:
            raise ValueError("out must be contiguous")
        self._decode(payload, flat)
        if info.kind == "cupy" or (info.kind == "torch" and info.device.type != "cpu") or \
                info.byteorder != "=":  # decoded into a staging copy: copy to the caller's
            out[...] = from_host(flat.reshape(payload.shape), info)
        return out

    def check(self, payload: Payload, expect: int | None = None) -> None:
        """Raise PayloadError unless the payload is one this compressor made, intact.

        ``expect``: the element count of the caller's output; without it the output the
        payload implies is bounded by ``MAX_EXPANSION_BITS``."""
        mine = self.params
        if payload.compressor != self.name or dict(payload.params) != mine or any(
                type(v) is not type(mine[k]) for k, v in payload.params.items()):
            raise PayloadError(f"payload from {payload.compressor}{dict(payload.params)} given to "
                               f"{self.name}{mine}")
        # A dense result may be much larger than its payload, but not without bound: this keeps
        # a corrupted shape from making decompress allocate gigabytes.
        limit = max(payload.nbytes, 1 << 12) << MAX_EXPANSION_BITS
        dense = payload.numel * storage_dtype(payload.dtype).itemsize
        if expect is None and dense > limit:
            raise PayloadError(f"shape {payload.shape} is too large for {payload.nbytes} bytes "
                               f"of payload (at most {limit} bytes of output without out=)")
        if expect is not None and expect != payload.numel:
            raise PayloadError(f"out is an array of {expect} elements, the payload decodes to "
                               f"{payload.numel}")
        try:
            lay = self.layout(payload.shape, payload.dtype)
        except ValueError as e:
            raise PayloadError(str(e)) from None
        if set(lay) != set(payload.buffers):
            raise PayloadError(f"buffers {sorted(payload.buffers)}, expected {sorted(lay)}")
        for key, (dt, n) in lay.items():
            b = payload.buffers[key]
            if b.dtype != dt or b.ndim != 1 or (n is not None and n >= 0 and b.size != n):
                raise PayloadError(f"buffer {key!r}: {b.dtype}[{b.size}], expected {dt}[{n}]")
        self._check(payload)

    def _check(self, payload: Payload) -> None:
        """Checks beyond the layout (index ranges, variable lengths)."""

    def _encode(self, flat: np.ndarray, dtype: str, seed: int, bufs: dict[str, np.ndarray],
                **where: Any) -> None:
        raise TypeError(f"{type(self).__name__} cannot compress")

    def _decode(self, payload: Payload, out: np.ndarray) -> None:
        raise TypeError(f"{type(self).__name__} cannot decompress")


def _numel_of(out: Any) -> int:
    """Elements of an output array of any supported type."""
    return int(np.prod(tuple(getattr(out, "shape", np.shape(out))), dtype=np.int64))


_REGISTRY: dict[str, type[Compressor]] = {}
C = TypeVar("C", bound=type[Compressor])


def register(name: str) -> Callable[[C], C]:
    """Class decorator: make a compressor available as ``get(name)``.

    Example::

        >>> import numpy as np, compressors
        >>> from dataclasses import dataclass
        >>> @compressors.register("my_identity")
        ... @dataclass(frozen=True)
        ... class MyIdentity(compressors.NoCompression):
        ...     pass  # the identity, under another name
        >>> assert compressors.get("my_identity").name == "my_identity"
    """

    def deco(cls: C) -> C:
        if name in _REGISTRY or name in ALIASES:
            raise ValueError(f"compressor {name!r} is registered twice")
        cls.name = name
        _REGISTRY[name] = cls
        return cls

    return deco


#: Other names of compressors: each stands for a spec, and takes that spec's compressor's
#: other parameters ("int8:stochastic=false").
ALIASES: dict[str, str] = {"int8": "uniform:bits=8", "int4": "uniform:bits=4"}


def available() -> list[str]:
    """Names of the registered compressors (the aliases of :data:`ALIASES` are listed by
    :func:`aliases`).

    Example::

        >>> import numpy as np, compressors
        >>> assert {"uniform", "topk", "powersgd"} <= set(compressors.available())
    """
    return sorted(_REGISTRY)


def aliases() -> dict[str, str]:
    """The compressor aliases, name -> the spec it stands for.

    Example::

        >>> import numpy as np, compressors
        >>> assert compressors.aliases()["int8"] == "uniform:bits=8"
        >>> assert compressors.get("int4") == compressors.get("uniform:bits=4")
    """
    return dict(ALIASES)


def described() -> str:
    """The compressor names and aliases a spec may start with, for error messages."""
    alias = ", ".join(f"{k} ({v})" for k, v in sorted(ALIASES.items()))
    return f"{', '.join(available())}; aliases: {alias}"


def _parse(value: str) -> Any:
    low = value.lower()
    if low in ("true", "false"):
        return low == "true"
    for conv in (int, float):
        try:
            return conv(value)
        except ValueError:
            pass
    return value


def parse_spec(spec: str, *, raw: bool = False) -> tuple[str, dict[str, Any]]:
    """(name, parameters) of a spec ``"name:key=value,key=value"``, values typed (bools,
    integers, numbers, else text; ``raw``: the text as written). A parameter given twice
    raises ValueError naming it: which value was meant cannot be known.

    Example::

        >>> import numpy as np, compressors
        >>> from compressors.base import parse_spec
        >>> assert parse_spec("uniform:bits=4,stochastic=false") == (
        ...     "uniform", {"bits": 4, "stochastic": False})
    """
    if not isinstance(spec, str):
        raise TypeError(f"a compressor spec is a string like 'uniform:bits=8', got "
                        f"{type(spec).__name__}")
    name, _, rest = spec.partition(":")
    params: dict[str, Any] = {}
    for item in filter(None, (s.strip() for s in rest.split(","))):
        key, eq, value = item.partition("=")
        key = key.strip()
        if not eq or not key:
            raise ValueError(f"bad option {item!r} in {spec!r}: expected key=value")
        if key in params:
            raise ValueError(f"parameter {key!r} is given twice in {spec!r}; give it once")
        params[key] = value.strip() if raw else _parse(value.strip())
    return name.strip(), params


def get(spec: str, **params: Any) -> Compressor:
    """Compressor by name (or alias, see :func:`aliases`) and parameters.

    ``get("topk", ratio=0.01)`` and ``get("topk:ratio=0.01")`` are the same compressor; a
    parameter given twice (in the spec, or in the spec and as a keyword) raises ValueError.

    Example::

        >>> import numpy as np, compressors
        >>> comp = compressors.get("uniform:bits=4")  # or ("uniform", bits=4), or "int4"
        >>> assert comp == compressors.get("uniform", bits=4) and comp.bits == 4
    """
    name, given = parse_spec(spec)
    both = sorted(set(given) & set(params))
    if both:
        raise ValueError(f"parameter(s) {both} given both in the spec {spec!r} and as keywords; "
                         f"give each once")
    given.update(params)
    if name in ALIASES:
        base, fixed = parse_spec(ALIASES[name])
        clash = sorted(set(fixed) & set(given))
        if clash:
            raise ValueError(f"{name} is {ALIASES[name]!r}: its {clash} cannot be set; "
                             f"write {base!r} with the parameters instead")
        name, given = base, {**fixed, **given}
    try:
        cls = _REGISTRY[name]
    except KeyError:
        raise ValueError(f"unknown compressor {name!r}; available: {described()}") from None
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    unknown = set(given) - set(fields)
    if unknown:
        raise ValueError(f"{name} has no parameter(s) {sorted(unknown)}; it takes {sorted(fields)}")
    return cls(**{key: _typed(name, fields[key], v) for key, v in given.items()})


def _typed(name: str, f: dataclasses.Field, value: Any) -> Any:
    """``value`` as the type of the field's default (an integer for an int field, a number
    for a float field), or a ValueError naming both: a parameter read from the wire as 1.0
    must not reach a kernel that takes an integer."""
    default = f.default
    if isinstance(default, bool):
        ok, kind = isinstance(value, bool | np.bool_), "a bool"
    elif isinstance(default, int):
        ok, kind = isinstance(value, numbers.Integral) and not isinstance(value, bool), \
            "an integer"
    elif isinstance(default, float):
        ok, kind = isinstance(value, numbers.Real) and not isinstance(value, bool), "a number"
    else:
        return value
    if not ok:
        raise ValueError(f"{name}: parameter {f.name} must be {kind}, got "
                         f"{type(value).__name__} {value!r}")
    return bool(value) if kind == "a bool" else int(value) if kind == "an integer" else value
