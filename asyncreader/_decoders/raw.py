"""``decode_raw``: reinterpret the bytes of records as numbers, for a whole batch at once."""

from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import numpy as np

from .._errors import InvalidArgumentError
from .._records.batch import RecordBatch
from .dtypes import resolve_dtype, tf_name
from .policy import check_keys, check_on_error, check_skip_shape, with_key
from .strings import flatten_strings

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._error_policy import OnError
    from .policy import DecodeErrors

__all__ = ["decode_raw"]

_RAW_TYPES = frozenset(
    np.dtype(t)
    for t in (
        np.float16,
        np.float32,
        np.float64,
        np.int32,
        np.uint16,
        np.uint8,
        np.int16,
        np.int8,
        np.int64,
        np.complex64,
        np.complex128,
        np.bool_,
    )
)
# DecodePaddedRaw takes fewer types than DecodeRaw: no bool and no complex.
_PADDED_TYPES = _RAW_TYPES - {np.dtype(np.complex64), np.dtype(np.complex128), np.dtype(np.bool_)}
_RAW_ALLOWED = (
    "half, float, double, int32, uint16, uint8, int16, int8, int64, complex64, complex128, "
    "bool, bfloat16"
)
_PADDED_ALLOWED = "half, float, double, int32, uint16, uint8, int16, int8, int64, bfloat16"
_HOST_LITTLE = sys.byteorder == "little"


