"""Pipeline checkpoints as bytes: a small, versioned, pickle-free container.

A checkpoint is a tree of plain values (``None``, bools, ints of any size, floats, strings,
bytes, lists, tuples, dicts with string keys) and numpy arrays. It is stored as::

    MAGIC | u32 version | u64 header length | u32 masked CRC32C of the rest
          | JSON header | blob area

The JSON header holds the tree; bytes and array data live in the blob area and the header
refers to them by offset, so a checkpoint holding megabytes of queued examples is written
and read with a few large copies rather than per-element encoding. Nothing is ever
unpickled, and decoding is bounded (nesting depth, node count, blob references that must
account for the bytes present), so damaged or crafted bytes are rejected with
:class:`~asyncreader.InvalidArgumentError` without using more memory than a small multiple
of their size. What a decoded tree then makes a pipeline do is checked by the session (see
``docs/guides/checkpoints.md``, "Checkpoints from outside").
"""

from __future__ import annotations

import json
import math
import re
import struct
import warnings
from typing import Any, Final

import numpy as np

from .._errors import InvalidArgumentError
from .._io.crc import masked_crc32c
from .._messages import short_repr

__all__ = ["MAX_DEPTH", "MAX_NODES", "decode", "encode"]

MAGIC: Final = b"ASYNCREADER-CHECKPOINT\n"
VERSION: Final = 1
_HEAD: Final = struct.Struct("<IQI")
#: How deep containers may nest in a checkpoint (pipelines' own trees are far shallower).
MAX_DEPTH: Final = 100
#: How many nodes a checkpoint's tree may have.
MAX_NODES: Final = 50_000_000
#: The most dimensions a stored array may have.
_MAX_NDIM: Final = 32
#: Array dtypes a checkpoint may hold: numbers, bools, fixed-width text, dates.
_ARRAY_KINDS: Final = frozenset("biufcSUmM")
# ``dtype.str`` of those kinds: byte order, kind, item size, a datetime unit.
_DTYPE_STR: Final = re.compile(r"[<>|][biufcSUmM][0-9]{1,9}(\[[0-9]{0,9}[A-Za-z]{1,3}\])?")
#: The keys of each tagged node, by tag.
_NODE_KEYS: Final = {
    "$d": frozenset({"$d"}),
    "$t": frozenset({"$t"}),
    "$b": frozenset({"$b"}),
    "$f": frozenset({"$f"}),
    "$a": frozenset({"$a", "dtype", "shape"}),
    "$o": frozenset({"$o", "shape"}),
}
_SPECIAL_FLOATS: Final = frozenset({"inf", "-inf", "nan"})


class _Writer:
    def __init__(self) -> None:
        self.blobs: list[bytes | memoryview] = []
        self.size = 0

    def blob(self, data: bytes | memoryview) -> list[int]:
        ref = [self.size, len(data)]
        self.blobs.append(data)
        self.size += len(data)
        return ref

    def tree(self, value: Any, depth: int = 0) -> Any:
        if depth > MAX_DEPTH:
            raise InvalidArgumentError(
                f"cannot checkpoint values nested deeper than {MAX_DEPTH} levels"
            )
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            return value if math.isfinite(value) else {"$f": repr(value)}
        if isinstance(value, (bytes, bytearray, memoryview)):
            return {"$b": self.blob(bytes(value))}
        if isinstance(value, np.generic):
            return self.array(np.asarray(value), depth)
        if isinstance(value, np.ndarray):
            return self.array(value, depth)
        if isinstance(value, tuple):
            return {"$t": [self.tree(v, depth + 1) for v in value]}
        if isinstance(value, list):
            return [self.tree(v, depth + 1) for v in value]
        if isinstance(value, dict):
            for key in value:
                if not isinstance(key, str):
                    raise InvalidArgumentError(
                        f"cannot checkpoint a dict with the non-string key {key!r}"
                    )
            return {"$d": {k: self.tree(v, depth + 1) for k, v in value.items()}}
        raise InvalidArgumentError(
            f"cannot checkpoint a value of type {type(value).__name__}: checkpoints hold "
            "numbers, strings, bytes, numpy arrays, and lists, tuples and dicts of them"
        )

    def array(self, array: np.ndarray[Any, Any], depth: int) -> Any:
        shape = list(array.shape)
        if array.dtype.kind == "O":
            # Strings in a typed queue: bytes (or str) objects, one blob reference each.
            items = array.reshape(-1).tolist()
            return {"$o": [self.tree(v, depth + 1) for v in items], "shape": shape}
        if array.dtype.hasobject or array.dtype.kind == "V":
            raise InvalidArgumentError(f"cannot checkpoint an array of dtype {array.dtype}")
        # As a flat view of bytes: also for empty arrays and dates, which a buffer cast refuses.
        raw = np.ascontiguousarray(array).reshape(-1).view(np.uint8)
        blob = self.blob(raw.data)
        return {"$a": blob, "dtype": array.dtype.str, "shape": shape}


