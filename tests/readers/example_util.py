"""Serialized Examples compared by what they hold, whatever their layout."""

from __future__ import annotations

import asyncreader as ar
from asyncreader._decoders import wire

__all__ = ["canonical", "entries"]


def entries(record: bytes) -> list[bytes]:
    """The keys of a serialized Example's map entries, in the record's order (repeats kept)."""
    if not record:
        return []
    assert record[0] == 0x0A
    pos, end = wire._length(record, 1, len(record))
    assert end == len(record)
    keys = []
    while pos < end:
        assert record[pos] == 0x0A
        start, stop = wire._length(record, pos + 1, end)
        assert record[start] == 0x0A
        key_start, key_stop = wire._length(record, start + 1, stop)
        keys.append(record[key_start:key_stop])
        pos = stop
    return keys


def canonical(values: list[bytes]) -> list[bytes]:
    """Each record parsed and serialized again (shortest varints, keys in protobuf's
    deterministic order): the row path's bytes of the same Example. A key twice fails."""
    out = []
    for value in values:
        keys = entries(value)
        assert len(set(keys)) == len(keys), keys
        out.append(ar.Example.FromString(value).SerializeToString())
    return out
