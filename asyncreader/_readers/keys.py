"""Record keys: how a reader names each record, and how a key is split back.

A built-in reader's key is ``b"<work item>:<record key>"`` (SPEC §3.7), the record key a
line number, record index or byte offset in decimal; WholeFileReader and IdentityReader
use the work item itself. Keys are made in bulk, a record run at a time
(:func:`bulk_keys`, :func:`range_keys`), and split in bulk when a checkpoint saves queued
records as references (:class:`RecordKeys`, :class:`WorkItemKeys`).
"""

from __future__ import annotations

import re
from typing import Final

from .._errors import InvalidArgumentError
from .._records.keys import bulk_keys

__all__ = ["RecordKeys", "WorkItemKeys"]


#: A record key as a key's suffix: decimal, no leading zeros.
_RECORD_TAIL: Final = rb"0|[1-9][0-9]*"
_ONE_TAIL: Final = re.compile(_RECORD_TAIL)
#: Record keys joined with a newline after each (all keys of a checkpoint checked at once).
_RECORD_TAILS: Final = re.compile(rb"(?:(?:%s)\n)*" % _RECORD_TAIL)


class RecordKeys:
    """Record keys ``b"<work item>:<record key>"`` (ReaderBase's scheme)."""

    def _split_key(self, key: bytes) -> tuple[bytes, int]:
        """Return the work item and record key of a key this reader made.

        Raises:
            InvalidArgumentError: ``key`` is not ``b"<work item>:<record key>"``.
        """
        work, sep, tail = key.rpartition(b":")
        if sep and _ONE_TAIL.fullmatch(tail):
            return work, int(tail)
        raise InvalidArgumentError(f"{key!r} is not a record key of a {type(self).__name__}")

    def _split_keys(self, keys: list[bytes]) -> tuple[list[bytes], list[int], list[int]]:
        """:meth:`_split_key` in bulk: return the distinct work items of ``keys`` (in the
        order first seen), the index of each key's work item among them, and each key's
        record key.

        One pass splits the keys and one regular expression checks all record keys at
        once; only when that check fails are the keys split one by one, to raise the
        first bad key's error.

        Raises:
            InvalidArgumentError: a key is not one this reader made.
        """
        works: dict[bytes, int] = {}
        index: list[int] = []
        tails: list[bytes] = []
        add_index, add_tail, setdefault = index.append, tails.append, works.setdefault
        separated = True
        for key in keys:
            work, sep, tail = key.rpartition(b":")
            separated = separated and sep == b":"
            add_index(setdefault(work, len(works)))
            add_tail(tail)
        if not separated or _RECORD_TAILS.fullmatch(b"\n".join(tails) + b"\n") is None:
            for key in keys:
                self._split_key(key)  # raises for the first bad key
        return list(works), index, list(map(int, tails))

    def _record_keys(self, work: bytes, records: list[int]) -> list[bytes]:
        """Return the keys of ``records`` of ``work`` (inverse of :meth:`_split_key`)."""
        return bulk_keys(work + b":", records)


class WorkItemKeys:
    """Record keys of readers whose key is the work item itself (WholeFile, Identity):
    one record per work item, record key 0."""

    def _split_key(self, key: bytes) -> tuple[bytes, int]:
        return key, 0

    def _split_keys(self, keys: list[bytes]) -> tuple[list[bytes], list[int], list[int]]:
        works: dict[bytes, int] = {}
        index = [works.setdefault(key, len(works)) for key in keys]
        return list(works), index, [0] * len(keys)

    def _record_keys(self, work: bytes, records: list[int]) -> list[bytes]:
        return [work] * len(records)
