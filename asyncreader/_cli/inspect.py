"""``asyncreader inspect``: what a record file holds.

For each TFRecord, text or fixed-length file (local or URL): the compression (detected),
the record count, the record size range and, for ``tf.train.Example`` records, the
features seen (name, kind, value counts and the ``parse_example`` spec that reads them).
``--verify`` checks every TFRecord checksum and names the first bad record's byte offset.
A file that cannot be read is reported (and the exit status is 1); the other files are
still inspected.
"""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import TYPE_CHECKING, Any

from .._errors import AsyncReaderError
from .progress import make_meter
from .schema import SchemaScan
from .source import NONE, CommandError, FixedLayout, chunks, open_source

if TYPE_CHECKING:
    import argparse

    import numpy as np

    from .._records.compression import TFRecordCompressionType
    from .._records.framer import Framer

__all__ = ["FileReport", "inspect_file", "run"]

_FORMAT_NAMES = {"tfrecord": "TFRecord", "text": "text", "fixed": "fixed-length", "empty": "empty"}


@dataclasses.dataclass(slots=True)
class FileReport:
    """What ``inspect`` found in one file."""

    path: str
    format: str | None = None
    compression: TFRecordCompressionType | None = None
    hint: TFRecordCompressionType | None = None
    size: int | None = None
    stream_bytes: int | None = None
    records: int = 0
    min_bytes: int | None = None
    max_bytes: int | None = None
    total_bytes: int = 0
    verified: bool = False
    schema: SchemaScan | None = None
    error: Exception | None = None

    def add(self, lengths: np.ndarray) -> None:
        """Count a chunk of records of these lengths."""
        if not len(lengths):
            return
        low, high = int(lengths.min()), int(lengths.max())
        self.min_bytes = low if self.min_bytes is None else min(self.min_bytes, low)
        self.max_bytes = high if self.max_bytes is None else max(self.max_bytes, high)
        self.records += len(lengths)
        self.total_bytes += int(lengths.sum())

    def _error_json(self) -> dict[str, Any] | None:
        error = self.error
        if error is None:
            return None
        found: dict[str, Any] = {"type": type(error).__name__, "message": str(error)}
        if isinstance(error, AsyncReaderError):
            found["offset"] = error.offset
            if self.format == "tfrecord" and isinstance(error.record, int):
                found["offset"] = error.record  # the bad record's header
            if error.offset is not None or error.record is not None:
                found["record_index"] = self.records
        return found

    def to_json(self) -> dict[str, Any]:
        """The report as a JSON object."""
        report: dict[str, Any] = {
            "path": self.path,
            "format": self.format,
            "compression": None if self.compression is None else self.compression.name,
            "size": self.size,
            "stream_bytes": self.stream_bytes,
            "records": self.records,
            "record_bytes": {
                "min": self.min_bytes,
                "max": self.max_bytes,
                "mean": self.total_bytes / self.records if self.records else None,
                "total": self.total_bytes,
            },
            "verified": self.verified,
            "example": None,
            "error": self._error_json(),
        }
        schema = self.schema
        if schema is not None and schema.examples:
            report["example"] = {
                "records": schema.examples,
                "other_records": schema.others,
                "first_other_offset": schema.first_other,
                "features": {
                    name: seen.to_json(schema.examples)
                    for name, seen in sorted(schema.features.items())
                },
            }
        return report

    def to_text(self) -> str:
        """The report as lines for a person."""
        lines = [self.path]
        if self.format is not None:
            kind = _FORMAT_NAMES[self.format]
            compression = self.compression
            if compression is None or compression is NONE:
                packed = "uncompressed"
            else:
                packed = f"{compression.name}-compressed (detected)"
            if self.hint is not None and self.hint is not compression:
                packed += f"; the name suggests {self.hint.name}, the contents do not"
            lines.append(f"  format       {kind}, {packed}")
        if self.size is not None:
            size = f"{self.size:,} bytes"
            if self.stream_bytes is not None and self.compression not in (None, NONE):
                size += f" ({self.stream_bytes:,} decompressed)"
            lines.append(f"  size         {size}")
        if self.format is not None:
            before = " before the error" if self.error is not None else ""
            lines.append(f"  records      {self.records:,}{before}")
        if self.records:
            mean = self.total_bytes / self.records
            if self.min_bytes == self.max_bytes:
                sizes = f"{self.min_bytes:,} bytes each"
            else:
                sizes = f"{self.min_bytes:,} to {self.max_bytes:,} bytes (mean {mean:,.1f})"
            lines.append(f"  record size  {sizes}")
        if self.format == "tfrecord":
            if self.verified:
                lines.append("  checksums    all verified")
            elif self.error is None:
                lines.append("  checksums    not checked (pass --verify)")
        schema = self.schema
        if schema is not None and schema.examples:
            note = (
                f"{schema.examples:,} of {schema.examples + schema.others:,} records"
                if schema.others
                else f"all {schema.examples:,} records"
            )
            lines.append(f"  tf.train.Example features ({note}):")
            width = max(len(name) for name in schema.features) if schema.features else 0
            for name, seen in sorted(schema.features.items()):
                kinds = "/".join(sorted(seen.kinds)) or "empty"
                low = max(seen.min_values, 0)
                values = (
                    f"[{low}]" if low == seen.max_values else f"{low} to {seen.max_values} values"
                )
                if seen.records < schema.examples:
                    values += f", in {seen.records:,} records"
                lines.append(
                    f"    {name:<{width}}  {kinds:<6} {values:<28} {seen.spec(schema.examples)}"
                )
            if schema.others and schema.first_other is not None:
                are = "record is" if schema.others == 1 else "records are"
                lines.append(
                    f"  {schema.others:,} {are} not tf.train.Example "
                    f"(the first at byte {schema.first_other:,})"
                )
        if self.error is not None:
            lines.append(f"  error        {self._error_text()}")
        return "\n".join(lines)

    def _error_text(self) -> str:
        error = self.error
        text = str(error)
        if isinstance(error, AsyncReaderError) and self.format is not None:
            at = error.record if self.format == "tfrecord" else error.offset
            if isinstance(at, int) and error.offset is not None:
                stream = (
                    " of the decompressed stream" if self.compression not in (None, NONE) else ""
                )
                text += f"; first bad record: #{self.records} at byte {at:,}{stream}"
        return text


