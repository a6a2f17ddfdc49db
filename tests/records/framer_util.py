"""Helpers shared by the framer tests: feeding a file to a framer in pieces."""

from __future__ import annotations

import copy
import functools
from typing import TYPE_CHECKING

import numpy as np
import pytest

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

    from asyncreader._records.framer import Framed, Framer, Records


def feed_until_error(
    framer: Framer, data: bytes, cuts: Sequence[int]
) -> tuple[list[int], list[bytes], ar.AsyncReaderError | None]:
    """Feed ``data`` cut at the sorted offsets ``cuts``, the way a reader does, then finish.

    Returns the keys and values delivered and the error that stopped the framer, or
    ``None``. Each piece is followed by ``decode(b"")`` while the framer has pending
    compressed input. Cuts at 0 or ``len(data)`` feed an empty piece.

    A copy of the framer is fed the same pieces in segment mode (``decode_segments`` /
    ``finish_segments``), as read-only views of arrays the way ``read_batch`` hands it
    its pooled read blocks (:func:`block_view`), call by call: each call must give the
    same keys and records
    (checked to be views of the chunk where no join was needed), the same error at the
    same call, and leave the same position, ``skip_to`` and statistics. So every framer
    test that feeds through here also tests segment mode.
    """
    twin = copy.deepcopy(framer)
    keys: list[int] = []
    values: list[bytes] = []
    prev = 0

    def step(call: Callable[[], Records], call_segments: Callable[[], Framed]) -> Records:
        try:
            result = call()
        except ar.AsyncReaderError as exc:
            with pytest.raises(type(exc)) as info:
                call_segments()
            assert_same_error(info.value, exc)
            raise
        framed = call_segments()
        assert framed.keys.dtype == np.int64
        assert framed.keys.tolist() == result[0]
        assert framed.tolist() == result[1]
        for segment in framed.segments:
            assert not segment.buffer.flags.writeable
            assert segment.starts.dtype == segment.lengths.dtype == np.int64
        assert_same_state(twin, framer)
        return result

    try:
        for cut in [*cuts, len(data)]:
            piece = data[prev:cut]
            k, v = step(
                functools.partial(framer.decode, piece),
                functools.partial(twin.decode_segments, block_view(piece)),
            )
            keys += k
            values += v
            prev = cut
            while framer.pending:
                k, v = step(lambda: framer.decode(b""), lambda: twin.decode_segments(b""))
                keys += k
                values += v
        k, v = step(framer.finish, twin.finish_segments)
    except ar.AsyncReaderError as exc:
        assert_same_state(twin, framer)
        return keys, values, exc
    return keys + k, values + v, None


def block_view(piece: bytes) -> memoryview:
    """``piece`` as ``read_batch`` feeds a framer: a read-only ``memoryview`` of a numpy
    array of its own (a pooled read block), not ``bytes``."""
    array = np.frombuffer(piece, np.uint8).copy()
    array.flags.writeable = False
    return memoryview(array)  # type: ignore[arg-type]


def assert_same_error(got: BaseException, expected: ar.AsyncReaderError) -> None:
    """Check that segment mode raised the error list mode did."""
    assert isinstance(got, ar.AsyncReaderError)
    assert type(got) is type(expected)
    assert (got.message, got.work_item, got.record, got.offset) == (
        expected.message,
        expected.work_item,
        expected.record,
        expected.offset,
    )


def assert_same_state(twin: Framer, framer: Framer) -> None:
    """Check that the segment-mode twin is where the list-mode framer is."""
    assert twin.position == framer.position
    assert twin.next_key == framer.next_key
    assert twin.skip_to == framer.skip_to
    assert twin.pending == framer.pending
    assert twin.statistics() == framer.statistics()


def feed(framer: Framer, data: bytes, cuts: Sequence[int] = ()) -> tuple[list[int], list[bytes]]:
    """Return the keys and values :func:`feed_until_error` delivers; raise its error."""
    keys, values, error = feed_until_error(framer, data, cuts)
    if error is not None:
        raise error
    return keys, values


def fixed_length_reference(data: bytes, r: int, h: int = 0, f: int = 0, p: int = 0) -> list[bytes]:
    """Return the records FixedLengthRecordReader finds in ``data`` (record, header, footer and
    hop bytes; a hop of 0 means the record size), computed the plain way."""
    p = p or r
    out = []
    i = 0
    while h + i * p + r + f <= len(data):
        out.append(data[h + i * p : h + i * p + r])
        i += 1
    return out


def cuts_every(chunk: int | None, data: bytes) -> list[int]:
    """Return the cuts that split ``data`` into ``chunk``-byte pieces (one piece if None)."""
    return list(range(chunk, len(data), chunk)) if chunk else []
