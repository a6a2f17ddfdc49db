"""Reader state bytes: TensorFlow's ``ReaderBaseState`` proto and asyncreader's own format.

**TensorFlow's format** (SPEC §3.6), used by :class:`~asyncreader.WholeFileReader` and
:class:`~asyncreader.IdentityReader` so their states interchange with TensorFlow: the proto3
message ``ReaderBaseState`` with fields 1 ``work_started``, 2 ``work_finished``,
3 ``num_records_produced`` (int64 varints) and 4 ``current_work`` (bytes); zero and empty
fields are omitted, so a fresh reader's state is ``b""``. Parsing follows protobuf's rules:
unknown fields of a valid wire type are skipped, anything truncated or malformed fails.

**asyncreader's format**, used by every other reader; it can resume part-way through a
file::

    b"ARRS"                       magic
    u8  version                   1
    u16 kind length, kind         the reader class name, e.g. b"TFRecordReader"
    i64 work_started, i64 work_finished, i64 num_records_produced
    u32 work length, work         the current work item
    u32 extra length, extra       reader-specific (position, next key, configuration)
    u32 crc32c                    of everything before it

All integers are little-endian. The checksum makes damaged state fail cleanly instead of
resuming at a wrong place.

:func:`parse_state` checks parsed state as a restore needs it (counters, the kind of
reader, the extra state of a work item in progress); :func:`in_progress_tree` and
:func:`from_checkpoint` are how a session checkpoint holds the state of a reader with
TensorFlow's format whose work item is in progress.
"""

from __future__ import annotations

import dataclasses
import struct
from typing import TYPE_CHECKING, Any, Final

from .._errors import InvalidArgumentError
from .._io.crc import crc32c

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = [
    "IN_PROGRESS",
    "MAGIC",
    "SKIP",
    "VERSION",
    "ReaderState",
    "c_escape",
    "check_skip",
    "decode_native",
    "decode_tf_proto",
    "encode_native",
    "encode_tf_proto",
    "from_checkpoint",
    "in_progress_tree",
    "parse_state",
]

MAGIC: Final = b"ARRS"
VERSION: Final = 1
_COUNTERS = struct.Struct("<qqq")
_U32 = struct.Struct("<I")
_U16 = struct.Struct("<H")

#: Records a hook reader's saved position is ahead of the state's next record: the prefix
#: of a hook reader's extra state (see ``ReaderBase.serialize_state``).
SKIP: Final = struct.Struct("<q")
#: How a session checkpoint holds the state of a reader with TensorFlow's state format whose
#: work item is in progress: ``{IN_PROGRESS: state in asyncreader's format}``.
IN_PROGRESS: Final = "in_progress"


@dataclasses.dataclass(frozen=True, slots=True)
class ReaderState:
    """A reader's counters, current work item and reader-specific extra bytes."""

    work_started: int = 0
    work_finished: int = 0
    num_records_produced: int = 0
    current_work: bytes = b""
    extra: bytes = b""

    def debug_string(self) -> str:
        """Return the fields as protobuf's text format shows them (zero fields omitted)."""
        parts = []
        if self.work_started:
            parts.append(f"work_started: {self.work_started}")
        if self.work_finished:
            parts.append(f"work_finished: {self.work_finished}")
        if self.num_records_produced:
            parts.append(f"num_records_produced: {self.num_records_produced}")
        if self.current_work:
            parts.append(f'current_work: "{c_escape(self.current_work)}"')
        return " ".join(parts)


def c_escape(data: bytes) -> str:
    """Escape ``data`` as TensorFlow's ``absl::CEscape`` does (octal for non-printables)."""
    out = []
    for b in data:
        if b == 0x0A:
            out.append("\\n")
        elif b == 0x0D:
            out.append("\\r")
        elif b == 0x09:
            out.append("\\t")
        elif b == 0x22:
            out.append('\\"')
        elif b == 0x27:
            out.append("\\'")
        elif b == 0x5C:
            out.append("\\\\")
        elif 0x20 <= b < 0x7F:
            out.append(chr(b))
        else:
            out.append(f"\\{b:03o}")
    return "".join(out)


