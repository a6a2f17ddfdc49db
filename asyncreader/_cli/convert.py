"""``asyncreader convert``: write TFRecord files from TFRecord, text, CSV or fixed-length input.

* TFRecord input is copied record for record (every checksum verified on the way): to
  re-compress (``--compression``) or re-shard (``--shards``).
* Text input becomes one ``tf.train.Example`` per line, the line as a one-value bytes
  feature (``--text-feature``, default ``text``).
* CSV input (``.csv``/``.tsv`` or ``--input-format csv``) becomes one ``tf.train.Example``
  per row: the header row names the features; a column whose values in the first
  1,000 rows all parse as integers is an ``int64`` feature, else as numbers a ``float``
  feature, else ``bytes``. Rows are decoded a block at a time by
  :func:`~asyncreader.decode_csv`.
* Fixed-length input (``--record-bytes``) is copied one record per TFRecord.

Records go to the shards in turn (record ``i`` to shard ``i % N``), each shard written by a
:class:`~asyncreader.TFRecordWriter` to a temporary name and renamed when complete, so an
error never leaves a half-written output behind. Output files are named ``OUTPUT`` for one
shard and ``OUTPUT-00000-of-00004`` (TensorFlow's convention) for several.
"""

from __future__ import annotations

import contextlib
import os
from typing import TYPE_CHECKING, Final

import numpy as np

from .._decoders import wire
from .._decoders.csv import decode_csv
from .._errors import InvalidArgumentError
from .._io.filesystem import is_url
from .._readers.row_example import RowEncoder
from .._records.writer import TFRecordWriter
from .progress import make_meter
from .source import COMPRESSION_NAMES, CommandError, FixedLayout, chunks, open_source

if TYPE_CHECKING:
    import argparse
    from collections.abc import Callable, Sequence

__all__ = ["output_names", "run"]

#: Rows a CSV column's kind is inferred from.
_SAMPLE_ROWS: Final = 1000
_CSV_SUFFIXES: Final = {".csv": ",", ".tsv": "\t"}
_KIND_DTYPES: Final = {wire.INT64: np.int64, wire.FLOAT: np.float32, wire.BYTES: object}
_KIND_NAMES: Final = {wire.INT64: "int64", wire.FLOAT: "float", wire.BYTES: "bytes"}


def output_names(output: str, shards: int) -> list[str]:
    """The files ``convert`` writes: ``output`` itself, or ``output-00000-of-0000N``."""
    if shards == 1:
        return [output]
    return [f"{output}-{i:05d}-of-{shards:05d}" for i in range(shards)]


def _bytes_example(key: bytes) -> Callable[[bytes], bytes]:
    prefix = b"\x0a" + wire.encode_varint(len(key)) + key + b"\x12"

    def encode(value: bytes) -> bytes:
        values = b"\x0a" + wire.encode_varint(len(value)) + value
        feature = b"\x0a" + wire.encode_varint(len(values)) + values
        entry = prefix + wire.encode_varint(len(feature)) + feature
        body = b"\x0a" + wire.encode_varint(len(entry)) + entry
        return b"\x0a" + wire.encode_varint(len(body)) + body

    return encode


class _Csv:
    """The columns of a CSV input: names from the header row, kinds from the first rows."""

    def __init__(self, name: str, header: bytes, delimiter: str) -> None:
        self.delimiter = delimiter
        try:
            names = decode_csv(
                [header],
                [np.dtype(object)] * (header.count(delimiter.encode()) + 1),
                field_delim=delimiter,
            )
        except InvalidArgumentError as exc:
            raise CommandError(f"{name}: line 1 is not a CSV header row: {exc}") from exc
        self.keys = [bytes(column[0]) for column in names]
        if len(set(self.keys)) != len(self.keys) or not all(self.keys):
            raise CommandError(
                f"{name}: the header row must name every column once, not {header!r:.200}"
            )
        self.kinds: list[int] | None = None
        self.sampled = 0

    def infer(self, lines: list[bytes]) -> None:
        """Choose each column's kind from ``lines``, the first rows."""
        kinds = []
        for i in range(len(self.keys)):
            for kind in (wire.INT64, wire.FLOAT):
                try:
                    decode_csv(
                        lines,
                        [np.dtype(_KIND_DTYPES[kind])],
                        field_delim=self.delimiter,
                        select_cols=[i],
                    )
                except InvalidArgumentError:
                    continue
                kinds.append(kind)
                break
            else:
                kinds.append(wire.BYTES)
        self.kinds = kinds
        self.sampled = len(lines)

    def encode(self, name: str, lines: list[bytes], keys: np.ndarray) -> list[bytes]:
        """The rows ``lines`` (line numbers ``keys``) as serialized Examples."""
        if self.kinds is None:
            self.infer(lines[:_SAMPLE_ROWS])
        assert self.kinds is not None
        try:
            columns = decode_csv(
                lines,
                [np.dtype(_KIND_DTYPES[kind]) for kind in self.kinds],
                field_delim=self.delimiter,
            )
        except InvalidArgumentError as exc:
            line = int(keys[exc.record]) if isinstance(exc.record, int) else None
            where = f"line {line}: " if line is not None else ""
            types = ", ".join(
                f"{key.decode('utf-8', 'replace')}={_KIND_NAMES[kind]}"
                for key, kind in zip(self.keys, self.kinds, strict=True)
            )
            raise CommandError(
                f"{name}: {where}{exc.message} (column types were inferred from the first "
                f"{self.sampled:,} rows: {types})"
            ) from exc
        encoder = RowEncoder(self.keys)
        by_name = dict(zip(self.keys, columns, strict=True))
        return encoder.encode_columns([by_name[key].tolist() for key in encoder.columns])