def inspect_file(
    name: str,
    *,
    verify: bool,
    format: str = "auto",
    compression: str = "auto",
    layout: FixedLayout | None = None,
    progress: str = "auto",
) -> FileReport:
    """Inspect one file; errors are kept in the report, not raised."""
    report = FileReport(name)
    framers: list[Framer] = []
    try:
        source = open_source(name, format=format, compression=compression, layout=layout)
    except (AsyncReaderError, CommandError, OSError) as exc:
        report.error = exc
        return report
    try:
        report.format = source.format
        report.compression = source.compression
        report.hint = source.hint
        report.size = source.size
        schema = SchemaScan() if source.format == "tfrecord" else None
        report.schema = schema
        with make_meter(progress, source.size, f"inspect {name}") as meter:
            for chunk in chunks(
                source,
                values=schema is not None,
                verify=verify,
                layout=layout,
                on_framer=framers.append,
            ):
                report.add(chunk.lengths)
                if schema is not None and chunk.values:
                    schema.add(chunk.values, chunk.keys)
                meter.advance(chunk.input_bytes, len(chunk.lengths))
        report.verified = verify and source.format == "tfrecord"
    except (AsyncReaderError, CommandError, OSError) as exc:
        report.error = exc
    finally:
        source.close()
    if framers and report.error is None:
        report.stream_bytes = framers[0].position
    return report


def run(args: argparse.Namespace) -> int:
    """Run ``asyncreader inspect`` with parsed arguments; return the exit status."""
    layout = (
        FixedLayout(args.record_bytes, args.header_bytes, args.footer_bytes)
        if args.record_bytes is not None
        else None
    )
    reports = []
    for name in args.paths:
        report = inspect_file(
            name,
            verify=args.verify,
            format=args.format,
            compression=args.compression,
            layout=layout,
            progress="none" if args.progress == "auto" and args.json else args.progress,
        )
        reports.append(report)
        if not args.json:
            print(report.to_text(), flush=True)
    failed = [report for report in reports if report.error is not None]
    if args.json:
        document = {"files": [report.to_json() for report in reports], "ok": not failed}
        json.dump(document, sys.stdout, indent=2)
        sys.stdout.write("\n")
    for report in failed:
        print(f"asyncreader inspect: error: {report.error}", file=sys.stderr)
    return 1 if failed else 0
