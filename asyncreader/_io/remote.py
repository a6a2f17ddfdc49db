"""Remote files read by concurrent range requests, with timeouts and retries.

A file on an object store or web server (``s3://``, ``http(s)://``: any fsspec filesystem
with an asynchronous implementation) is read as byte ranges fetched concurrently on
fsspec's own event loop, ahead of the reader, in a window bounded in bytes:

* at most :attr:`RemoteReading.concurrency` requests are in flight per open file, each for
  a part of ``read_ahead / concurrency`` bytes (between 256 KiB and 16 MiB);
* fetched bytes not yet read, and the bytes of requests in flight, stay within
  :attr:`RemoteReading.read_ahead` (the bytes a read asks for always come first), so
  memory is bounded by the window whatever the file's size;
* a file read from its start is read ahead by the whole window at once; after a seek the
  window opens as the file is read in order (twice the bytes read since the seek), so a
  seek followed by a short read (records read again by key) fetches little more than it
  asked for.

Opening a file costs one round trip: where the client can tell (obstore), the file's size
comes from the ``Content-Range`` of the answer to the first range request, whose body is
the file's first part; other clients ask for the size first. Files can also be opened
ahead of their reader (``wait=False``, see
:func:`~asyncreader._io.filesystem.prefetch_work_item`): their first windows are then
fetched at once, while the reader reads the file before them, within one window that
they share (``after``), so a reader holds at most two windows.

So one reader is not bound to the latency of one request: with the default window
(64 MiB, 8 requests) a link of 50 ms per request still streams 8 parts at a time.

Faults: every request has a timeout (:attr:`RemoteReading.request_timeout`). A request
that fails in a way that may pass (a timeout, a reset or refused connection, a 5xx answer,
a truncated body) is retried from the exact byte it had reached, after an exponential
backoff with jitter (0.1 s doubling to 5 s), for at most
:attr:`RemoteReading.max_attempts` attempts in a row and
:attr:`RemoteReading.retry_budget` seconds since the first of them; any progress starts the
count again. Past the budget the read fails with
:class:`~asyncreader.FailedPreconditionError` naming the file and the byte offset, which a
reader's error policy can skip like any bad work item. A missing file or a refused
permission is not retried. A cancelled read does not wait for a retry or a request: the
requests of a closed file are cancelled on fsspec's loop. A reader that closes while a
read it gave up on still waits (its I/O thread abandoned) interrupts the file
(:meth:`RangeFile.interrupt`, through :func:`~asyncreader._io.executor.interruptible`):
its requests end at once, retries included, and the thread returns.

Everything here blocks the calling thread (the reader's I/O worker) and never the caller's
event loop.
"""

from __future__ import annotations

import asyncio
import dataclasses
import functools
import logging
import random
import threading
import time
from collections import deque
from concurrent.futures import CancelledError as FutureCancelled
from typing import TYPE_CHECKING, Any, Final, Protocol

from .._errors import (
    AsyncReaderError,
    DataLossError,
    FailedPreconditionError,
    InvalidArgumentError,
    map_io_errors,
)
from .executor import interruptible

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Sequence
    from concurrent.futures import Future


#: Each retried request is logged here (WARNING), naming the file, offset and cause.
_log = logging.getLogger("asyncreader.remote")

__all__ = [
    "DEFAULT_CONCURRENCY",
    "DEFAULT_MAX_ATTEMPTS",
    "DEFAULT_READ_AHEAD",
    "DEFAULT_REQUEST_TIMEOUT",
    "DEFAULT_RETRY_BUDGET",
    "FsspecClient",
    "RangeFile",
    "RemoteClient",
    "RemoteReading",
    "remote_reading",
    "set_remote_reading",
]

#: Bytes a remote file is read ahead (in flight plus fetched and not yet read).
DEFAULT_READ_AHEAD: Final = 64 << 20
#: Range requests in flight per open remote file.
DEFAULT_CONCURRENCY: Final = 8
#: Seconds one request may take, start to last byte.
DEFAULT_REQUEST_TIMEOUT: Final = 60.0
#: Seconds a request is retried for, from its first failure.
DEFAULT_RETRY_BUDGET: Final = 60.0
#: Attempts of one request in a row without progress.
DEFAULT_MAX_ATTEMPTS: Final = 10

