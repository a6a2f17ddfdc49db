"""RecordRefs: checkpoints that save queued reader records as references, not payloads.

A shuffle buffer of serialized records (TensorFlow 1.x's "batch the records, parse the
batch" layout) holds thousands of payloads; saving them makes every checkpoint as large as
the buffer. The key a reader gives a record names where it came from, so a queue told
which components hold a reader's keys and values saves, per element, only the work item
(once per file), the record key and the value's CRC32C: 16 bytes. A restored queue
reads the values again before it hands out anything, and a value that no longer matches
its checksum fails the restore.

Queues know readers only through the small protocols defined here: a reader is a
:class:`RereadableReader` whose ``_record_source()`` returns a :class:`RecordSource`, the
object that splits the reader's keys and reads records again (readers live in a higher
layer and satisfy these protocols; nothing here imports them).

:class:`RefLayout` binds a :class:`RecordRefs` to one queue's element layout and converts
between the checkpoint value of stored elements (``snapshot_rows``) and its compact form.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol, TypeAlias, runtime_checkable

import numpy as np

from .._errors import InvalidArgumentError
from .._runtime.context import current_checkpointer

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .elements import TypedCodec, UntypedCodec

__all__ = [
    "RecordRefs",
    "RecordRefsArg",
    "RecordSource",
    "RefLayout",
    "RereadableReader",
    "as_record_refs",
    "referenced_works",
]

#: The keys of a section of record references in a saved tree (see RefLayout.save).
_SECTION_KEYS = frozenset({"works", "work", "record", "crc32c", "rest"})


def referenced_works(tree: Any) -> frozenset[bytes]:
    """The work items whose records a saved tree names as references (in any of its
    sections, at any depth); what is not such a section is passed over."""
    works: set[bytes] = set()
    todo = [tree]
    while todo:
        node = todo.pop()
        if isinstance(node, dict):
            if node.keys() == _SECTION_KEYS:
                names = node["works"]
                if isinstance(names, list):
                    works.update(w for w in names if isinstance(w, bytes))
                continue
            todo.extend(node.values())
        elif isinstance(node, (list, tuple)):
            todo.extend(node)
    return frozenset(works)


class RecordSource(Protocol):
    """How a reader's records are found again from their keys (what :class:`RefLayout`
    needs of a reader).

    A key names a record as ``(work item, record key)``; a checkpoint saves those and each
    value's checksum, and a restore reads the values again and checks them.
    """

    @property
    def kind(self) -> str:
        """The reader type a checkpoint's references were saved by (its class name)."""
        ...

    def config(self) -> dict[str, object]:
        """The arguments that decide how records are read (a restore checks them)."""
        ...

    def split_key(self, key: bytes) -> tuple[bytes, int]:
        """Return the work item and record key of ``key``.

        Raises:
            InvalidArgumentError: ``key`` is not a key of the reader.
        """
        ...

    def split_keys(self, keys: list[bytes]) -> tuple[list[bytes], list[int], list[int]]:
        """:meth:`split_key` in bulk: the distinct work items (in the order first seen), the
        index of each key's work item among them, and each key's record key.

        Raises:
            InvalidArgumentError: a key is not a key of the reader.
        """
        ...

    def checksums(self, values: Sequence[bytes]) -> np.ndarray[tuple[int], np.dtype[np.uint32]]:
        """Return the checksum of each value, as :meth:`reread` checks them."""
        ...

    async def reread(
        self,
        works: Sequence[bytes],
        work_index: np.ndarray[tuple[int], np.dtype[np.uint32]],
        records: np.ndarray[tuple[int], np.dtype[np.int64]],
        crcs: np.ndarray[tuple[int], np.dtype[np.uint32]],
    ) -> tuple[list[bytes], list[bytes]]:
        """Read the referenced records again; return their keys and values, in order.

        Reference ``i`` is record ``records[i]`` of work item ``works[work_index[i]]``,
        whose value had checksum ``crcs[i]``.

        Raises:
            NotFoundError: a file is gone.
            DataLossError: a record is corrupt, missing, or differs from its checksum.
        """
        ...


