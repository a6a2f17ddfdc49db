"""The ``tf.train.Example`` schema seen in a file: feature names, kinds and value counts.

Examples written by one program usually share one byte layout (the same keys, kinds and
value counts at the same offsets). :class:`SchemaScan` checks a whole chunk against the
layout of its first example with :class:`~asyncreader._decoders.example_layout.SharedLayout`
(one numpy comparison for the chunk), takes the counts of every matching example from the
layout (int64 counts from the varint bytes of the chunk's matrix), and parses only the
examples that differ, one by one, with the wire-format decoder.
"""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any, Final

import numpy as np

from .._decoders import wire
from .._decoders.example_columns import RequestedFeature
from .._decoders.example_layout import LAYOUT_MIN_BATCH, SharedLayout
from .._decoders.features import VarLenFeature

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["FeatureSeen", "SchemaScan"]

KIND_NAMES: Final = {wire.BYTES: "bytes", wire.FLOAT: "float", wire.INT64: "int64"}
_DTYPES: Final = {wire.BYTES: "string", wire.FLOAT: "float32", wire.INT64: "int64"}
_TF_DTYPES: Final = {"bytes": "tf.string", "float": "tf.float32", "int64": "tf.int64"}
# Layout rounds per chunk before the rest is parsed one by one.
_ROUNDS: Final = 4
#: Records that are not Examples, with none that is, after which a file is taken to hold
#: no Examples and the scan stops (it would otherwise try every record one by one).
GIVE_UP: Final = 100


@dataclasses.dataclass(slots=True)
class FeatureSeen:
    """What one feature looked like across the examples that hold it.

    Attributes:
        kinds: The list kinds seen (``"bytes"``, ``"float"``, ``"int64"``; an empty
            Feature with no list set adds nothing).
        records: Examples that hold the feature.
        min_values: The fewest values one example held.
        max_values: The most values one example held.
    """

    kinds: set[str] = dataclasses.field(default_factory=set)
    records: int = 0
    min_values: int = -1
    max_values: int = 0

    def add(self, kind: int, counts: np.ndarray) -> None:
        """Note ``len(counts)`` examples holding the feature as ``kind`` with ``counts``."""
        if not len(counts):
            return
        if kind in KIND_NAMES:
            self.kinds.add(KIND_NAMES[kind])
        low, high = int(counts.min()), int(counts.max())
        self.min_values = low if self.min_values < 0 else min(self.min_values, low)
        self.max_values = max(self.max_values, high)
        self.records += len(counts)

    def shape(self, examples: int) -> list[int] | None:
        """``[n]`` when every example holds exactly ``n`` values, else ``None`` (varies)."""
        if self.records == examples and self.min_values == self.max_values:
            return [self.max_values]
        return None

    def spec(self, examples: int) -> str:
        """The ``parse_example`` spec that reads this feature, as text."""
        if len(self.kinds) != 1:
            return "-"
        dtype = _TF_DTYPES[next(iter(self.kinds))]
        shape = self.shape(examples)
        if shape is not None:
            return f"FixedLenFeature({shape}, {dtype})"
        return f"VarLenFeature({dtype})"

    def to_json(self, examples: int) -> dict[str, Any]:
        """The feature as a JSON object."""
        return {
            "kind": next(iter(self.kinds)) if len(self.kinds) == 1 else None,
            "kinds": sorted(self.kinds),
            "shape": self.shape(examples),
            "min_values": max(self.min_values, 0),
            "max_values": self.max_values,
            "records": self.records,
            "spec": self.spec(examples),
        }


class SchemaScan:
    """Collects the features of the serialized Examples fed to :meth:`add`.

    Attributes:
        examples: Records that parsed as a ``tf.train.Example`` with features.
        others: Records that did not.
        first_other: The key of the first record that did not (a TFRecord's byte offset),
            if any.
        features: By name.
        stopped: Whether the scan stopped because the first :data:`GIVE_UP` records
            were none of them Examples.
    """

    __slots__ = ("examples", "features", "first_other", "others", "stopped")

    def __init__(self) -> None:
        self.examples = 0
        self.others = 0
        self.first_other: int | None = None
        self.features: dict[str, FeatureSeen] = {}
        self.stopped = False

    def add(self, values: Sequence[bytes], keys: np.ndarray) -> None:
        """Add a chunk of records (``keys`` name them in :attr:`first_other`)."""
        if self.stopped:
            return
        rest: Sequence[bytes] = values
        rest_keys = keys
        for _ in range(_ROUNDS):
            if len(rest) < LAYOUT_MIN_BATCH:
                break
            unmatched = self._add_layout(rest)
            if unmatched is None:
                break
            rest = [rest[i] for i in unmatched.tolist()]
            rest_keys = rest_keys[unmatched]
        for value, key in zip(rest, rest_keys.tolist(), strict=True):
            self._add_one(value, key)
            if not self.examples and self.others >= GIVE_UP:
                self.stopped = True
                return

    def _add_layout(self, items: Sequence[bytes]) -> np.ndarray | None:
        """Add the items laid out like the first; return the positions of the others, or
        ``None`` (nothing added) when the first has no layout to share."""
        first = items[0]
        try:
            if not wire.has_features(first):
                return None
            index = wire.index_example(first)
            kinds = {key: wire.parse_feature(span)[0] for key, span in index.items()}
            names = {key: key.decode("utf-8") for key in index}
        except (wire.WireError, UnicodeDecodeError):
            return None
        specs = [
            RequestedFeature(
                names[key],
                key,
                VarLenFeature(_DTYPES.get(kind, "string")),
                kind if kind in KIND_NAMES else wire.BYTES,
                (),
                0,
            )
            for key, kind in kinds.items()
        ]
        layout = SharedLayout.build(items, specs)
        if layout is None:
            return None
        matched = np.flatnonzero(layout.matched)
        rows = matched if layout.position is None else layout.position[matched]
        for spec, kind, spans in zip(specs, layout.kinds, layout.ranges, strict=True):
            if kind == wire.INT64 and spans:
                start, stop = spans[0]
                # One value per varint: count the bytes that end one.
                counts = (layout.matrix[rows, start:stop] < 0x80).sum(axis=1)
            elif kind == wire.FLOAT and spans:
                start, stop = spans[0]
                counts = np.full(len(rows), (stop - start) // 4)
            else:
                counts = np.full(len(rows), len(spans))
            self.features.setdefault(spec.name, FeatureSeen()).add(kind, counts)
        self.examples += len(matched)
        return np.flatnonzero(~layout.matched)

    def _add_one(self, value: bytes, record: int) -> None:
        try:
            if not wire.has_features(value):
                raise wire.WireError("no features")
            found: list[tuple[str, int, int]] = []
            for name, span in wire.index_example(value).items():
                kind, values = wire.parse_feature(span)
                if kind == wire.BYTES:
                    count = len(wire.bytes_values(values))
                elif kind == wire.FLOAT:
                    count = len(wire.float_bytes(values)) // 4
                elif kind == wire.INT64:
                    stream = wire.int64_stream(values)
                    count = int(np.count_nonzero(np.frombuffer(stream, np.uint8) < 0x80))
                else:
                    count = 0
                found.append((name.decode("utf-8"), kind, count))
        except (wire.WireError, UnicodeDecodeError):
            self.others += 1
            if self.first_other is None:
                self.first_other = record
            return
        for feature, kind, count in found:
            self.features.setdefault(feature, FeatureSeen()).add(kind, np.array([count]))
        self.examples += 1