#: Bounds of the size of one range request.
MIN_PART: Final = 256 << 10
MAX_PART: Final = 16 << 20
#: Seconds the first answer to a file opened ahead takes from which the files after it are
#: opened ahead too (see RangeFile._share): below it, one file ahead hides the latency.
DEEP_AHEAD_LATENCY: Final = 0.02
#: First pause between attempts, doubled per failure up to the second.
BACKOFF_FIRST: Final = 0.1
BACKOFF_MAX: Final = 5.0


@dataclasses.dataclass(frozen=True, slots=True)
class RemoteReading:
    """How remote files are read (see :func:`asyncreader.set_remote_reading`)."""

    read_ahead: int = DEFAULT_READ_AHEAD
    concurrency: int = DEFAULT_CONCURRENCY
    request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT
    retry_budget: float = DEFAULT_RETRY_BUDGET
    max_attempts: int = DEFAULT_MAX_ATTEMPTS

    def __post_init__(self) -> None:
        def integer(value: object) -> bool:
            return isinstance(value, int) and not isinstance(value, bool)

        def number(value: object) -> bool:
            return isinstance(value, (int, float)) and not isinstance(value, bool)

        if not integer(self.read_ahead) or self.read_ahead < 0:
            raise InvalidArgumentError(
                f"read_ahead must be a number of bytes >= 0, not {self.read_ahead!r}"
            )
        if not integer(self.concurrency) or self.concurrency < 1:
            raise InvalidArgumentError(f"concurrency must be an int >= 1, not {self.concurrency!r}")
        timeout = self.request_timeout
        if timeout is not None and (not number(timeout) or not timeout > 0):
            raise InvalidArgumentError(
                f"request_timeout must be a number > 0 or None, not {timeout!r}"
            )
        if not number(self.retry_budget) or not self.retry_budget >= 0:
            raise InvalidArgumentError(
                f"retry_budget must be a number of seconds >= 0, not {self.retry_budget!r}"
            )
        if not integer(self.max_attempts) or self.max_attempts < 1:
            raise InvalidArgumentError(
                f"max_attempts must be an int >= 1, not {self.max_attempts!r}"
            )

    @property
    def part_size(self) -> int:
        """Bytes of one range request: the window shared by the requests, within bounds."""
        return min(MAX_PART, max(MIN_PART, self.read_ahead // self.concurrency))


_settings: dict[str | None, RemoteReading] = {}
_settings_lock = threading.Lock()


def set_remote_reading(
    *,
    scheme: str | None = None,
    read_ahead: int = DEFAULT_READ_AHEAD,
    concurrency: int = DEFAULT_CONCURRENCY,
    request_timeout: float | None = DEFAULT_REQUEST_TIMEOUT,
    retry_budget: float = DEFAULT_RETRY_BUDGET,
    max_attempts: int = DEFAULT_MAX_ATTEMPTS,
    obstore: bool | None = None,
) -> None:
    """Set how remote files (``s3://``, ``http(s)://``, …) are read, for files opened from now on.

    Each open remote file is read ahead by up to ``concurrency`` range requests at once,
    holding at most ``read_ahead`` bytes (in flight, or fetched and not yet read). Every
    request has a timeout; one that fails in a way that may pass (timeout, reset or
    refused connection, 5xx answer, truncated body) is retried from the byte it reached
    with exponential backoff, up to ``max_attempts`` attempts in a row and
    ``retry_budget`` seconds from the first failure; then the read fails with
    :class:`~asyncreader.FailedPreconditionError` naming the file and byte offset.
    Calling it without arguments restores the defaults everywhere (per-scheme settings
    included).

    Args:
        scheme: Apply to this URL scheme only (``"s3"``, ``"https"``, …); ``None``: to
            every scheme without settings of its own.
        read_ahead: Bytes read ahead per open file (default 64 MiB); 0 reads only what
            is asked for. A reader may hold a second window: the next files in its
            FIFO work queue, opened ahead, share it.
        concurrency: Range requests in flight per open file (default 8).
        request_timeout: Seconds one request may take (default 60); ``None``: no limit.
        retry_budget: Seconds a failing request is retried for (default 60).
        max_attempts: Attempts of one request in a row before giving up (default 10).
        obstore: Fetch the byte ranges of ``s3://`` files through obstore
            (``asyncreader[obstore]``) instead of s3fs: 2.5-8x the throughput measured
            against a local S3 server. Off by default for now. ``None`` (the default)
            leaves the choice as it is, except that a call without arguments turns it
            off.

    Raises:
        InvalidArgumentError: a value is out of range.
    """
    settings = RemoteReading(
        read_ahead=read_ahead,
        concurrency=concurrency,
        request_timeout=request_timeout,
        retry_budget=retry_budget,
        max_attempts=max_attempts,
    )
    if scheme is not None and (not isinstance(scheme, str) or not scheme):
        raise InvalidArgumentError(f"scheme must be a URL scheme such as 's3', not {scheme!r}")
    key = None if scheme is None else scheme.lower()
    from . import obstore_client  # the flag lives with the client it switches

    if obstore is not None:
        obstore_client.ENABLED = bool(obstore)
    with _settings_lock:
        if key is None and settings == RemoteReading():
            if obstore is None:
                obstore_client.ENABLED = False
            _settings.clear()  # the defaults everywhere again
        else:
            _settings[key] = settings


def remote_reading(scheme: str | None = None) -> RemoteReading:
    """Return the settings files of ``scheme`` are opened with."""
    with _settings_lock:
        found = _settings.get(None if scheme is None else scheme.lower())
        if found is None:
            found = _settings.get(None, RemoteReading())
        return found


#: HTTP statuses worth asking again for: timeouts, throttling, server errors.
_TRANSIENT_STATUS: Final = frozenset({408, 425, 429, 500, 502, 503, 504})


def _transient_status(exc: BaseException) -> bool | None:
    """Whether an HTTP error status says to ask again; ``None``: no status."""
    status = getattr(exc, "status", None)
    if isinstance(status, int) and 400 <= status < 600:
        return status in _TRANSIENT_STATUS
    return None


def _permanent(exc: BaseException) -> bool:
    """Whether retrying cannot help: the file is missing or may not be read, or the
    request itself is wrong."""
    transient = _transient_status(exc)
    if transient is not None:
        return not transient
    if isinstance(exc, FileNotFoundError):
        # fsspec's HTTP filesystem reports any failed size probe (a timeout or a 503 too)
        # as not found: what it wraps decides.
        cause = exc.__cause__
        if cause is None or isinstance(cause, (FileNotFoundError, PermissionError)):
            return True
        return not (isinstance(cause, (TimeoutError, OSError)) or _transient_status(cause))
    return isinstance(
        exc,
        (
            IsADirectoryError,
            NotADirectoryError,
            PermissionError,
            AsyncReaderError,
            ValueError,
            TypeError,
        ),
    )


def _describe(exc: BaseException) -> str:
    seen: BaseException | None = exc
    for _ in range(4):
        if isinstance(seen, TimeoutError):
            return "timed out"
        if seen is None:
            break
        seen = seen.__cause__ or seen.__context__
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


class _Part:
    """One range request: bytes ``[start, end)`` of the file, being fetched."""

    __slots__ = ("end", "future", "start")

    def __init__(self, start: int, end: int, future: Future[bytes]) -> None:
        self.start = start
        self.end = end
        self.future = future


class RemoteClient(Protocol):
    """How a :class:`RangeFile` asks for one file's size and byte ranges.

    ``setup`` returns the client's one-time set-up to await on ``loop`` first, if any;
    ``first``, ``size`` and ``get`` are coroutines run on ``loop`` (one attempt each: the
    range file retries them). ``get`` returns a bytes-like object of ``end - start``
    bytes, fewer only where the file ends. ``first`` asks for the file's first range and
    returns, once the answer's headers are in, the file's size (from the answer's
    ``Content-Range``) and a function returning its body, as ``get`` would; ``None`` when
    the client cannot (then ``size`` is asked) or the file is empty.
    """

    @property
    def loop(self) -> asyncio.AbstractEventLoop: ...

    def setup(self) -> Awaitable[Any] | None: ...

    async def first(
        self, start: int, end: int
    ) -> tuple[int, Callable[[], Awaitable[Any]]] | None: ...

    async def size(self) -> int | None: ...

    async def get(self, start: int, end: int) -> Any: ...


class FsspecClient:
    """A file of an fsspec filesystem with an asynchronous implementation (s3fs, HTTP)."""

    __slots__ = ("_fs", "_path")

    def __init__(self, fs: Any, path: str) -> None:
        self._fs = fs
        self._path = path

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        loop: asyncio.AbstractEventLoop = self._fs.loop
        return loop

    def setup(self) -> Awaitable[Any] | None:
        set_session = getattr(self._fs, "set_session", None)
        if asyncio.iscoroutinefunction(set_session):
            # The client's one-time set-up (botocore reads its config files), before any
            # request, run as fsspec itself runs it (the file blocks on it in any case).
            setup: Awaitable[Any] = set_session()
            return setup
        return None

    async def first(self, start: int, end: int) -> tuple[int, Callable[[], Awaitable[Any]]] | None:
        return None  # fsspec's ranged reads do not tell the size: asked for apart

    async def size(self) -> int | None:
        size = (await self._fs._info(self._path)).get("size")
        return size if isinstance(size, int) else None

    async def get(self, start: int, end: int) -> Any:
        return await self._fs._cat_file(self._path, start=start, end=end)


class RangeFile:
    """A remote file read by concurrent range requests ahead of the reader.

    It is a :class:`~asyncreader._io.filesystem.RandomAccessFile`: ``read`` and
    ``readinto`` return exactly what was asked for unless the file ends first. Not
    thread-safe: one caller at a time (a reader's worker-thread hops).

    Args:
        client: Asks for the file's size and byte ranges.
        name: The work item, for errors.
        settings: Read-ahead window, concurrency, timeout and retry budget.
        wait: Wait for the open (the size); ``False`` only begins it, for a file opened
            ahead of its reader (:meth:`opened` waits).
        after: Files opened ahead before this one (``wait=False``), which its reader reads
            first: they share one read-ahead window. This file's open waits for their
            first answers (their sizes) and asks for what the window has left, nothing
            when it is full (then its reader opens it when it gets there).
    """

    __slots__ = (
        "_ahead_bytes",
        "_asked",
        "_began",
        "_client",
        "_closed",
        "_futures",
        "_guard",
        "_interrupted",
        "_latency",
        "_loop",
        "_name",
        "_next",
        "_opening",
        "_parts",
        "_pos",
        "_seen_size",
        "_settings",
        "_streak",
        "size",
    )

    def __init__(
        self,
        client: RemoteClient,
        name: str | bytes,
        settings: RemoteReading,
        *,
        wait: bool = True,
        after: Sequence[RangeFile] = (),
    ) -> None:
        self._client = client
        self._name = name
        self._settings = settings
        self._loop = client.loop
        self._parts: deque[_Part] = deque()
        self._pos = 0  # where the next read starts
        self._next = 0  # where the next range request starts
        self._streak = 0  # bytes read in order since the last seek
        self._closed = False
        # Requests submitted and maybe not done, and whether the file was interrupted:
        # shared with the thread that interrupts it (see interrupt), under the guard.
        self._guard = threading.Lock()
        self._futures: list[Future[Any]] = []
        self._interrupted = False
        # The size comes with the answer to the first range request where the client can
        # tell it: one round trip per file less than asking for it first. That request's
        # body is the file's first part, fetched on while the reader starts.
        self.size: int | None = None
        # Bytes the open begun ahead asked for (None until its first answer): what this
        # file holds of the window it shares with the files opened ahead after it.
        self._ahead_bytes: int | None = None
        # Bytes its first request asks for, once asked; the size its first answer told.
        self._asked: int | None = None
        self._seen_size: int | None = None
        self._latency: float | None = None  # seconds to the open's first answer
        with interruptible(self):
            setup = client.setup()
            if setup is not None:
                self._wait(self._submit(setup), None)
            self._began: Future[Any] = self._submit(
                self._open(
                    # Opened ahead: the whole window in one request (what the files opened
                    # ahead before it leave of it), so that one round trip brings a file
                    # of up to the window's size.
                    settings.read_ahead
                    if not wait
                    else min(settings.part_size, settings.read_ahead),
                    not wait,
                    [f for f in after if f._opening is not None],
                )
            )
            self._opening: Future[Any] | None = self._began
            if wait:
                self.opened()

    def opened(self) -> None:
        """Wait for the open begun by the constructor (``wait=False``: begun ahead)."""
        opening, self._opening = self._opening, None
        if opening is None:
            return
        with interruptible(self):
            self.size, parts = self._wait(opening, 0)
        self._parts.extend(parts)
        if parts:
            self._next = parts[-1].end

    @property
    def deferred(self) -> bool:
        """Whether an open begun ahead found the shared window full and asked for nothing:
        opened again by its reader, or ahead again once there is room."""
        opening = self._opening
        return (
            opening is not None
            and opening.done()
            and not opening.cancelled()
            and opening.exception() is None
            and opening.result()[0] is None
        )

    @property
    def open_failed(self) -> bool:
        """Whether an open begun ahead has failed already (it is better begun again)."""
        opening = self._opening
        return (
            opening is not None
            and opening.done()
            and (opening.cancelled() or opening.exception() is not None)
        )

    # -- on the client's loop ----------------------------------------------------------

    async def _open(
        self, first: int, ahead: bool, after: list[RangeFile]
    ) -> tuple[int | None, list[_Part]]:
        """The file's size, and the requests begun with it: where the client can, the
        first part's (its body goes on being fetched); for a file opened ahead of its
        reader, the read-ahead window's (``ahead``), less what the files opened ahead
        before it hold (``after``). ``(None, [])``: the window is full, nothing asked
        for."""
        if after:
            first = min(first, await self._share(after))
            if first <= 0 < self._settings.read_ahead:
                self._ahead_bytes = 0
                return None, []
        self._asked = max(0, first)  # before any await: the files after this one count it
        parts: list[_Part] = []
        size: int | None = None
        asked_at = time.monotonic()
        if first > 0:
            got = await self._retrying(
                functools.partial(self._client.first, 0, first), "opening", 0
            )
            if got is not None:
                size = got[0]
                end = min(first, size)
                parts.append(_Part(0, end, self._submit(self._body(got[1], 0, end))))
        if size is None:
            size = await self._retrying(self._client.size, "opening", 0)
        self._seen_size = size
        self._latency = time.monotonic() - asked_at
        if ahead and size is not None:
            # Opened ahead: the window (its share of it) is fetched now, while the reader
            # reads its current file, as a file read from its start would be on its
            # first read.
            settings = self._settings
            at = parts[-1].end if parts else 0
            target = min(size, first)
            while at < target and len(parts) < settings.concurrency:
                end = min(target, at + settings.part_size)
                parts.append(_Part(at, end, self._submit(self._fetch(at, end))))
                at = end
        self._ahead_bytes = parts[-1].end if parts else 0
        return size, parts

    async def _share(self, after: list[RangeFile]) -> int:
        """The bytes of the read-ahead window that the files opened ahead before this one
        (``after``, in the order they are read) leave to it: each holds what its first
        request asked for until its answer says how much of that the file has.

        Once one of them has answered, it asks at once when they leave room, for about
        the size of the files answered so far (files of a data set tend to be alike), so
        that several small files are asked for in one round trip, not one after another;
        otherwise it waits for more answers. Nothing (0) when the window is full, or when
        the answer came within :data:`DEEP_AHEAD_LATENCY` (the next file alone hides such
        latency; it is opened ahead in its turn)."""
        window = self._settings.read_ahead
        while True:
            held = 0
            undecided = False
            waiting: list[Future[Any]] = []
            seen = 0
            latency: float | None = None
            for f in after:
                if f._opening is None:
                    continue  # taken by its reader (or closed): no longer ahead
                if f._began.done():
                    held += f._ahead_bytes or 0
                    seen = max(seen, f._seen_size or 0)
                    if f._latency is not None:
                        latency = max(latency or 0.0, f._latency)
                    continue
                waiting.append(f._began)
                if f._asked is None:
                    undecided = True  # waiting itself: what it will ask for is not known
                else:
                    held += f._asked
            left = window - held
            if latency is not None and latency < DEEP_AHEAD_LATENCY:
                # Answers come quickly: the file opened ahead next is enough. More files
                # in flight would only share the server with the file being read, whose
                # bytes are wanted first.
                return 0
            if not waiting or (latency is not None and left > 0 and not undecided):
                if seen:
                    return min(left, max(seen, self._settings.part_size))
                return left
            await asyncio.wait(
                [asyncio.wrap_future(f) for f in waiting], return_when=asyncio.FIRST_COMPLETED
            )

    async def _body(self, body: Callable[[], Awaitable[Any]], start: int, end: int) -> Any:
        """The body of the first request, bytes ``[start, end)``; a failure part-way asks
        for them again from the byte reached, within the budget."""
        timeout = self._settings.request_timeout
        try:
            data = await asyncio.wait_for(body(), timeout)
        except Exception as exc:
            if _permanent(exc):
                raise
            data = b""  # asked for again below, with the retries of any request
            self._log_retry("reading", start, _describe(exc), "asking again at once")
        if len(data) > end - start:
            raise FailedPreconditionError(
                f"the server answered a request for bytes {start}-{end - 1} with "
                f"{len(data)} bytes: it does not serve byte ranges",
                work_item=self._name,
                offset=start,
            )
        if len(data) < end - start:
            if data:
                self._log_short(start, len(data))
            rest = await self._fetch(start + len(data), end)
            return bytes(data) + rest if data else rest
        return data

    async def _retrying(self, attempt: Callable[[], Awaitable[Any]], doing: str, at: int) -> Any:
        """Await ``attempt()`` under the timeout, retried within the budget."""
        settings = self._settings
        failures = 0
        first_failure = 0.0
        while True:
            if self._interrupted:
                raise self._closed_error(at)  # no new attempt for a file interrupted
            try:
                if settings.request_timeout is None:
                    return await attempt()
                return await asyncio.wait_for(attempt(), settings.request_timeout)
            except Exception as exc:
                if _permanent(exc):
                    raise
                failures += 1
                now = time.monotonic()
                if failures == 1:
                    first_failure = now
                delay = min(BACKOFF_MAX, BACKOFF_FIRST * 2 ** (failures - 1))
                delay *= random.uniform(0.5, 1.0)  # jitter: retries of many readers spread out
                spent = now - first_failure
                if failures >= settings.max_attempts or spent + delay > settings.retry_budget:
                    raise FailedPreconditionError(
                        f"gave up {doing} after {failures} failed attempts in "
                        f"{spent:.1f} s (retry budget {settings.max_attempts} attempts, "
                        f"{settings.retry_budget:g} s; see set_remote_reading); last error: "
                        f"{_describe(exc)}",
                        work_item=self._name,
                        offset=at,
                    ) from exc
                self._log_retry(
                    doing,
                    at,
                    _describe(exc),
                    f"asking again in {delay:.2f} s (attempt {failures + 1} of "
                    f"{settings.max_attempts})",
                )
                await asyncio.sleep(delay)

    def _log_retry(self, doing: str, at: int, cause: str, then: str) -> None:
        """Log a failed request that is asked again: file, byte, the cause's first line.

        A file interrupted asks for nothing again: that is raised instead. Under the
        guard, so that once :meth:`interrupt` returned no such line is logged.
        """
        name = self._name
        with self._guard:
            if self._interrupted:
                raise self._closed_error(at)
            _log.warning(
                "%s: %s at byte %d failed (%s); %s",
                name.decode("utf-8", "replace") if isinstance(name, bytes) else name,
                doing, at, cause.partition("\n")[0].strip(), then,
            )  # fmt: skip

    def _log_short(self, at: int, got: int) -> None:
        """Log an answer cut short (its connection ended early): the rest is asked for."""
        self._log_retry(
            "reading",
            at,
            f"the answer ended after {got} bytes",
            f"asking for the rest from byte {at + got}",
        )

    async def _fetch(self, start: int, end: int) -> bytes:
        """Bytes ``[start, end)``: retried from the byte reached, never repeated."""
        pieces: list[bytes] = []
        at = start
        while at < end:
            data = await self._retrying(functools.partial(self._client.get, at, end), "reading", at)
            if len(data) > end - at:
                raise FailedPreconditionError(
                    f"the server answered a request for bytes {at}-{end - 1} with "
                    f"{len(data)} bytes: it does not serve byte ranges",
                    work_item=self._name,
                    offset=at,
                )
            if not data:
                raise DataLossError(
                    f"the file ended at {at}, before the {self.size} bytes it had when it "
                    "was opened",
                    work_item=self._name,
                    offset=at,
                )
            pieces.append(data)
            at += len(data)
            if at < end:
                self._log_short(at - len(data), len(data))
        return pieces[0] if len(pieces) == 1 else b"".join(pieces)

    # -- on the reader's thread -----------------------------------------------------------

    def _submit(self, coro: Any) -> Future[Any]:
        """Run ``coro`` on the client's loop (from any thread); a file interrupted runs
        nothing more (see :meth:`interrupt`)."""
        with self._guard:
            if not self._interrupted:
                future = asyncio.run_coroutine_threadsafe(coro, self._loop)
                futures = self._futures
                futures[:] = [f for f in futures if not f.done()]
                futures.append(future)
                return future
        coro.close()
        raise self._closed_error(None)

    def _wait(self, future: Future[Any], offset: int | None) -> Any:
        try:
            with map_io_errors(self._name, offset=offset):
                return future.result()
        except FutureCancelled:
            raise self._closed_error(offset) from None

    def _closed_error(self, offset: int | None) -> FailedPreconditionError:
        return FailedPreconditionError(
            "the file was closed during the read", work_item=self._name, offset=offset
        )

    def _launch(self, need: int) -> None:
        """Request what a read up to ``need`` wants, and the read-ahead within the window."""
        size = self.size
        assert size is not None
        settings = self._settings
        window = settings.read_ahead
        # A file read from its start streams: the whole window at once. After a seek
        # (a restore, records read again by key) the window opens as reads go on in order.
        ahead = window if self._streak == self._pos else min(window, 2 * self._streak)
        target = min(size, max(need, self._pos + ahead))
        part = settings.part_size
        parts = self._parts
        in_flight = sum(1 for p in parts if not p.future.done())
        while self._next < target and in_flight < settings.concurrency:
            start = self._next
            if start >= need and start + min(part, target - start) - self._pos > window:
                break  # read-ahead only within the window
            end = min(target, start + part)
            parts.append(_Part(start, end, self._submit(self._fetch(start, end))))
            self._next = end
            in_flight += 1

    def readinto(self, buf: memoryview) -> int:
        if self._closed:
            raise FailedPreconditionError("read from a closed file", work_item=self._name)
        with interruptible(self):
            return self._readinto(buf)

    def _readinto(self, buf: memoryview) -> int:
        size = self.size
        assert size is not None
        n = min(len(buf), max(0, size - self._pos))
        have = 0
        parts = self._parts
        while have < n:
            self._launch(self._pos + (n - have))
            first = parts[0]
            data: bytes = self._wait(first.future, first.start)
            at = self._pos - first.start
            take = min(n - have, len(data) - at)
            buf[have : have + take] = data[at : at + take]
            have += take
            self._pos += take
            if self._pos >= first.end:
                parts.popleft()
        self._streak += have
        if parts or have:
            self._launch(self._pos)  # keep the window full while the caller works
        return have

    def read(self, n: int) -> bytes:
        buf = bytearray(max(0, min(n, (self.size or 0) - self._pos)))
        got = self.readinto(memoryview(buf))
        return bytes(buf[:got]) if got < len(buf) else bytes(buf)

    def seek(self, offset: int) -> None:
        if offset == self._pos:
            return
        if offset < 0:
            raise InvalidArgumentError(f"cannot seek to {offset}", work_item=self._name)
        self._cancel()
        self._pos = self._next = offset
        self._streak = 0

    def _cancel(self) -> None:
        opening, self._opening = self._opening, None
        if opening is not None:
            opening.cancel()
            if opening.done() and not opening.cancelled() and opening.exception() is None:
                for part in opening.result()[1]:
                    part.future.cancel()  # the requests begun with the open
        parts, self._parts = self._parts, deque()
        for part in parts:
            part.future.cancel()  # cancels the request on fsspec's loop

    def close(self) -> None:
        self._closed = True
        self.interrupt()  # every request, the open's included
        self._cancel()

    def interrupt(self) -> None:
        """End the file's requests now, retries included; it asks for nothing more.

        Thread-safe (its I/O thread may be blocked in a read or the open meanwhile): the
        requests are cancelled on the client's loop, and a read or open waiting for one
        fails with :class:`~asyncreader.FailedPreconditionError` ("the file was closed
        during the read"), as every later one does. The thread running a reader's call
        that a closing reader discards is interrupted so (see
        :meth:`~asyncreader._io.executor.IoCall.interrupt`).
        """
        with self._guard:
            self._interrupted = True
            futures, self._futures = self._futures, []
        for future in futures:
            future.cancel()  # thread-safe: its task on the client's loop is cancelled in turn

    @property
    def in_flight(self) -> int:
        """Range requests not yet answered."""
        return sum(1 for p in self._parts if not p.future.done())

    @property
    def held(self) -> int:
        """Bytes requested and not yet read (the window in use)."""
        return self._next - self._pos

    def __repr__(self) -> str:
        return f"<RangeFile {self._name!r} size={self.size} closed={self._closed}>"
