"""TFRecordFramer: SPEC §4 framing, checksums, errors and chunk-boundary independence."""

from __future__ import annotations

import gzip
import random
import struct
import zlib

import pytest
from framer_util import feed

import asyncreader as ar
from asyncreader._io.crc import masked_crc32c
from asyncreader._records.tfrecord import TFRecordFramer, frame_record


def encode(payloads: list[bytes]) -> bytes:
    return b"".join(b"".join(frame_record(p)) for p in payloads)


def offsets(payloads: list[bytes]) -> list[int]:
    out, at = [], 0
    for p in payloads:
        out.append(at)
        at += len(p) + 16
    return out


PAYLOADS = [b"", b"a", b"hello", b"x" * 100, b"y" * 100, bytes(range(256)) * 4, b""]


def test_frame_record_matches_spec_layout() -> None:
    header, payload, footer = frame_record(b"abc")
    assert header[:8] == struct.pack("<Q", 3)
    assert struct.unpack("<I", header[8:])[0] == masked_crc32c(header[:8])
    assert payload == b"abc"
    assert struct.unpack("<I", footer)[0] == masked_crc32c(b"abc")


def test_empty_payload_footer_is_mask_of_zero() -> None:
    assert frame_record(b"")[2] == struct.pack("<I", 0xA282EAD8)


def test_decodes_records_with_header_offsets_as_keys() -> None:
    keys, values = feed(TFRecordFramer(), encode(PAYLOADS), [])
    assert values == PAYLOADS
    assert keys == offsets(PAYLOADS)


def test_empty_input_gives_no_records() -> None:
    framer = TFRecordFramer()
    assert framer.decode(b"") == ([], [])
    assert framer.finish() == ([], [])


def test_every_single_split_gives_the_same_records() -> None:
    data = encode(PAYLOADS)
    for cut in range(len(data) + 1):
        assert feed(TFRecordFramer(), data, [cut]) == (offsets(PAYLOADS), PAYLOADS)


def test_byte_by_byte_feeding() -> None:
    data = encode(PAYLOADS)
    assert feed(TFRecordFramer(), data, list(range(len(data)))) == (offsets(PAYLOADS), PAYLOADS)


def test_random_splits_and_memoryview_chunks() -> None:
    rng = random.Random(3)
    payloads = [rng.randbytes(rng.choice([0, 3, 100, 100, 100, 700])) for _ in range(300)]
    data = encode(payloads)
    for _ in range(20):
        cuts = sorted(rng.sample(range(len(data)), 25))
        framer = TFRecordFramer()
        keys: list[int] = []
        values: list[bytes] = []
        prev = 0
        for cut in [*cuts, len(data)]:
            k, v = framer.decode(memoryview(data)[prev:cut])
            keys += k
            values += v
            prev = cut
        assert framer.finish() == ([], [])
        assert (keys, values) == (offsets(payloads), payloads)