def _input_format(name: str, asked: str) -> str:
    if asked != "auto":
        return asked
    base = name.rstrip("/").rsplit("/", 1)[-1].lower()
    for suffix in (".gz", ".gzip", ".zz", ".zlib"):
        base = base.removesuffix(suffix)
    return "csv" if os.path.splitext(base)[1] in _CSV_SUFFIXES else "auto"


def run(args: argparse.Namespace) -> int:
    """Run ``asyncreader convert`` with parsed arguments; return the exit status."""
    layout = (
        FixedLayout(args.record_bytes, args.header_bytes, args.footer_bytes)
        if args.record_bytes is not None
        else None
    )
    if is_url(args.output):
        raise CommandError(
            f"{args.output}: convert writes local files; give OUTPUT as a local path"
        )
    names = output_names(args.output, args.shards)
    inputs = {os.path.realpath(path) for path in args.inputs if "://" not in path}
    clash = [name for name in names if os.path.realpath(name) in inputs]
    if clash:
        raise CommandError(f"{clash[0]}: the output would overwrite an input file")
    temporary = [f"{name}.partial" for name in names]
    writers = [TFRecordWriter(path, COMPRESSION_NAMES[args.compression]) for path in temporary]
    written = 0
    try:
        for name in args.inputs:
            written = _convert_one(name, args, layout, writers, written)
        for writer in writers:
            writer.close()
        for path, name in zip(temporary, names, strict=True):
            os.replace(path, name)
    except BaseException:
        for writer in writers:
            with contextlib.suppress(Exception):
                writer.close()
        for path in temporary:
            with contextlib.suppress(OSError):
                os.unlink(path)
        raise
    shown = names[0] if len(names) == 1 else f"{len(names)} shards {names[0]} ..."
    print(f"wrote {written:,} records to {shown}")
    return 0


def _convert_one(
    name: str,
    args: argparse.Namespace,
    layout: FixedLayout | None,
    writers: Sequence[TFRecordWriter],
    written: int,
) -> int:
    fmt = _input_format(name, args.input_format)
    read_as = "text" if fmt == "csv" else fmt
    source = open_source(name, format=read_as, compression=args.input_compression, layout=layout)
    try:
        if fmt == "auto":
            fmt = source.format
        csv: _Csv | None = None
        text = _bytes_example(args.text_feature.encode("utf-8"))
        delimiter = args.delimiter or _CSV_SUFFIXES.get(
            os.path.splitext(name.lower().removesuffix(".gz"))[1], ","
        )
        shards = len(writers)
        with make_meter(args.progress, source.size, f"convert {name}") as meter:
            for chunk in chunks(source, values=True, layout=layout):
                values = chunk.values
                assert values is not None
                keys = chunk.keys
                if fmt == "csv":
                    if csv is None and values:
                        csv = _Csv(name, values[0], delimiter)
                        values, keys = values[1:], keys[1:]
                    records = csv.encode(name, values, keys) if csv is not None and values else []
                elif fmt == "text":
                    records = [text(line) for line in values]
                else:
                    records = values
                for shard in range(shards):
                    part = records[(shard - written) % shards :: shards]
                    if part:
                        writers[shard].write_many(part)
                written += len(records)
                meter.advance(chunk.input_bytes, len(records))
    finally:
        source.close()
    return written
