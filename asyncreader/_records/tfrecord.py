"""Sans-I/O TFRecord framing: chunks of a record file in, ``(offsets, payloads)`` out.

Format (SPEC §4.1, little-endian)::

    uint64 length | uint32 masked_crc32c(length) | payload[length] | uint32 masked_crc32c(payload)

Keys are the byte offsets of the records' 12-byte headers in the (decompressed) stream. See
:mod:`asyncreader._records.framer` for the chunk contract shared by all framers.

Errors at a record starting at offset ``o`` (SPEC §4.4):

* fewer than 12 bytes left at the end of input: silent end of file (quirk Q5);
* header CRC mismatch: ``corrupted record at <o>``;
* a length of 2**64 - 5 or more: ``record size too large``;
* payload or footer cut off by the end of input: ``truncated record at <o>``;
* payload CRC mismatch: ``corrupted record at <o+12>``;
* a corrupt compressed stream: ``inflate() failed with error <code>: <message>``.

Speed: ``bytes`` chunks are framed without copying the chunk; each payload is sliced once
into its own ``bytes`` and checksummed by one C call. Verified headers are remembered (same
bytes, same CRC), so a file of few distinct record lengths checksums almost no headers. A
chunk is framed in two passes: a tight loop walks the headers, then payloads are sliced and
their CRCs compared with the footers in bulk (numpy). When records of one length follow
each other, a run of them is framed with a few numpy operations: headers compared as a
block, payloads sliced by one strided ``tolist()``. Measured with
``benchmarks/framing.py`` (1 MiB chunks, CRCs verified, a 2-core x86-64 VM): about 4M
records/s for 100-byte records of one length, 1.5M/s for lengths varying from 90 to 110,
and about half of ``bytes``-copy speed for 100 KiB records (a copy plus a CRC pass each).

Segment mode (:meth:`~asyncreader._records.framer.Framer.decode_segments`) walks the
headers the same way but keeps payloads where they lie: the records of a chunk are one
segment over it (a record straddling chunks is joined into its own), with arange offsets
for a run of one length, and payload CRCs computed in place by
:func:`~asyncreader._io.crc.crc32c_many`.
"""

from __future__ import annotations

import struct
from typing import Final, NoReturn

import numpy as np

from .._errors import DataLossError, InvalidArgumentError, ResourceExhaustedError
from .._io.crc import crc32c, crc32c_at, crc32c_bytes, crc32c_many, crc32c_strided
from .compression import (
    DEFAULT_MAX_OUTPUT,
    TFRecordCompressionType,
    compression_hint,
    parse_compression_type,
)
from .framer import (
    DEFAULT_MAX_RECORD_BYTES,
    Framer,
    check_max_record_bytes,
    too_long_message,
)

__all__ = ["HEADER_SIZE", "FOOTER_SIZE", "TFRecordFramer", "frame_record"]

HEADER_SIZE: Final = 12
FOOTER_SIZE: Final = 4
_OVERHEAD: Final = HEADER_SIZE + FOOTER_SIZE
_MAX_LENGTH: Final = 2**64 - 5
_DELTA: Final = 0xA282EAD8
_U32: Final = 0xFFFFFFFF
_HEADER = struct.Struct("<QI")
_U32LE = struct.Struct("<I")
_U64LE = struct.Struct("<Q")
#: Consecutive same-length records seen before a block of them is framed with numpy; keeps
#: files of varied lengths off the vectorised path, whose setup costs a few microseconds.
_RUN_BEFORE_BLOCK: Final = 8
#: Verified headers remembered (a few KiB of memory).
_KNOWN_HEADERS: Final = 4096
#: Fewest records worth a vectorised block.
_MIN_BLOCK: Final = 16
_FOOTER_BYTES: Final = np.arange(FOOTER_SIZE)


def frame_record(payload: bytes | bytearray | memoryview) -> list[bytes]:
    """Return the header, payload and footer that store ``payload`` as one TFRecord.

    Args:
        payload: The record's bytes.

    Returns:
        ``[header, payload, footer]``, to be written one after the other.
    """
    length = _U64LE.pack(len(payload))
    c = crc32c(length)
    header = length + _U32LE.pack((((c >> 15) | (c << 17)) + _DELTA) & _U32)
    c = crc32c(payload)
    footer = _U32LE.pack((((c >> 15) | (c << 17)) + _DELTA) & _U32)
    return [header, bytes(payload), footer]


