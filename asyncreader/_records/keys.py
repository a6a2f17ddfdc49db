"""Record keys in bulk: ``b"<work item>:<record key>"`` for a run of records (SPEC §3.7).

The record key is a line number, record index or byte offset in decimal. Readers build the
keys of a record run at once, and a :class:`~asyncreader._records.batch.RecordBatch` builds
them only when :meth:`~asyncreader._records.batch.RecordBatch.keys` is called.
"""

from __future__ import annotations

from typing import Final

__all__ = ["bulk_keys", "key_format", "range_keys"]


def key_format(prefix: bytes) -> bytes:
    """Return the ``%`` format that turns a record key into ``prefix`` + its decimal digits."""
    return prefix.replace(b"%", b"%%") + b"%d"


def bulk_keys(prefix: bytes, ints: list[int], *, fmt: bytes | None = None) -> list[bytes]:
    """Return ``[prefix + b"%d" % k for k in ints]``: the keys of one record run, in one pass.

    ``fmt`` is :func:`key_format` of ``prefix``, when the caller keeps it. One precomputed
    format per key measured fastest for arbitrary integers (about 110 ns a key, against
    150 ns for ``b"%s%d" % (prefix, k)``); numpy digit matrices and join-then-split pay
    more for creating the ``bytes`` objects.
    """
    f = key_format(prefix) if fmt is None else fmt
    return [f % k for k in ints]


#: The last three digits of every key in a run of a thousand consecutive keys.
_DIGITS3: Final = tuple(b"%03d" % i for i in range(1000))


def range_keys(prefix: bytes, start: int, stop: int, *, fmt: bytes | None = None) -> list[bytes]:
    """Return ``bulk_keys(prefix, range(start, stop))`` faster (``0 <= start <= stop``).

    Keys of one block of a thousand share everything but their last three digits, so a
    block formats its stem once and makes each key by one concatenation (about 40% less
    time a key than formatting every one).
    """
    f = key_format(prefix) if fmt is None else fmt
    first = -(-max(start, 1000) // 1000)  # first whole block whose stem has no leading 0
    last = stop // 1000
    if first >= last:
        return [f % k for k in range(start, stop)]
    keys = [f % k for k in range(start, first * 1000)]
    keys += [stem + tail for stem in [f % b for b in range(first, last)] for tail in _DIGITS3]
    keys += [f % k for k in range(last * 1000, stop)]
    return keys
