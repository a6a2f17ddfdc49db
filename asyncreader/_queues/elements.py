"""Element structure of a queue: dtypes, shapes and names, conversion and batching.

A queue built without ``dtypes`` stores any Python object unchanged (:class:`UntypedCodec`).
With ``dtypes`` an element is a fixed-arity tuple of components, each converted to a numpy
value of its dtype and checked against its shape (:class:`TypedCodec`).

A typed element is stored as a *row*: ``(batch, i)``, where ``batch`` is a tuple of
component arrays with a leading batch dimension (the queue's own copy of what was enqueued;
one row long for ``enqueue``) and ``i`` the row. ``enqueue_many`` thus stores a batch without
splitting it, and a batched dequeue of rows that came from one batch is a slice or a single
fancy-index per component instead of a per-element stack. A batch stays in memory until its
last row is dequeued.

Validation messages follow TensorFlow's wording (SPEC §2.1, §2.2), so code that matched on
TensorFlow's messages keeps working.

A :class:`~asyncreader.RecordBatch` (what ``read_batch`` returns) is converted in bulk, once:
as a string component it is its records; as the whole ``enqueue_many`` argument it is the
two components ``(keys, values)``, exactly what ``read_up_to`` returns (in an untyped queue,
one ``(key, value)`` tuple per record). It is not one element: ``enqueue`` refuses it in a
typed queue (an untyped queue stores any object, a batch too).
"""

from __future__ import annotations

import operator
from collections.abc import Iterable, Mapping, Sequence
from itertools import chain, repeat
from typing import Any, ClassVar, Final

import numpy as np

from .._decoders.dtypes import builtin_dtype, dtype_by_name, tf_name
from .._errors import InvalidArgumentError
from .._records.batch import RecordBatch

__all__ = [
    "as_int",
    "make_codec",
    "record_components",
    "record_strings",
    "Row",
    "Shape",
    "TypedCodec",
    "UntypedCodec",
    "as_dtype",
    "as_shape_list",
    "format_shape",
    "split_shapes",
    "tf_dtype_name",
]

#: A shape: one entry per dimension, ``None`` for a dimension of unknown size.
Shape = tuple[int | None, ...]

#: A stored typed element: the component arrays of its batch and its row in them.
Row = tuple[tuple[np.ndarray[Any, Any], ...], int]

_STRING_SPELLINGS = ("string", "str", "bytes", "object")


def as_dtype(spec: Any) -> np.dtype[Any]:
    """Return the numpy dtype for ``spec``; ``object``, ``bytes``, ``str``, ``"string"`` → object.

    Names mean what they mean in TensorFlow (``"float"`` is float32, ``"double"`` float64,
    ``"half"`` float16) and Python's ``float`` is float32, as in ``tf.as_dtype``; the table
    is the decoders' (:mod:`asyncreader._decoders.dtypes`), so a queue's checkpoint, which
    names its dtypes that way, restores into the same dtypes. Other numpy spellings
    (``"<i4"``, ``np.float64``) are taken as numpy reads them, in native byte order (a
    dtype's TensorFlow name has no byte order, so a restore could not bring one back).

    Raises:
        InvalidArgumentError: if ``spec`` names no dtype.
    """
    if spec is object or spec is bytes or spec is str or spec in _STRING_SPELLINGS:
        return np.dtype(object)
    found = dtype_by_name(spec) if isinstance(spec, str) else builtin_dtype(spec)
    if found is not None:
        return found
    try:
        dtype: np.dtype[Any] = np.dtype(spec)
    except TypeError as exc:
        raise InvalidArgumentError(f"not a dtype: {spec!r}") from exc
    if dtype.kind in "SUV":
        return np.dtype(object)
    return dtype.newbyteorder("=")


def tf_dtype_name(dtype: np.dtype[Any]) -> str:
    """Return TensorFlow's name for ``dtype`` (``float`` for float32, ``string`` for text)."""
    if dtype.kind in "SUO":
        return "string"
    return tf_name(dtype)


def format_shape(shape: Sequence[int | None]) -> str:
    """Format ``shape`` the way TensorFlow's messages do: ``[]``, ``[2,3]``, ``[?,3]``."""
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