class TFRecordFramer(Framer):
    """Turn chunks of a TFRecord file into ``(offsets, payloads)``.

    Args:
        verify_crc: Check both checksums of every record (TensorFlow always does).
        compression_type: ``None``/``""``, ``"ZLIB"`` or ``"GZIP"`` in any case (or a
            :class:`TFRecordCompressionType`).
        start_offset: Stream offset of the first record. Uncompressed input must start
            there; compressed input is fed from the start of the file and the framer
            discards the first ``start_offset`` decompressed bytes.
        work_item: The file, named in errors.
        max_output: The most decompressed bytes one ``decode`` call frames.
        max_record_bytes: The longest payload accepted. A header declaring more fails at
            once with :class:`~asyncreader.ResourceExhaustedError`, before anything of the
            record is buffered or inflated (its extent is known, so :attr:`skip_to` lets a
            reader skip just that record).
        stream_size: The size of an uncompressed stream, when known (a local file's size):
            a header declaring a record that would end beyond it fails at once with
            :class:`~asyncreader.DataLossError` (``truncated record at <offset>``) instead
            of buffering the rest of the file first. Ignored for compressed streams. May
            also be set later, as the attribute of the same name.

    Raises:
        InvalidArgumentError: if ``start_offset`` is negative, ``compression_type`` is
            unknown or ``max_record_bytes`` is below 1.
    """

    __slots__ = (
        "_known",
        "_last_hdr",
        "_limit",
        "_parts",
        "_pos",
        "_tail_len",
        "_verify",
        "stream_size",
    )

    def __init__(
        self,
        *,
        verify_crc: bool = True,
        compression_type: str | TFRecordCompressionType | None = None,
        start_offset: int = 0,
        work_item: str | bytes | None = None,
        max_output: int = DEFAULT_MAX_OUTPUT,
        max_record_bytes: int = DEFAULT_MAX_RECORD_BYTES,
        stream_size: int | None = None,
    ) -> None:
        if start_offset < 0:
            raise InvalidArgumentError(f"start_offset must be >= 0, not {start_offset}")
        # The largest length accepted without a check beyond one comparison per new header.
        self._limit = min(check_max_record_bytes(max_record_bytes), _MAX_LENGTH - 1)
        #: The uncompressed stream's size when known, bounding declared lengths.
        self.stream_size = stream_size
        super().__init__(
            compression=parse_compression_type(compression_type),
            skip=start_offset,
            work_item=work_item,
            max_output=max_output,
        )
        self._verify = verify_crc
        self._pos = start_offset
        # Partial record carried between chunks, as a list so a huge record fed in many
        # small chunks is joined once.
        self._parts: list[bytes] = []
        self._tail_len = 0
        # The last header whose CRC was verified, as (length, masked crc).
        self._last_hdr = (-1, -1)
        # Verified headers, masked CRC -> length: record lengths repeat, so most headers
        # are checked by one lookup instead of a checksum.
        self._known: dict[int, int] = {}

    @property
    def position(self) -> int:
        """Stream offset of the next record's header."""
        return self._pos

    @property
    def next_key(self) -> int:
        """Key (header offset) of the next record; the same as :attr:`position`."""
        return self._pos

    def __repr__(self) -> str:
        state = "failed" if self._error is not None else "ok"
        return (
            f"<TFRecordFramer position={self._pos} records={self._records} "
            f"buffered={self._tail_len} verify_crc={self._verify} {state}>"
        )

    # -- framing ----------------------------------------------------------------------

    def _buffered(self) -> int:
        return self._tail_len

    def _frame(self, data: bytes, keys: list[int], values: list[bytes]) -> None:
        start = 0
        if self._parts:
            start = self._complete_tail(data, keys, values)
            if start < 0:
                return
        end = self._scan(data, start, self._pos - start, keys, values)
        if end < len(data):
            rest = data[end:]
            self._parts = [rest]
            self._tail_len = len(rest)

    def _complete_tail(self, data: bytes, keys: list[int], values: list[bytes]) -> int:
        """Finish the record carried over from earlier chunks; return where ``data`` resumes.

        Returns -1 when ``data`` is used up without completing it.
        """
        have = self._tail_len
        if have < HEADER_SIZE:
            self._parts.append(data[: HEADER_SIZE - have])
            head = b"".join(self._parts)
            self._parts = [head]
            self._tail_len = len(head)
            if len(head) < HEADER_SIZE:
                return -1
            # Verify the header now: TensorFlow reports a bad header before reading on.
            self._scan(head, 0, self._pos, keys, values)
            used = HEADER_SIZE - have
            have = HEADER_SIZE
        else:
            used = 0
        length: int = _U64LE.unpack_from(self._parts[0])[0]
        take = length + _OVERHEAD - have
        if len(data) - used < take:
            self._parts.append(data[used:])
            self._tail_len += len(data) - used
            return -1
        self._parts.append(data[used : used + take])
        record = b"".join(self._parts)
        self._parts = []
        self._tail_len = 0
        self._scan(record, 0, self._pos, keys, values)
        return used + take

    def _scan(self, buf: bytes, p: int, base: int, keys: list[int], values: list[bytes]) -> int:
        """Append every complete record of ``buf[p:]``; return the offset of the first
        incomplete one. ``base`` is the stream offset of ``buf[0]``.

        Two passes: a tight loop walks the headers and notes where payloads lie, then the
        payloads are sliced, checksummed and compared with their footers in bulk.
        """
        n = len(buf)
        verify = self._verify
        unpack_header = _HEADER.unpack_from
        # google-crc32c's C function takes only bytes; a read block's view is copied.
        crc = crc32c_bytes if type(buf) is bytes else crc32c
        last_len, last_crc = self._last_hdr
        known = self._known
        limit = self._limit
        starts: list[int] = []
        ends: list[int] = []
        add_start = starts.append
        add_end = ends.append
        error: DataLossError | ResourceExhaustedError | None = None
        run = 0
        # Literals and locals below: this loop runs once per record.
        last_header = n - 12
        last_stop = n - 4
        while p <= last_header:
            length, hcrc = unpack_header(buf, p)
            if length != last_len or hcrc != last_crc:
                if verify and known.get(hcrc) != length:
                    c = crc(buf[p : p + 8])
                    if (((c >> 15) | (c << 17)) + _DELTA) & _U32 != hcrc:
                        error = self._header_error(buf, p, base)
                        break
                    if len(known) >= _KNOWN_HEADERS:
                        known.clear()
                    known[hcrc] = length
                if length > limit:
                    # Before buffering or inflating any of it.
                    error = self._length_error(base + p, length)
                    break
                last_len, last_crc = length, hcrc
                self._last_hdr = (length, hcrc)
                run = 0
            else:
                run += 1
            stop = p + 12 + length
            if stop > last_stop:
                # Incomplete in this chunk (once per chunk): the rest is buffered, unless
                # the file is known to end before the record does.
                size = self.stream_size
                if size is not None and base + stop + 4 > size and self._decomp is None:
                    error = self._truncated_error(base + p, length)
                break
            if run >= _RUN_BEFORE_BLOCK and length:
                run = 0
                if starts:
                    self._emit(buf, base, starts, ends, keys, values)
                    starts = []
                    ends = []
                    add_start = starts.append
                    add_end = ends.append
                done = self._block(buf, p, base, length, keys, values)
                if done:
                    p += done
                    continue
            add_start(p)
            add_end(stop)
            p = stop + 4
        if starts:
            self._emit(buf, base, starts, ends, keys, values)
        self._pos = base + p
        if error is not None:
            self._stop(base + p, keys)
            self._fail(error, keys)
        return p

    def _emit(
        self,
        buf: bytes,
        base: int,
        starts: list[int],
        ends: list[int],
        keys: list[int],
        values: list[bytes],
    ) -> None:
        """Slice and verify the complete records at ``buf[starts[i]:ends[i] + 4]``."""
        if self._out is not None:
            self._emit_segment(buf, base, starts, ends, keys)
            return
        payloads = [buf[s + HEADER_SIZE : e] for s, e in zip(starts, ends, strict=True)]
        if self._verify:
            bad = self._bad_footer(buf, payloads, ends)
            if bad >= 0:
                keys.extend([base + s for s in starts[:bad]])
                values.extend(payloads[:bad])
                at = base + starts[bad]
                # The header vouched for the length: the next record is right after.
                after = base + ends[bad] + 4
                self._skip_to = (after, after)
                self._stop(at, keys)
                self._fail(
                    self._error_at(at, f"corrupted record at {at + HEADER_SIZE}", HEADER_SIZE),
                    keys,
                )
        keys.extend([base + s for s in starts] if base else starts)
        values.extend(payloads)

    def _emit_segment(
        self, buf: bytes, base: int, starts: list[int], ends: list[int], keys: list[int]
    ) -> None:
        """Segment mode of :meth:`_emit`: payload offsets, checksummed in place."""
        out = self._out
        assert out is not None
        count = len(starts)
        if count < _MIN_BLOCK:
            # A few records (long ones, or a chunk's first): numpy's setup per call would
            # cost more than these few steps per record.
            if self._verify:
                unpack_u32 = _U32LE.unpack_from
                for i in range(count):
                    s, e = starts[i] + HEADER_SIZE, ends[i]
                    c = crc32c_at(buf, s, e - s)
                    if (((c >> 15) | (c << 17)) + _DELTA) & _U32 != unpack_u32(buf, e)[0]:
                        count = i
                        break
            out.add(
                buf,
                [s + HEADER_SIZE for s in starts[:count]],
                [e - s - HEADER_SIZE for s, e in zip(starts[:count], ends, strict=False)],
                np.array(starts[:count], dtype=np.int64) + base,
            )
            if count < len(starts):
                self._payload_error(base, starts[count], ends[count], keys)
            return
        heads = np.array(starts, dtype=np.int64)
        stops = np.array(ends, dtype=np.int64)
        first = heads + HEADER_SIZE
        lengths = stops - first
        if self._verify:
            crcs = crc32c_many(buf, first, lengths)
            masked = (((crcs >> 15) | (crcs << 17)) + _DELTA) & _U32
            # The 4 footer bytes of each record, gathered as rows and read as one uint32.
            footers = out.view(buf)[stops[:, None] + _FOOTER_BYTES].view("<u4")[:, 0]
            bad = np.flatnonzero(masked != footers)
            if bad.size:
                count = int(bad[0])
        out.add(buf, first[:count], lengths[:count], heads[:count] + base)
        if count < len(heads):
            self._payload_error(base, starts[count], ends[count], keys)

    def _payload_error(self, base: int, start: int, end: int, keys: list[int]) -> NoReturn:
        """Fail at the record at ``buf[start:end + 4]`` whose payload CRC does not match."""
        at = base + start
        # The header vouched for the length: the next record is right after.
        after = base + end + 4
        self._skip_to = (after, after)
        self._stop(at, keys)
        self._fail(self._error_at(at, f"corrupted record at {at + HEADER_SIZE}", HEADER_SIZE), keys)

    @staticmethod
    def _bad_footer(buf: bytes, payloads: list[bytes], ends: list[int]) -> int:
        """Return the index of the first payload whose CRC does not match, or -1."""
        count = len(payloads)
        if count < _MIN_BLOCK:
            unpack_u32 = _U32LE.unpack_from
            for i, (payload, end) in enumerate(zip(payloads, ends, strict=True)):
                c = crc32c_bytes(payload)
                if (((c >> 15) | (c << 17)) + _DELTA) & _U32 != unpack_u32(buf, end)[0]:
                    return i
            return -1
        crcs = np.fromiter(map(crc32c_bytes, payloads), dtype=np.uint64, count=count)
        masked = (((crcs >> 15) | (crcs << 17)) + _DELTA) & _U32
        raw = np.frombuffer(buf, dtype=np.uint8)
        at = np.array(ends, dtype=np.intp)
        footers = (
            raw[at].astype(np.uint64)
            | (raw[at + 1].astype(np.uint64) << 8)
            | (raw[at + 2].astype(np.uint64) << 16)
            | (raw[at + 3].astype(np.uint64) << 24)
        )
        bad = np.flatnonzero(masked != footers)
        return int(bad[0]) if bad.size else -1

    def _length_error(self, at: int, length: int) -> DataLossError | ResourceExhaustedError:
        """The error for a header at ``at`` declaring more than ``max_record_bytes``."""
        if length >= _MAX_LENGTH:
            return self._error_at(at, "record size too large")
        size = self.stream_size
        if size is not None and at + _OVERHEAD + length > size and self._decomp is None:
            return self._truncated_error(at, length)
        # The header vouches for the length: the next record starts after this one.
        after = at + _OVERHEAD + length
        self._skip_to = (after, after)
        return ResourceExhaustedError(
            too_long_message(f"record at {at}", length, self._limit),
            work_item=self.work_item,
            record=at,
            offset=at,
        )

    def _truncated_error(self, at: int, length: int) -> DataLossError:
        """The error for a header at ``at`` whose record would end beyond the file."""
        assert self.stream_size is not None
        left = max(self.stream_size - at - HEADER_SIZE, 0)
        return self._error_at(
            at,
            f"truncated record at {at}: its header declares {length} bytes of payload "
            f"but the file has {left} bytes after the header",
        )

    def _header_error(self, buf: bytes, p: int, base: int) -> DataLossError:
        """The error for a header whose checksum fails at ``buf[p]``."""
        message = f"corrupted record at {base + p}"
        if base + p == 0 and self._decomp is None:
            # The first header of an uncompressed stream: the file may be compressed.
            message += compression_hint(
                buf[p : p + 2], TFRecordCompressionType.NONE, "compression_type"
            )
        return self._error_at(base + p, message)

    def _error_at(self, record: int, message: str, delta: int = 0) -> DataLossError:
        return DataLossError(
            message, work_item=self.work_item, record=record, offset=record + delta
        )

    def _block(
        self,
        buf: bytes,
        p: int,
        base: int,
        length: int,
        keys: list[int],
        values: list[bytes],
    ) -> int:
        """Frame a run of records of ``length`` bytes at ``buf[p:]`` with numpy.

        The header at ``p`` is already verified. Returns the bytes consumed (0 when the run
        is too short to be worth it); on a bad payload CRC, appends the good records before
        it and fails.
        """
        stride = length + _OVERHEAD
        m = (len(buf) - p) // stride
        if m < _MIN_BLOCK:
            return 0
        rows = np.frombuffer(buf, dtype=np.uint8, count=m * stride, offset=p).reshape(m, stride)
        headers = rows[:, :HEADER_SIZE]
        same = (headers == headers[0]).all(axis=1)
        k = m if bool(same.all()) else int(np.argmin(same))
        if k < _MIN_BLOCK:
            return 0
        out = self._out
        if out is not None:
            return self._block_segment(buf, p, base, length, k)
        payloads: list[bytes] = np.ndarray(
            (k,),
            dtype=np.dtype((np.void, length)),
            buffer=buf,
            offset=p + HEADER_SIZE,
            strides=(stride,),
        ).tolist()
        if self._verify:
            c = np.fromiter(map(crc32c_bytes, payloads), dtype=np.uint64, count=k)
            masked = (((c >> 15) | (c << 17)) + _DELTA) & _U32
            footers = np.ndarray(
                (k,),
                dtype="<u4",
                buffer=buf,
                offset=p + HEADER_SIZE + length,
                strides=(stride,),
            )
            bad = np.flatnonzero(masked != footers)
            if bad.size:
                j = int(bad[0])
                keys.extend(range(base + p, base + p + j * stride, stride))
                values.extend(payloads[:j])
                at = base + p + j * stride
                self._skip_to = (at + stride, at + stride)
                self._stop(at, keys)
                self._fail(
                    DataLossError(
                        f"corrupted record at {at + HEADER_SIZE}",
                        work_item=self.work_item,
                        record=at,
                        offset=at + HEADER_SIZE,
                    ),
                    keys,
                )
        keys.extend(range(base + p, base + p + k * stride, stride))
        values.extend(payloads)
        return k * stride

    def _block_segment(self, buf: bytes, p: int, base: int, length: int, k: int) -> int:
        """Segment mode of :meth:`_block` for its ``k`` records: strided payload offsets."""
        out = self._out
        assert out is not None
        stride = length + _OVERHEAD
        first = np.arange(p + HEADER_SIZE, p + HEADER_SIZE + k * stride, stride, dtype=np.int64)
        good = k
        if self._verify:
            c = crc32c_strided(buf, p + HEADER_SIZE, k, length, stride)
            masked = (((c >> 15) | (c << 17)) + _DELTA) & _U32
            footers = np.ndarray(
                (k,), dtype="<u4", buffer=buf, offset=p + HEADER_SIZE + length, strides=(stride,)
            )
            bad = np.flatnonzero(masked != footers)
            if bad.size:
                good = int(bad[0])
        out.add(
            buf,
            first[:good],
            np.full(good, length, dtype=np.int64),
            range(base + p, base + p + good * stride, stride),
        )
        if good < k:
            at = base + p + good * stride
            self._skip_to = (at + stride, at + stride)
            self._stop(at, [])
            self._fail(
                DataLossError(
                    f"corrupted record at {at + HEADER_SIZE}",
                    work_item=self.work_item,
                    record=at,
                    offset=at + HEADER_SIZE,
                ),
                [],
            )
        return k * stride

    def _stop(self, at: int, keys: list[int]) -> None:
        # Position stays at the damaged record, so state saved now retries it.
        self._pos = at
        self._parts = []
        self._tail_len = 0

    def _finish(self, keys: list[int], values: list[bytes]) -> None:
        have = self._tail_len
        if have < HEADER_SIZE:
            # Quirk Q5: a partial header at the end of the file is a silent end of file.
            return
        self._fail(
            DataLossError(
                f"truncated record at {self._pos}",
                work_item=self.work_item,
                record=self._pos,
                offset=self._pos,
            ),
            keys,
        )
