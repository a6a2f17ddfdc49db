"""dtype names shared by queues and decoders: TensorFlow's spellings mapped onto numpy.

One table, so that a name means the same everywhere: ``"float"`` is float32, ``"double"``
float64 and ``"half"`` float16, as in TensorFlow (numpy alone reads ``"float"`` as float64).
Queues write these names into their checkpoints and read them back on restore.

Decoders accept a dtype the way a TensorFlow user writes it (``"float"``, ``"half"``,
``"int32"``, ``"string"``), the way a numpy user writes it (``np.float32``,
``np.dtype("<i8")``), or as an object with an ``as_numpy_dtype`` attribute (a ``tf.DType``).
Python's ``float`` means float32 and ``bool`` means bool, as in ``tf.as_dtype``; ``bytes``,
``str`` and ``object`` mean TensorFlow's ``string`` (numpy object arrays of ``bytes``).
Messages always name dtypes the way TensorFlow prints them (``float``, ``double``, ``half``).
"""

from __future__ import annotations

import numpy as np

from .._errors import InvalidArgumentError

__all__ = ["STRING", "builtin_dtype", "dtype_by_name", "resolve_dtype", "tf_name"]

#: The numpy dtype that stands for TensorFlow's ``string``: object arrays holding ``bytes``.
STRING = np.dtype(object)

_TF_NAMES: dict[np.dtype[np.generic], str] = {
    np.dtype(np.float16): "half",
    np.dtype(np.float32): "float",
    np.dtype(np.float64): "double",
    np.dtype(np.int8): "int8",
    np.dtype(np.int16): "int16",
    np.dtype(np.int32): "int32",
    np.dtype(np.int64): "int64",
    np.dtype(np.uint8): "uint8",
    np.dtype(np.uint16): "uint16",
    np.dtype(np.uint32): "uint32",
    np.dtype(np.uint64): "uint64",
    np.dtype(np.bool_): "bool",
    np.dtype(np.complex64): "complex64",
    np.dtype(np.complex128): "complex128",
    STRING: "string",
}

_BY_NAME: dict[str, np.dtype[np.generic]] = {name: dt for dt, name in _TF_NAMES.items()}
_BY_NAME.update(
    {
        "float16": np.dtype(np.float16),
        "float32": np.dtype(np.float32),
        "float64": np.dtype(np.float64),
        "bytes": STRING,
        "str": STRING,
        "object": STRING,
    }
)

_BUILTINS: dict[object, np.dtype[np.generic]] = {
    float: np.dtype(np.float32),
    bool: np.dtype(np.bool_),
    bytes: STRING,
    str: STRING,
    object: STRING,
}


def dtype_by_name(name: str) -> np.dtype[np.generic] | None:
    """Return the dtype TensorFlow (or numpy, for ``"float32"`` and the like) calls ``name``.

    ``None`` when the table has no such name.
    """
    return _BY_NAME.get(name)


def builtin_dtype(value: object) -> np.dtype[np.generic] | None:
    """Return the dtype a Python type stands for (``float`` → float32), or ``None``."""
    if isinstance(value, type):
        return _BUILTINS.get(value)
    return None


def resolve_dtype(value: object) -> np.dtype[np.generic]:
    """Turn a TensorFlow name, numpy dtype, type object or ``tf.DType`` into a numpy dtype.

    The result is in native byte order. ``string`` and its aliases give the object dtype.

    Raises:
        InvalidArgumentError: ``value`` names no dtype.
    """
    if isinstance(value, str):
        found = _BY_NAME.get(value)
        if found is None:
            raise InvalidArgumentError(f"unknown dtype name {value!r}")
        return found
    if isinstance(value, type) and value in _BUILTINS:
        return _BUILTINS[value]
    numpy_dtype = getattr(value, "as_numpy_dtype", None)
    if numpy_dtype is not None:
        value = numpy_dtype
    try:
        dtype: np.dtype[np.generic] = np.dtype(value)  # type: ignore[call-overload]
    except TypeError:
        raise InvalidArgumentError(f"cannot interpret {value!r} as a dtype") from None
    if dtype.kind in "SUO":
        return STRING
    return dtype.newbyteorder("=")


def tf_name(dtype: np.dtype[np.generic]) -> str:
    """TensorFlow's name for ``dtype`` (``float`` for float32, ``string`` for object)."""
    return _TF_NAMES.get(dtype.newbyteorder("=") if dtype.kind != "O" else dtype, str(dtype))
