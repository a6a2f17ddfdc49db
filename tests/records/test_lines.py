"""LineFramer: TextLineReader's splitting rules (SPEC §3.7) fed in arbitrary chunks."""

from __future__ import annotations

import random

import pytest
from framer_util import feed

import asyncreader as ar
from asyncreader._records.lines import LineFramer


def lines(data: bytes, skip_header_lines: int = 0) -> tuple[list[int], list[bytes]]:
    return feed(LineFramer(skip_header_lines=skip_header_lines), data, [])


def test_splits_on_newline_with_one_based_keys() -> None:
    assert lines(b"a\nbb\nccc") == ([1, 2, 3], [b"a", b"bb", b"ccc"])


def test_final_newline_adds_no_empty_line() -> None:
    assert lines(b"a\nb\n") == ([1, 2], [b"a", b"b"])


def test_empty_middle_lines_are_records() -> None:
    assert lines(b"a\n\n\nb") == ([1, 2, 3, 4], [b"a", b"", b"", b"b"])


def test_crlf_reads_like_lf_and_other_cr_is_kept() -> None:
    assert lines(b"a\r\nb\rc\r\n\r\n") == ([1, 2, 3], [b"a", b"b\rc", b""])


def test_only_one_cr_before_newline_is_removed() -> None:
    assert lines(b"a\r\r\n") == ([1], [b"a\r"])


def test_final_cr_ending_the_file_is_removed() -> None:
    assert lines(b"one\r\ntwo\r") == ([1, 2], [b"one", b"two"])


def test_final_lone_cr_line_is_dropped() -> None:
    # TensorFlow's quirk: a last unterminated line of only "\r" is no record.
    assert lines(b"one\ntwo\n\r") == ([1, 2], [b"one", b"two"])


def test_final_double_cr_line_keeps_one() -> None:
    assert lines(b"one\n\r\r") == ([1, 2], [b"one", b"\r"])


def test_empty_file_and_lone_newline() -> None:
    assert lines(b"") == ([], [])
    assert lines(b"\n") == ([1], [b""])


def test_skip_header_lines_counts_skipped_lines_in_keys() -> None:
    assert lines(b"h\na\nb", skip_header_lines=1) == ([2, 3], [b"a", b"b"])
    assert lines(b"h1\nh2\na\n", skip_header_lines=2) == ([3], [b"a"])


def test_skipping_past_the_end_is_not_an_error() -> None:
    assert lines(b"h1\nh2", skip_header_lines=5) == ([], [])


def test_negative_skip_header_lines_message() -> None:
    with pytest.raises(ar.InvalidArgumentError, match=r"^skip_header_lines must be >= 0 not -1$"):
        LineFramer(skip_header_lines=-1)


def test_bad_resume_arguments() -> None:
    with pytest.raises(ar.InvalidArgumentError, match="first_line"):
        LineFramer(first_line=0)
    with pytest.raises(ar.InvalidArgumentError, match="start_offset"):
        LineFramer(start_offset=-3)


def test_every_split_position_gives_the_same_lines() -> None:
    data = b"first\r\nsecond\r\n\r\nfourth \r inside\r\nlast\r"
    expected = lines(data)
    for cut in range(len(data) + 1):
        assert feed(LineFramer(), data, [cut]) == expected
    assert feed(LineFramer(), data, list(range(len(data)))) == expected


def test_random_splits_match_whole_input() -> None:
    rng = random.Random(5)
    alphabet = [b"a", b"b", b"\r", b"\n", b"\r\n"]
    for _ in range(200):
        data = b"".join(rng.choice(alphabet) for _ in range(rng.randint(0, 40)))
        cuts = sorted(rng.sample(range(len(data) + 1), min(len(data), 5)))
        assert feed(LineFramer(skip_header_lines=1), data, cuts) == lines(data, skip_header_lines=1)


def test_position_and_resume_mid_file() -> None:
    data = b"h\nalpha\nbeta\r\ngamma"
    framer = LineFramer(skip_header_lines=1)
    keys, values = framer.decode(data[:9])
    assert (keys, values) == ([2], [b"alpha"])
    assert framer.position == 8
    assert framer.next_key == 3
    resumed = LineFramer(skip_header_lines=1, first_line=framer.next_key, start_offset=8)
    assert feed(resumed, data[8:], []) == ([3, 4], [b"beta", b"gamma"])
    assert resumed.position == len(data)


def test_statistics_and_repr() -> None:
    framer = LineFramer()
    framer.decode(b"ab\ncd")
    stats = framer.statistics()
    assert (stats.records, stats.position, stats.buffered, stats.failed) == (1, 3, 2, False)
    assert repr(framer) == "<LineFramer next_line=2 position=3 records=1 buffered=2>"


def test_memoryview_and_bytearray_chunks() -> None:
    framer = LineFramer()
    assert framer.decode(memoryview(b"a\nb")) == ([1], [b"a"])
    assert framer.decode(bytearray(b"c\n")) == ([2], [b"bc"])


@pytest.mark.parametrize(
    ("data", "cuts", "expected"),
    [
        (b"a\r\nb\r\nc", [2], [b"a", b"b", b"c"]),  # CR ends one chunk, LF starts the next
        (b"a\r\nbb\nc", [2], [b"a", b"bb", b"c"]),  # ... and the next chunk has no CR
        (b"xyz\r\nb\n", [1, 2, 3, 4], [b"xyz", b"b"]),  # the CR arrives in a carried piece
        (b"a\r\r\nb", [2, 3], [b"a\r", b"b"]),  # only the CR just before LF goes
        (b"a\rb\nc\r", [2], [b"a\rb", b"c"]),  # a CR inside a line stays; a final CR goes
    ],
)
def test_crlf_split_across_chunks(data: bytes, cuts: list[int], expected: list[bytes]) -> None:
    assert feed(LineFramer(), data, cuts) == (list(range(1, len(expected) + 1)), expected)