def _as_shape(spec: Any) -> Shape:
    if spec is None:
        raise InvalidArgumentError("a shape of unknown rank is not supported here")
    if isinstance(spec, int):
        spec = (spec,)
    dims: list[int | None] = []
    for d in spec:
        if d is None:
            dims.append(None)
            continue
        if isinstance(d, bool) or not isinstance(d, (int, np.integer)) or d < 0:
            raise InvalidArgumentError(f"invalid dimension {d!r} in shape {spec!r}")
        dims.append(int(d))
    return tuple(dims)


def split_shapes(shapes: Any) -> tuple[Shape, ...]:
    """Normalise ``shapes`` as TensorFlow does: a bare shape stands for a one-component list.

    Raises:
        InvalidArgumentError: if a shape is malformed.
    """
    if (
        not isinstance(shapes, (list, tuple))
        or not shapes
        or all(d is None or isinstance(d, int) for d in shapes)
    ):
        shapes = [shapes]
    return tuple(_as_shape(s) for s in shapes)


def as_shape_list(shapes: Any, count: int) -> tuple[Shape, ...] | None:
    """Normalise ``shapes`` (see :func:`split_shapes`) and check there are ``count``.

    Raises:
        InvalidArgumentError: if the count differs from ``count`` or a shape is malformed.
    """
    if shapes is None:
        return None
    result = split_shapes(shapes)
    if len(result) != count:
        raise InvalidArgumentError("Queue shapes must have the same length as dtypes")
    return result


def _as_names(names: Any, count: int) -> tuple[str, ...] | None:
    if names is None:
        return None
    if isinstance(names, str):
        names = [names]
    result = tuple(names)
    if not all(isinstance(n, str) for n in result):
        raise InvalidArgumentError(f"Queue names must be strings, got {names!r}")
    if len(result) != count:
        raise InvalidArgumentError("Queue names must have the same length as dtypes")
    if len(set(result)) != len(result):
        raise InvalidArgumentError(f"Queue names must be unique, got {list(result)}")
    return result


def record_strings(batch: RecordBatch) -> np.ndarray[Any, Any]:
    """Return the records of ``batch`` as a 1-D ``object`` array of ``bytes`` (the form a
    queue stores strings in), built in one pass."""
    return _object_array(batch.tolist())


