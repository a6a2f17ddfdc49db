"""Helpers shared by the framer tests: feeding a file to a framer in pieces."""

from __future__ import annotations

from typing import TYPE_CHECKING

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Sequence

    from asyncreader._records.framer import Framer


def feed_until_error(
    framer: Framer, data: bytes, cuts: Sequence[int]
) -> tuple[list[int], list[bytes], ar.AsyncReaderError | None]:
    """Feed ``data`` cut at the sorted offsets ``cuts``, the way a reader does, then finish.

    Returns the keys and values delivered and the error that stopped the framer, or
    ``None``. Each piece is followed by ``decode(b"")`` while the framer has pending
    compressed input. Cuts at 0 or ``len(data)`` feed an empty piece.
    """
    keys: list[int] = []
    values: list[bytes] = []
    prev = 0
    try:
        for cut in [*cuts, len(data)]:
            k, v = framer.decode(data[prev:cut])
            keys += k
            values += v
            prev = cut
            while framer.pending:
                k, v = framer.decode(b"")
                keys += k
                values += v
        k, v = framer.finish()
    except ar.AsyncReaderError as exc:
        return keys, values, exc
    return keys + k, values + v, None


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
