"""The filesystem layer: the one place where readers open their work items.

A work item names a file. Plain paths (``str``, ``bytes`` or :class:`os.PathLike`) are local
files, read with large unbuffered reads and ``seek``. A string with a URL scheme
(``memory://``, ``http(s)://``, ``s3://``, …) goes through `fsspec
<https://filesystem-spec.readthedocs.io>`_, which is the optional extra
``asyncreader[remote]``; without it such work items fail with a
:class:`~asyncreader.FailedPreconditionError` naming the extra. ``file://`` URLs are local.

Everything here blocks: readers call it on the shared I/O executor, never on the event loop.
Errors are translated at this boundary with :func:`~asyncreader._errors.map_io_errors`: a
missing file is a :class:`~asyncreader.NotFoundError` naming it.

``http(s)://`` work items have timeouts (:func:`set_remote_timeouts`): a server that accepts
the connection and never answers fails the open or the read with a
:class:`~asyncreader.FailedPreconditionError` naming the URL instead of blocking for good.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import threading
from typing import TYPE_CHECKING, Any, Final, Protocol, runtime_checkable

from .._errors import (
    AsyncReaderError,
    DataLossError,
    FailedPreconditionError,
    InvalidArgumentError,
    NotFoundError,
    map_io_errors,
)
from .obstore_client import obstore_client
from .remote import FsspecClient, RangeFile, RemoteClient, remote_reading

if TYPE_CHECKING:
    from collections.abc import Iterator, Sequence
    from typing import TypeAlias

__all__ = [
    "READ_BLOCK",
    "Prefetched",
    "match_work_items",
    "pattern_names",
    "RandomAccessFile",
    "WorkItem",
    "is_url",
    "open_work_item",
    "prefetch_work_item",
    "read_whole",
    "remote_timeouts",
    "set_remote_timeouts",
]

#: Block size of readers' file reads: large enough that per-call overhead (a thread hop, a
#: framing call, an HTTP range request) vanishes against the bytes moved.
READ_BLOCK: Final = 4 << 20

#: What names a file: a local path or a URL.
WorkItem: TypeAlias = "str | bytes | os.PathLike[str] | os.PathLike[bytes]"

_SCHEME = re.compile(r"^([A-Za-z][A-Za-z0-9+.\-]*)://")

#: Default seconds to wait for an HTTP connection, and for each answer of the server.
DEFAULT_CONNECT_TIMEOUT: Final = 30.0
DEFAULT_READ_TIMEOUT: Final = 60.0

_timeouts: tuple[float | None, float | None] = (DEFAULT_CONNECT_TIMEOUT, DEFAULT_READ_TIMEOUT)


def _check_timeout(what: str, value: float | None) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not value > 0:
        raise InvalidArgumentError(f"{what} timeout must be a number > 0 or None, not {value!r}")
    return float(value)


def set_remote_timeouts(
    *,
    connect: float | None = DEFAULT_CONNECT_TIMEOUT,
    read: float | None = DEFAULT_READ_TIMEOUT,
) -> None:
    """Set the timeouts of ``http(s)://`` work items, for files opened from now on.

    A server that does not accept the connection within ``connect`` seconds, or goes
    ``read`` seconds without answering a request (the size probe of the open, or one
    block read), fails the operation with :class:`~asyncreader.FailedPreconditionError`
    naming the URL. Other fsspec filesystems (``s3://``, ``gs://``, …) keep their own
    settings.

    Args:
        connect: Seconds to connect (default 30); ``None``: no limit.
        read: Seconds to wait for each answer (default 60); ``None``: no limit.

    Raises:
        InvalidArgumentError: a timeout is not a number > 0 or ``None``.
    """
    global _timeouts
    _timeouts = (_check_timeout("connect", connect), _check_timeout("read", read))


def remote_timeouts() -> tuple[float | None, float | None]:
    """Return the ``(connect, read)`` timeouts of ``http(s)://`` work items in seconds."""
    return _timeouts


def _timed_out(exc: BaseException) -> bool:
    """Whether ``exc`` (or what it wraps: fsspec turns a failed probe into
    ``FileNotFoundError``) is a timeout."""
    seen: BaseException | None = exc
    for _ in range(4):
        if seen is None:
            return False
        if isinstance(seen, TimeoutError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _timeout_error(name: str | bytes, doing: str, offset: int | None = None) -> Exception:
    connect, read = _timeouts
    return FailedPreconditionError(
        f"timed out {doing} (connect timeout {connect} s, read timeout {read} s; see "
        "set_remote_timeouts)",
        work_item=name,
        offset=offset,
    )


@runtime_checkable
class RandomAccessFile(Protocol):
    """An open, readable, seekable file as the readers use it.

    ``read(n)`` returns exactly ``n`` bytes unless the end of the file comes first (a short
    result means end of file); ``readinto(buf)`` fills ``buf`` likewise and returns how many
    bytes it wrote; ``seek(offset)`` moves to an absolute offset (a file that
    cannot seek, such as a pipe, raises :class:`~asyncreader.FailedPreconditionError`);
    ``size`` is the file's length when known; ``close()`` is idempotent. A remote file
    read by range requests also has ``interrupt()``
    (:class:`~asyncreader._io.executor.Interruptible`): a closing reader ends the requests
    that its abandoned I/O call waits for through it.
    """

    @property
    def size(self) -> int | None: ...

    def read(self, n: int) -> bytes: ...

    def readinto(self, buf: memoryview) -> int: ...

    def seek(self, offset: int) -> None: ...

    def close(self) -> None: ...


def is_url(work: WorkItem) -> bool:
    """Return whether ``work`` is a URL with a scheme (and so not a plain local path)."""
    if isinstance(work, bytes):
        return _SCHEME.match(work.decode("utf-8", "replace")) is not None
    if isinstance(work, str):
        return _SCHEME.match(work) is not None
    return False


@contextlib.contextmanager
def _seeking(name: str | bytes, offset: int) -> Iterator[None]:
    """Map the errors of a seek to ``offset``; a file that cannot seek (a pipe, a stream)
    is :class:`FailedPreconditionError` naming it, not a bare ``OSError``."""
    try:
        with map_io_errors(name, offset=offset):
            yield
    except io.UnsupportedOperation as exc:
        raise _unseekable(name, offset) from exc
    except OSError as exc:
        if exc.errno != errno.ESPIPE:
            raise
        raise _unseekable(name, offset) from exc


def _unseekable(name: str | bytes, offset: int) -> FailedPreconditionError:
    return FailedPreconditionError(
        f"cannot resume at offset {offset}: the work item does not support seeking (a pipe "
        "or a stream can only be read from its start)",
        work_item=name,
        offset=offset,
    )


class _LocalFile:
    """A local file read with unbuffered ``os.read`` calls.

    A read that ends before the size the file had when it was opened means the file
    shrank while it was read: that is :class:`DataLossError`, not a quiet end of file
    (the records that were there are gone).
    """

    __slots__ = ("_f", "_name", "_pos", "size")

    def __init__(self, path: str | bytes, name: str | bytes) -> None:
        self._name = name
        try:
            with map_io_errors(name):
                self._f = open(path, "rb", buffering=0)  # noqa: SIM115 - closed by close()
                try:
                    self.size: int | None = os.fstat(self._f.fileno()).st_size
                except BaseException:
                    self._f.close()
                    raise
        except NotFoundError as exc:
            text = os.fsdecode(name)
            if has_glob_magic(text):
                # Work items are file names, as in TensorFlow; a pattern given by mistake
                # is a common slip, so say how patterns are given.
                exc.add_note(
                    f"{text!r} is taken as a file name: to read the files a glob pattern "
                    "matches, pass glob=True to string_input_producer or use "
                    "match_filenames_once"
                )
            raise
        self._pos = 0

    def read(self, n: int) -> bytes:
        with map_io_errors(self._name):
            data = self._f.read(n) or b""
            if len(data) < n and data:
                # A short read of a regular file is rare (signals); finish the block.
                parts = [data]
                have = len(data)
                while have < n:
                    more = self._f.read(n - have)
                    if not more:
                        break
                    parts.append(more)
                    have += len(more)
                data = b"".join(parts)
            self._pos += len(data)
            if len(data) < n and self.size is not None and self._pos < self.size:
                self._check_not_shrunk()
            return data

    def readinto(self, buf: memoryview) -> int:
        n = len(buf)
        with map_io_errors(self._name):
            have = self._f.readinto(buf) or 0
            # A short read of a regular file is rare (signals); finish the block.
            while 0 < have < n:
                more = self._f.readinto(buf[have:])
                if not more:
                    break
                have += more
            self._pos += have
            if have < n and self.size is not None and self._pos < self.size:
                self._check_not_shrunk()
            return have

    @property
    def position(self) -> int:
        """Where the next :meth:`read` starts."""
        return self._pos

    def pread_into(self, buf: memoryview, offset: int) -> int:
        """Fill ``buf`` from ``offset`` on without moving the file's position (safe on
        another thread while nothing else reads the file); return the bytes written, fewer
        only at the end of the file."""
        n = len(buf)
        fd = self._f.fileno()
        with map_io_errors(self._name, offset=offset):
            have = os.preadv(fd, [buf], offset)
            while 0 < have < n:  # short reads are rare (signals): finish the block
                more = os.preadv(fd, [buf[have:]], offset + have)
                if not more:
                    break
                have += more
            if have < n and self.size is not None and offset + have < self.size:
                now = os.fstat(fd).st_size
                if now < self.size:
                    raise DataLossError(
                        f"the file shrank from {self.size} to {now} bytes while it was read",
                        work_item=self._name,
                        offset=offset + have,
                    )
            return have

    def check_extent(self, end: int) -> None:
        """Raise :class:`~asyncreader.DataLossError` if the file no longer reaches ``end``
        (bytes read ahead of time are then no longer the file's)."""
        with map_io_errors(self._name):
            now = os.fstat(self._f.fileno()).st_size
        if now < end:
            raise DataLossError(
                f"the file shrank from {self.size} to {now} bytes while it was read",
                work_item=self._name,
                offset=now,
            )

    def _check_not_shrunk(self) -> None:
        now = os.fstat(self._f.fileno()).st_size
        if now < self._pos or (self.size is not None and now < self.size):
            raise DataLossError(
                f"the file shrank from {self.size} to {now} bytes while it was read",
                work_item=self._name,
                offset=self._pos,
            )

    def seek(self, offset: int) -> None:
        if offset == self._pos:
            return  # e.g. resuming at the start of a pipe, which cannot seek
        with _seeking(self._name, offset):
            self._f.seek(offset)
        self._pos = offset

    def close(self) -> None:
        self._f.close()

    def __repr__(self) -> str:
        return f"<_LocalFile {self._name!r} size={self.size} closed={self._f.closed}>"


class _FsspecFile:
    """A file opened through fsspec (random access by range reads where supported)."""

    __slots__ = ("_f", "_name", "_pos", "size")

    def __init__(self, f: Any, name: str | bytes) -> None:
        self._f = f
        self._name = name
        self._pos = 0
        size = getattr(f, "size", None)
        self.size = size if isinstance(size, int) else None

    def read(self, n: int) -> bytes:
        parts: list[bytes] = []
        have = 0
        try:
            with map_io_errors(self._name, offset=self._pos):
                while have < n:
                    data = self._f.read(n - have)
                    if not data:
                        break
                    parts.append(bytes(data))
                    have += len(data)
        except Exception as exc:
            if _timed_out(exc):
                raise _timeout_error(self._name, "reading", self._pos + have) from exc
            raise
        self._pos += have
        return parts[0] if len(parts) == 1 else b"".join(parts)

    def readinto(self, buf: memoryview) -> int:
        # fsspec files return bytes per request: one copy into the block.
        data = self.read(len(buf))
        buf[: len(data)] = data
        return len(data)

    def seek(self, offset: int) -> None:
        with _seeking(self._name, offset):
            self._f.seek(offset)
        self._pos = offset

    def close(self) -> None:
        self._f.close()

    def __repr__(self) -> str:
        return f"<_FsspecFile {self._name!r} size={self.size}>"


#: The extra that brings a scheme's filesystem, named when it is missing.
_EXTRAS: Final = {
    "s3": " (install the extra with pip install 'asyncreader[s3]')",
    "s3a": " (install the extra with pip install 'asyncreader[s3]')",
}


def _url_fs(url: str, name: str | bytes) -> tuple[Any, str, str | None]:
    """fsspec's filesystem of ``url``, the path in it, and the URL's scheme."""
    scheme = _SCHEME.match(url)
    try:
        import fsspec
    except ImportError:
        raise FailedPreconditionError(
            f"reading {url!r} needs fsspec: install the extra with "
            "pip install 'asyncreader[remote]'",
            work_item=name,
        ) from None
    options: dict[str, Any] = {}
    scheme_name = scheme[1].lower() if scheme is not None else None
    if scheme_name in ("http", "https"):
        try:
            import aiohttp
        except ImportError:
            pass  # fsspec names what is missing below
        else:
            connect, read = _timeouts
            # No total limit (a large file may take long): each wait for the server is.
            timeout = aiohttp.ClientTimeout(total=None, sock_connect=connect, sock_read=read)
            options["client_kwargs"] = {"timeout": timeout}
    with map_io_errors(name):
        try:
            fs, path = fsspec.core.url_to_fs(url, **options)
        except (ImportError, ValueError) as exc:
            hint = _EXTRAS.get(scheme[1].lower(), "") if scheme is not None else ""
            raise FailedPreconditionError(
                f"no filesystem for {url!r}: {exc}{hint}", work_item=name
            ) from exc
    return fs, path, scheme_name


def _range_file(
    fs: Any,
    path: str,
    url: str,
    scheme_name: str | None,
    name: str | bytes,
    *,
    wait: bool,
    after: Sequence[RangeFile] = (),
) -> RangeFile:
    # Object stores and web servers: concurrent range requests ahead of the reader, with
    # timeouts and retries (see asyncreader._io.remote); s3:// through obstore when it is
    # enabled (measured faster).
    client: RemoteClient | None = None
    if scheme_name in ("s3", "s3a"):
        client = obstore_client(url)
    if client is None:
        client = FsspecClient(fs, path)
    return RangeFile(client, name, remote_reading(scheme_name), wait=wait, after=after)


# Remote files whose open was begun ahead (prefetch_work_item), by URL: whichever reader
# opens the URL next takes it.
_ahead: dict[str, RangeFile] = {}
_ahead_lock = threading.Lock()


class Prefetched:
    """A remote file opened ahead of its reader (see :func:`prefetch_work_item`)."""

    __slots__ = ("file", "url")

    def __init__(self, url: str, file: RangeFile) -> None:
        self.url = url
        self.file = file

    @property
    def deferred(self) -> bool:
        """Whether the window was full: nothing was asked for (see :func:`prefetch_work_item`)."""
        return self.file.deferred

    def discard(self) -> None:
        """Close the file unless a reader took it. Blocks briefly (no I/O)."""
        with _ahead_lock:
            mine = _ahead.get(self.url) is self.file
            if mine:
                del _ahead[self.url]
        if mine:
            self.file.close()


def prefetch_work_item(work: WorkItem, *, after: Sequence[Prefetched] = ()) -> Prefetched | None:
    """Begin opening the remote file ``work`` names, for the reader that opens it next.

    A reader about to read its current file calls this with the work items its queue will
    hand out next, so that their first windows (their sizes with them) are fetched
    while the current file is read: with latency per request, files are no longer opened
    one round trip after another. The files opened ahead, ``after`` (in the order they
    will be read) and this one, share one read-ahead window
    (:attr:`~asyncreader._io.remote.RemoteReading.read_ahead`): this one asks for what
    they leave of it once their first answers are in, and nothing when they fill it or
    answered quickly (:attr:`~asyncreader._io.remote.RangeFile.deferred`). That is held
    until a reader opens the file or the caller discards it. Nothing is taken from the
    queue; :func:`open_work_item` of the same URL, by any reader, takes the open. Local
    files, streams and URLs already begun return ``None``; so does any error (the real
    open reports it).
    """
    name: str | bytes = os.fspath(work)
    if not is_url(name):
        return None
    url = os.fsdecode(name)
    scheme = _SCHEME.match(url)
    if scheme is not None and scheme[1].lower() == "file":
        return None
    with _ahead_lock:
        if url in _ahead:
            return None
    try:
        fs, path, scheme_name = _url_fs(url, name)
        if not getattr(fs, "async_impl", False):
            return None
        ranged = _range_file(
            fs, path, url, scheme_name, name, wait=False, after=[p.file for p in after]
        )
    except Exception:
        return None
    with _ahead_lock:
        if url not in _ahead:
            _ahead[url] = ranged
            return Prefetched(url, ranged)
    ranged.close()
    return None


def _take_ahead(url: str) -> RangeFile | None:
    """The file of ``url`` opened ahead, opened now; ``None`` when there is none or its
    open failed (opened again by the caller, which reports any error)."""
    with _ahead_lock:
        ranged = _ahead.pop(url, None)
    if ranged is None:
        return None
    if not ranged.open_failed:
        try:
            ranged.opened()
        except Exception:
            pass  # failed late: opened again, which retries or says why
        else:
            if ranged.size is not None:
                return ranged
    ranged.close()
    return None


def _open_url(url: str, name: str | bytes) -> RandomAccessFile:
    scheme = _SCHEME.match(url)
    if scheme is not None and scheme[1].lower() == "file":
        return _LocalFile(url[len("file://") :], name)
    if _ahead:
        ahead = _take_ahead(url)
        if ahead is not None:
            return ahead
    fs, path, scheme_name = _url_fs(url, name)
    try:
        with map_io_errors(name):
            if getattr(fs, "async_impl", False):
                ranged = _range_file(fs, path, url, scheme_name, name, wait=True)
                if ranged.size is not None:
                    return ranged
                ranged.close()  # no size (a stream): read it in order below
            # Readers read big blocks themselves: no read-ahead cache on top.
            f = fs.open(path, "rb", block_size=READ_BLOCK, cache_type="none")
    except AsyncReaderError:
        raise  # said already (the retries of a range file gave up)
    except Exception as exc:
        if _timed_out(exc):
            raise _timeout_error(name, "opening") from exc
        raise
    return _FsspecFile(f, name)


def open_work_item(work: WorkItem) -> RandomAccessFile:
    """Open the file that ``work`` names for reading. Blocks: call it through ``run_io``.

    Args:
        work: A local path (``str``, ``bytes`` or path-like) or a URL with a scheme.

    Returns:
        The open file; the caller closes it.

    Raises:
        NotFoundError: if the file does not exist or is a directory.
        FailedPreconditionError: if it may not be read, or it is a URL and fsspec (the
            ``asyncreader[remote]`` extra) is not installed or knows no such scheme.
    """
    name: str | bytes = os.fspath(work)
    if is_url(name):
        return _open_url(os.fsdecode(name), name)
    # Open by str where the bytes decode, so that OS errors name the file readably.
    return _LocalFile(os.fsdecode(name), name)


def read_whole(work: WorkItem) -> bytes:
    """Return the entire contents of the file ``work`` names. Blocks.

    Raises:
        NotFoundError: if the file does not exist or is a directory.
        FailedPreconditionError: as for :func:`open_work_item`.
    """
    f = open_work_item(work)
    try:
        size = f.size
        if size is not None:
            data = f.read(size)
            extra = f.read(READ_BLOCK)  # the file may have grown since it was opened
            if not extra:
                return data
            parts = [data, extra]
        else:
            parts = []
        while True:
            block = f.read(READ_BLOCK)
            if not block:
                return b"".join(parts)
            parts.append(block)
    finally:
        f.close()


_MAGIC = re.compile(r"[*?[]")


def has_glob_magic(pattern: str) -> bool:
    """Whether ``pattern`` has glob wildcards (``*``, ``?``, ``[...]``)."""
    return _MAGIC.search(pattern) is not None


def pattern_names(pattern: str, name: str) -> bool:
    """Whether :func:`match_work_items` could return ``name`` for ``pattern``. No I/O.

    The test is by the text alone, the way :func:`glob.glob` walks: ``/``-separated parts
    matched one by one, ``*`` and ``?`` within a part, ``**`` across any number of parts,
    and a part starting with ``.`` matched only by a pattern part starting with ``.`` (so
    ``..`` never is). Used to vet names a checkpoint claims a pattern matched.
    """
    if not (is_url(pattern) and not pattern.lower().startswith("file://")):
        if pattern.lower().startswith("file://"):
            pattern = pattern[len("file://") :]
        pattern = os.path.expanduser(pattern)
    if not has_glob_magic(pattern):
        return name == pattern
    return _parts_match(pattern.split("/"), name.split("/"))


def _parts_match(pattern: list[str], name: list[str]) -> bool:
    import fnmatch

    if not pattern:
        return not name
    head = pattern[0]
    if head == "**":
        # Zero parts, or one more visible part, then the rest.
        return _parts_match(pattern[1:], name) or (
            bool(name) and not name[0].startswith(".") and _parts_match(pattern, name[1:])
        )
    if not name:
        return False
    part = name[0]
    if part.startswith(".") and not head.startswith("."):
        return False
    if part in (".", "..") and head != part:
        return False
    return fnmatch.fnmatchcase(part, head) and _parts_match(pattern[1:], name[1:])


def match_work_items(patterns: list[str]) -> list[str]:
    """Return the files matching any of ``patterns``, sorted, each once. Blocks.

    Local patterns follow :func:`glob.glob` (``**`` spans directories); URL patterns go
    through fsspec's ``glob`` and come back as URLs of the same scheme. A pattern without
    wildcards names one file, which must exist. Directories are never matched.

    Raises:
        NotFoundError: a pattern matches no file (naming the pattern).
        FailedPreconditionError: a URL pattern and fsspec is not installed.
    """
    import glob

    found: set[str] = set()
    for pattern in patterns:
        matches: list[str]
        if is_url(pattern) and not pattern.lower().startswith("file://"):
            matches = _match_url(pattern)
        else:
            local = pattern[len("file://") :] if pattern.lower().startswith("file://") else pattern
            with map_io_errors(pattern):
                matches = [
                    m
                    for m in glob.glob(os.path.expanduser(local), recursive=True)
                    if os.path.isfile(m)
                ]
        if not matches:
            raise NotFoundError(f"no file matches {pattern!r}", work_item=pattern)
        found.update(matches)
    return sorted(found)


def _match_url(pattern: str) -> list[str]:
    scheme = _SCHEME.match(pattern)
    assert scheme is not None
    try:
        import fsspec
    except ImportError:
        raise FailedPreconditionError(
            f"matching {pattern!r} needs fsspec: install the extra with "
            "pip install 'asyncreader[remote]'",
            work_item=pattern,
        ) from None
    try:
        with map_io_errors(pattern):
            fs, path = fsspec.core.url_to_fs(pattern)
            if not has_glob_magic(path):
                return [pattern] if fs.isfile(path) else []
            paths = fs.glob(path, detail=True)
    except Exception as exc:
        if _timed_out(exc):
            raise _timeout_error(pattern, "listing") from exc
        raise
    # fsspec gives paths without the scheme; hand back URLs of the pattern's scheme.
    prefix = scheme[0]
    urls = []
    for found, info in paths.items():
        if info.get("type") != "file":
            continue
        urls.append(found if _SCHEME.match(found) else prefix + found.lstrip("/"))
    return urls