def record_components(batch: RecordBatch) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Return ``batch`` as the two components ``(keys, values)`` ``read_up_to`` returns:
    1-D ``object`` arrays of ``bytes``."""
    return _object_array(batch.keys()), record_strings(batch)


def _object_array(items: list[Any]) -> np.ndarray[Any, Any]:
    # Assigned rather than np.array(items): bytes must stay whole objects, never a
    # fixed-width "S" array (which drops trailing NUL bytes).
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out


_STRING_TYPES: Final = frozenset({bytes, str})

#: Element types that are neither a Mapping nor a RecordBatch: they (and numpy scalars)
#: skip those checks, which are abstract-class checks and comparatively slow.
_PLAIN: Final = frozenset({bytes, str, int, float, bool, list, np.ndarray})


def _not_one_element() -> InvalidArgumentError:
    return InvalidArgumentError(
        "a RecordBatch is a batch of records, (keys, values), not one element: "
        "enqueue it with enqueue_many"
    )


class UntypedCodec:
    """Elements are arbitrary Python objects, stored and returned unchanged."""

    __slots__ = ()

    typed = False
    dtypes: tuple[np.dtype[Any], ...] | None = None
    shapes: tuple[Shape, ...] | None = None
    names: tuple[str, ...] | None = None

    def encode_one(self, vals: Any) -> Any:
        return vals

    def encode_many(self, vals: Any) -> list[Any]:
        if isinstance(vals, list):
            return vals[:]
        if isinstance(vals, RecordBatch):
            # (keys, values) has no components here: one (key, value) element per record.
            return list(zip(vals.keys(), vals.tolist(), strict=True))
        if isinstance(vals, (str, bytes)) or not isinstance(vals, Iterable):
            raise InvalidArgumentError(
                f"enqueue_many needs a sequence of elements, got {type(vals).__name__}"
            )
        return list(vals)

    def decode_one(self, elem: Any) -> Any:
        return elem

    def decode_many(self, elems: list[Any]) -> Any:
        return elems

    def check_batchable(self, kind: str) -> None:
        """Untyped queues batch into lists; nothing to check."""

    def snapshot_rows(self, elems: list[Any]) -> Any:
        """Return stored elements as a checkpoint value (see :meth:`restore_rows`)."""
        return list(elems)

    def restore_rows(self, value: Any) -> list[Any]:
        """Return the elements :meth:`snapshot_rows` saved, ready to store."""
        if not isinstance(value, list):
            raise InvalidArgumentError("malformed checkpoint of an untyped queue")
        return list(value)

    def config(self) -> dict[str, object]:
        return {"dtypes": None, "shapes": None, "names": None}


class TypedCodec:
    """Elements are tuples of numpy values with declared dtypes (and optionally shapes).

    Args:
        dtypes: One dtype per component (a single dtype stands for one component).
        shapes: One shape per component, or ``None``.
        names: One name per component, or ``None``.
        partial_shapes: Whether shapes may have unknown (``None``) dimensions, as in a
            PaddingFIFOQueue; otherwise every shape must be fully defined.

    Raises:
        InvalidArgumentError: if the description is inconsistent (see SPEC §2.1).
    """

    __slots__ = ("dtypes", "names", "ordered", "partial", "shapes")

    typed = True

    def __init__(
        self,
        dtypes: Any,
        shapes: Any = None,
        names: Any = None,
        *,
        partial_shapes: bool = False,
    ) -> None:
        if isinstance(dtypes, (list, tuple)):
            if not dtypes:
                raise InvalidArgumentError("a queue needs at least one component dtype")
            self.dtypes = tuple(as_dtype(d) for d in dtypes)
        else:
            self.dtypes = (as_dtype(dtypes),)
        count = len(self.dtypes)
        self.shapes = as_shape_list(shapes, count)
        if self.shapes is not None and not partial_shapes:
            for shape in self.shapes:
                if None in shape:
                    shown = ", ".join(format_shape(s) for s in self.shapes)
                    raise InvalidArgumentError(f"All shapes must be fully defined: [{shown}]")
        self.names = _as_names(names, count)
        self.partial = partial_shapes
        #: Set by FIFO storage: rows leave in the order they were stored.
        self.ordered = False

    def config(self) -> dict[str, object]:
        return {
            "dtypes": tuple(tf_dtype_name(d) for d in self.dtypes),
            "shapes": self.shapes,
            "names": self.names,
        }

    # -- structure -------------------------------------------------------------------------

    def _components(self, vals: Any) -> Sequence[Any]:
        """Split one enqueue argument (tuple / list / dict / bare value) into components."""
        names = self.names
        if type(vals) is dict:
            return self._mapping(vals)
        # (plain types first: the abstract Mapping and RecordBatch checks are comparatively slow)
        if not isinstance(vals, (tuple, np.generic)) and type(vals) not in _PLAIN:
            if isinstance(vals, RecordBatch):
                # encode_many takes a batch before it gets here: this is enqueue().
                raise _not_one_element()
            if isinstance(vals, Mapping):
                return self._mapping(vals)
        if names is not None:
            raise InvalidArgumentError("You must enqueue a dictionary in a Queue with names")
        count = len(self.dtypes)
        # A tuple is always a tuple of components. A list is one too, except in a
        # one-component queue, where it is the (array-like) value of that component.
        if isinstance(vals, tuple) or (isinstance(vals, list) and count > 1):
            if len(vals) != count:
                raise InvalidArgumentError(
                    f"Wrong number of components in tuple. Expected {count}, got {len(vals)}"
                )
            return vals
        if count != 1:
            raise InvalidArgumentError(
                f"Wrong number of components in tuple. Expected {count}, got 1"
            )
        return (vals,)

    def _mapping(self, vals: Mapping[Any, Any]) -> list[Any]:
        names = self.names
        if names is None:
            raise InvalidArgumentError("Queue must have names to enqueue a dictionary")
        if sorted(vals) != sorted(names):
            raise InvalidArgumentError(
                "Keys in dictionary to enqueue do not match names of Queue.  "
                f"Dictionary: {sorted(vals)}, Queue: {sorted(names)}"
            )
        return [vals[n] for n in names]

    def _record_batch(self, batch: RecordBatch) -> list[np.ndarray[Any, Any]]:
        """Return ``batch`` as the converted components ``(keys, values)``, if the element
        has two string components."""
        count = len(self.dtypes)
        names = self.names
        if count == 2 and names is None:
            for i, dtype in enumerate(self.dtypes):
                if dtype.kind != "O":
                    self._mismatch(i, np.dtype(object))
            return list(record_components(batch))  # all bytes: no element to check
        if names is not None:
            shown = (
                f"{{{names[0]!r}: batch.keys(), {names[1]!r}: batch}}"
                if count == 2
                else "a dict of them"
            )
            hint = f"a queue with names takes {shown}"
        elif count == 1:
            hint = "enqueue (batch,) for its records alone"
        else:
            hint = "give a tuple of every component, with the batch as its records"
        raise InvalidArgumentError(
            "a RecordBatch stands for the two components (keys, values), but the queue's "
            f"elements have {count}: {hint}"
        )

    # -- conversion ------------------------------------------------------------------------

    #: Whether ``enqueue_many`` takes its own copy of the values (the queue keeps them);
    #: storage that copies rows as it inserts them needs none.
    copy_many: ClassVar[bool] = True

    def _convert(self, val: Any, i: int, copy: bool = True) -> np.ndarray[Any, Any]:
        """Return an array of component ``i``'s dtype holding ``val``: a fresh one, or with
        ``copy=False`` ``val`` itself when it already is such an array."""
        dtype = self.dtypes[i]
        kind = type(val)
        if dtype.kind == "O":
            # (a scalar string skips the RecordBatch check: that one is an abstract
            # Sequence check, comparatively slow)
            if kind is not bytes and kind is not str and isinstance(val, RecordBatch):
                return record_strings(val)  # all bytes: no element to check
            if isinstance(val, np.ndarray) and val.dtype.kind not in "OSU":
                self._mismatch(i, val.dtype)
            arr = np.array(val, dtype=object)
            if not arr.ndim:
                scalar: object = arr[()]
                if not isinstance(scalar, (bytes, str)):
                    self._not_a_string(i, scalar)
                return arr
            items = arr.ravel().tolist()
            # The element types, collected without a Python loop; only a batch holding
            # something else (or a bytes / str subclass) is looked at element by element.
            if not _STRING_TYPES.issuperset(map(type, items)):
                for x in items:
                    if not isinstance(x, (bytes, str)):
                        self._not_a_string(i, x)
            return arr
        if (kind is int and dtype.kind in "iuf") or (kind is float and dtype.kind in "fc"):
            # A plain Python number of a compatible kind: convert directly.
            try:
                return np.array(val, dtype=dtype)
            except OverflowError as exc:
                raise InvalidArgumentError(
                    f"Type mismatch in tuple component {i}. Expected {tf_dtype_name(dtype)}, "
                    f"got {kind.__name__} {val!r} out of range"
                ) from exc
        src = val if isinstance(val, (np.ndarray, np.generic)) else None
        if src is None:
            if isinstance(val, RecordBatch):
                self._mismatch(i, np.dtype(object))
            try:
                src = np.asarray(val)
            except (ValueError, TypeError) as exc:
                raise InvalidArgumentError(
                    f"Type mismatch in tuple component {i}. Expected "
                    f"{tf_dtype_name(dtype)}, got {type(val).__name__}"
                ) from exc
        # An empty value has no elements to mistype (``[]`` infers float64).
        if (
            src.dtype != dtype
            and src.size
            and (src.dtype.kind in "OSUV" or not np.can_cast(src.dtype, dtype, "same_kind"))
        ):
            self._mismatch(i, src.dtype)
        try:
            return np.array(src, dtype=dtype) if copy else np.asarray(src, dtype=dtype)
        except (ValueError, TypeError, OverflowError) as exc:
            raise InvalidArgumentError(
                f"Type mismatch in tuple component {i}. Expected {tf_dtype_name(dtype)}, "
                f"got {tf_dtype_name(src.dtype)}"
            ) from exc

    def _not_a_string(self, i: int, value: object) -> None:
        got = np.asarray(value).dtype
        if got.kind == "O":  # not "string": name what it is (None, an object)
            raise InvalidArgumentError(
                f"Type mismatch in tuple component {i}. Expected string, got {type(value).__name__}"
            )
        self._mismatch(i, got)

    def _mismatch(self, i: int, got: np.dtype[Any]) -> None:
        raise InvalidArgumentError(
            f"Type mismatch in tuple component {i}. Expected {tf_dtype_name(self.dtypes[i])}, "
            f"got {tf_dtype_name(got)}"
        )

    def _check_shape(self, i: int, got: tuple[int, ...], lead: tuple[int, ...] = ()) -> None:
        if self.shapes is None:
            return
        want = lead + self.shapes[i]
        if got == want:
            return
        if len(got) != len(want) or any(
            w is not None and w != g for w, g in zip(want, got, strict=True)
        ):
            raise InvalidArgumentError(
                f"Shape mismatch in tuple component {i}. Expected {format_shape(want)}, "
                f"got {format_shape(got)}"
            )

    def encode_one(self, vals: Any) -> Row:
        """Convert and check one element into a one-row batch; nothing is stored if this raises.

        Raises:
            InvalidArgumentError: wrong structure, dtype or shape, or ``vals`` is a
                :class:`~asyncreader.RecordBatch` (a batch, not one element).
        """
        comps = self._components(vals)
        out: list[np.ndarray[Any, Any]] = []
        for i, val in enumerate(comps):
            arr = self._convert(val, i)
            self._check_shape(i, arr.shape)
            out.append(arr[np.newaxis])
        return (tuple(out), 0)

    def encode_many(self, vals: Any) -> list[Row]:
        """Convert and check a batch (components stacked on axis 0) into elements.

        Raises:
            InvalidArgumentError: wrong structure, dtype, rank, shape or unequal batch sizes,
                or a :class:`~asyncreader.RecordBatch` given for an element that is not
                two components (keys, values).
        """
        if isinstance(vals, RecordBatch):
            arrays = self._record_batch(vals)
        else:
            copy = self.copy_many
            comps = self._components(vals)
            arrays = [self._convert(val, i, copy) for i, val in enumerate(comps)]
        batch = -1
        for i, arr in enumerate(arrays):
            if arr.ndim == 0:
                raise InvalidArgumentError(
                    f"Shape must be at least rank 1 but is rank 0 for component {i} of enqueue_many"
                )
            if batch < 0:
                batch = arr.shape[0]
            if self.shapes is not None:
                self._check_shape(i, arr.shape, (batch,))
            elif arr.shape[0] != batch:
                raise InvalidArgumentError(
                    "All input tensors must have the same size in the 0th dimension. "
                    f"Component {i} has {arr.shape[0]}, and should have {batch}"
                )
        stored = tuple(arrays)
        return list(zip(repeat(stored, batch), range(batch), strict=True))

    # -- results ---------------------------------------------------------------------------

    def _structure(self, values: Sequence[Any]) -> Any:
        if self.names is not None:
            return dict(zip(self.names, values, strict=True))
        if len(values) == 1:
            return values[0]
        return tuple(values)

    def decode_one(self, row: Row) -> Any:
        """Return the element stored as ``row`` (numpy scalars for scalar components)."""
        arrays, i = row
        return self._structure([c[i] for c in arrays])

    def check_batchable(self, kind: str) -> None:
        """Raise unless the components have declared shapes (batched dequeues need them).

        Raises:
            InvalidArgumentError: the queue was built without shapes.
        """
        if self.shapes is None:
            raise InvalidArgumentError(
                f"{kind}'s DequeueMany and DequeueUpTo require the components to have "
                "specified shapes."
            )

    def snapshot_rows(self, rows: list[Any]) -> Any:
        """Return stored elements as a checkpoint value, without removing them.

        With fully defined shapes, one stacked array per component (a few large copies);
        otherwise one list of components per element.
        """
        if self.shapes is not None and not any(None in s for s in self.shapes):
            return {"stacked": self._gather(rows)}
        return {"rows": [[arrays[j][i] for j in range(len(arrays))] for arrays, i in rows]}

    def _gather(self, rows: list[Any]) -> list[np.ndarray[Any, Any]]:
        shapes = self.shapes
        assert shapes is not None
        k = len(rows)
        out = [
            np.empty((k, *(d or 0 for d in shape)), dtype=dtype)
            for dtype, shape in zip(self.dtypes, shapes, strict=True)
        ]
        for p, (arrays, i) in enumerate(rows):
            for dst, src in zip(out, arrays, strict=True):
                dst[p] = src[i]
        return out

    def restore_rows(self, value: Any) -> list[Row]:
        """Return the elements :meth:`snapshot_rows` saved, as rows ready to store.

        Raises:
            InvalidArgumentError: the value does not fit this queue's components.
        """
        names = self.names

        def element(comps: Any) -> Any:
            return tuple(comps) if names is None else dict(zip(names, comps, strict=True))

        try:
            if "stacked" in value:
                return self.encode_many(element(value["stacked"]))
            return [self.encode_one(element(comps)) for comps in value["rows"]]
        except (TypeError, KeyError) as exc:
            raise InvalidArgumentError(f"malformed checkpoint of a typed queue: {exc}") from None

    def decode_many(self, rows: list[Row]) -> Any:
        """Stack each component of ``rows`` into one array with a leading batch dimension."""
        shapes = self.shapes
        assert shapes is not None
        k = len(rows)
        if not k:
            return self._structure(
                [
                    np.empty((0, *(d or 0 for d in shape)), dtype=dtype)
                    for dtype, shape in zip(self.dtypes, shapes, strict=True)
                ]
            )
        arrays, first = rows[0]
        if self.ordered:
            # FIFO storage keeps each batch's rows together and in order, so rows that
            # start and end in one batch, k - 1 rows apart, are that batch's slice.
            last_arrays, last = rows[-1]
            if last_arrays is arrays and last - first == k - 1:
                return self._structure([c[first : first + k] for c in arrays])
        elif all(map(operator.is_, map(_first, rows), repeat(arrays))):
            # All from one batch, in any order: one fancy-index per component.
            take = np.fromiter(map(_second, rows), dtype=np.intp, count=k)
            return self._structure([c[take] for c in arrays])
        out: list[Any] = []
        for j, dtype in enumerate(self.dtypes):
            values = [r[0][j][r[1]] for r in rows]
            shape = shapes[j]
            if self.partial and None in shape:
                out.append(_pad(values, dtype, shape))
            else:
                out.append(_stack(values, dtype, shape))
        return self._structure(out)

    def row_shapes(self, rows: list[Row]) -> list[np.ndarray[Any, Any]]:
        """Each element's own shape, per component: an ``int64`` array of ``len(rows)``
        rows of ``len(shape)`` dimensions (what :meth:`decode_many` pads to the batch's
        maximum)."""
        shapes = self.shapes
        assert shapes is not None
        k = len(rows)
        arrays = list(map(_first, rows))
        out = []
        for j, shape in enumerate(shapes):
            n = len(shape)
            dims = np.empty((k, n), dtype=np.int64)
            if n and k and self.ordered and arrays[0] is arrays[-1]:
                # FIFO storage keeps a stored batch's rows together: one shape for all.
                dims[:] = arrays[0][j].shape[1:]
            elif n and k:
                flat = chain.from_iterable([a[j].shape[1:] for a in arrays])
                dims[:] = np.fromiter(flat, dtype=np.int64, count=k * n).reshape(k, n)
            out.append(dims)
        return out


_first = operator.itemgetter(0)
_second = operator.itemgetter(1)


def make_codec(dtypes: Any, shapes: Any, names: Any) -> TypedCodec | UntypedCodec:
    """Return the codec of a FIFO or shuffle queue: untyped without ``dtypes``."""
    if dtypes is None:
        if shapes is not None or names is not None:
            raise InvalidArgumentError("shapes and names need dtypes")
        return UntypedCodec()
    return TypedCodec(dtypes, shapes, names)


def _stack(values: list[Any], dtype: np.dtype[Any], shape: Shape) -> np.ndarray[Any, Any]:
    if dtype.kind == "O":
        # np.array would try to look inside object values; fill a preallocated array.
        out = np.empty((len(values), *(d or 0 for d in shape)), dtype=object)
        if shape == ():
            out[:] = values
        else:
            for j, v in enumerate(values):
                out[j] = v
        return out
    return np.array(values, dtype=dtype)


def _pad(values: list[Any], dtype: np.dtype[Any], shape: Shape) -> np.ndarray[Any, Any]:
    """Stack ``values`` padding every unknown dimension to the batch maximum (SPEC §2.6)."""
    dims = [d if d is not None else max(v.shape[k] for v in values) for k, d in enumerate(shape)]
    if dtype.kind == "O":
        out = np.full((len(values), *dims), b"", dtype=object)
    else:
        out = np.zeros((len(values), *dims), dtype=dtype)
    for j, v in enumerate(values):
        corner: tuple[int | slice, ...] = (j, *[slice(0, n) for n in v.shape])
        out[corner] = v
    return out


def as_int(value: object) -> int | None:
    """Return ``value`` as an int if it is an integer (numpy integers too, not bools)."""
    if isinstance(value, bool):
        return None
    try:
        return operator.index(value)  # type: ignore[arg-type]
    except TypeError:
        return None