def encode(tree: Any) -> bytes:
    """Return ``tree`` as checkpoint bytes.

    Raises:
        InvalidArgumentError: the tree holds a value of another type.
    """
    writer = _Writer()
    header = json.dumps(writer.tree(tree), separators=(",", ":")).encode()
    body = b"".join([header, *writer.blobs])
    crc = masked_crc32c(body)
    return b"".join([MAGIC, _HEAD.pack(VERSION, len(header), crc), body])


class _Malformed(Exception):
    """A structural defect of a checkpoint (reported as InvalidArgumentError)."""


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


class _Reader:
    """Rebuild a tree from its JSON header, in bounded memory.

    Everything is checked before it is built: the encoder writes blobs in the order the
    tree is walked, so each blob reference must start where the previous one ended, and
    each byte of the blob area is copied out once at most. An array's declared shape and
    dtype must account for exactly the bytes referenced, so nothing larger than the
    checkpoint itself is ever allocated for its data.
    """

    def __init__(self, blobs: memoryview) -> None:
        self.blobs = blobs
        self.cursor = 0  # where the next blob must start
        self.nodes = 0

    def blob(self, ref: Any) -> memoryview:
        if not (isinstance(ref, list) and len(ref) == 2 and all(map(_is_int, ref))):
            raise _Malformed(f"bad blob reference {short_repr(ref)}")
        offset, length = ref
        if offset != self.cursor or length < 0 or length > len(self.blobs) - offset:
            raise _Malformed(
                f"blob reference {ref} does not follow the previous one (at {self.cursor}) "
                f"inside the {len(self.blobs)} bytes of blobs"
            )
        self.cursor = offset + length
        return self.blobs[offset : offset + length]

    def tree(self, node: Any, depth: int = 0) -> Any:
        self.nodes += 1
        if self.nodes > MAX_NODES:
            raise _Malformed(f"more than {MAX_NODES} nodes")
        if depth > MAX_DEPTH:
            raise _Malformed(f"nested deeper than {MAX_DEPTH} levels")
        if isinstance(node, list):
            return [self.tree(v, depth + 1) for v in node]
        if node is None or isinstance(node, (bool, int, float, str)):
            return node
        if not isinstance(node, dict):  # pragma: no cover - JSON has no other types
            raise _Malformed(f"unexpected {type(node).__name__}")
        tags = [k for k in node if k in _NODE_KEYS]
        if len(tags) != 1 or set(node) != _NODE_KEYS[tags[0]]:
            raise _Malformed(f"unknown node with keys {short_repr(sorted(node))}")
        tag = tags[0]
        value = node[tag]
        if tag == "$d":
            if not isinstance(value, dict):
                raise _Malformed("a dict node does not hold an object")
            return {k: self.tree(v, depth + 1) for k, v in value.items()}
        if tag == "$t":
            if not isinstance(value, list):
                raise _Malformed("a tuple node does not hold a list")
            return tuple(self.tree(v, depth + 1) for v in value)
        if tag == "$b":
            return bytes(self.blob(value))
        if tag == "$f":
            if not isinstance(value, str) or value not in _SPECIAL_FLOATS:
                raise _Malformed(f"bad float {short_repr(value)}")
            return float(value)
        shape = self.shape(node["shape"])
        count = math.prod(shape)
        if tag == "$a":
            dtype = self.dtype(node["dtype"])
            data = self.blob(value)
            if count * dtype.itemsize != len(data):
                raise _Malformed(
                    f"an array of shape {shape} and dtype {dtype.str} needs "
                    f"{count * dtype.itemsize} bytes, not {len(data)}"
                )
            return np.frombuffer(data, dtype=dtype).reshape(shape).copy()
        if not isinstance(value, list) or len(value) != count:
            raise _Malformed(f"an object array of shape {shape} does not hold {count} items")
        items = [self.tree(v, depth + 1) for v in value]
        out = np.empty(count, dtype=object)
        out[:] = items
        return out.reshape(shape)

    @staticmethod
    def shape(value: Any) -> tuple[int, ...]:
        if (
            not isinstance(value, list)
            or len(value) > _MAX_NDIM
            or not all(_is_int(d) and d >= 0 for d in value)
        ):
            raise _Malformed(f"bad array shape {short_repr(value)}")
        return tuple(value)

    @staticmethod
    def dtype(value: Any) -> np.dtype[Any]:
        # Only the shape of string ``encode`` writes (``dtype.str``) reaches numpy: its
        # parser takes comma lists through ``ast.literal_eval`` and warns on old aliases.
        if not isinstance(value, str) or _DTYPE_STR.fullmatch(value) is None:
            raise _Malformed(f"bad array dtype {short_repr(value)}")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error")
                dtype = np.dtype(value)
        except (TypeError, ValueError, Warning):
            raise _Malformed(f"bad array dtype {short_repr(value)}") from None
        if (
            dtype.kind not in _ARRAY_KINDS
            or dtype.fields is not None
            or dtype.subdtype is not None
            or dtype.itemsize == 0
            or dtype.str != value
        ):
            raise _Malformed(f"bad array dtype {short_repr(value)}")
        return dtype


