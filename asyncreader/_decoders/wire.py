"""The protobuf wire format of ``tf.train.Example``, hand-written for batch decoding.

The messages (``tensorflow/core/example/example.proto`` and ``feature.proto``)::

    Example   { Features features = 1; }
    Features  { map<string, Feature> feature = 1; }     // entries: {key = 1; value = 2}
    Feature   { oneof kind { BytesList bytes_list = 1; FloatList float_list = 2;
                             Int64List int64_list = 3; } }
    BytesList { repeated bytes value = 1; }
    FloatList { repeated float value = 1 [packed = true]; }
    Int64List { repeated int64 value = 1 [packed = true]; }

Decoding follows protobuf's rules, not only the common layout: unknown fields (and groups)
are skipped at every level, packed and unpacked numbers are both accepted, a message field
seen twice is merged (so two ``float_list`` fields in one Feature concatenate, and a second
``features`` field adds map entries), and for a repeated map key or oneof the last wins.

The decoder never builds Python objects for features nobody asked for: it maps each key to
the byte range of its serialized Feature, and callers decode only the lists they need. Values
come out in batch-friendly forms: float lists as their raw little-endian float32 bytes, int64
lists as varint byte streams that :func:`decode_varints` turns into one int64 array for a
whole batch, and bytes lists as lists of ``bytes``.
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "BYTES",
    "FLOAT",
    "INT64",
    "NONE",
    "WireError",
    "bytes_values",
    "decode_varints",
    "encode_example",
    "encode_feature",
    "encode_varint",
    "float_bytes",
    "has_features",
    "index_example",
    "int64_stream",
    "parse_feature",
]

#: Feature kinds, numbered as the oneof's field numbers.
NONE, BYTES, FLOAT, INT64 = 0, 1, 2, 3

_MAX_VARINT_BYTES = 10

#: A Feature's location: (buffer, start, end). Merged Features get a buffer of their own.
Span = tuple[bytes, int, int]


class WireError(Exception):
    """The bytes are not a valid serialized message; the argument says why."""


# --- decoding --------------------------------------------------------------------------


def _varint(buf: bytes, pos: int) -> tuple[int, int]:
    try:
        byte = buf[pos]
        if byte < 0x80:
            return byte, pos + 1
        result = byte & 0x7F
        shift = 7
        while True:
            pos += 1
            byte = buf[pos]
            result |= (byte & 0x7F) << shift
            if byte < 0x80:
                return result & 0xFFFFFFFFFFFFFFFF, pos + 1
            shift += 7
            if shift >= 7 * _MAX_VARINT_BYTES:
                raise WireError("varint longer than 10 bytes")
    except IndexError:
        raise WireError("truncated varint") from None


def _length(buf: bytes, pos: int, end: int) -> tuple[int, int]:
    """Read a length prefix; return (start, stop) of the delimited payload."""
    length, pos = _varint(buf, pos)
    stop = pos + length
    if stop > end:
        raise WireError("length-delimited field runs past the end of its message")
    return pos, stop


def _check_end(pos: int, end: int) -> None:
    if pos > end:
        raise WireError("a field runs past the end of its message")


def _skip(buf: bytes, pos: int, tag: int, end: int) -> int:
    """Skip the value of an unknown field whose tag has been read; return the new position."""
    wire_type = tag & 7
    if tag >> 3 == 0:
        raise WireError("field number 0")
    if wire_type == 0:
        pos = _varint(buf, pos)[1]
        if pos > end:
            raise WireError("varint runs past the end of its message")
        return pos
    if wire_type == 2:
        return _length(buf, pos, end)[1]
    if wire_type in (1, 5):
        pos += 8 if wire_type == 1 else 4
        if pos > end:
            raise WireError("fixed-width field runs past the end of its message")
        return pos
    if wire_type == 3:
        closing = (tag & ~7) | 4
        while True:
            if pos >= end:
                raise WireError("unterminated group")
            inner, pos = _varint(buf, pos)
            if inner == closing:
                return pos
            pos = _skip(buf, pos, inner, end)
    raise WireError(f"invalid wire type {wire_type}")


def index_example(buf: bytes) -> dict[bytes, Span]:
    """Map every feature key of a serialized Example to its serialized Feature.

    Raises:
        WireError: the bytes are not a valid Example.
    """
    features: dict[bytes, Span] = {}
    pos = 0
    end = len(buf)
    while pos < end:
        tag, pos = _varint(buf, pos)
        if tag == 0x0A:
            start, stop = _length(buf, pos, end)
            _index_features(buf, start, stop, features)
            pos = stop
        else:
            pos = _skip(buf, pos, tag, end)
    _check_end(pos, end)
    return features


def has_features(buf: bytes) -> bool:
    """Whether a valid serialized Example sets its ``features`` field (even to empty)."""
    pos = 0
    end = len(buf)
    while pos < end:
        tag, pos = _varint(buf, pos)
        if tag == 0x0A:
            return True
        pos = _skip(buf, pos, tag, end)
    return False


def _index_features(buf: bytes, pos: int, end: int, features: dict[bytes, Span]) -> None:
    # Hot loop: one- and two-byte lengths are decoded inline; anything else goes the slow way.
    while pos < end:
        if buf[pos] != 0x0A:
            tag, pos = _varint(buf, pos)
            pos = _skip(buf, pos, tag, end)
            continue
        length = buf[pos + 1] if pos + 1 < end else 0x80
        if length < 0x80:
            start = pos + 2
        else:
            start, stop = _length(buf, pos + 1, end)
            length = stop - start
        stop = start + length
        if stop > end:
            raise WireError("length-delimited field runs past the end of its message")
        pos = stop
        # Common layout: key (field 1) then value (field 2), each with a short length.
        if stop - start >= 4 and buf[start] == 0x0A and buf[start + 1] < 0x80:
            key_end = start + 2 + buf[start + 1]
            if key_end + 1 < stop and buf[key_end] == 0x12:
                value_length = buf[key_end + 1]
                if value_length < 0x80:
                    value_start = key_end + 2
                else:
                    value_start, value_stop = _length(buf, key_end + 1, stop)
                    value_length = value_stop - value_start
                if value_start + value_length == stop:
                    features[buf[start + 2 : key_end]] = (buf, value_start, stop)
                    continue
        key, value = _map_entry(buf, start, stop)
        features[key] = value
    _check_end(pos, end)


def _map_entry(buf: bytes, pos: int, end: int) -> tuple[bytes, Span]:
    key = b""
    parts: list[bytes] = []
    span: Span | None = None
    while pos < end:
        tag, pos = _varint(buf, pos)
        if tag == 0x0A:
            start, pos = _length(buf, pos, end)
            key = buf[start:pos]
        elif tag == 0x12:
            start, pos = _length(buf, pos, end)
            if span is None and not parts:
                span = (buf, start, pos)
            else:
                if span is not None:
                    parts.append(span[0][span[1] : span[2]])
                    span = None
                parts.append(buf[start:pos])  # a repeated message field merges
        else:
            pos = _skip(buf, pos, tag, end)
    _check_end(pos, end)
    if parts:
        merged = b"".join(parts)
        return key, (merged, 0, len(merged))
    return key, span if span is not None else (b"", 0, 0)


def parse_feature(span: Span) -> tuple[int, Span]:
    """The kind of a serialized Feature and the span of its list message.

    Raises:
        WireError: the Feature is malformed.
    """
    buf, pos, end = span
    if pos == end:
        return NONE, (b"", 0, 0)
    tag = buf[pos]
    if tag in (0x0A, 0x12, 0x1A):
        start, stop = _length(buf, pos + 1, end)
        if stop == end:
            return tag >> 3, (buf, start, stop)
    kind = NONE
    parts: list[bytes] = []
    while pos < end:
        tag, pos = _varint(buf, pos)
        if tag in (0x0A, 0x12, 0x1A):
            start, pos = _length(buf, pos, end)
            if tag >> 3 != kind:
                kind = tag >> 3  # another member of the oneof replaces the first
                parts = []
            parts.append(buf[start:pos])
        else:
            pos = _skip(buf, pos, tag, end)
    _check_end(pos, end)
    merged = b"".join(parts)
    return kind, (merged, 0, len(merged))


def bytes_values(span: Span) -> list[bytes]:
    """The values of a serialized BytesList."""
    buf, pos, end = span
    values: list[bytes] = []
    while pos < end:
        tag = buf[pos]
        if tag == 0x0A:
            start, pos = _length(buf, pos + 1, end)
            values.append(buf[start:pos])
        else:
            tag, pos = _varint(buf, pos)
            pos = _skip(buf, pos, tag, end)
    _check_end(pos, end)
    return values


def float_bytes(span: Span) -> bytes:
    """The values of a serialized FloatList as little-endian float32 bytes."""
    buf, pos, end = span
    if pos == end:
        return b""
    if buf[pos] == 0x0A:
        start, stop = _length(buf, pos + 1, end)
        if stop == end:
            if (stop - start) % 4:
                raise WireError("packed float list length is not a multiple of 4")
            return buf[start:stop]
    parts: list[bytes] = []
    while pos < end:
        tag, pos = _varint(buf, pos)
        if tag == 0x0A:
            start, pos = _length(buf, pos, end)
            if (pos - start) % 4:
                raise WireError("packed float list length is not a multiple of 4")
            parts.append(buf[start:pos])
        elif tag == 0x0D:
            if pos + 4 > end:
                raise WireError("truncated float")
            parts.append(buf[pos : pos + 4])
            pos += 4
        else:
            pos = _skip(buf, pos, tag, end)
    _check_end(pos, end)
    return b"".join(parts)


def int64_stream(span: Span) -> bytes:
    """The values of a serialized Int64List as a stream of varints (one per value)."""
    buf, pos, end = span
    if pos == end:
        return b""
    if buf[pos] == 0x0A:
        start, stop = _length(buf, pos + 1, end)
        if stop == end:
            if stop > start and buf[stop - 1] >= 0x80:
                raise WireError("truncated varint in packed int64 list")
            return buf[start:stop]
    parts: list[bytes] = []
    while pos < end:
        tag, pos = _varint(buf, pos)
        if tag == 0x0A:
            start, pos = _length(buf, pos, end)
            if pos > start and buf[pos - 1] >= 0x80:
                raise WireError("truncated varint in packed int64 list")
            parts.append(buf[start:pos])
        elif tag == 0x08:
            start = pos
            pos = _varint(buf, pos)[1]
            parts.append(buf[start:pos])
        else:
            pos = _skip(buf, pos, tag, end)
    _check_end(pos, end)
    return b"".join(parts)


def decode_varints(stream: bytes | np.ndarray) -> np.ndarray:
    """Decode a stream of whole varints (``bytes`` or a ``uint8`` array) into int64 values,
    all at once with numpy.

    Raises:
        WireError: the stream ends inside a varint, or a varint is longer than 10 bytes.
    """
    data = np.frombuffer(stream, dtype=np.uint8)
    if data.size == 0:
        return np.empty(0, dtype=np.int64)
    if data[-1] >= 0x80:
        raise WireError("truncated varint")
    last = np.flatnonzero(data < 0x80)
    if last.size == data.size:
        return data.astype(np.int64)
    first = np.empty_like(last)
    first[0] = 0
    first[1:] = last[:-1] + 1
    extra = last - first  # bytes after each varint's first
    longest = int(extra.max())
    if longest >= _MAX_VARINT_BYTES:
        raise WireError("varint longer than 10 bytes")
    values = (data[first] & 0x7F).astype(np.uint64)
    # One pass per byte position, not one per byte of the stream: measured 2-3x faster
    # than grouping every byte by its varint.
    if np.count_nonzero(extra) * 4 < extra.size:
        # Few varints longer than a byte: only those are touched, fewer at each position.
        rest = np.flatnonzero(extra)
        for k in range(1, longest + 1):
            if k > 1:
                rest = rest[extra[rest] >= k]
            group = (data[first[rest] + k] & 0x7F).astype(np.uint64)
            values[rest] |= group << np.uint64(7 * k)
    else:
        at = first.copy()
        for k in range(1, longest + 1):
            at += 1
            np.minimum(at, last, out=at)  # a shorter varint reads its own last byte ...
            group = (data[at] & 0x7F).astype(np.uint64)
            group[extra < k] = 0  # ... which counts for nothing here
            values |= group << np.uint64(7 * k)
    return values.view(np.int64)


# --- encoding --------------------------------------------------------------------------


def encode_varint(value: int) -> bytes:
    """One varint; negative numbers as their 64-bit two's complement (10 bytes)."""
    value &= 0xFFFFFFFFFFFFFFFF
    if value < 0x80:
        return bytes((value,))
    out = bytearray()
    while value >= 0x80:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def _encode_varints(values: np.ndarray) -> bytes:
    """Varint-encode int64 values with numpy: one byte column per 7 bits, then a mask."""
    unsigned = values.astype(np.int64).view(np.uint64)
    if unsigned.size and int(unsigned.max()) < 0x80:
        return unsigned.astype(np.uint8).tobytes()
    shifts = np.arange(0, 70, 7, dtype=np.uint64)
    groups = (unsigned[:, None] >> shifts[None, :]) & np.uint64(0x7F)
    # Number of bytes: one more than the index of the highest non-zero 7-bit group.
    nonzero = groups != 0
    nbytes = np.where(nonzero.any(axis=1), 10 - np.argmax(nonzero[:, ::-1], axis=1), 1)
    columns = np.arange(10)
    keep = columns[None, :] < nbytes[:, None]
    more = columns[None, :] < (nbytes - 1)[:, None]
    encoded = (groups | (more.astype(np.uint64) << np.uint64(7))).astype(np.uint8)
    return encoded[keep].tobytes()


