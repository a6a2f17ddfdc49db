"""Examples as flat tuples of components, and back.

Batching queues hold flat tuples of numpy components. Users hand in examples shaped as they
like: a tuple (including named tuples), a list, a dict, or a single bare value. A
:class:`Structure` remembers that shape from the first example, flattens every example into
the queue's component order and rebuilds batches in the user's shape:

- a dict's keys are ordered by ``str(key)`` (TensorFlow's order) and a batch is a dict again;
- a tuple gives a tuple (a named tuple gives the same named tuple), a list gives a list;
- a bare value gives a bare batch.

Unlike ``tf.train.batch``, a one-element *list* gives a one-element list, not a bare batch:
only a bare value comes back bare.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from .._errors import InvalidArgumentError
from .._records.batch import RecordBatch

__all__ = [
    "Shape",
    "Structure",
    "component_spec",
    "format_shape",
    "normalize_shapes",
    "order_shapes",
]

#: A component shape: one entry per dimension, ``None`` where the size may vary.
Shape = tuple[int | None, ...]

_DICT = "dict"
_TUPLE = "tuple"
_LIST = "list"
_BARE = "bare"


def format_shape(shape: Sequence[int | None]) -> str:
    """Return ``shape`` in TensorFlow's debug form: ``[]``, ``[2,3]``, ``[?,3]``."""
    return "[" + ",".join("?" if d is None else str(d) for d in shape) + "]"


class Structure:
    """The layout of an example: which container holds its components, in which order.

    Args:
        example: The example to take the layout from.
        what: The function name used in error messages.

    Raises:
        InvalidArgumentError: if the example has no components.
    """

    __slots__ = ("_keys", "_kind", "_make", "_named", "size")

    def __init__(self, example: object, what: str = "batch") -> None:
        self._keys: tuple[Any, ...] = ()
        self._make: Callable[[list[Any]], Any] | None = None
        self._named: Any = None
        if isinstance(example, Mapping):
            self._kind = _DICT
            self._keys = tuple(sorted(example, key=str))
            self.size = len(self._keys)
        elif isinstance(example, tuple):
            self._kind = _TUPLE
            self.size = len(example)
            fields = getattr(type(example), "_fields", None)
            if fields is not None:  # a named tuple comes back as the same named tuple
                cls = self._named = type(example)
                self._make = lambda comps: cls(*comps)
        elif isinstance(example, list):
            self._kind = _LIST
            self.size = len(example)
        else:
            self._kind = _BARE
            self.size = 1
        if self.size == 0:
            raise InvalidArgumentError(f"Expected at least one tensor in {what}().")

    @property
    def keys(self) -> tuple[Any, ...]:
        """The dict keys in component order (empty unless examples are dicts)."""
        return self._keys

    def flatten(self, example: object) -> tuple[Any, ...]:
        """Return the components of ``example`` in queue order.

        Raises:
            InvalidArgumentError: if ``example`` is laid out differently from the first one
                (another container, other dict keys, another number of components).
        """
        kind = self._kind
        if kind == _TUPLE:
            if isinstance(example, tuple) and len(example) == self.size:
                return example
            return self._mismatch(example)
        if kind == _BARE:
            if isinstance(example, (Mapping, tuple, list)):
                return self._mismatch(example)
            return (example,)
        if kind == _DICT:
            if not isinstance(example, Mapping) or len(example) != self.size:
                return self._mismatch(example)
            try:
                return tuple(example[k] for k in self._keys)
            except KeyError:
                return self._mismatch(example)
        if isinstance(example, list) and len(example) == self.size:
            return tuple(example)
        return self._mismatch(example)

    def _mismatch(self, example: object) -> tuple[Any, ...]:
        if self._kind == _DICT and isinstance(example, Mapping):
            raise InvalidArgumentError(
                "All dictionaries in tensors_list must have the same keys: expected "
                f"{list(self._keys)!r}, got {sorted(example, key=str)!r}"
            )
        raise InvalidArgumentError(
            f"Expected types to be consistent: every example must be {self.describe()}, "
            f"got {_describe(example)}"
        )

    def pack(self, components: Sequence[Any]) -> Any:
        """Rebuild the user's layout from components in queue order."""
        kind = self._kind
        if kind == _TUPLE:
            return self._make(list(components)) if self._make else tuple(components)
        if kind == _DICT:
            return dict(zip(self._keys, components, strict=True))
        if kind == _LIST:
            return list(components)
        return components[0]

    def to_state(self) -> dict[str, Any]:
        """Return the layout as a checkpoint value (see :meth:`from_state`)."""
        named = None
        if self._named is not None:
            cls = self._named
            named = [cls.__module__, cls.__qualname__, list(cls._fields)]
        return {"kind": self._kind, "keys": list(self._keys), "size": self.size, "named": named}

    @classmethod
    def from_state(cls, state: Any) -> Structure:
        """Rebuild a layout saved by :meth:`to_state`.

        A named tuple type is imported again by its module and name when it can be, else
        rebuilt with the same fields.

        Raises:
            InvalidArgumentError: the value is not a saved layout.
        """
        try:
            kind, keys, size, named = state["kind"], state["keys"], state["size"], state["named"]
        except (TypeError, KeyError):
            raise InvalidArgumentError("malformed example layout in checkpoint") from None
        if kind not in (_DICT, _TUPLE, _LIST, _BARE):
            raise InvalidArgumentError(f"unknown example layout {kind!r} in checkpoint")
        out = cls.__new__(cls)
        out._kind, out._keys, out.size = kind, tuple(keys), int(size)
        out._make = out._named = None
        if named is not None:
            module, qualname, fields = named
            named_type = out._named = _import_named(module, qualname, fields)
            out._make = lambda comps: named_type(*comps)
        return out

    def describe(self) -> str:
        """Return a short description of the layout for messages and reprs."""
        if self._kind == _DICT:
            return f"a dict with keys {list(self._keys)!r}"
        if self._kind == _BARE:
            return "a single value"
        return f"a {self._kind} of {self.size} components"

    def __repr__(self) -> str:
        return f"<Structure {self.describe()}>"


