"""Pipeline checkpoints as bytes: a small, versioned, pickle-free container.

A checkpoint is a tree of plain values (``None``, bools, ints of any size, floats, strings,
bytes, lists, tuples, dicts with string keys) and numpy arrays. It is stored as::

    MAGIC | u32 version | u64 header length | u32 masked CRC32C of the rest
          | JSON header | blob area

The JSON header holds the tree; bytes and array data live in the blob area and the header
refers to them by offset, so a checkpoint holding megabytes of queued examples is written
and read with a few large copies rather than per-element encoding. Nothing is ever
unpickled: a checkpoint from an untrusted source can at worst be rejected.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any, Final

import numpy as np

from .._errors import InvalidArgumentError
from .._io.crc import masked_crc32c

__all__ = ["decode", "encode"]

MAGIC: Final = b"ASYNCREADER-CHECKPOINT\n"
VERSION: Final = 1
_HEAD: Final = struct.Struct("<IQI")


class _Writer:
    def __init__(self) -> None:
        self.blobs: list[bytes | memoryview] = []
        self.size = 0

    def blob(self, data: bytes | memoryview) -> list[int]:
        ref = [self.size, len(data)]
        self.blobs.append(data)
        self.size += len(data)
        return ref

    def tree(self, value: Any) -> Any:
        if value is None or isinstance(value, (bool, str)):
            return value
        if isinstance(value, int):
            return int(value)
        if isinstance(value, float):
            return value if math.isfinite(value) else {"$f": repr(value)}
        if isinstance(value, (bytes, bytearray, memoryview)):
            return {"$b": self.blob(bytes(value))}
        if isinstance(value, np.generic):
            return self.array(np.asarray(value))
        if isinstance(value, np.ndarray):
            return self.array(value)
        if isinstance(value, tuple):
            return {"$t": [self.tree(v) for v in value]}
        if isinstance(value, list):
            return [self.tree(v) for v in value]
        if isinstance(value, dict):
            for key in value:
                if not isinstance(key, str):
                    raise InvalidArgumentError(
                        f"cannot checkpoint a dict with the non-string key {key!r}"
                    )
            return {"$d": {k: self.tree(v) for k, v in value.items()}}
        raise InvalidArgumentError(
            f"cannot checkpoint a value of type {type(value).__name__}: checkpoints hold "
            "numbers, strings, bytes, numpy arrays, and lists, tuples and dicts of them"
        )

    def array(self, array: np.ndarray[Any, Any]) -> Any:
        shape = list(array.shape)
        if array.dtype.kind == "O":
            # Strings in a typed queue: bytes (or str) objects, one blob reference each.
            return {"$o": [self.tree(v) for v in array.reshape(-1).tolist()], "shape": shape}
        if array.dtype.hasobject or array.dtype.kind == "V":
            raise InvalidArgumentError(f"cannot checkpoint an array of dtype {array.dtype}")
        data = np.ascontiguousarray(array)
        blob = self.blob(memoryview(data.data).cast("B"))
        return {"$a": blob, "dtype": data.dtype.str, "shape": shape}


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


class _Reader:
    def __init__(self, blobs: memoryview) -> None:
        self.blobs = blobs

    def blob(self, ref: Any) -> memoryview:
        offset, length = ref
        if not (
            isinstance(offset, int)
            and isinstance(length, int)
            and offset >= 0
            and length >= 0
            and offset + length <= len(self.blobs)
        ):
            raise ValueError(f"blob reference {ref!r} out of range")
        return self.blobs[offset : offset + length]

    def tree(self, node: Any) -> Any:
        if isinstance(node, list):
            return [self.tree(v) for v in node]
        if not isinstance(node, dict):
            return node
        if "$d" in node:
            return {k: self.tree(v) for k, v in node["$d"].items()}
        if "$t" in node:
            return tuple(self.tree(v) for v in node["$t"])
        if "$b" in node:
            return bytes(self.blob(node["$b"]))
        if "$f" in node:
            return float(node["$f"])
        if "$a" in node:
            data = self.blob(node["$a"])
            return np.frombuffer(data, dtype=np.dtype(node["dtype"])).reshape(node["shape"]).copy()
        if "$o" in node:
            items = [self.tree(v) for v in node["$o"]]
            out = np.empty(len(items), dtype=object)
            out[:] = items
            return out.reshape(node["shape"])
        raise ValueError(f"unknown node {sorted(node)}")


def decode(data: bytes) -> Any:
    """Return the tree stored in checkpoint bytes from :func:`encode`.

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
    try:
        header = json.loads(bytes(body[:header_len]))
        return _Reader(body[header_len:]).tree(header)
    except (ValueError, TypeError, KeyError) as exc:
        raise InvalidArgumentError(f"checkpoint is damaged: {exc}") from None