def encode_feature(kind: int, values: object) -> bytes:
    """Serialize one Feature (``values``: list of bytes, or a float32 / int64 array)."""
    if kind == NONE:
        return b""
    if kind == BYTES:
        assert isinstance(values, list)
        body = b"".join([b"\x0a" + encode_varint(len(value)) + value for value in values])
    else:
        assert isinstance(values, np.ndarray)
        if kind == FLOAT:
            payload = values.astype("<f4", copy=False).tobytes()
        elif values.size <= 8:
            payload = b"".join([encode_varint(int(value)) for value in values.tolist()])
        else:
            payload = _encode_varints(values)
        body = b"\x0a" + encode_varint(len(payload)) + payload if payload else b""
    return bytes(((kind << 3) | 2,)) + encode_varint(len(body)) + body


def upb_key_order(key: bytes) -> tuple[int, ...]:
    # upb's deterministic order: bytewise, but a key sorts before its own prefixes.
    return (*key, 256)


def encode_example(features: dict[bytes, bytes] | None) -> bytes:
    """Serialize an Example from serialized Features by key; None means "not set".

    Keys are written in the order protobuf's deterministic serialization in TensorFlow's
    Python (upb) uses, so the bytes equal ``SerializeToString(deterministic=True)``.
    """
    if features is None:
        return b""
    entries = []
    for key in sorted(features, key=upb_key_order):
        value = features[key]
        entry = (
            b"\x0a" + encode_varint(len(key)) + key + b"\x12" + encode_varint(len(value)) + value
        )
        entries.append(b"\x0a" + encode_varint(len(entry)) + entry)
    body = b"".join(entries)
    return b"\x0a" + encode_varint(len(body)) + body