@runtime_checkable
class RereadableReader(Protocol):
    """A reader as :class:`RecordRefs` takes it: one that may be able to read its records
    again from their keys."""

    def _record_source(self) -> RecordSource | None:
        """Return what reads this reader's records again, or ``None`` when it cannot."""
        ...


#: What ``record_refs=`` accepts: a :class:`RecordRefs`, or a reader (components 0 and 1).
RecordRefsArg: TypeAlias = "RecordRefs | RereadableReader | None"


class RecordRefs:
    """Which components of a queue's elements are a reader's record key and value.

    Given as ``record_refs=`` to a queue or a batcher, it makes checkpoints save those
    records as ``(work item, record key)`` references instead of their bytes; a restore
    reads them again from their files before the queue hands anything out. The value
    component must be the record exactly as the reader returned it (decoded or augmented
    examples are not records and are saved as they are).

    Args:
        reader: A built-in reader (TFRecord, TextLine, FixedLength, WholeFile, Identity)
            of the type and arguments that read the records; it reads them again on
            restore without disturbing its own position.
        key: The component holding the record key: its index, or its name in a queue
            with ``names`` (a dict key in an untyped queue of dicts).
        value: The component holding the record value, likewise.

    Raises:
        InvalidArgumentError: ``reader`` cannot read a record again from its key (a reader
            subclass of your own), or the components are not distinct indices or names.
    """

    __module__ = "asyncreader"
    __slots__ = ("_source", "key", "reader", "value")

    def __init__(self, reader: RereadableReader, key: int | str = 0, value: int | str = 1) -> None:
        if not isinstance(reader, RereadableReader):
            raise InvalidArgumentError(f"RecordRefs needs a reader, not {type(reader).__name__}")
        source = reader._record_source()
        if source is None:
            raise InvalidArgumentError(
                f"{type(reader).__name__} cannot read a record again from its key; "
                "record_refs needs a built-in reader (its records are saved as payloads)"
            )
        for what, component in (("key", key), ("value", value)):
            if isinstance(component, bool) or not isinstance(component, (int, str)):
                raise InvalidArgumentError(
                    f"RecordRefs {what} must be a component index or name, not {component!r}"
                )
            if isinstance(component, int) and component < 0:
                raise InvalidArgumentError(f"RecordRefs {what} must be >= 0, not {component}")
        if key == value:
            raise InvalidArgumentError(f"RecordRefs key and value are one component: {key!r}")
        self.reader = reader
        self.key = key
        self.value = value
        self._source = source

    def __repr__(self) -> str:
        return f"RecordRefs({self.reader!r}, key={self.key!r}, value={self.value!r})"


def as_record_refs(spec: RecordRefsArg) -> RecordRefs | None:
    """Return ``spec`` as a :class:`RecordRefs` (a bare reader means components 0 and 1).

    Raises:
        InvalidArgumentError: ``spec`` is neither.
    """
    if spec is None or isinstance(spec, RecordRefs):
        return spec
    return RecordRefs(spec)


