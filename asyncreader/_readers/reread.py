"""Reading records again from their keys: how checkpoints keep queues of records small.

A record's key names where it came from (``b"<work item>:<record key>"``, SPEC §3.7), so a
checkpoint can save a queue of reader records as ``(work item, record key)`` references
and the CRC32C of each value, and a restore can read the values again. This module does
the reading: references are grouped by work item, each file is read once on the I/O
executor (files in parallel, as the executor allows), and every value is checked against
its saved checksum, so a file that changed since the checkpoint fails the restore with a
:class:`~asyncreader.DataLossError` instead of feeding other data.

How a file is read depends on the format (the reader's ``_reread``): uncompressed TFRecord
and fixed-length files seek to each record (reading on through gaps shorter than a seek is
worth); text lines and compressed files are framed once from the start up to the last
record wanted.

A re-read blocked for good (a stalled mount, a named pipe) does not hold up the session:
a cancellation abandons its thread, which closes the file when it returns; a remote
file's requests, retries included, end at once (:meth:`IoCall.interrupt`).

:class:`ReaderRecords` is what a built-in reader's ``_record_source()`` returns: the
:class:`~asyncreader._queues.record_refs.RecordSource` through which queues split its keys
and read its records again, without knowing readers.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import anyio
import numpy as np

from .._errors import DataLossError
from .._io.crc import crc32c_bytes
from .._io.executor import IoCall, run_io_abandoning

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .base import ReaderBase

__all__ = ["ReaderRecords", "checksums", "reread"]


def checksums(values: Sequence[bytes]) -> np.ndarray[tuple[int], np.dtype[np.uint32]]:
    """Return the CRC32C of each value (what :func:`reread` checks the values against).

    ``values`` are ``bytes`` (reader records): the C function runs on each directly.
    """
    return np.fromiter(map(crc32c_bytes, values), dtype=np.uint32, count=len(values))


async def reread(
    reader: ReaderBase,
    works: Sequence[bytes],
    work_index: np.ndarray[tuple[int], np.dtype[np.uint32]],
    records: np.ndarray[tuple[int], np.dtype[np.int64]],
    crcs: np.ndarray[tuple[int], np.dtype[np.uint32]],
) -> tuple[list[bytes], list[bytes]]:
    """Read the referenced records again; return their keys and values, in order.

    Reference ``i`` is record ``records[i]`` of work item ``works[work_index[i]]``; the
    same record may be referenced more than once (two epochs in one shuffle buffer).

    Raises:
        NotFoundError: a file is gone.
        DataLossError: a record is corrupt, missing, or differs from its checksum.
    """
    n = len(records)
    keys: list[bytes] = [b""] * n
    values: list[bytes] = [b""] * n
    order = np.lexsort((records, work_index))  # by file, then by record
    bounds = np.flatnonzero(np.diff(work_index[order])) + 1
    groups = np.split(order, bounds) if n else []

    failed: list[Exception] = []

    async def one_file(refs: np.ndarray[tuple[int], np.dtype[np.intp]]) -> None:
        work = works[int(work_index[refs[0]])]
        mine = records[refs]
        try:
            if reader._reread_blocks:
                # Abandoned on cancellation: _reread closes what it opened when it returns.
                call = IoCall(functools.partial(_reread_checked, reader, work, mine, crcs[refs]))
                try:
                    found = await run_io_abandoning(call)
                except BaseException:
                    if call.abandoned:
                        # Nobody takes its records any more: end its remote requests
                        # (retries too) instead of letting them run for their budget.
                        call.interrupt()
                    raise
            else:
                found = _reread_checked(reader, work, mine, crcs[refs])
        except Exception as exc:
            # The first bad file is the error (not a group of one): stop the others.
            failed.append(exc)
            tg.cancel_scope.cancel()
            return
        made = reader._record_keys(work, mine.tolist())
        for i, key, value in zip(refs.tolist(), made, found, strict=True):
            keys[i] = key
            values[i] = value

    async with anyio.create_task_group() as tg:
        for refs in groups:
            tg.start_soon(one_file, refs)
    if failed:
        raise failed[0]
    return keys, values


def _reread_checked(
    reader: ReaderBase,
    work: bytes,
    records: np.ndarray[tuple[int], np.dtype[np.int64]],
    crcs: np.ndarray[tuple[int], np.dtype[np.uint32]],
) -> list[bytes]:
    """Return the values of ``records`` of ``work`` (any order, repeats allowed), each
    checked against its saved checksum in ``crcs``."""
    wanted = np.unique(records).tolist()
    by_record = dict(zip(wanted, reader._reread(work, wanted), strict=True))
    out = [by_record[record] for record in records.tolist()]
    changed = np.flatnonzero(checksums(out) != crcs)
    if changed.size:
        raise DataLossError(
            "record differs from the one the checkpoint saved (the file changed since)",
            work_item=work,
            record=int(records[changed[0]]),
        )
    return out


class ReaderRecords:
    """A reader's records as a :class:`~asyncreader._queues.record_refs.RecordSource`:
    its keys split and its records read again by :func:`reread`, through the reader's
    key scheme and ``_reread``."""

    __slots__ = ("_reader",)

    def __init__(self, reader: ReaderBase) -> None:
        self._reader = reader

    @property
    def kind(self) -> str:
        """The reader's class name."""
        return type(self._reader).__name__

    def config(self) -> dict[str, object]:
        """The reader's arguments, without its name (which does not change its records)."""
        return {k: v for k, v in self._reader._shared_config().items() if k != "name"}

    def split_key(self, key: bytes) -> tuple[bytes, int]:
        """Return the work item and record key of ``key`` (see ``ReaderBase._split_key``)."""
        return self._reader._split_key(key)

    def split_keys(self, keys: list[bytes]) -> tuple[list[bytes], list[int], list[int]]:
        """:meth:`split_key` in bulk (see ``ReaderBase._split_keys``)."""
        return self._reader._split_keys(keys)

    def checksums(self, values: Sequence[bytes]) -> np.ndarray[tuple[int], np.dtype[np.uint32]]:
        """Return the CRC32C of each value (see :func:`checksums`)."""
        return checksums(values)

    async def reread(
        self,
        works: Sequence[bytes],
        work_index: np.ndarray[tuple[int], np.dtype[np.uint32]],
        records: np.ndarray[tuple[int], np.dtype[np.int64]],
        crcs: np.ndarray[tuple[int], np.dtype[np.uint32]],
    ) -> tuple[list[bytes], list[bytes]]:
        """Read the referenced records again (see :func:`reread`)."""
        return await reread(self._reader, works, work_index, records, crcs)
