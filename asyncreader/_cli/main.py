"""The ``asyncreader`` command (also ``python -m asyncreader``).

Subcommands:

* ``asyncreader demo`` — the CIFAR-10 training input pipeline end to end (see
  :mod:`asyncreader._cli.demo` and :mod:`asyncreader._demo`);
* ``asyncreader inspect PATH...`` — what record files hold (:mod:`asyncreader._cli.inspect`);
* ``asyncreader convert INPUT... -o OUTPUT`` — write TFRecord files
  (:mod:`asyncreader._cli.convert`);
* ``asyncreader make-cifar10 DIR`` — write the synthetic CIFAR-10 binary files to ``DIR``;
* ``asyncreader watch URL`` — a running pipeline's stages, refreshing (:mod:`.watch`);
* ``asyncreader version`` — print the installed version (as ``asyncreader --version``).

Bare ``asyncreader`` prints the help. Exit status: 0 on success, 1 when an input cannot be
read or is bad (the message names the file and, for corrupt data, the byte offset), 2 for a
usage error, 130 when interrupted with Ctrl-C. Bad input never shows a traceback.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._errors import AsyncReaderError
from .source import CommandError

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["build_parser", "main"]


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be positive, not {value}")
    return value


def _non_negative(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not an integer: {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be 0 or more, not {value}")
    return value


def build_parser() -> argparse.ArgumentParser:
    """Return the argument parser of the ``asyncreader`` command."""
    from .._demo.training import DemoOptions

    defaults = DemoOptions()
    parser = argparse.ArgumentParser(
        prog="asyncreader",
        description="TensorFlow 1.x's queue-based input pipeline for async Python.",
    )
    parser.add_argument(
        "--version",
        action="version",
        version=f"asyncreader {_version()}",
        help="print the installed version and exit",
    )
    commands = parser.add_subparsers(dest="command", metavar="COMMAND")

    demo = commands.add_parser(
        "demo",
        help="train a small classifier on CIFAR-10 through the input pipeline",
        description=(
            "Run the CIFAR-10 training input (file name queue, FixedLengthRecordReader, "
            "decode_raw, random crop/flip/standardise, shuffle_batch) into a numpy training "
            "loop, then evaluate on the test set. Without --data-dir a synthetic CIFAR-10 "
            "set is written once to a cache folder; nothing is downloaded."
        ),
    )
    demo.add_argument(
        "--data-dir",
        type=Path,
        help="folder with real CIFAR-10 binaries (data_batch_1.bin ... test_batch.bin)",
    )
    demo.add_argument(
        "--cache-dir",
        type=Path,
        help="folder for the synthetic data set (default: the user cache folder, "
        "e.g. ~/.cache/asyncreader/cifar10-synthetic)",
    )
    demo.add_argument(
        "--steps", type=_positive, default=defaults.steps, help="training steps (%(default)s)"
    )
    demo.add_argument(
        "--batch-size",
        type=_positive,
        default=defaults.batch_size,
        help="images per batch (%(default)s)",
    )
    demo.add_argument(
        "--backend",
        choices=("asyncio", "trio"),
        default=defaults.backend,
        help="event loop (%(default)s)",
    )
    demo.add_argument(
        "--readers",
        type=_positive,
        default=defaults.readers,
        help="reader tasks, each with its own preprocessing thread (%(default)s)",
    )
    demo.add_argument("--seed", type=int, default=defaults.seed, help="random seed (%(default)s)")
    demo.add_argument(
        "--shuffle-buffer",
        type=_non_negative,
        default=None,
        help="images the shuffle queue keeps to draw from (default: 40%% of an epoch, 20000)",
    )
    demo.add_argument(
        "--progress",
        choices=("auto", "rich", "plain", "none"),
        default="auto",
        help="progress display: rich bar on a terminal when installed, else plain lines",
    )

    make = commands.add_parser(
        "make-cifar10",
        help="write the synthetic CIFAR-10 binary files to a folder",
        description="Write data_batch_1.bin ... data_batch_5.bin and test_batch.bin in the "
        "CIFAR-10 binary format, with learnable class structure, from a fixed seed.",
    )
    make.add_argument("dir", type=Path, help="output folder (created if missing)")
    make.add_argument(
        "--records-per-file",
        type=_positive,
        default=10_000,
        help="records in each file (%(default)s)",
    )

    _add_inspect(commands)
    _add_convert(commands)
    commands.add_parser("version", help="print the installed version (as --version)")

    from . import watch  # asyncreader watch URL: its own module

    watch.add_parser(commands)
    return parser


def _version() -> str:
    from importlib.metadata import version

    return version("asyncreader")


_PROGRESS_HELP = (
    "progress display: a rich bar on a terminal when rich is installed, else plain lines "
    "(records/s, MB/s, ETA)"
)


def _add_input_options(command: argparse.ArgumentParser, *, prefix: str = "") -> None:
    """The options that say how to read the input files."""
    command.add_argument(
        f"--{prefix}compression",
        choices=("auto", "none", "gzip", "zlib"),
        default="auto",
        help="compression of the input (default: detected from the first bytes)",
    )
    layout = command.add_argument_group("fixed-length records")
    layout.add_argument(
        "--record-bytes",
        type=_positive,
        help="read the input as fixed-length records of this many bytes",
    )
    layout.add_argument(
        "--header-bytes", type=_non_negative, default=0, help="bytes before the first record"
    )
    layout.add_argument(
        "--footer-bytes", type=_non_negative, default=0, help="bytes after the last record"
    )


def _add_inspect(commands: Any) -> None:
    inspect = commands.add_parser(
        "inspect",
        help="report what record files hold: format, compression, records, Example features",
        description=(
            "For each TFRecord, text or fixed-length file (local path or URL such as "
            "s3://bucket/key or https://...): the compression (detected), the record count, "
            "the record size range and, for tf.train.Example records, the features seen "
            "(name, kind, value counts, the parse_example spec). Exit status 1 if any file "
            "cannot be read or is corrupt."
        ),
    )
    inspect.add_argument("paths", nargs="+", metavar="PATH", help="files or URLs")
    inspect.add_argument(
        "--verify",
        action="store_true",
        help="check every TFRecord checksum; name the first bad record's byte offset",
    )
    inspect.add_argument(
        "--json", action="store_true", help="print one JSON document to standard output"
    )
    inspect.add_argument(
        "--format",
        choices=("auto", "tfrecord", "text", "fixed"),
        default="auto",
        help="file format (default: from the name, else the contents)",
    )
    _add_input_options(inspect)
    inspect.add_argument(
        "--progress",
        choices=("auto", "rich", "plain", "none"),
        default="auto",
        help=_PROGRESS_HELP + "; with --json, auto shows none",
    )


def _add_convert(commands: Any) -> None:
    convert = commands.add_parser(
        "convert",
        help="write TFRecord files from TFRecord, text or CSV input (re-compress, re-shard)",
        description=(
            "Write the records of the inputs to TFRecord files. TFRecord input is copied "
            "record for record; text lines and CSV rows (header row first) become "
            "tf.train.Example records; fixed-length records are copied one per TFRecord. "
            "With --shards N, record i goes to OUTPUT-0000k-of-0000N with k = i mod N."
        ),
    )
    convert.add_argument("inputs", nargs="+", metavar="INPUT", help="files or URLs")
    convert.add_argument(
        "-o", "--output", required=True, help="output file (the shards' common prefix)"
    )
    convert.add_argument(
        "--compression",
        choices=("none", "gzip", "zlib"),
        default="none",
        help="compression of the output (%(default)s)",
    )
    convert.add_argument("--shards", type=_positive, default=1, help="output files (%(default)s)")
    convert.add_argument(
        "--input-format",
        choices=("auto", "tfrecord", "text", "csv", "fixed"),
        default="auto",
        help="input format (default: from the name, else the contents; .csv/.tsv are CSV)",
    )
    convert.add_argument(
        "--delimiter", help="CSV field delimiter (default: tab for .tsv, else a comma)"
    )
    convert.add_argument(
        "--text-feature",
        default="text",
        help="the Example feature a text line is stored in (%(default)s)",
    )
    _add_input_options(convert, prefix="input-")
    convert.add_argument(
        "--progress",
        choices=("auto", "rich", "plain", "none"),
        default="auto",
        help=_PROGRESS_HELP,
    )


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``asyncreader`` command line tool; return the exit status.

    Args:
        argv: The arguments; default ``sys.argv[1:]``.

    Returns:
        0 on success, 1 on a usage or data error, 130 when interrupted with Ctrl-C,
        141 when standard output was closed early (``asyncreader inspect ... | head``:
        the status a tool killed by ``SIGPIPE`` reports, without a traceback or message).
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command is None:
        parser.print_help()
        return 0
    if getattr(args, "progress", None) == "rich":
        from .progress import have_rich

        if not have_rich():
            parser.error("--progress rich needs rich: pip install 'asyncreader[cli]'")
    try:
        if args.command == "watch":
            from . import watch

            return watch.run(args)
        if args.command == "demo":
            from .._demo.training import DemoOptions
            from . import demo

            options = DemoOptions(
                data_dir=args.data_dir,
                cache_dir=args.cache_dir,
                steps=args.steps,
                batch_size=args.batch_size,
                backend=args.backend,
                readers=args.readers,
                seed=args.seed,
                shuffle_buffer=args.shuffle_buffer,
                progress=args.progress,
            )
            return demo.main(options)
        if args.command == "make-cifar10":
            from ..cifar10 import write_synthetic_dataset

            info = write_synthetic_dataset(args.dir, records_per_file=args.records_per_file)
            verb = "wrote" if info.created else "kept the existing"
            print(
                f"{verb} synthetic CIFAR-10 ({info.records_per_file:,} records per file) "
                f"in {info.path}"
            )
            return 0
        if args.command == "inspect":
            from . import inspect

            return inspect.run(args)
        if args.command == "convert":
            from . import convert

            return convert.run(args)
        print(f"asyncreader {_version()}")
        return 0
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return _reader_went_away()
    except (OSError, AsyncReaderError, CommandError) as exc:
        print(f"asyncreader {args.command}: error: {exc}", file=sys.stderr)
        return 1


def _reader_went_away() -> int:
    """Standard output's reader closed it: end quietly, as a tool killed by SIGPIPE would."""
    # Python ignores SIGPIPE, so the interpreter's final flush of stdout would fail again
    # and print a second error; point the descriptor at /dev/null first.
    devnull = os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, sys.stdout.fileno())
    finally:
        os.close(devnull)
    return 128 + int(signal.SIGPIPE)


if __name__ == "__main__":
    sys.exit(main())