class RefLayout:
    """A :class:`RecordRefs` bound to one queue's element layout.

    Args:
        refs: The components and reader.
        codec: The queue's element codec.
        queue: The queue's name, for messages.

    Raises:
        InvalidArgumentError: a component does not exist, or is not a scalar string.
    """

    __slots__ = ("_key", "_queue", "_source", "_typed", "_value")

    def __init__(self, refs: RecordRefs, codec: TypedCodec | UntypedCodec, queue: str) -> None:
        self._source = refs._source
        self._queue = queue
        self._typed = codec.typed
        self._key: Any = refs.key
        self._value: Any = refs.value
        if codec.typed:
            self._key = self._component(refs.key, codec)
            self._value = self._component(refs.value, codec)

    def _component(self, which: int | str, codec: TypedCodec | UntypedCodec) -> int:
        assert codec.dtypes is not None
        names = codec.names
        if isinstance(which, str):
            if names is None or which not in names:
                raise InvalidArgumentError(
                    f"record_refs: queue '{self._queue}' has no component named {which!r}"
                )
            index = names.index(which)
        elif which < len(codec.dtypes):
            index = which
        else:
            raise InvalidArgumentError(
                f"record_refs: queue '{self._queue}' has {len(codec.dtypes)} components, "
                f"not {which + 1}"
            )
        shape = None if codec.shapes is None else codec.shapes[index]
        if codec.dtypes[index].kind != "O" or shape not in (None, ()):
            raise InvalidArgumentError(
                f"record_refs: component {which!r} of queue '{self._queue}' must be a "
                "scalar string, as reader keys and values are"
            )
        return index

    # -- the checkpoint header -------------------------------------------------------------

    def header(self) -> dict[str, Any]:
        """Return what a restoring queue checks its own layout against."""
        return {
            "reader": self._source.kind,
            "config": repr(sorted(self._source.config().items())),
            "key": self._key,
            "value": self._value,
        }

    def check(self, header: Any) -> None:
        """Check a saved :meth:`header` against this layout.

        Raises:
            InvalidArgumentError: the records were saved by another reader type or
                configuration, or with other components.
        """
        mine = self.header()
        if header != mine:
            raise InvalidArgumentError(
                f"queue '{self._queue}' saved its records as references {header}, which do "
                f"not fit its record_refs {mine}"
            )

    # -- stored elements <-> references ----------------------------------------------------

    def strip(self, snapshot: Any) -> dict[str, Any]:
        """Return ``snapshot`` (from ``snapshot_rows``) with its records as references.

        Raises:
            InvalidArgumentError: an element's key is not a key of the reader, or its
                value is not ``bytes``.
        """
        keys, values, rest = self._split(snapshot)
        if not all(type(value) is bytes for value in values):
            i, value = next((i, v) for i, v in enumerate(values) if type(v) is not bytes)
            raise InvalidArgumentError(
                f"record_refs: element {i} of queue '{self._queue}' has a "
                f"{type(value).__name__} as its value component {self._value!r}, not "
                "the bytes a reader returned"
            )
        if not all(type(key) is bytes for key in keys):
            i, key = next((i, k) for i, k in enumerate(keys) if type(k) is not bytes)
            raise InvalidArgumentError(
                f"record_refs: element {i} of queue '{self._queue}' has a "
                f"{type(key).__name__} as its key component {self._key!r}, not a reader key"
            )
        try:
            works, index, records = self._source.split_keys(keys)
        except InvalidArgumentError:
            self._name_bad_key(keys)
            raise
        return {
            "works": works,
            "work": np.array(index, dtype=np.uint32),
            "record": np.array(records, dtype=np.int64),
            "crc32c": self._source.checksums(values),
            "rest": rest,
        }

    def _name_bad_key(self, keys: list[bytes]) -> None:
        """Raise the error of the first key the reader did not make, naming its element."""
        for i, key in enumerate(keys):
            try:
                self._source.split_key(key)
            except InvalidArgumentError as exc:
                exc.add_note(f"element {i} of queue '{self._queue}' (record_refs)")
                raise

    def _split(self, snapshot: Any) -> tuple[list[Any], list[Any], Any]:
        k, v = self._key, self._value
        if not self._typed:
            keys, values, rest = [], [], []
            for i, element in enumerate(snapshot):
                try:
                    if not isinstance(element, (tuple, list, dict)):
                        raise TypeError
                    keys.append(element[k])
                    values.append(element[v])
                except (TypeError, KeyError, IndexError):
                    raise InvalidArgumentError(
                        f"record_refs: element {i} of queue '{self._queue}' has no components "
                        f"{k!r} and {v!r}: {type(element).__name__}"
                    ) from None
                rest.append(_blank(element, k, v))
            return keys, values, rest
        if "stacked" in snapshot:
            arrays = snapshot["stacked"]
            blanked = [None if j in (k, v) else a for j, a in enumerate(arrays)]
            return arrays[k].tolist(), arrays[v].tolist(), {"stacked": blanked}
        rows = snapshot["rows"]
        blank_rows = [[None if j in (k, v) else c for j, c in enumerate(r)] for r in rows]
        return [r[k] for r in rows], [r[v] for r in rows], {"rows": blank_rows}

    async def restore(self, sections: list[Any]) -> list[Any]:
        """Read the records of sections from :meth:`strip` again; return their snapshots.

        All sections are read together, each file once.

        Raises:
            InvalidArgumentError: a section is malformed.
            NotFoundError: a file is gone.
            DataLossError: a record is corrupt, missing or changed since the checkpoint.
        """
        works: dict[bytes, int] = {}
        parts: list[tuple[np.ndarray[Any, Any], ...]] = []
        try:
            for section in sections:
                remap = np.array(
                    [works.setdefault(bytes(w), len(works)) for w in section["works"]],
                    dtype=np.uint32,
                )
                index = np.asarray(section["work"], dtype=np.uint32)
                records = np.asarray(section["record"], dtype=np.int64)
                crcs = np.asarray(section["crc32c"], dtype=np.uint32)
                if not (index.shape == records.shape == crcs.shape and index.ndim == 1):
                    raise ValueError("reference arrays differ in length")
                if len(index) and (int(index.max()) >= len(remap) or int(records.min()) < 0):
                    raise ValueError("reference out of range")
                parts.append((remap[index], records, crcs))
        except (TypeError, KeyError, ValueError, OverflowError) as exc:
            raise InvalidArgumentError(
                f"malformed record references in the checkpoint of queue '{self._queue}': {exc}"
            ) from None
        checkpointer = current_checkpointer()
        if checkpointer is not None:  # an unsigned restore reads only its producers' files
            await checkpointer.work_items_ready()
            checkpointer.check_work_items(works, f"queue '{self._queue}' (record_refs)")
        if parts:
            keys, values = await self._source.reread(
                list(works),
                np.concatenate([p[0] for p in parts]),
                np.concatenate([p[1] for p in parts]),
                np.concatenate([p[2] for p in parts]),
            )
        else:
            keys, values = [], []
        out = []
        start = 0
        try:
            for section, part in zip(sections, parts, strict=True):
                stop = start + len(part[1])
                out.append(self._fill(section["rest"], keys[start:stop], values[start:stop]))
                start = stop
        except (TypeError, KeyError, IndexError, ValueError) as exc:
            raise InvalidArgumentError(
                f"malformed checkpoint of queue '{self._queue}': the elements around its "
                f"record references do not fit them ({type(exc).__name__}: {exc})"
            ) from None
        return out

    def _fill(self, rest: Any, keys: list[bytes], values: list[bytes]) -> Any:
        k, v = self._key, self._value
        if not self._typed:
            if not isinstance(rest, list) or len(rest) != len(keys):
                raise InvalidArgumentError(f"malformed checkpoint of queue '{self._queue}'")
            return [
                _refill(element, k, key, v, value)
                for element, key, value in zip(rest, keys, values, strict=True)
            ]
        if "stacked" in rest:
            arrays = list(rest["stacked"])
            arrays[k] = _objects(keys)
            arrays[v] = _objects(values)
            return {"stacked": arrays}
        rows = [list(r) for r in rest["rows"]]
        for r, key, value in zip(rows, keys, values, strict=True):
            r[k], r[v] = key, value
        return {"rows": rows}


def _blank(element: Any, k: Any, v: Any) -> Any:
    """Return ``element`` with components ``k`` and ``v`` set to ``None``."""
    if isinstance(element, dict):
        return {**element, k: None, v: None}
    blanked = list(element)
    blanked[k] = blanked[v] = None
    return tuple(blanked) if isinstance(element, tuple) else blanked


def _refill(element: Any, k: Any, key: bytes, v: Any, value: bytes) -> Any:
    """Return ``element`` (from :func:`_blank`) with its key and value put back."""
    if isinstance(element, dict):
        return {**element, k: key, v: value}
    filled = list(element)
    filled[k], filled[v] = key, value
    return tuple(filled) if isinstance(element, tuple) else filled


def _objects(items: list[bytes]) -> np.ndarray[Any, Any]:
    out = np.empty(len(items), dtype=object)
    out[:] = items
    return out
