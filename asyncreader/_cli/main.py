"""The ``asyncreader`` command: ``demo`` and the CIFAR-10 data tools.

Subcommands:

* ``asyncreader demo`` — the CIFAR-10 training input pipeline end to end (see
  :mod:`asyncreader._cli.demo` and :mod:`asyncreader._demo`);
* ``asyncreader make-cifar10 DIR`` — write the synthetic CIFAR-10 binary files to ``DIR``;
* ``asyncreader watch URL`` — a running pipeline's stages, refreshing (:mod:`.watch`);
* ``asyncreader version`` — print the installed version.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

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
    commands = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)

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

    commands.add_parser("version", help="print the installed version")

    from . import watch  # asyncreader watch URL: its own module

    watch.add_parser(commands)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``asyncreader`` command line tool; return the exit status.

    Args:
        argv: The arguments; default ``sys.argv[1:]``.

    Returns:
        0 on success, 1 on a usage or data error, 130 when interrupted with Ctrl-C.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
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
        from importlib.metadata import version

        print(f"asyncreader {version('asyncreader')}")
        return 0
    except KeyboardInterrupt:
        print("\ninterrupted", file=sys.stderr)
        return 130
    except OSError as exc:
        print(f"asyncreader {args.command}: error: {exc}", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