# -- TensorFlow's ReaderBaseState proto ------------------------------------------------------


def _varint(value: int) -> bytes:
    value &= (1 << 64) - 1  # int64 is encoded as its two's complement, 10 bytes if negative
    out = bytearray()
    while value > 0x7F:
        out.append((value & 0x7F) | 0x80)
        value >>= 7
    out.append(value)
    return bytes(out)


def encode_tf_proto(state: ReaderState) -> bytes:
    """Return ``state`` as ``ReaderBaseState`` proto bytes (``extra`` is not part of it)."""
    out = bytearray()
    for tag, value in (
        (0x08, state.work_started),
        (0x10, state.work_finished),
        (0x18, state.num_records_produced),
    ):
        if value:
            out.append(tag)
            out += _varint(value)
    if state.current_work:
        out.append(0x22)
        out += _varint(len(state.current_work))
        out += state.current_work
    return bytes(out)


class _ParseError(Exception):
    pass


def _read_varint(data: bytes, p: int) -> tuple[int, int]:
    result = 0
    shift = 0
    while True:
        if p >= len(data) or shift >= 70:
            raise _ParseError
        b = data[p]
        p += 1
        result |= (b & 0x7F) << shift
        if not b & 0x80:
            return result, p
        shift += 7


def _int64(value: int) -> int:
    value &= (1 << 64) - 1
    return value - (1 << 64) if value >= 1 << 63 else value


def decode_tf_proto(data: bytes) -> ReaderState:
    """Parse ``ReaderBaseState`` proto bytes.

    Raises:
        ValueError: if ``data`` is not a valid serialisation of the message.
    """
    fields = {1: 0, 2: 0, 3: 0}
    work = b""
    p = 0
    n = len(data)
    try:
        while p < n:
            key, p = _read_varint(data, p)
            number, wire = key >> 3, key & 7
            if number == 0:
                raise _ParseError
            if wire == 0:
                value, p = _read_varint(data, p)
                if number in fields:
                    fields[number] = _int64(value)
                elif number == 4:
                    raise _ParseError
            elif wire == 2:
                length, p = _read_varint(data, p)
                if p + length > n:
                    raise _ParseError
                if number == 4:
                    work = data[p : p + length]
                elif number in fields:
                    raise _ParseError
                p += length
            elif wire in (1, 5):
                width = 8 if wire == 1 else 4
                if p + width > n or number in fields or number == 4:
                    raise _ParseError
                p += width
            else:  # groups (3, 4) are not proto3; 6 and 7 do not exist
                raise _ParseError
    except _ParseError:
        raise ValueError("not a ReaderBaseState") from None
    return ReaderState(fields[1], fields[2], fields[3], work)


# -- asyncreader's own format --------------------------------------------------------------


def encode_native(kind: str, state: ReaderState) -> bytes:
    """Return ``state`` of a reader of class ``kind`` in asyncreader's versioned format."""
    kind_b = kind.encode()
    body = b"".join(
        [
            MAGIC,
            bytes([VERSION]),
            _U16.pack(len(kind_b)),
            kind_b,
            _COUNTERS.pack(state.work_started, state.work_finished, state.num_records_produced),
            _U32.pack(len(state.current_work)),
            state.current_work,
            _U32.pack(len(state.extra)),
            state.extra,
        ]
    )
    return body + _U32.pack(crc32c(body))