def decode_raw(
    data: object,
    out_type: object,
    little_endian: bool = True,
    fixed_length: int | None = None,
    *,
    on_error: OnError | DecodeErrors = None,
    keys: object = None,
) -> np.ndarray:
    """Reinterpret the bytes of each string as a vector of ``out_type`` numbers.

    Mirrors ``tf.io.decode_raw``. ``data`` is one bytes value (the result is 1-D) or a batch:
    a list / tuple (possibly nested) or numpy array of bytes, giving shape
    ``data.shape + [length // itemsize]``. A numpy ``S`` array is read from its fixed-width
    storage, ``itemsize`` bytes per element, NUL padding included. ``str`` values are UTF-8
    encoded first.

    A batch is decoded without a per-record Python loop: the records are joined into one
    ``bytearray`` and reinterpreted with one ``np.frombuffer``. The result is therefore a
    fresh, writable array that shares memory with nothing the caller holds.

    ``little_endian`` gives the byte order of the input; numbers are returned in native order
    (complex numbers have their real and imaginary parts swapped separately). ``bool`` output
    is normalised so that any non-zero byte is ``True``.

    Args:
        data: The bytes to decode, one value or a batch.
        out_type: ``half``/``float16``, ``float``/``float32``, ``double``/``float64``,
            ``int8``, ``int16``, ``int32``, ``int64``, ``uint8``, ``uint16``, ``bool``,
            ``complex64`` or ``complex128``, as a TensorFlow name, numpy dtype or type.
        little_endian: Whether the input is little-endian.
        fixed_length: If given, every string is first truncated or zero-padded on the right
            to this many bytes (``tf.io.decode_raw``'s ``fixed_length``); strings may then
            have different lengths. Not available for ``bool`` and complex types.
        on_error: ``None`` / ``"raise"`` (TensorFlow's behaviour) raises on the first record
            of another size; a :class:`~asyncreader.DecodeErrors` with a skipping policy drops
            the records whose size is not the batch's most common size (of those that are a
            multiple of the item size) instead, and notes them as dead letters; ``data``
            must then be a 1-D batch, and ``errors.kept`` gives the positions decoded.
        keys: The batch's reader keys, one per record, so that errors and dead letters name
            the file and record key.

    Returns:
        A native-order array of ``out_type``, shape ``batch_shape + [n]`` (with bad records
        skipped: one row per kept record).

    Raises:
        InvalidArgumentError: ``out_type`` is not one of the types above; the strings have
            different lengths (``DecodeRaw requires input strings to all be the same size,
            but element <i> has size <first> != <this>``); a length is not a multiple of
            the item size (``Input to DecodeRaw has length <n> that is not a multiple of
            <size>, the size of <type>``); ``fixed_length`` is not positive or not a
            multiple of the item size; ``data`` is not bytes or a batch of bytes; skipping was
            asked for without a DecodeErrors, or for data that is not a 1-D batch; the
            policy's limits were exceeded.
    """
    errors = check_on_error(on_error)
    dtype = resolve_dtype(out_type)
    if isinstance(data, RecordBatch):
        return _decode_record_batch(data, dtype, little_endian, fixed_length, errors, keys)
    if errors is not None or keys is not None:
        return _decode_guarded(data, dtype, little_endian, fixed_length, errors, keys)
    if fixed_length is not None:
        return _decode_padded(data, dtype, little_endian, fixed_length)
    if dtype not in _RAW_TYPES:
        raise InvalidArgumentError(
            f"Value for attr 'out_type' of {tf_name(dtype)} is not in the list of allowed "
            f"values: {_RAW_ALLOWED}"
        )
    itemsize = dtype.itemsize
    if isinstance(data, np.ndarray) and data.dtype.kind == "S":
        # Fixed-width storage: every element has exactly ``itemsize`` bytes.
        shape = tuple(int(dim) for dim in data.shape)
        width = data.dtype.itemsize
        buffer = bytearray(np.ascontiguousarray(data).tobytes())
    else:
        items, shape = flatten_strings(data)
        count = len(items)
        if count == 0:
            return np.zeros((*shape, 0), dtype=dtype)
        width = len(items[0])
        if count > 1:
            lengths = np.fromiter(map(len, items), dtype=np.intp, count=count)
            mismatched = np.flatnonzero(lengths != width)
            if mismatched.size:
                index = int(mismatched[0])
                raise InvalidArgumentError(
                    "DecodeRaw requires input strings to all be the same size, but element "
                    f"{index} has size {width} != {int(lengths[index])}",
                    record=index,
                )
        # bytearray.join gives a buffer nobody else holds, so the result is writable.
        buffer = bytearray().join(items) if count > 1 else bytearray(items[0])
    if width % itemsize:
        raise InvalidArgumentError(
            f"Input to DecodeRaw has length {width} that is not a multiple of {itemsize}, "
            f"the size of {tf_name(dtype)}"
        )
    return _finish(buffer, dtype, little_endian, (*shape, width // itemsize))


def _decode_guarded(
    data: object,
    dtype: np.dtype[np.generic],
    little_endian: bool,
    fixed_length: int | None,
    errors: DecodeErrors | None,
    keys: object,
) -> np.ndarray:
    """``decode_raw`` under a policy: only records of another size are bad, so they are
    found from the lengths alone and the rest is decoded as one batch."""
    if fixed_length is not None or (isinstance(data, np.ndarray) and data.dtype.kind == "S"):
        # No record can be bad on its own: padding fits every length, and ``S`` storage
        # gives every element the same width.
        result = decode_raw(data, dtype, little_endian, fixed_length)
        count = len(result) if result.ndim > 1 else 1
        check_keys(keys, count)
        if errors is not None:
            check_skip_shape(errors, result.shape[:-1])
            errors._finish(np.arange(count, dtype=np.int64))
        return result
    items, shape = flatten_strings(data)
    key_list = check_keys(keys, len(items))
    if not check_skip_shape(errors, shape):
        try:
            result = decode_raw(data, dtype, little_endian)
        except InvalidArgumentError as exc:
            raise with_key(exc, key_list) from None
        if errors is not None:
            errors._finish(np.arange(len(items), dtype=np.int64))
        return result
    assert errors is not None
    lengths = np.fromiter(map(len, items), dtype=np.intp, count=len(items))
    width = _usual_width(lengths, dtype.itemsize)
    for index in np.flatnonzero(lengths != width).tolist():
        size = int(lengths[index])
        if width < 0 or size % dtype.itemsize:
            message = (
                f"Input to DecodeRaw has length {size} that is not a multiple of "
                f"{dtype.itemsize}, the size of {tf_name(dtype)}"
            )
        else:
            message = (
                "DecodeRaw requires input strings to all be the same size, but element "
                f"{index} has size {width} != {size}"
            )
        key = None if key_list is None else key_list[index]
        error = with_key(InvalidArgumentError(message, record=index), key_list)
        errors._note(error, index, key)
    kept = np.flatnonzero(lengths == width).astype(np.int64)
    errors._finish(kept)
    if not kept.size:
        return np.zeros((0, max(width, 0) // dtype.itemsize), dtype=dtype)
    good = [items[index] for index in kept.tolist()] if kept.size < len(items) else items
    return decode_raw(good, dtype, little_endian).reshape(kept.size, -1)


def _decode_record_batch(
    batch: RecordBatch,
    dtype: np.dtype[np.generic],
    little_endian: bool,
    fixed_length: int | None,
    errors: DecodeErrors | None,
    keys: object,
) -> np.ndarray:
    """``decode_raw`` of a reader's batch, from its buffers: records of one length become
    a view of the block they were read into where the alignment allows."""
    given = check_keys(keys, len(batch))
    key_seq: Sequence[bytes] = batch.key_view() if given is None else given
    if fixed_length is not None:
        result = _decode_padded(batch, dtype, little_endian, fixed_length)
        if errors is not None:
            errors._finish(np.arange(len(batch), dtype=np.int64))
        return result
    if dtype not in _RAW_TYPES:
        raise InvalidArgumentError(
            f"Value for attr 'out_type' of {tf_name(dtype)} is not in the list of allowed "
            f"values: {_RAW_ALLOWED}"
        )
    itemsize = dtype.itemsize
    lengths = batch.lengths
    count = len(lengths)
    if count == 0:
        if errors is not None:
            errors._finish(np.zeros(0, dtype=np.int64))
        return np.zeros((0, 0), dtype=dtype)
    if check_skip_shape(errors, (count,)):
        assert errors is not None
        width = _usual_width(lengths, itemsize)
        for index in np.flatnonzero(lengths != width).tolist():
            size = int(lengths[index])
            if width < 0 or size % itemsize:
                message = (
                    f"Input to DecodeRaw has length {size} that is not a multiple of "
                    f"{itemsize}, the size of {tf_name(dtype)}"
                )
            else:
                message = (
                    "DecodeRaw requires input strings to all be the same size, but element "
                    f"{index} has size {width} != {size}"
                )
            error = with_key(InvalidArgumentError(message, record=index), key_seq)
            errors._note(error, index, key_seq[index])
        kept = np.flatnonzero(lengths == width).astype(np.int64)
        errors._finish(kept)
        if not kept.size:
            return np.zeros((0, max(width, 0) // itemsize), dtype=dtype)
        if kept.size < count:
            batch = batch.take(kept)
    else:
        width = int(lengths[0])
        mismatched = np.flatnonzero(lengths != width)
        if mismatched.size:
            index = int(mismatched[0])
            raise with_key(
                InvalidArgumentError(
                    "DecodeRaw requires input strings to all be the same size, but element "
                    f"{index} has size {width} != {int(lengths[index])}",
                    record=index,
                ),
                key_seq,
            )
        if width % itemsize:
            raise with_key(
                InvalidArgumentError(
                    f"Input to DecodeRaw has length {width} that is not a multiple of "
                    f"{itemsize}, the size of {tf_name(dtype)}",
                    record=0,
                ),
                key_seq,
            )
        if errors is not None:
            errors._finish(np.arange(count, dtype=np.int64))
    return _numbers_of_rows(batch.to_numpy(), dtype, little_endian)


def _numbers_of_rows(
    rows: np.ndarray, dtype: np.dtype[np.generic], little_endian: bool
) -> np.ndarray:
    """Reinterpret a ``(n, width)`` byte matrix as ``(n, width // itemsize)`` numbers: a
    view when its rows are aligned for ``dtype`` and in native order, else a copy."""
    if dtype.kind == "b":
        truth: np.ndarray = rows != 0  # any non-zero byte is true
        return truth
    if rows.shape[1] == 0:
        return np.zeros((rows.shape[0], 0), dtype=dtype)
    itemsize = dtype.itemsize
    aligned = rows.ctypes.data % dtype.alignment == 0 and rows.strides[0] % itemsize == 0
    numbers = (rows if aligned else np.ascontiguousarray(rows)).view(dtype)
    if little_endian != _HOST_LITTLE and itemsize > 1:
        numbers = numbers.byteswap()  # a copy: the reader's block stays as it was read
    return numbers


def _usual_width(lengths: np.ndarray, itemsize: int) -> int:
    """The most common record length that is a multiple of ``itemsize`` (the first seen on
    a tie), or -1 when there is none."""
    usable = lengths[lengths % itemsize == 0]
    if not usable.size:
        return -1
    widths, first, counts = np.unique(usable, return_index=True, return_counts=True)
    best = np.flatnonzero(counts == counts.max())
    return int(widths[best[np.argmin(first[best])]])


def _decode_padded(
    data: object, dtype: np.dtype[np.generic], little_endian: bool, fixed_length: int
) -> np.ndarray:
    if dtype not in _PADDED_TYPES:
        raise InvalidArgumentError(
            f"Value for attr 'out_type' of {tf_name(dtype)} is not in the list of allowed "
            f"values: {_PADDED_ALLOWED}"
        )
    fixed_length = int(fixed_length)
    if fixed_length <= 0:
        raise InvalidArgumentError(f"fixed_length ({fixed_length}) must be greater than zero.")
    if fixed_length % dtype.itemsize:
        raise InvalidArgumentError(
            f"fixed_length ({fixed_length}) must be a multiple of the size of out_type "
            f"({dtype.itemsize})"
        )
    if isinstance(data, RecordBatch):
        count = len(data)
        out_shape: tuple[int, ...] = (count, fixed_length // dtype.itemsize)
        if count == 0:
            return np.zeros(out_shape, dtype=dtype)
        lengths = data.lengths
        if (lengths == lengths[0]).all():
            return _pad_matrix(data.to_numpy(), dtype, little_endian, fixed_length, out_shape)
        source = data.data
        starts = data.starts
        return _pad_scatter(source, starts, lengths, dtype, little_endian, fixed_length, out_shape)
    items, shape = flatten_strings(data)
    count = len(items)
    out_shape = (*shape, fixed_length // dtype.itemsize)
    if count == 0:
        return np.zeros(out_shape, dtype=dtype)
    lengths = np.fromiter(map(len, items), dtype=np.intp, count=count)
    joined = bytearray().join(items)
    if (lengths == fixed_length).all():
        return _finish(joined, dtype, little_endian, out_shape)
    if (lengths == lengths[0]).all():
        rows = np.frombuffer(joined, dtype=np.uint8).reshape(count, int(lengths[0]))
        return _pad_matrix(rows, dtype, little_endian, fixed_length, out_shape)
    source = np.frombuffer(joined, dtype=np.uint8)
    starts = np.cumsum(lengths) - lengths
    return _pad_scatter(source, starts, lengths, dtype, little_endian, fixed_length, out_shape)


def _pad_matrix(
    rows: np.ndarray,
    dtype: np.dtype[np.generic],
    little_endian: bool,
    fixed_length: int,
    out_shape: tuple[int, ...],
) -> np.ndarray:
    """Truncate or zero-pad rows of one length with one strided copy."""
    count, width = rows.shape
    matrix = np.zeros((count, fixed_length), dtype=np.uint8)
    prefix = min(width, fixed_length)
    matrix[:, :prefix] = rows[:, :prefix]
    return _finish(matrix, dtype, little_endian, out_shape)


def _pad_scatter(
    source: np.ndarray,
    starts: np.ndarray,
    lengths: np.ndarray,
    dtype: np.dtype[np.generic],
    little_endian: bool,
    fixed_length: int,
    out_shape: tuple[int, ...],
) -> np.ndarray:
    """Truncate / zero-pad every record at once: scatter the kept prefix of each into a
    zeroed (count, fixed_length) byte matrix. Padding happens before any byte swap, so a
    short record never reads past its end."""
    count = len(lengths)
    kept = np.minimum(lengths, fixed_length)
    columns = np.arange(fixed_length)
    mask = columns[None, :] < kept[:, None]
    matrix = np.zeros((count, fixed_length), dtype=np.uint8)
    matrix[mask] = source[(starts[:, None] + columns[None, :])[mask]]
    return _finish(matrix, dtype, little_endian, out_shape)


def _finish(
    buffer: bytearray | np.ndarray,
    dtype: np.dtype[np.generic],
    little_endian: bool,
    shape: tuple[int, ...],
) -> np.ndarray:
    if dtype.kind == "b":
        # Any non-zero byte is true; numpy must never hold a bool byte other than 0 or 1.
        return np.frombuffer(buffer, dtype=np.uint8).astype(np.bool_).reshape(shape)
    array = np.frombuffer(buffer, dtype=dtype)
    if little_endian != _HOST_LITTLE and dtype.itemsize > 1:
        # numpy swaps complex numbers part by part, as TensorFlow does.
        array.byteswap(inplace=True)
    return array.reshape(shape)
