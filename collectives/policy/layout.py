"""The model as the DDP hook reports it to the automatic policy: layers, buckets, dtypes."""

from __future__ import annotations

from collections.abc import Hashable
from typing import Any

from .layers import Layer
from .part import Part


class Layout(Part):
    """Every layer the hook named, the DDP bucket it travels in, its place there and dtype.

    The measurements are keyed by it (:meth:`key`, the cache's), profiling goes bucket by
    bucket, and the plan fuses the layers of a bucket that share a compressor.
    """

    KEYS = {"_layers": "layers", "_bucket": "bucket", "_layout": "place"}

    def __init__(self) -> None:
        self.layers: dict[str, Layer] = {}
        self.bucket: dict[str, Hashable] = {}  # a layer's bucket (its name when unknown)
        self.place: dict[str, tuple[int, int, str]] = {}  # name: bucket, position, dtype

    def see_bucket(self, bucket: int, layers: list[Layer], dtypes: list[str]) -> None:
        """The layers of DDP bucket ``bucket`` in its order, with their dtypes."""
        for j, (lay, dtype) in enumerate(zip(layers, dtypes, strict=True)):
            self.layers[lay.name], self.bucket[lay.name] = lay, bucket
            self.place[lay.name] = (bucket, j, dtype)

    def note(self, layer: Layer, bucket: int | None) -> None:
        """A layer seen with its gradient (the hook reported its bucket first, if at all)."""
        self.layers.setdefault(layer.name, layer)
        if bucket is not None:
            self.bucket.setdefault(layer.name, bucket)

    def key(self) -> list[list[Any]]:
        """[bucket, name, shape, dtype] per placed layer in bucket order: what the
        measurements depend on, as the cache keys them."""
        order = sorted(self.place.items(), key=lambda kv: kv[1][:2])
        return [[b, n, list(self.layers[n].shape), dt] for n, (b, _, dt) in order]

    def buckets(self) -> list[list[Layer]]:
        """The layers of each placed bucket, in the bucket's order."""
        by: dict[int, list[tuple[int, Layer]]] = {}
        for n, (b, j, _) in self.place.items():
            by.setdefault(b, []).append((j, self.layers[n]))
        return [[lay for _, lay in sorted(by[b], key=lambda x: x[0])] for b in sorted(by)]
