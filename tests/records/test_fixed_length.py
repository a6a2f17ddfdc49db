"""FixedLengthFramer: header, footer, hop and encoding rules (SPEC §3.7), chunk by chunk."""

from __future__ import annotations

import gzip
import logging
import random
import zlib
from typing import Any

import pytest
from framer_util import feed, fixed_length_reference

import asyncreader as ar
from asyncreader._records.fixed_length import FixedLengthFramer

DATA = bytes(range(40))


def test_plain_records_and_ignored_tail() -> None:
    keys, values = feed(FixedLengthFramer(6), DATA, [])
    assert values == [DATA[i : i + 6] for i in range(0, 36, 6)]
    assert keys == list(range(6))


def test_header_and_footer() -> None:
    _keys, values = feed(FixedLengthFramer(4, header_bytes=5, footer_bytes=3), DATA, [])
    assert values == fixed_length_reference(DATA, 4, 5, 3)
    # The footer is only a reserve: 5 + 8*4 + 3 = 40 bytes fit exactly.
    assert len(values) == 8


def test_overlapping_records_with_small_hop() -> None:
    assert feed(FixedLengthFramer(4, hop_bytes=1), DATA[:8], [])[1] == [
        DATA[0:4],
        DATA[1:5],
        DATA[2:6],
        DATA[3:7],
        DATA[4:8],
    ]


def test_gaps_with_large_hop() -> None:
    assert feed(FixedLengthFramer(2, 1, 0, 5), DATA[:14], [])[1] == [
        DATA[1:3],
        DATA[6:8],
        DATA[11:13],
    ]


def test_records_with_null_bytes_keep_them() -> None:
    data = b"\x00\x00a\x00" * 5
    assert feed(FixedLengthFramer(4), data, [])[1] == [b"\x00\x00a\x00"] * 5


def test_file_equal_to_header_yields_nothing() -> None:
    assert feed(FixedLengthFramer(4, header_bytes=5), DATA[:5], []) == ([], [])


def test_file_shorter_than_header_is_out_of_range(caplog: pytest.LogCaptureFixture) -> None:
    framer = FixedLengthFramer(4, header_bytes=10, work_item="short.bin")
    framer.decode(DATA[:3])
    with (
        caplog.at_level(logging.WARNING, logger="asyncreader"),
        pytest.raises(ar.OutOfRangeError, match="shorter than header_bytes") as info,
    ):
        framer.finish()
    assert info.value.work_item == "short.bin"
    assert "short.bin" in caplog.text


@pytest.mark.parametrize("name", ["record_bytes", "header_bytes", "footer_bytes", "hop_bytes"])
def test_negative_sizes_are_rejected_with_tf_message(name: str) -> None:
    args: dict[str, Any] = {"record_bytes": 4, name: -2}
    with pytest.raises(ar.InvalidArgumentError, match=f"^{name} must be >= 0 not -2$"):
        FixedLengthFramer(**args)


def test_zero_record_bytes_is_rejected() -> None:
    with pytest.raises(ar.InvalidArgumentError, match=r"^record_bytes must be > 0 not 0$"):
        FixedLengthFramer(0)


def test_non_integer_and_bad_start_index() -> None:
    with pytest.raises(ar.InvalidArgumentError, match="integer"):
        FixedLengthFramer(4.5)  # type: ignore[arg-type]
    with pytest.raises(ar.InvalidArgumentError, match="start_index"):
        FixedLengthFramer(4, start_index=-1)


def test_every_split_position_matches_reference() -> None:
    for args in ((4, 5, 3, 0), (4, 5, 3, 2), (3, 2, 4, 7), (1, 0, 0, 0)):
        expected = fixed_length_reference(DATA, *args)
        for cut in range(len(DATA) + 1):
            keys, values = feed(FixedLengthFramer(*args), DATA, [cut])
            assert values == expected
            assert keys == list(range(len(expected)))


def test_random_shapes_and_splits_match_reference() -> None:
    rng = random.Random(11)
    for _ in range(400):
        data = rng.randbytes(rng.randint(0, 120))
        args = (rng.randint(1, 9), rng.randint(0, 9), rng.randint(0, 9), rng.randint(0, 11))
        if len(data) < args[1]:
            continue
        cuts = sorted(rng.sample(range(len(data) + 1), min(len(data), 6)))
        assert feed(FixedLengthFramer(*args), data, cuts)[1] == fixed_length_reference(data, *args)


@pytest.mark.parametrize("encoding", ["ZLIB", "GZIP"])
def test_compressed_encodings(encoding: str) -> None:
    packed = zlib.compress(DATA) if encoding == "ZLIB" else gzip.compress(DATA)
    framer = FixedLengthFramer(4, 5, 3, 2, encoding, max_output=7)
    assert feed(framer, packed, [3])[1] == fixed_length_reference(DATA, 4, 5, 3, 2)


def test_unknown_encoding_is_refused() -> None:
    with pytest.raises(ar.InvalidArgumentError, match=r"encoding must be .* not 'BROTLI'"):
        FixedLengthFramer(8, encoding="BROTLI")
    packed = zlib.compress(DATA)
    assert feed(FixedLengthFramer(8, encoding="zlib"), packed, [])[1] == fixed_length_reference(
        DATA, 8
    )


def test_resume_from_position() -> None:
    framer = FixedLengthFramer(4, 5, 3, 6)
    keys, _ = framer.decode(DATA[:20])
    assert keys == [0, 1]
    assert (framer.next_key, framer.position) == (2, 17)
    resumed = FixedLengthFramer(4, 5, 3, 6, start_index=2)
    keys, values = feed(resumed, DATA[17:], [4])
    assert keys == [2, 3, 4]
    assert values == fixed_length_reference(DATA, 4, 5, 3, 6)[2:]


def test_resume_compressed_from_the_start_of_the_file() -> None:
    resumed = FixedLengthFramer(4, 5, 3, 0, "GZIP", start_index=3, max_output=5)
    keys, values = feed(resumed, gzip.compress(DATA), [])
    assert keys == [3, 4, 5, 6, 7]
    assert values == fixed_length_reference(DATA, 4, 5, 3)[3:]


def test_statistics_and_repr() -> None:
    framer = FixedLengthFramer(4, header_bytes=2, footer_bytes=1)
    framer.decode(DATA[:9])
    stats = framer.statistics()
    assert (stats.records, stats.position, stats.buffered) == (1, 6, 3)
    assert repr(framer) == (
        "<FixedLengthFramer record_bytes=4 header_bytes=2 footer_bytes=1 hop_bytes=4 "
        "next_index=1 position=6 buffered=3>"
    )


@pytest.mark.parametrize(("r", "h", "f", "p"), [(7, 3, 2, 0), (7, 0, 5, 3), (4, 1, 0, 9)])
@pytest.mark.parametrize("chunk", [1, 2, 3, 6, 8, 11, 64])
def test_records_straddling_chunks_of_any_size(r: int, h: int, f: int, p: int, chunk: int) -> None:
    # Chunks smaller than, equal to and larger than a record; only straddling records are
    # joined, the rest of each chunk is framed in place.
    data = bytes(random.Random(chunk * 100 + r).randrange(256) for _ in range(97))
    cuts = list(range(chunk, len(data), chunk))
    keys, values = feed(FixedLengthFramer(r, h, f, p), data, cuts)
    assert values == fixed_length_reference(data, r, h, f, p)
    assert keys == list(range(len(values)))