def decode(data: bytes) -> Any:
    """Return the tree stored in checkpoint bytes from :func:`encode`.

    Safe on bytes from anywhere: whatever the input, it returns a tree or raises
    :class:`~asyncreader.InvalidArgumentError`, and the memory it uses is bounded by a
    small multiple of the input's size.

    Raises:
        InvalidArgumentError: the bytes are not a checkpoint, come from a newer version,
            or are damaged (checksum mismatch, malformed header).
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        raise InvalidArgumentError(f"a checkpoint is bytes, not {type(data).__name__}")
    view = memoryview(data).cast("B")
    start = len(MAGIC) + _HEAD.size
    if len(view) < start or bytes(view[: len(MAGIC)]) != MAGIC:
        raise InvalidArgumentError("not an asyncreader checkpoint (bad magic)")
    version, header_len, crc = _HEAD.unpack_from(view, len(MAGIC))
    if version != VERSION:
        raise InvalidArgumentError(
            f"checkpoint version {version} is not supported (this version reads {VERSION})"
        )
    body = view[start:]
    if masked_crc32c(body) != crc:
        raise InvalidArgumentError("checkpoint is damaged: checksum mismatch")
    if header_len > len(body):
        raise InvalidArgumentError(
            f"checkpoint is damaged: its header of {header_len} bytes is longer than the "
            f"{len(body)} bytes present"
        )
    try:
        header = json.loads(bytes(body[:header_len]))
        reader = _Reader(body[header_len:])
        tree = reader.tree(header)
    except RecursionError:
        raise InvalidArgumentError(
            f"checkpoint is damaged: nested deeper than {MAX_DEPTH} levels"
        ) from None
    except (_Malformed, ValueError) as exc:
        # ValueError: bad JSON or UTF-8, or a number too long to convert.
        raise InvalidArgumentError(f"checkpoint is damaged: {exc}") from None
    if reader.cursor != len(reader.blobs):
        raise InvalidArgumentError(
            f"checkpoint is damaged: {len(reader.blobs) - reader.cursor} bytes of blobs "
            "are not referenced"
        )
    return tree
