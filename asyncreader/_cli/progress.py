"""Progress display for the command line tool: a rich bar when available, plain lines otherwise.

``rich`` is an optional extra (``asyncreader[cli]``). Without it, or when the output is not a
terminal, progress is a plain line: rewritten in place on a terminal, or printed as a new
line at most every ``interval`` seconds otherwise (so logs and pipes stay readable).
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any, Self, TextIO

if TYPE_CHECKING:
    from types import TracebackType

    from .._demo.training import Progress

__all__ = [
    "NullProgress",
    "PlainProgress",
    "RichProgress",
    "have_rich",
    "make_progress",
]


class NullProgress:
    """Shows nothing."""

    __slots__ = ()

    def update(self, completed: int, status: str) -> None:
        """Ignore the update."""

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        return None


class PlainProgress:
    """A text progress line.

    Args:
        total: Steps in the run.
        description: Text before the counter.
        stream: Where to write.
        interval: Seconds between two lines when ``stream`` is not a terminal (a terminal
            line is rewritten at most ten times a second).
    """

    __slots__ = ("_description", "_interval", "_last", "_shown", "_stream", "_total", "_tty")

    def __init__(
        self, total: int, description: str, stream: TextIO, *, interval: float = 1.0
    ) -> None:
        self._total = total
        self._description = description
        self._stream = stream
        self._tty = stream.isatty()
        self._interval = 0.1 if self._tty else interval
        self._last = float("-inf")
        self._shown = ""

    def update(self, completed: int, status: str) -> None:
        """Show the progress if enough time passed since the last line (or at the end)."""
        now = time.monotonic()
        if now - self._last < self._interval and completed < self._total:
            return
        self._last = now
        width = len(str(self._total))
        percent = 100 * completed // max(self._total, 1)
        line = f"{self._description} {completed:>{width}}/{self._total} {percent:3d}% | {status}"
        if self._tty:
            pad = " " * max(0, len(self._shown) - len(line))
            self._stream.write(f"\r{line}{pad}")
        else:
            self._stream.write(f"{line}\n")
        self._shown = line
        self._stream.flush()

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._tty and self._shown:
            self._stream.write("\n")
            self._stream.flush()


class RichProgress:
    """A rich progress bar with elapsed time and a status column.

    Args:
        total: Steps in the run.
        description: Text before the bar.
        stream: Where to draw (a terminal).
    """

    __slots__ = ("_progress", "_task")

    def __init__(self, total: int, description: str, stream: TextIO) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            MofNCompleteColumn,
            TextColumn,
            TimeElapsedColumn,
        )
        from rich.progress import Progress as _RichProgress

        self._progress: Any = _RichProgress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.fields[status]}"),
            console=Console(file=stream),
            refresh_per_second=8,
        )
        self._task = self._progress.add_task(description, total=total, status="starting")

    def update(self, completed: int, status: str) -> None:
        """Move the bar and replace the status text."""
        self._progress.update(self._task, completed=completed, status=status)

    def __enter__(self) -> Self:
        self._progress.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._progress.stop()


def have_rich() -> bool:
    """Return whether the optional ``rich`` package is installed."""
    try:
        import rich.progress  # noqa: F401
    except ImportError:
        return False
    return True


def make_progress(
    kind: str, total: int, description: str, stream: TextIO | None = None
) -> Progress:
    """Return the progress display ``kind`` asks for.

    Args:
        kind: ``"auto"`` (rich on a terminal when installed, else plain), ``"rich"``,
            ``"plain"`` or ``"none"``.
        total: Steps in the run.
        description: Text before the counter.
        stream: Where to write; default standard error.

    Returns:
        A display satisfying :class:`asyncreader._demo.training.Progress`.

    Raises:
        ValueError: ``kind`` is unknown, or ``"rich"`` was asked for without rich installed.
    """
    out = sys.stderr if stream is None else stream
    if kind == "none":
        return NullProgress()
    if kind == "plain":
        return PlainProgress(total, description, out)
    if kind == "rich":
        if not have_rich():
            raise ValueError("--progress rich needs rich: pip install 'asyncreader[cli]'")
        return RichProgress(total, description, out)
    if kind == "auto":
        if out.isatty() and have_rich():
            return RichProgress(total, description, out)
        return PlainProgress(total, description, out)
    raise ValueError(f"unknown progress display {kind!r}")
