"""The TFRecord framer's shortcuts for headers it has verified before.

Record lengths repeat, so :class:`TFRecordFramer` checksums a header only when it is new:
it compares it with the previous header (``(length, crc)``), looks its CRC up in a cache of
verified headers (masked CRC -> length), and frames runs of identical headers as a block
(all 12 bytes compared). Each shortcut must treat a header as known only when *both* its
length and its CRC match one verified before. A corrupted length keeps its old CRC, which
is in the cache: these tests make sure that header is still ``corrupted record at <o>``,
whichever shortcut sees it and however the file is cut into chunks.
"""

from __future__ import annotations

import struct

import pytest
from framer_util import cuts_every, feed_until_error

import asyncreader as ar
from asyncreader._io.crc import masked_crc32c
from asyncreader._records.tfrecord import TFRecordFramer, frame_record

CHUNKINGS = [None, 1, 7, 12, 16, 100, 4096]


def _frame(payloads: list[bytes]) -> tuple[bytes, list[int]]:
    parts = [b"".join(frame_record(p)) for p in payloads]
    offsets, at = [], 0
    for part in parts:
        offsets.append(at)
        at += len(part)
    return b"".join(parts), offsets


def _corrupt_length(data: bytes, at: int, new_length: int) -> bytes:
    """Replace the length of the header at ``at``, keeping its (now wrong) CRC."""
    return data[:at] + struct.pack("<Q", new_length) + data[at + 8 :]


def _assert_header_error(
    data: bytes, at: int, payloads: list[bytes], index: int, chunk: int | None
) -> None:
    _keys, values, error = feed_until_error(TFRecordFramer(), data, cuts_every(chunk, data))
    assert isinstance(error, ar.DataLossError), error
    assert error.message == f"corrupted record at {at}"
    assert error.offset == at
    assert error.record == at
    assert values == payloads[:index]


# Lengths 5 and 7 alternate, so both headers are in the cache before the damaged one.
MIXED = [b"%05d" % i if i % 2 == 0 else b"%07d" % i for i in range(40)]


@pytest.mark.parametrize("chunk", CHUNKINGS)
@pytest.mark.parametrize(
    "new_length",
    [
        7,  # the other cached length: a cache keyed on the CRC alone would accept it
        5 ^ 0x10,  # a flipped low bit
        5 | 1 << 32,  # a flipped high bit: equal in the low 32 bits
        5 | 1 << 56,  # equal in all but the last byte
        0,
    ],
)
def test_a_corrupted_length_whose_crc_is_cached_is_detected(
    chunk: int | None, new_length: int
) -> None:
    data, offsets = _frame(MIXED)
    index = 20  # a length-5 record; both lengths were verified many times before it
    assert len(MIXED[index]) == 5
    bad = _corrupt_length(data, offsets[index], new_length)
    _assert_header_error(bad, offsets[index], MIXED, index, chunk)


@pytest.mark.parametrize("chunk", CHUNKINGS)
def test_a_cached_crc_with_a_length_that_frames_a_valid_record_is_still_refused(
    chunk: int | None,
) -> None:
    # The header says 9 bytes under the CRC of length 5, and 9 bytes with a good footer
    # follow: a cache keyed on the CRC alone would deliver them as a record, silently.
    data, _ = _frame(MIXED[:20])
    crc_of_5 = struct.unpack_from("<I", data, 8)[0]
    forged = struct.pack("<QI", 9, crc_of_5) + b"".join(frame_record(b"x" * 9))[12:]
    tail, _ = _frame([b"after"])
    _assert_header_error(data + forged + tail, len(data), MIXED, 20, chunk)


@pytest.mark.parametrize("chunk", CHUNKINGS)
def test_a_corrupted_length_right_after_a_record_with_the_same_crc_is_detected(
    chunk: int | None,
) -> None:
    # The previous header is (5, crc5): the "same as the last header" shortcut must
    # compare the length too, not only the CRC.
    payloads = [b"%05d" % i for i in range(30)]
    data, offsets = _frame(payloads)
    for index in (1, 5, 29):
        bad = _corrupt_length(data, offsets[index], 6)
        _assert_header_error(bad, offsets[index], payloads, index, chunk)


@pytest.mark.parametrize("chunk", [None, 4096, 65536])
@pytest.mark.parametrize("new_length", [99, 101, 100 | 1 << 40])
def test_a_corrupted_length_inside_a_run_framed_as_a_block_is_detected(
    chunk: int | None, new_length: int
) -> None:
    # Hundreds of identical headers are framed as numpy blocks, all 12 bytes compared.
    payloads = [b"%0100d" % i for i in range(600)]
    data, offsets = _frame(payloads)
    for index in (40, 333, 599):
        bad = _corrupt_length(data, offsets[index], new_length)
        _assert_header_error(bad, offsets[index], payloads, index, chunk)


def test_the_checksum_itself_agrees_with_the_header_format() -> None:
    # The forged headers above are wrong only because crc(length) differs: check that.
    for length in (5, 7, 9, 6, 99, 101):
        raw = struct.pack("<Q", length)
        header = b"".join(frame_record(b"\0" * length))[:12]
        assert header == raw + struct.pack("<I", masked_crc32c(raw))
    assert masked_crc32c(struct.pack("<Q", 5)) != masked_crc32c(struct.pack("<Q", 9))
