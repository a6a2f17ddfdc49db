"""The ``tf.train.Example`` messages: :class:`Example`, :class:`Features`, :class:`Feature`.

They mirror TensorFlow's protobuf messages and serialize to the same bytes. Encoding and
decoding go through the hand-written wire-format codec in :mod:`.wire`; where protobuf's
rules and TensorFlow's fast parser disagree on unusual payloads, decoding follows protobuf:
packed and unpacked numbers may be mixed in one list, unknown fields inside lists are
skipped, a Feature with two oneof members keeps the last, the same list field twice is
concatenated, and a packed float list whose length is not a multiple of 4 is an error.

Parsing a batch of serialized Examples into arrays (``parse_example``) does not build these
objects; see :mod:`.example`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final

import numpy as np

from .._errors import InvalidArgumentError
from . import wire
from .strings import to_bytes

if TYPE_CHECKING:
    from collections.abc import Mapping, Sequence

__all__ = ["KIND_NAMES", "Example", "Feature", "Features"]

#: The name of each wire kind of feature list, as the Feature message spells its fields.
KIND_NAMES: Final = {
    wire.BYTES: "bytes_list",
    wire.FLOAT: "float_list",
    wire.INT64: "int64_list",
}


class Feature:
    """One feature of an Example: a list of bytes, float32 or int64 values, or nothing.

    Build it like TensorFlow's message, ``Feature(float_list=[1.0, 2.0])`` (at most one of
    the three keywords), or let :meth:`from_value` pick the kind from Python / numpy values.

    Attributes:
        kind: ``"bytes_list"``, ``"float_list"``, ``"int64_list"``, or None when unset.
        value: A list of ``bytes``, a float32 array, an int64 array, or None.
    """

    __slots__ = ("_kind", "_value")

    def __init__(
        self,
        *,
        bytes_list: Sequence[bytes | str] | None = None,
        float_list: object = None,
        int64_list: object = None,
    ) -> None:
        """Create a Feature holding one kind of list.

        Raises:
            InvalidArgumentError: more than one list is given, or values do not convert
                (bytes_list elements must be bytes or str; int64 values must fit in int64).
        """
        given = [
            (kind, values)
            for kind, values in (
                (wire.BYTES, bytes_list),
                (wire.FLOAT, float_list),
                (wire.INT64, int64_list),
            )
            if values is not None
        ]
        if len(given) > 1:
            raise InvalidArgumentError(
                "a Feature holds only one of bytes_list, float_list, int64_list"
            )
        self._kind = wire.NONE
        self._value: list[bytes] | np.ndarray | None = None
        if given:
            self._kind, values = given[0]
            self._value = _convert_values(self._kind, values)

    @classmethod
    def _from_parts(cls, kind: int, value: list[bytes] | np.ndarray | None) -> Feature:
        feature = cls.__new__(cls)
        feature._kind = kind
        feature._value = value
        return feature

    @classmethod
    def from_value(cls, value: object) -> Feature:
        """Wrap ``value`` in a Feature of the kind its type implies.

        ``bytes`` / ``str`` (or lists and string arrays of them) give a bytes_list; floats and
        floating arrays a float_list; ints, bools and integer arrays an int64_list. A Feature
        is returned unchanged.

        Raises:
            InvalidArgumentError: the kind cannot be inferred (an empty list, mixed types,
                complex numbers) or the values do not convert.
        """
        if isinstance(value, Feature):
            return value
        if isinstance(value, (bytes, str, bytearray, np.bytes_)):
            return cls(bytes_list=[value])  # type: ignore[list-item]
        if isinstance(value, (bool, int, np.integer, np.bool_)):
            return cls(int64_list=[value])
        if isinstance(value, (float, np.floating)):
            return cls(float_list=[value])
        if isinstance(value, np.ndarray):
            kind = value.dtype.kind
            if kind in "SUO":
                return cls(bytes_list=value.ravel().tolist())
            if kind in "iub":
                return cls(int64_list=value)
            if kind == "f":
                return cls(float_list=value)
            raise InvalidArgumentError(f"cannot store a {value.dtype} array in a Feature")
        if isinstance(value, (list, tuple)):
            if not value:
                raise InvalidArgumentError(
                    "cannot infer the kind of an empty list; pass Feature(float_list=[]) "
                    "(or bytes_list / int64_list)"
                )
            if all(isinstance(item, (bytes, str, bytearray, np.bytes_)) for item in value):
                return cls(bytes_list=list(value))
            if all(isinstance(item, (bool, int, np.integer, np.bool_)) for item in value):
                return cls(int64_list=value)
            if all(isinstance(item, (bool, int, float, np.integer, np.floating)) for item in value):
                return cls(float_list=value)
            raise InvalidArgumentError(f"cannot infer one Feature kind for {value!r:.80}")
        raise InvalidArgumentError(f"cannot store {type(value).__name__} in a Feature")

    @property
    def kind(self) -> str | None:
        """Which list is set: ``"bytes_list"``, ``"float_list"``, ``"int64_list"`` or None."""
        return KIND_NAMES.get(self._kind)

    @property
    def value(self) -> list[bytes] | np.ndarray | None:
        """The values: a list of bytes, a float32 array, an int64 array, or None."""
        return self._value

    def SerializeToString(self) -> bytes:
        """The Feature in protobuf wire format."""
        return wire.encode_feature(self._kind, self._value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Feature):
            return NotImplemented
        if self._kind != other._kind:
            return False
        if isinstance(self._value, np.ndarray) and isinstance(other._value, np.ndarray):
            # Compare bit patterns so that NaN payloads and -0.0 count as stored.
            return self._value.tobytes() == other._value.tobytes()
        return self._value == other._value

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        if self._kind == wire.NONE:
            return "Feature()"
        value = self._value
        shown = value.tolist() if isinstance(value, np.ndarray) else value
        return f"Feature({self.kind}={shown!r:.200})"


def _convert_values(kind: int, values: object) -> list[bytes] | np.ndarray:
    if kind == wire.BYTES:
        if isinstance(values, (bytes, str)):
            raise InvalidArgumentError("bytes_list takes a list of values, not one bytes value")
        if isinstance(values, np.ndarray):
            values = values.ravel().tolist()
        return [to_bytes(item) for item in values]  # type: ignore[attr-defined]
    dtype = np.float32 if kind == wire.FLOAT else np.int64
    try:
        array = np.asarray(values)
        if kind == wire.INT64 and array.dtype.kind == "f" and array.size:
            raise InvalidArgumentError("int64_list values must be integers")
        if kind == wire.INT64 and array.dtype.kind == "O":
            array = np.array([int(item) for item in array.ravel().tolist()], dtype=np.int64)
        return array.astype(dtype).ravel()
    except (OverflowError, TypeError, ValueError) as exc:
        if isinstance(exc, InvalidArgumentError):
            raise
        raise InvalidArgumentError(f"cannot store {values!r:.80} in a Feature: {exc}") from None


class Features:
    """A map from feature name to :class:`Feature` (``tf.train.Features``).

    Attributes:
        feature: The mapping itself (a dict; values are :class:`Feature`).
    """

    __slots__ = ("feature",)

    def __init__(self, feature: Mapping[str, object] | None = None) -> None:
        """Build from ``{name: Feature or value}``; values go through :meth:`Feature.from_value`.

        Raises:
            InvalidArgumentError: a name is not a str, or a value cannot be stored.
        """
        self.feature: dict[str, Feature] = {}
        for name, value in (feature or {}).items():
            if not isinstance(name, str):
                raise InvalidArgumentError(f"feature names must be str, got {name!r}")
            self.feature[name] = Feature.from_value(value)

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Features):
            return NotImplemented
        return self.feature == other.feature

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Features({self.feature!r})"


class Example:
    """A ``tf.train.Example``: named features, serialized exactly as TensorFlow does.

    ``Example(features={"image": raw_bytes, "label": 3, "x": np.array([...], np.float32)})``
    infers each feature's kind (see :meth:`Feature.from_value`); pass :class:`Feature`
    objects to choose it, or a :class:`Features`. Serialized keys are ordered as protobuf's
    deterministic serialization orders them in TensorFlow's Python, so the bytes equal
    ``tf.train.Example.SerializeToString(deterministic=True)``; any order parses the same.

    Attributes:
        features: The :class:`Features` (empty when the Example has none).
    """

    __slots__ = ("_has_features", "features")

    def __init__(self, features: Features | Mapping[str, object] | None = None) -> None:
        """Create an Example; ``features=None`` leaves the field unset (serializes to b"").

        Raises:
            InvalidArgumentError: a feature name is not a str or a value cannot be stored.
        """
        self._has_features = features is not None
        if isinstance(features, Features):
            self.features = features
        else:
            self.features = Features(features)

    def SerializeToString(self) -> bytes:
        """The Example in protobuf wire format."""
        if not self._has_features and not self.features.feature:
            return wire.encode_example(None)
        return wire.encode_example(
            {
                name.encode("utf-8"): feature.SerializeToString()
                for name, feature in self.features.feature.items()
            }
        )

    serialize = SerializeToString

    @classmethod
    def FromString(cls, serialized: bytes) -> Example:
        """Decode a serialized Example.

        Raises:
            InvalidArgumentError: the bytes are not a valid Example (or a key is not UTF-8).
        """
        data = to_bytes(serialized)
        try:
            spans = wire.index_example(data)
            decoded = {key: _decode_feature(span) for key, span in spans.items()}
            names = {key.decode("utf-8"): feature for key, feature in decoded.items()}
        except (wire.WireError, UnicodeDecodeError) as exc:
            raise InvalidArgumentError(f"Error parsing Example: {exc}") from None
        example = cls(Features())
        example.features.feature = names
        example._has_features = bool(names) or wire.has_features(data)
        return example

    parse = FromString

    def to_dict(self) -> dict[str, list[bytes] | np.ndarray | None]:
        """``{name: values}`` for every feature (see :attr:`Feature.value`)."""
        return {name: feature.value for name, feature in self.features.feature.items()}

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Example):
            return NotImplemented
        return self.features == other.features

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"Example(features={self.features.feature!r})"


def _decode_feature(span: wire.Span) -> Feature:
    kind, body = wire.parse_feature(span)
    if kind == wire.NONE:
        return Feature._from_parts(kind, None)
    if kind == wire.BYTES:
        return Feature._from_parts(kind, wire.bytes_values(body))
    if kind == wire.FLOAT:
        floats = np.frombuffer(bytearray(wire.float_bytes(body)), dtype="<f4")
        return Feature._from_parts(kind, floats.astype(np.float32, copy=False))
    return Feature._from_parts(kind, wire.decode_varints(wire.int64_stream(body)))
