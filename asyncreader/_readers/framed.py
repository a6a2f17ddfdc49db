"""The framed file reader behind TextLine, FixedLength and TFRecord readers.

Files are read in blocks of :data:`~asyncreader._io.filesystem.READ_BLOCK` bytes on the I/O
executor and framed by a sans-I/O framer (:mod:`asyncreader._records`); each hop also builds
the keys of its records in bulk, so the event loop only slices lists.

A hop frames about :data:`HOP_RECORDS` records, not a whole block: a 4 MiB block of short
lines is 150,000 records, and their objects (two per record) no longer fit in cache by the
time the event loop hands them out, which measured twice as slow as framing a block in
cache-sized pieces. The piece size follows the records seen so far, so files of large
records are still framed a whole block per hop.

``read_batch`` (segment mode) frames whole blocks instead, as many per hop as the call
wants records, up to :data:`HOP_BYTES`; its blocks come from the pool of warm read blocks,
and a local file's next blocks are read ahead on helper threads meanwhile
(:mod:`asyncreader._io.blocks`).

State: before each record run the reader notes the framer's restart point (stream position
and key of the run's first record). Saved state is that point plus how many records of the
run were already delivered; restoring reopens the file, seeks to the point (an
uncompressed file) or inflates it again from the start and discards the bytes before it (a
compressed file: the cost is decompressing the file up to the point once), then skips the
delivered records.

Keys: one precomputed ``%`` format per work item; consecutive keys (line numbers, record
indices) are built a thousand at a time by :func:`~asyncreader._readers.keys.range_keys`.
"""

from __future__ import annotations

import struct
from bisect import bisect_left
from typing import TYPE_CHECKING, ClassVar, Final

import numpy as np

from .._errors import AsyncReaderError, DataLossError, InvalidArgumentError
from .._io.blocks import CAN_READ_AHEAD, BlockReader, PositionalFile, read_block
from .._io.filesystem import READ_BLOCK, Prefetched, open_work_item, prefetch_work_item
from .._records.batch import KeyRun, RecordBatch, assemble, concat
from .._records.keys import bulk_keys, key_format, range_keys
from .buffered import BufferedReader

if TYPE_CHECKING:
    from .._error_policy import OnError
    from .._io.filesystem import RandomAccessFile
    from .._records.framer import Framed, Framer
    from .buffer import BatchRun, RecordRun

__all__ = ["HOP_BYTES", "HOP_RECORDS", "FramedReader"]

_RESTART = struct.Struct("<qqq")

#: Records one hop aims to frame: enough to amortise the hop, few enough that their objects
#: are still in cache when the event loop hands them out.
HOP_RECORDS: Final = 8192
#: The most bytes ``read_batch`` frames per hop: several blocks, so that a batch of large
#: records costs a few hops (about 0.1 ms each), and the hop still ends within
#: milliseconds (a cancelled call waits for it).
HOP_BYTES: Final = 32 << 20
#: Bounds of the piece of a block framed per hop (bytes).
_MIN_PIECE: Final = 64 << 10
_FIRST_PIECE: Final = 256 << 10
#: Bytes read at a time when reading records again by key: a seek costs about as much.
_REREAD_PIECE: Final = 64 << 10


