"""Compression types and the bounded streaming decompressor."""

from __future__ import annotations

import gzip
import zlib

import pytest

import asyncreader as ar
from asyncreader._records.compression import (
    Decompressor,
    TFRecordCompressionType,
    compression_name,
    parse_compression_type,
    wbits_for,
)


def inflate_all(d: Decompressor, chunks: list[bytes]) -> bytes:
    out = []
    for chunk in chunks:
        out.append(d.decompress(chunk))
        while d.pending:
            out.append(d.decompress(b""))
    d.finish()
    return b"".join(out)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, TFRecordCompressionType.NONE),
        ("", TFRecordCompressionType.NONE),
        ("zlib", TFRecordCompressionType.ZLIB),
        ("GZIP", TFRecordCompressionType.GZIP),
        (1, TFRecordCompressionType.ZLIB),
        (TFRecordCompressionType.GZIP, TFRecordCompressionType.GZIP),
    ],
)
def test_parse_compression_type(value: str | int | None, expected: TFRecordCompressionType) -> None:
    assert parse_compression_type(value) is expected


@pytest.mark.parametrize("value", ["SNAPPY", 7, True, 1.5])
def test_unknown_compression_type_is_rejected(value: object) -> None:
    with pytest.raises(ar.InvalidArgumentError, match="compression_type must be"):
        parse_compression_type(value)  # type: ignore[arg-type]


def test_the_error_names_the_argument() -> None:
    with pytest.raises(ar.InvalidArgumentError, match=r"^encoding must be .* not 'BZIP2'"):
        parse_compression_type("BZIP2", name="encoding")


def test_names_and_wbits() -> None:
    assert compression_name(TFRecordCompressionType.NONE) == ""
    assert compression_name(TFRecordCompressionType.GZIP) == "GZIP"
    assert wbits_for(TFRecordCompressionType.ZLIB) == 15
    assert wbits_for(TFRecordCompressionType.GZIP) == 31
    with pytest.raises(ar.InvalidArgumentError):
        wbits_for(TFRecordCompressionType.NONE)


def test_public_constant_holder_is_exported() -> None:
    assert int(ar.TFRecordCompressionType.ZLIB) == 1


def test_output_is_bounded_per_call() -> None:
    bomb = zlib.compress(b"\x00" * (8 << 20), 9)
    d = Decompressor(TFRecordCompressionType.ZLIB, max_output=1 << 16)
    first = d.decompress(bomb)
    assert len(first) == 1 << 16
    was_pending = d.pending
    assert was_pending
    total = len(first)
    while d.pending:
        piece = d.decompress(b"")
        assert len(piece) <= 1 << 16
        total += len(piece)
    d.finish()
    assert total == 8 << 20
    assert d.output_bytes == total
    assert d.input_bytes == len(bomb)


def test_concatenated_gzip_members_and_zlib_streams() -> None:
    data = gzip.compress(b"abc") + gzip.compress(b"def")
    assert inflate_all(Decompressor(TFRecordCompressionType.GZIP, max_output=2), [data]) == (
        b"abcdef"
    )
    data = zlib.compress(b"abc") + zlib.compress(b"def")
    assert inflate_all(Decompressor(TFRecordCompressionType.ZLIB), [data[:5], data[5:]]) == (
        b"abcdef"
    )


def test_byte_by_byte_input() -> None:
    data = gzip.compress(b"hello world" * 50)
    chunks = [data[i : i + 1] for i in range(len(data))]
    assert inflate_all(Decompressor(TFRecordCompressionType.GZIP), chunks) == b"hello world" * 50


def test_corrupt_stream_message() -> None:
    with pytest.raises(ar.DataLossError, match=r"^inflate\(\) failed with error -3: incorrect"):
        Decompressor(TFRecordCompressionType.ZLIB).decompress(b"not zlib at all")


def test_gzip_data_is_not_zlib() -> None:
    with pytest.raises(ar.DataLossError, match="inflate"):
        Decompressor(TFRecordCompressionType.ZLIB).decompress(gzip.compress(b"x"))


def test_trailing_garbage_after_a_member_is_an_error() -> None:
    d = Decompressor(TFRecordCompressionType.GZIP)
    with pytest.raises(ar.DataLossError, match="inflate"):
        inflate_all(d, [gzip.compress(b"x") + b"garbage!"])


def test_truncated_stream_at_finish() -> None:
    data = zlib.compress(b"x" * 1000)
    d = Decompressor(TFRecordCompressionType.ZLIB)
    d.decompress(data[:-3])
    with pytest.raises(ar.DataLossError, match=r"^truncated compressed stream after"):
        d.finish()


def test_empty_input_is_an_empty_stream() -> None:
    d = Decompressor(TFRecordCompressionType.GZIP)
    assert d.decompress(b"") == b""
    d.finish()


def test_bad_arguments() -> None:
    with pytest.raises(ar.InvalidArgumentError, match="max_output"):
        Decompressor(TFRecordCompressionType.ZLIB, max_output=0)
    with pytest.raises(ar.InvalidArgumentError):
        Decompressor(TFRecordCompressionType.NONE)


def test_repr() -> None:
    d = Decompressor(TFRecordCompressionType.ZLIB)
    d.decompress(zlib.compress(b"abc"))
    assert repr(d).startswith("<Decompressor wbits=15 in=11 out=3 pending=False>")