def _import_named(module: str, qualname: str, fields: list[str]) -> Any:
    """Return the named tuple type ``module.qualname``, or one with the same fields."""
    import collections
    import importlib

    try:
        found: Any = importlib.import_module(module)
        for part in qualname.split("."):
            found = getattr(found, part)
        if isinstance(found, type) and list(getattr(found, "_fields", ())) == list(fields):
            return found
    except (ImportError, AttributeError):
        pass
    return collections.namedtuple(qualname.rsplit(".", 1)[-1], fields)


def _describe(example: object) -> str:
    if isinstance(example, Mapping):
        return f"a dict with keys {sorted(example, key=str)!r}"
    if isinstance(example, (tuple, list)):
        return f"a {type(example).__name__} of {len(example)} components"
    return f"a single value ({type(example).__name__})"


def component_spec(value: object, *, enqueue_many: bool, index: int) -> tuple[np.dtype[Any], Shape]:
    """Return the queue dtype and element shape of one component value.

    Text (``str`` / ``bytes``) becomes the ``object`` dtype, which queues use for strings.
    With ``enqueue_many`` the value is a batch and its leading dimension is dropped.

    Raises:
        InvalidArgumentError: if ``enqueue_many`` is set and the value is a scalar.
    """
    if isinstance(value, RecordBatch):  # its records: a vector of strings
        dtype: np.dtype[Any] = np.dtype(object)
        shape: Shape = (len(value),)
    else:
        array = value if isinstance(value, np.ndarray) else np.asarray(value)
        dtype = array.dtype
        if dtype.kind in "SUO":
            dtype = np.dtype(object)
        shape = tuple(int(d) for d in array.shape)
    if enqueue_many:
        if not shape:
            raise InvalidArgumentError(
                f"Shape must be at least rank 1 but is rank 0 for component {index}: with "
                "enqueue_many=True every component must be a batch"
            )
        shape = shape[1:]
    return dtype, shape


def normalize_shapes(shapes: object) -> list[Shape] | dict[Any, Shape]:
    """Normalise a user ``shapes`` argument to a list (or dict) of shape tuples.

    Accepts a list / tuple of shapes in component order, or a dict keyed like the examples.
    Each shape is a sequence of ints or ``None``.

    Raises:
        InvalidArgumentError: if a shape is not a sequence of non-negative ints / ``None``.
    """
    if isinstance(shapes, Mapping):
        return {k: _one_shape(v) for k, v in shapes.items()}
    if not isinstance(shapes, (list, tuple)):
        raise InvalidArgumentError(
            f"shapes must be a list of shapes (one per component), not {shapes!r}"
        )
    return [_one_shape(s) for s in shapes]


def _one_shape(shape: object) -> Shape:
    if isinstance(shape, (int, np.integer)) and not isinstance(shape, bool):
        # TensorShape(5) style: a vector of length 5.
        return (int(shape),)
    if not isinstance(shape, (list, tuple)):
        raise InvalidArgumentError(f"a shape must be a list of dimensions, not {shape!r}")
    out: list[int | None] = []
    for d in shape:
        if d is None or d == -1:
            out.append(None)
        elif isinstance(d, (int, np.integer)) and not isinstance(d, bool) and d >= 0:
            out.append(int(d))
        else:
            raise InvalidArgumentError(f"invalid dimension {d!r} in shape {shape!r}")
    return tuple(out)


def order_shapes(shapes: list[Shape] | dict[Any, Shape], structure: Structure) -> list[Shape]:
    """Return ``shapes`` in the structure's component order.

    Raises:
        InvalidArgumentError: if the number of shapes (or the dict keys) does not match the
            examples' components.
    """
    if isinstance(shapes, dict):
        if structure.keys and set(shapes) == set(structure.keys):
            return [shapes[k] for k in structure.keys]
        raise InvalidArgumentError(
            f"shapes has keys {sorted(shapes, key=str)!r} but examples are {structure.describe()}"
        )
    if len(shapes) != structure.size:
        raise InvalidArgumentError(
            f"shapes has {len(shapes)} entries but examples have {structure.size} components"
        )
    return list(shapes)