class FramedReader(BufferedReader):
    """A reader that frames its work items' bytes in large record runs (internal base)."""

    #: Key of a file's first record.
    _first_key: ClassVar[int] = 0
    #: Whether a run's keys are consecutive integers (line numbers, record indices).
    _consecutive_keys: ClassVar[bool] = False
    _opens_ahead = True

    def __init__(self, name: str | None = None, *, on_error: OnError = None) -> None:
        super().__init__(name, on_error=on_error)
        self._file: RandomAccessFile | None = None
        self._framer: Framer | None = None
        self._prefix = b""
        self._key_format = b"%d"
        self._restart = (0, self._first_key)
        self._restart_skip = 0
        self._skip_pending = 0
        # The block being framed, how far it has been fed, whether it ended the file, and
        # the size of the next piece fed from it.
        self._block = b""
        self._block_at = 0
        self._block_last = False
        self._piece = _FIRST_PIECE
        # Reads the blocks of read_batch, the next ones ahead (local files).
        self._ahead: BlockReader | None = None
        # The size of the block framed last.
        self._block_bytes = 0
        # The next work items' remote files, opened ahead (by URL: any reader may take
        # them), in queue order.
        self._prefetched: dict[bytes, Prefetched] = {}

    # -- subclass interface ------------------------------------------------------------

    def _new_framer(self, work: bytes, position: int, key: int, size: int | None) -> Framer:
        """Return a framer whose first record is at ``position`` with key ``key``; ``size``
        is the file's size when known (it bounds the lengths records may declare)."""
        raise NotImplementedError

    def _seek_target(self, position: int, key: int) -> int | None:
        """Return where to seek to resume at ``(position, key)``; ``None`` for compressed
        files, which are read again from the start."""
        return position

    def _position_of(self, key: int) -> int | None:
        """Return the stream offset of record ``key``, or ``None`` when only framing from
        the start finds it (text lines)."""
        return None

    def _config(self) -> dict[str, object]:
        return {}

    def _shared_config(self) -> dict[str, object]:
        return {**super()._shared_config(), **self._config()}

    def _config_bytes(self) -> bytes:
        return repr(sorted(self._config().items())).encode()

    # -- hooks (worker thread) -----------------------------------------------------------

    def on_work_started(self, work: bytes) -> None:
        self._close_files()
        if self._resume is None:
            # Read from its start (not resumed, which seeks at once): a remote file not
            # opened ahead asks for its whole read-ahead window in its first request, so
            # that one round trip brings a file of up to the window's size.
            prefetch_work_item(work)
        # The next files' opens begin before this one is waited for: their requests go
        # out with its.
        self._open_ahead(work)
        self._file = open_work_item(work)  # takes the file opened ahead
        self._prefix = work + b":"
        self._key_format = key_format(self._prefix)
        self._framer = self._new_framer(work, 0, self._first_key, self._file.size)
        self._skip_pending = 0

    def restore_extra(self, extra: bytes) -> None:
        position, key, skip = _RESTART.unpack_from(extra)
        assert self._file is not None
        target = self._seek_target(position, key)
        if target is not None:
            self._file.seek(target)
        self._drop_block()
        self._framer = self._new_framer(self._work, position, key, self._file.size)
        self._skip_pending = skip

    def on_work_finished(self) -> None:
        self._close_files()

    def reset_state(self) -> None:
        self._framer = None
        self._skip_pending = 0
        self._drop_block()

    def _skip_bad_record(self) -> bool:
        framer = self._framer
        where = None if framer is None else framer.skip_to
        if where is None or self._file is None:
            return False
        position, key = where
        target = self._seek_target(position, key)
        if target is None:
            # A compressed file: inflate again from the start, discarding up to there.
            self._close_files()
            self._file = open_work_item(self._work)
        else:
            self._file.seek(target)
        self._drop_block()
        assert self._file is not None
        self._framer = self._new_framer(self._work, position, key, self._file.size)
        self._skip_pending = 0
        return True

    def _open_ahead(self, work: bytes) -> None:
        """Begin opening the remote files the work queue hands out after ``work`` (noted
        when it was taken), so that their first windows arrive while this one is read:
        with latency per request, not one round trip per file. Memory: one read-ahead
        window shared by those files, besides the open file's (see prefetch_work_item)."""
        hints, self._work_hints = self._work_hints, ()
        old = self._prefetched
        new: dict[bytes, Prefetched] = {}
        old.pop(work, None)  # opened now, by on_work_started
        for hint in hints:
            if hint == work or hint in new:
                continue
            ahead = old.pop(hint, None)
            if ahead is not None and ahead.deferred:
                ahead.discard()  # the window was full: asked for again, with what it has now
                ahead = None
            if ahead is None:
                ahead = prefetch_work_item(hint, after=list(new.values()))
            if ahead is not None:
                new[hint] = ahead
        for stale in old.values():
            stale.discard()  # not taken by any reader: the queue order changed
        self._prefetched = new

    def _close_files(self) -> None:
        f, self._file = self._file, None
        self._drop_block()
        if f is not None:
            f.close()
        if self._closed:
            # A closed reader opens nothing more: the file it opened ahead goes too. (At
            # the end of a work item it stays, for whichever reader opens it next.)
            stale, self._prefetched = self._prefetched, {}
            for ahead in stale.values():
                ahead.discard()

    def _drop_block(self) -> None:
        self._block, self._block_at, self._block_last = b"", 0, False
        self._stop_ahead()

    def _stop_ahead(self) -> None:
        ahead, self._ahead = self._ahead, None
        if ahead is not None:
            ahead.close()

    def _has_open_files(self) -> bool:
        return self._file is not None or bool(self._prefetched)

    # -- reading records again by key ------------------------------------------------------

    _rereadable: ClassVar[bool] = True

    def _reread(self, work: bytes, wanted: list[int]) -> list[bytes]:
        try:
            return self._reread_records(work, wanted)
        except DataLossError as exc:
            if "since the checkpoint" in exc.message:
                raise
            # A framing error here means the bytes are not what the checkpoint read.
            raise DataLossError(
                f"{exc.message} while reading records again for a restore: the file "
                "changed since the checkpoint, or its records were not read by a "
                f"{self._reread_as()}",
                work_item=exc.work_item,
                record=exc.record,
                offset=exc.offset,
            ) from exc

    def _reread_records(self, work: bytes, wanted: list[int]) -> list[bytes]:
        found: list[bytes] = []
        f = open_work_item(work)
        try:
            framer: Framer | None = None
            at_end = False
            while len(found) < len(wanted):
                key = wanted[len(found)]
                if framer is None or self._seek_is_shorter(framer, key):
                    framer, at_end = self._framer_at(f, work, key), False
                elif at_end:
                    raise DataLossError(
                        "record not found: the file changed since the checkpoint, or its "
                        f"records were not read by a {self._reread_as()}",
                        work_item=work,
                        record=key,
                    )
                data = f.read(_REREAD_PIECE)
                if data:
                    ints, values = framer.decode(data)
                    while framer.pending:
                        try:
                            more_ints, more_values = framer.decode(b"")
                        except AsyncReaderError:
                            # Pick the records framed before the damage; the framer
                            # raises again if more are wanted.
                            break
                        ints += more_ints
                        values += more_values
                else:
                    ints, values = framer.finish()
                    at_end = True
                self._pick(work, wanted, found, ints, values, self._reread_as())
        finally:
            f.close()
        return found

    def _seek_is_shorter(self, framer: Framer, key: int) -> bool:
        """Whether seeking to record ``key`` beats framing on to it."""
        position = self._position_of(key)
        return (
            position is not None
            and self._seek_target(position, key) is not None
            and position - framer.position > _REREAD_PIECE
        )

    def _framer_at(self, f: RandomAccessFile, work: bytes, key: int) -> Framer:
        """Position ``f`` and return a framer whose first record is ``key`` (or, when its
        offset is unknown, the file's first record)."""
        position = self._position_of(key)
        if position is None:
            f.seek(0)
            return self._new_framer(work, 0, self._first_key, f.size)
        target = self._seek_target(position, key)
        f.seek(0 if target is None else target)  # compressed: inflate up to it again
        return self._new_framer(work, position, key, f.size)

    def _reread_as(self) -> str:
        """The reader type and arguments that records are read again as, for messages."""
        arguments = ", ".join(f"{k}={v!r}" for k, v in sorted(self._config().items()))
        return f"{type(self).__name__}({arguments})"

    @staticmethod
    def _pick(
        work: bytes,
        wanted: list[int],
        found: list[bytes],
        ints: list[int],
        values: list[bytes],
        reader: str,
    ) -> None:
        """Append to ``found`` the values of the records of ``wanted`` framed just now.

        ``ints`` (the framed keys) ascend: each wanted key is looked up by bisection, so the
        cost follows the records wanted, not the records framed through to reach them.
        """
        if not ints:
            return
        last = ints[-1]
        lo = 0
        while len(found) < len(wanted):
            key = wanted[len(found)]
            if key > last:
                return  # in a later piece
            lo = bisect_left(ints, key, lo)
            if ints[lo] != key:  # framed past it: no record starts there
                raise DataLossError(
                    "no record starts here: the file changed since the checkpoint, or its "
                    f"records were not read by a {reader}",
                    work_item=work,
                    record=key,
                )
            found.append(values[lo])
            lo += 1

    # -- state -----------------------------------------------------------------------------

    def _before_fill(self) -> None:
        framer = self._framer
        if framer is not None:
            self._restart = (framer.position, framer.next_key)
        self._restart_skip = self._skip_pending

    def _run_mark(self) -> tuple[tuple[int, int], int]:
        return self._restart, self._restart_skip

    def _rewind(self, mark: tuple[tuple[int, int], int], skip: int) -> None:
        self._restart, base = mark
        self._restart_skip = base + skip

    def _start_state(self) -> bytes:
        return _RESTART.pack(0, self._first_key, 0) + self._config_bytes()

    def _run_state(self, skip: int) -> bytes:
        position, key = self._restart
        return _RESTART.pack(position, key, self._restart_skip + skip) + self._config_bytes()

    def _check_extra(self, extra: bytes) -> None:
        if len(extra) < _RESTART.size or extra[_RESTART.size :] != self._config_bytes():
            raise InvalidArgumentError(
                f"state was written by a {type(self).__name__} with other arguments "
                f"than {self._config()}"
            )
        position, key, skip = _RESTART.unpack_from(extra)
        if min(position, key, skip) < 0:
            raise InvalidArgumentError(f"negative position in state: {position}, {key}, {skip}")

    # -- reading ---------------------------------------------------------------------------

    def _fill(self) -> RecordRun:
        framer = self._framer
        assert framer is not None
        while True:
            if framer.error is not None:
                # A failed framer repeats its error: the work item stays in progress.
                raise framer.error
            at_end = False
            if framer.pending:
                ints, values = framer.decode(b"")
            else:
                data, last = self._next_piece()
                if data:
                    ints, values = framer.decode(data)
                    if ints:
                        # Aim the next piece at HOP_RECORDS records of the size just seen.
                        piece = len(data) * HOP_RECORDS // len(ints)
                        self._piece = min(max(piece, _MIN_PIECE), READ_BLOCK)
                    # The end of the file: finish in the same hop.
                    if last and framer.error is None and not framer.pending:
                        try:
                            more_ints, more_values = framer.finish()
                        except AsyncReaderError:
                            if not ints:
                                raise
                            # Deliver the good records first; the framer repeats the error.
                        else:
                            ints += more_ints
                            values += more_values
                            at_end = framer.error is None
                else:
                    ints, values = framer.finish()
                    at_end = framer.error is None
            self._drop_skipped(ints, values)
            if ints or at_end:
                return self._keys_of(ints), values, at_end

    def _fill_batch(self) -> BatchRun:
        # The segment mode of _fill: the same records, errors and state, framed a whole
        # block at a time (no per-record objects to keep in cache), keys left as ints;
        # blocks are framed in one hop until the call's records are there (up to
        # HOP_BYTES), so a large batch costs a few thread hops, not one per block.
        batch, at_end = self._frame_step()
        framer = self._framer
        assert framer is not None
        if at_end or framer.error is not None:
            return batch, at_end
        parts = [batch]
        count, want = len(batch), self._want
        hop = self._block_bytes
        while count < want and hop < HOP_BYTES:
            try:
                batch, at_end = self._frame_step()
            except Exception:
                # Deliver the records framed so far; the next hop repeats the failed
                # step (the framer repeats its error; a read is tried again).
                break
            parts.append(batch)
            count += len(batch)
            hop += self._block_bytes
            if at_end or framer.error is not None:
                break
        return concat(parts), at_end

    def _frame_step(self) -> BatchRun:
        """Frame the next block (or what the framer holds) into a non-empty batch, or the
        end of the work item."""
        framer = self._framer
        assert framer is not None
        while True:
            if framer.error is not None:
                raise framer.error
            at_end = False
            if framer.pending:
                framed = [framer.decode_segments(b"")]
            else:
                data, last = self._next_piece(whole=True)
                self._block_bytes = len(data)
                if data:
                    framed = [framer.decode_segments(data)]
                    if last and framer.error is None and not framer.pending:
                        try:
                            framed.append(framer.finish_segments())
                        except AsyncReaderError:
                            if not len(framed[0]):
                                raise
                            # Deliver the good records first; the framer repeats the error.
                        else:
                            at_end = framer.error is None
                else:
                    framed = [framer.finish_segments()]
                    at_end = framer.error is None
            batch = self._batch_of(framed)
            if len(batch) or at_end:
                return batch, at_end

    def _batch_of(self, framed: list[Framed]) -> RecordBatch:
        """A batch of framed records (their keys kept as ints), less the records a
        restored state says were delivered already."""
        segments = [s for f in framed for s in f.segments]
        ids = framed[0].keys if len(framed) == 1 else np.concatenate([f.keys for f in framed])
        batch = assemble(segments, [KeyRun(self._work, len(ids), ids)])
        skip = self._skip_pending
        if skip and len(batch):
            dropped = min(skip, len(batch))
            batch = batch[dropped:]
            self._skip_pending = skip - dropped
        return batch

    def _drop_skipped(self, ints: list[int], values: list[bytes]) -> None:
        """Drop the records a restored state says were delivered already."""
        skip = self._skip_pending
        if skip and ints:
            dropped = min(skip, len(ints))
            del ints[:dropped], values[:dropped]
            self._skip_pending = skip - dropped

    def _next_piece(self, *, whole: bool = False) -> tuple[bytes | memoryview, bool]:
        """Return the next piece of the file to frame, and whether it is the file's last.

        An empty piece is the end of the file. A block is read when the last one is used
        up; a short block ends the file. ``whole``: the rest of the block.
        """
        block, at = self._block, self._block_at
        if at >= len(block):
            f = self._file
            assert f is not None
            if whole:
                # Framed whole into views of the block: a warm pooled block, lent out
                # for as long as the batch (or anything taken from it) lives; a local
                # file's next blocks are read meanwhile on helper threads.
                ahead = self._ahead
                if ahead is None and CAN_READ_AHEAD and isinstance(f, PositionalFile):
                    ahead = self._ahead = BlockReader(f, READ_BLOCK)
                view = read_block(f, READ_BLOCK) if ahead is None else ahead.next()
                self._bytes_read += len(view)
                self._block, self._block_at, self._block_last = b"", 0, len(view) < READ_BLOCK
                return view, self._block_last
            self._stop_ahead()  # plain reads go on where the block reader stopped
            block = f.read(READ_BLOCK)
            self._bytes_read += len(block)
            self._block, at, self._block_last = block, 0, len(block) < READ_BLOCK
        stop = at + self._piece
        if whole or stop + _MIN_PIECE > len(block):
            stop = len(block)  # no small pieces left over
        self._block_at = stop
        last = self._block_last and stop == len(block)
        if at == 0 and stop == len(block):
            self._block = b""  # held by the framer alone from here on
            return block, last
        return block[at:stop], last

    def _keys_of(self, ints: list[int]) -> list[bytes]:
        if self._consecutive_keys and len(ints) > 1:
            return range_keys(self._prefix, ints[0], ints[-1] + 1, fmt=self._key_format)
        return bulk_keys(self._prefix, ints, fmt=self._key_format)