def decode_native(kind: str, data: bytes) -> ReaderState:
    """Parse state written by :func:`encode_native` for a reader of class ``kind``.

    Raises:
        InvalidArgumentError: if ``data`` is not such state (bad magic, version, length or
            checksum) or was written by a reader of another kind.
    """
    if data[:4] != MAGIC:
        raise InvalidArgumentError("not asyncreader reader state (bad magic)")
    if len(data) < 4 + 1 + 2 + 4:
        raise InvalidArgumentError("reader state is truncated")
    body, (crc,) = data[:-4], _U32.unpack_from(data, len(data) - 4)
    if crc32c(body) != crc:
        raise InvalidArgumentError("reader state is corrupt (checksum mismatch)")
    version = body[4]
    if version != VERSION:
        raise InvalidArgumentError(f"unsupported reader state version {version}")
    try:
        p = 5
        (klen,) = _U16.unpack_from(body, p)
        p += 2
        found = body[p : p + klen].decode()
        p += klen
        if found != kind:
            raise InvalidArgumentError(f"reader state was written by a {found}, not a {kind}")
        started, finished, produced = _COUNTERS.unpack_from(body, p)
        p += _COUNTERS.size
        (wlen,) = _U32.unpack_from(body, p)
        p += 4
        work = body[p : p + wlen]
        p += wlen
        (elen,) = _U32.unpack_from(body, p)
        p += 4
        extra = body[p : p + elen]
        p += elen
    except (struct.error, UnicodeDecodeError):
        raise InvalidArgumentError("reader state is truncated") from None
    if p != len(body) or len(work) != wlen or len(extra) != elen:
        raise InvalidArgumentError("reader state has a bad length")
    return ReaderState(started, finished, produced, work, extra)


# -- checking a reader's state -----------------------------------------------------------


def parse_state(
    data: bytes, *, kind: str, reader: str, tf_format: bool, check_extra: Callable[[bytes], None]
) -> ReaderState:
    """Parse and check the state of a reader of class ``kind``, shown as ``reader``.

    ``tf_format``: ``data`` is TensorFlow's ``ReaderBaseState`` (which holds no work in
    progress), else asyncreader's format. ``check_extra`` checks the extra state of a work
    item in progress.

    Raises:
        InvalidArgumentError: the state cannot be parsed, is of another kind, has a
            negative counter or inconsistent work counters, or a bad extra state.
    """
    if tf_format:
        try:
            parsed = decode_tf_proto(data)
        except ValueError:
            raise InvalidArgumentError(
                f"Could not parse state for {reader}: {c_escape(data)}"
            ) from None
    else:
        try:
            parsed = decode_native(kind, data)
        except InvalidArgumentError as exc:
            raise InvalidArgumentError(
                f"Could not parse state for {reader}: {exc.message}"
            ) from None
    if min(parsed.work_started, parsed.work_finished, parsed.num_records_produced) < 0:
        raise InvalidArgumentError(
            f"Unexpected negative value when restoring in {reader}: {parsed.debug_string()}"
        )
    if parsed.work_started < parsed.work_finished or (
        tf_format and parsed.work_started > parsed.work_finished
    ):
        raise InvalidArgumentError(
            "Inconsistent work started vs. finished when restoring in "
            f"{reader}: {parsed.debug_string()}"
        )
    if parsed.work_started > parsed.work_finished:
        check_extra(parsed.extra)
    return parsed


def check_skip(extra: bytes) -> None:
    """Check the extra state of a hook reader's work item in progress: :data:`SKIP`, then
    the hook's own extra state.

    Raises:
        InvalidArgumentError: the skip count is missing or negative.
    """
    if len(extra) < SKIP.size or SKIP.unpack_from(extra)[0] < 0:
        raise InvalidArgumentError("reader state has a malformed position")


# -- a reader's state in a session checkpoint ----------------------------------------------


def in_progress_tree(native: bytes) -> dict[str, bytes]:
    """Return how a session checkpoint saves the state (in asyncreader's format) of a
    reader with TensorFlow's format whose work item is in progress."""
    return {IN_PROGRESS: native}


def from_checkpoint(tree: Any, *, tf_state: bool) -> tuple[Any, bool]:
    """Return the state a session checkpoint saved for a reader, and whether it is in
    asyncreader's format although the reader uses TensorFlow's (``tf_state``)."""
    native = tf_state and isinstance(tree, dict) and set(tree) == {IN_PROGRESS}
    return (tree[IN_PROGRESS] if native else tree), native