def test_uniform_runs_use_the_block_path_and_stay_exact() -> None:
    payloads = [bytes([i % 251]) * 100 for i in range(500)] + [b"z" * 7] + [b"q" * 100] * 50
    data = encode(payloads)
    assert feed(TFRecordFramer(), data, [len(data) // 3]) == (offsets(payloads), payloads)


def test_partial_header_at_end_is_a_silent_end_of_file() -> None:
    data = encode([b"abc"])
    for extra in range(1, 12):
        _keys, values = feed(TFRecordFramer(), data + b"\x01" * extra, [])
        assert values == [b"abc"]


def test_truncated_payload_raises_truncated_record_at_offset() -> None:
    data = encode([b"abc", b"defgh"])
    framer = TFRecordFramer(work_item="f.tfrecord")
    assert framer.decode(data[:-2]) == ([0], [b"abc"])
    with pytest.raises(ar.DataLossError, match=r"^truncated record at 19 ") as info:
        framer.finish()
    assert info.value.offset == 19
    assert info.value.record == 19
    assert info.value.work_item == "f.tfrecord"
    assert str(info.value) == "truncated record at 19 (work item 'f.tfrecord', record 19)"


def test_header_only_is_truncated() -> None:
    data = encode([b"abc"])[:12]
    with pytest.raises(ar.DataLossError, match=r"^truncated record at 0( |$)"):
        feed(TFRecordFramer(), data, [])


def test_bad_header_crc_is_corrupted_record_at_offset() -> None:
    data = bytearray(encode([b"abc", b"de"]))
    data[19 + 8] ^= 0x01
    framer = TFRecordFramer()
    assert framer.decode(bytes(data)) == ([0], [b"abc"])
    with pytest.raises(ar.DataLossError, match=r"^corrupted record at 19( |$)") as info:
        framer.decode(b"")
    assert info.value.offset == 19


def test_bad_header_crc_reported_before_payload_arrives() -> None:
    data = bytearray(encode([b"abcdef"]))
    data[0] ^= 0x10
    framer = TFRecordFramer()
    with pytest.raises(ar.DataLossError, match=r"^corrupted record at 0( |$)"):
        framer.decode(bytes(data[:12]))


def test_bad_payload_crc_is_corrupted_record_at_offset_plus_12() -> None:
    data = bytearray(encode([b"abc", b"defg"]))
    data[19 + 12] ^= 0xFF
    # Fed alone, the damaged record starts at offset 0.
    with pytest.raises(ar.DataLossError, match=r"^corrupted record at 12( |$)") as info:
        feed(TFRecordFramer(), bytes(data[19:]), [])
    framer = TFRecordFramer()
    _keys, values = framer.decode(bytes(data))
    assert values == [b"abc"]
    with pytest.raises(ar.DataLossError, match="corrupted record at 31") as info:
        framer.finish()
    assert info.value.offset == 31
    assert info.value.record == 19


def test_bad_footer_in_uniform_block_keeps_records_before_it() -> None:
    payloads = [b"r" * 100] * 60
    data = bytearray(encode(payloads))
    bad = 40 * 116 + 12 + 100  # footer of record 40
    data[bad] ^= 0x01
    framer = TFRecordFramer()
    _keys, values = framer.decode(bytes(data))
    assert len(values) == 40
    assert framer.position == 40 * 116
    with pytest.raises(ar.DataLossError, match=f"^corrupted record at {40 * 116 + 12}( |$)"):
        framer.decode(b"")


def test_verify_crc_false_skips_checks() -> None:
    data = bytearray(encode([b"abc"]))
    data[-1] ^= 0xFF
    data[9] ^= 0xFF
    assert feed(TFRecordFramer(verify_crc=False), bytes(data), []) == ([0], [b"abc"])


def test_record_size_too_large() -> None:
    length = struct.pack("<Q", 2**64 - 5)
    data = length + struct.pack("<I", masked_crc32c(length)) + b"\x00" * 8
    with pytest.raises(ar.DataLossError, match=r"^record size too large") as info:
        feed(TFRecordFramer(), data, [])
    assert info.value.offset == 0


def test_huge_valid_length_is_truncated_at_finish() -> None:
    length = struct.pack("<Q", 2**40)
    data = length + struct.pack("<I", masked_crc32c(length)) + b"\x00" * 8
    with pytest.raises(ar.DataLossError, match=r"^truncated record at 0( |$)"):
        feed(TFRecordFramer(max_record_bytes=2**41), data, [])
    # Over the default max_record_bytes: refused as soon as the header is read.
    with pytest.raises(ar.ResourceExhaustedError, match=r"^record at 0 is 1099511627776 bytes"):
        feed(TFRecordFramer(), data, [])


def test_error_is_repeated_by_every_later_call() -> None:
    data = bytearray(encode([b"abc"]))
    data[-1] ^= 0xFF
    framer = TFRecordFramer()
    with pytest.raises(ar.DataLossError) as first:
        framer.decode(bytes(data))
    assert framer.error is first.value
    with pytest.raises(ar.DataLossError) as again:
        framer.decode(encode([b"ok"]))
    assert again.value is first.value
    with pytest.raises(ar.DataLossError) as again:
        framer.finish()
    assert again.value is first.value
    assert framer.statistics().failed


def test_position_and_restart_from_saved_offset() -> None:
    payloads = [b"one", b"two" * 10, b"three" * 50, b"four"]
    data = encode(payloads)
    framer = TFRecordFramer()
    framer.decode(data[:40])
    saved = framer.position
    assert saved == framer.next_key == 19
    resumed = TFRecordFramer(start_offset=saved)
    keys, values = feed(resumed, data[saved:], [7])
    assert values == payloads[1:]
    assert keys == offsets(payloads)[1:]


@pytest.mark.parametrize("kind", ["ZLIB", "GZIP"])
def test_compressed_streams(kind: str) -> None:
    payloads = [bytes([i]) * (i * 7) for i in range(100)]
    raw = encode(payloads)
    data = zlib.compress(raw) if kind == "ZLIB" else gzip.compress(raw)
    for cuts in ([], [1], [len(data) // 2], list(range(0, len(data), 97))):
        framer = TFRecordFramer(compression_type=kind, max_output=300)
        assert feed(framer, data, cuts) == (offsets(payloads), payloads)


@pytest.mark.parametrize("kind", ["ZLIB", "GZIP"])
def test_compressed_restart_skips_decompressed_prefix(kind: str) -> None:
    payloads = [b"a" * 50, b"b" * 60, b"c" * 70]
    raw = encode(payloads)
    data = zlib.compress(raw) if kind == "ZLIB" else gzip.compress(raw)
    resumed = TFRecordFramer(compression_type=kind, start_offset=66, max_output=10)
    assert feed(resumed, data, [5]) == ([66, 142], payloads[1:])


def test_concatenated_gzip_members() -> None:
    first, second = [b"one", b"two"], [b"three"]
    data = gzip.compress(encode(first)) + gzip.compress(encode(second))
    _keys, values = feed(TFRecordFramer(compression_type="GZIP"), data, [3])
    assert values == first + second


def test_corrupt_compressed_stream_names_inflate() -> None:
    data = bytearray(zlib.compress(encode([b"x" * 1000] * 3)))
    data[2] ^= 0xFF
    framer = TFRecordFramer(compression_type="ZLIB", work_item="f.zz")
    with pytest.raises(ar.DataLossError, match=r"^inflate\(\) failed with error -3: ") as info:
        feed(framer, bytes(data), [])
    assert info.value.work_item == "f.zz"
    assert info.value.offset == 0


def test_truncated_compressed_stream_at_end() -> None:
    data = zlib.compress(encode([b"x" * 1000, b"y"]))
    with pytest.raises(ar.DataLossError, match="truncated compressed stream"):
        feed(TFRecordFramer(compression_type="ZLIB"), data[:-6], [])


def test_empty_compressed_file_is_empty() -> None:
    assert feed(TFRecordFramer(compression_type="GZIP"), b"", []) == ([], [])


def test_unknown_compression_string_is_refused() -> None:
    with pytest.raises(ar.InvalidArgumentError, match=r"compression_type must be .* 'SNAPPY'"):
        TFRecordFramer(compression_type="SNAPPY")
    data = gzip.compress(encode([b"abc"]))
    assert feed(TFRecordFramer(compression_type="gzip"), data, []) == ([0], [b"abc"])


def test_negative_start_offset_is_rejected() -> None:
    with pytest.raises(ar.InvalidArgumentError, match="start_offset must be >= 0"):
        TFRecordFramer(start_offset=-1)


def test_statistics_and_repr() -> None:
    framer = TFRecordFramer()
    data = encode([b"abc", b"defg"])
    framer.decode(data[:25])
    stats = framer.statistics()
    assert stats.records == 1
    assert stats.position == 19
    assert stats.buffered == 6
    assert stats.input_bytes == 25
    assert not stats.failed
    assert repr(framer) == ("<TFRecordFramer position=19 records=1 buffered=6 verify_crc=True ok>")
