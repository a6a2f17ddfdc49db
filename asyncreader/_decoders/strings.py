"""Normalising "a bytes value or a batch of them" into a flat list plus a shape."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .._errors import InvalidArgumentError

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["flatten_strings", "to_bytes"]


def to_bytes(value: object) -> bytes:
    """One string element as ``bytes`` (``str`` is UTF-8 encoded).

    Raises:
        InvalidArgumentError: ``value`` is neither bytes-like nor ``str``.
    """
    if isinstance(value, bytes):
        return value
    if isinstance(value, str):
        return value.encode("utf-8")
    if isinstance(value, (bytearray, memoryview, np.bytes_)):
        return bytes(value)
    raise InvalidArgumentError(
        f"expected bytes or str elements, got {type(value).__name__}: {value!r:.80}"
    )


def flatten_strings(data: object) -> tuple[Sequence[bytes], tuple[int, ...]]:
    """Split ``data`` into its elements (row-major) and the shape they had.

    A single bytes / str value has shape ``()``. Lists and tuples may nest (rectangular);
    numpy arrays of object, ``S`` or ``U`` dtype keep their shape. ``S`` arrays are read
    element by element, as numpy defines them (trailing NUL bytes are not part of a value).

    Raises:
        InvalidArgumentError: an element is not bytes / str, or nested lists are ragged.
    """
    if isinstance(data, (bytes, bytearray, memoryview, str, np.bytes_, np.str_)):
        return [to_bytes(data)], ()
    if isinstance(data, (list, tuple)):
        if not data or set(map(type, data)) == {bytes}:
            return data, (len(data),)
        try:
            array = np.array(data, dtype=object)
        except ValueError as exc:
            raise InvalidArgumentError(f"records must be a rectangular batch: {exc}") from None
        if array.ndim and any(isinstance(item, (list, tuple)) for item in array.flat):
            raise InvalidArgumentError("records must be a rectangular batch of strings")
        data = array
    if isinstance(data, np.ndarray):
        shape = tuple(int(dim) for dim in data.shape)
        if data.dtype.kind == "S":
            return data.ravel().tolist(), shape
        if data.dtype.kind in "OU":
            items = data.ravel().tolist()
            if items and set(map(type, items)) != {bytes}:
                items = [to_bytes(item) for item in items]
            return items, shape
        raise InvalidArgumentError(
            f"expected an array of strings (object, S or U dtype), got dtype {data.dtype}"
        )
    raise InvalidArgumentError(
        f"expected bytes, str, or a list / array of them, got {type(data).__name__}"
    )
