"""Progress display for the command line tool: a rich bar when available, plain lines otherwise.

Two kinds: the *progress* displays count the steps of a training run (``demo``); the
*meters* count the bytes and records of a run over files (``inspect``, ``convert``) and
show records/s, bytes/s and the time left.

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
    "NullMeter",
    "NullProgress",
    "PlainMeter",
    "PlainProgress",
    "RichMeter",
    "RichProgress",
    "have_rich",
    "make_meter",
    "make_progress",
]


class _Display:
    """A display used as a context manager: :meth:`start` on entry, :meth:`finish` on exit."""

    __slots__ = ()

    def start(self) -> None:
        """Start showing (nothing to do by default)."""

    def finish(self) -> None:
        """Stop showing (nothing to do by default)."""

    def __enter__(self) -> Self:
        self.start()
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.finish()


class NullProgress(_Display):
    """Shows nothing."""

    __slots__ = ()

    def update(self, completed: int, status: str) -> None:
        """Ignore the update."""


class PlainProgress(_Display):
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

    def finish(self) -> None:
        """End the display (a terminal's line is closed)."""
        if self._tty and self._shown:
            self._stream.write("\n")
            self._stream.flush()


class RichProgress(_Display):
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

    def start(self) -> None:
        """Start drawing."""
        self._progress.start()

    def finish(self) -> None:
        """Stop drawing."""
        self._progress.stop()


def _resolve(kind: str, out: TextIO) -> str:
    """The display ``kind`` (``"auto"``, ``"rich"``, ``"plain"``, ``"none"``) comes to on
    ``out``: ``"none"``, ``"plain"`` or ``"rich"`` (``"auto"``: rich on a terminal when it
    is installed, plain lines otherwise)."""
    if kind == "auto":
        return "rich" if out.isatty() and have_rich() else "plain"
    if kind == "rich" and not have_rich():
        raise ValueError("--progress rich needs rich: pip install 'asyncreader[cli]'")
    if kind not in ("none", "plain", "rich"):
        raise ValueError(f"unknown progress display {kind!r}")
    return kind


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
    shown = _resolve(kind, out)
    if shown == "none":
        return NullProgress()
    if shown == "plain":
        return PlainProgress(total, description, out)
    return RichProgress(total, description, out)


def _duration(seconds: float) -> str:
    seconds = int(seconds + 0.5)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _megabytes(n: float) -> str:
    return f"{n / 1e6:,.1f} MB"


class _Rates:
    """Bytes and records done so far, and their rates since the start."""

    __slots__ = ("bytes", "records", "start", "total")

    def __init__(self, total: int | None) -> None:
        self.total = total
        self.bytes = 0
        self.records = 0
        self.start = time.monotonic()

    def add(self, input_bytes: int, records: int) -> None:
        self.bytes += input_bytes
        self.records += records

    def elapsed(self) -> float:
        return max(time.monotonic() - self.start, 1e-9)

    def eta(self) -> str:
        if not self.total or not self.bytes:
            return "?"
        left = max(self.total - self.bytes, 0)
        return _duration(left / (self.bytes / self.elapsed()))


class PlainMeter(_Display):
    """Progress of a long run over files as plain lines: records, bytes, their rates, ETA.

    Args:
        total: Bytes to read in all, when known.
        description: Text before the figures.
        stream: Where to write.
        interval: Seconds between two lines when ``stream`` is not a terminal (a terminal
            line is rewritten at most ten times a second). The last line is always shown.
    """

    __slots__ = (
        "_description",
        "_interval",
        "_last",
        "_rates",
        "_shown",
        "_shown_at",
        "_stream",
        "_tty",
    )

    def __init__(
        self, total: int | None, description: str, stream: TextIO, *, interval: float = 1.0
    ) -> None:
        self._rates = _Rates(total)
        # The (bytes, records) the last line showed, so the closing line is not a repeat.
        self._shown_at = (-1, -1)
        self._description = description
        self._stream = stream
        self._tty = stream.isatty()
        self._interval = 0.1 if self._tty else interval
        self._last = time.monotonic()
        self._shown = ""

    def advance(self, input_bytes: int, records: int) -> None:
        """Count ``input_bytes`` more bytes read and ``records`` more records framed."""
        self._rates.add(input_bytes, records)
        now = time.monotonic()
        if now - self._last >= self._interval:
            self._last = now
            self._show()

    def line(self) -> str:
        """The progress line as it stands."""
        rates = self._rates
        elapsed = rates.elapsed()
        done = _megabytes(rates.bytes)
        if rates.total:
            percent = 100 * rates.bytes // rates.total
            done = f"{done} of {_megabytes(rates.total)} {percent:3d}%"
        return (
            f"{self._description}: {rates.records:,} records, {done} | "
            f"{rates.records / elapsed:,.0f} records/s | {rates.bytes / elapsed / 1e6:,.1f} MB/s"
            f" | ETA {rates.eta()}"
        )

    def _show(self) -> None:
        self._shown_at = (self._rates.bytes, self._rates.records)
        line = self.line()
        if self._tty:
            pad = " " * max(0, len(self._shown) - len(line))
            self._stream.write(f"\r{line}{pad}")
        else:
            self._stream.write(f"{line}\n")
        self._shown = line
        self._stream.flush()

    def finish(self) -> None:
        """End the display (a terminal's line is closed)."""
        if self._shown_at != (self._rates.bytes, self._rates.records):
            self._show()
        if self._tty:
            self._stream.write("\n")
            self._stream.flush()


class RichMeter(_Display):
    """A rich progress bar over the bytes of a run, with records/s, bytes/s and the ETA.

    Args:
        total: Bytes to read in all, when known.
        description: Text before the bar.
        stream: Where to draw (a terminal).
        force_terminal: Draw as on a terminal whatever ``stream`` is.
    """

    __slots__ = ("_progress", "_rates", "_task")

    def __init__(
        self,
        total: int | None,
        description: str,
        stream: TextIO,
        *,
        force_terminal: bool | None = None,
    ) -> None:
        from rich.console import Console
        from rich.progress import (
            BarColumn,
            DownloadColumn,
            TextColumn,
            TimeRemainingColumn,
            TransferSpeedColumn,
        )
        from rich.progress import Progress as _RichProgress

        self._rates = _Rates(total)
        self._progress: Any = _RichProgress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            DownloadColumn(),
            TransferSpeedColumn(),
            TextColumn("{task.fields[records]} records, {task.fields[rate]} records/s"),
            TextColumn("ETA"),
            TimeRemainingColumn(),
            console=Console(file=stream, force_terminal=force_terminal),
            refresh_per_second=8,
        )
        self._task = self._progress.add_task(description, total=total, records="0", rate="0")

    def advance(self, input_bytes: int, records: int) -> None:
        """Count ``input_bytes`` more bytes read and ``records`` more records framed."""
        rates = self._rates
        rates.add(input_bytes, records)
        self._progress.update(
            self._task,
            completed=rates.bytes,
            records=f"{rates.records:,}",
            rate=f"{rates.records / rates.elapsed():,.0f}",
        )

    def start(self) -> None:
        """Start drawing."""
        self._progress.start()

    def finish(self) -> None:
        """Stop drawing."""
        self._progress.stop()


class NullMeter(_Display):
    """Shows nothing."""

    __slots__ = ()

    def advance(self, input_bytes: int, records: int) -> None:
        """Ignore the update."""


def make_meter(
    kind: str, total: int | None, description: str, stream: TextIO | None = None
) -> PlainMeter | RichMeter | NullMeter:
    """Return the progress display of a run over files that ``kind`` asks for.

    Args:
        kind: ``"auto"`` (rich on a terminal when installed, else plain lines), ``"rich"``,
            ``"plain"`` or ``"none"``.
        total: Bytes to read in all, when known.
        description: Text before the figures.
        stream: Where to write; default standard error.

    Raises:
        ValueError: ``kind`` is unknown, or ``"rich"`` was asked for without rich installed.
    """
    out = sys.stderr if stream is None else stream
    shown = _resolve(kind, out)
    if shown == "none":
        return NullMeter()
    if shown == "plain":
        return PlainMeter(total, description, out)
    # Asked for by name, the bar is drawn even where the stream is not a terminal.
    return RichMeter(total, description, out, force_terminal=True if kind == "rich" else None)
