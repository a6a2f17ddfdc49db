"""``s3://`` range requests through obstore (Rust's ``object_store``), when it is installed.

Measured against a local S3 server (``benchmarks/remote.py``), obstore fetched the same
objects 4-8x faster than s3fs on two cores: aiobotocore spends most of a request in Python
(signing, parsing, reading the body in small pieces) on the cores the readers need. So
with the optional extra ``asyncreader[obstore]`` installed, the range file
(:class:`~asyncreader._io.remote.RangeFile`) asks obstore for the byte ranges of ``s3://``
files; s3fs still lists buckets, and reads
the files when obstore is not installed or the configuration is one only s3fs understands.

The store is configured from fsspec's ``s3`` settings (``endpoint_url``, ``key``,
``secret``, ``token``, ``anon``, ``client_kwargs["region_name"]``), then from the usual
``AWS_*`` environment variables, as s3fs is. obstore's own retries are off: the range file
retries every request within its budget.
"""

from __future__ import annotations

import asyncio
import atexit
import os
import re
import threading
import time
from typing import TYPE_CHECKING, Any, Final

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable

__all__ = ["ENABLED", "ObstoreClient", "obstore_client"]

#: Whether ``s3://`` files are read through obstore when it is installed
#: (``set_remote_reading(obstore=True)``; off by default, see there).
ENABLED = False

#: fsspec ``s3`` settings that obstore is configured from; any other makes s3fs read.
_KNOWN: Final = frozenset(
    {"endpoint_url", "key", "secret", "token", "anon", "client_kwargs", "config_kwargs"}
)

#: A range request answered "416 Range Not Satisfiable" (an empty object). The status is
#: matched as a status: the message also holds the request's duration ("in 1.416ms"),
#: so a bare "416" could be any failed request (a 503 taken for an empty file).
_RANGE_NOT_SATISFIABLE: Final = re.compile(r"status(?: code)?:? 416\b|Range Not Satisfiable")

_stores: dict[tuple[str, tuple[tuple[str, Any], ...]], Any] = {}
_lock = threading.Lock()

#: obstore's requests not answered yet (futures on fsspec's event loop).
_in_flight: set[asyncio.Future[Any]] = set()
#: When the last of them was answered (time.monotonic()).
_last_answer = 0.0
#: How long a process exiting waits for them (see _settle_at_exit).
_EXIT_WAIT: Final = 5.0
#: How long it waits after the last answer: obstore's thread schedules the answer on the
#: loop before it wakes the loop up, so the answer can be taken while that thread is still
#: in Python for a moment.
_EXIT_AFTER_ANSWER: Final = 0.1


def _answered(future: asyncio.Future[Any]) -> None:
    global _last_answer
    _in_flight.discard(future)
    _last_answer = time.monotonic()


async def _answer(request: Awaitable[Any]) -> Any:
    """The answer of an obstore request, which is never cancelled.

    obstore's Rust threads deliver an answer by calling into Python
    (``call_soon_threadsafe``), and stay in Python a moment after the loop may have taken
    the answer. One that is there while the interpreter exits cannot take the GIL and
    the process aborts (SIGABRT, measured in about 1 exit in 20 right after a failed
    request). So a cancelled caller stops waiting but the request runs on until
    answered, and a process exiting waits for every answer and a moment after the last
    (bounded, see :func:`_settle_at_exit`).
    """
    future = asyncio.ensure_future(request)
    _in_flight.add(future)
    future.add_done_callback(_answered)
    return await asyncio.shield(future)


class ObstoreClient:
    """One ``s3://`` object read by ranges through obstore, on fsspec's event loop."""

    __slots__ = ("_key", "_loop", "_obstore", "_store", "_url")

    def __init__(self, obstore: Any, store: Any, key: str, url: str, loop: Any) -> None:
        self._obstore = obstore
        self._store = store
        self._key = key
        self._url = url
        self._loop = loop

    @property
    def loop(self) -> asyncio.AbstractEventLoop:
        loop: asyncio.AbstractEventLoop = self._loop
        return loop

    def setup(self) -> None:
        return None

    def _translated(self, exc: Exception) -> Exception:
        errors = self._obstore.exceptions
        if isinstance(exc, errors.NotFoundError):
            return FileNotFoundError(2, "No such file or directory", self._url)
        if isinstance(exc, (errors.PermissionDeniedError, errors.UnauthenticatedError)):
            return PermissionError(13, f"Permission denied ({exc})", self._url)
        return exc

    async def first(self, start: int, end: int) -> tuple[int, Callable[[], Awaitable[Any]]] | None:
        translated: Exception | None = None
        try:
            result = await _answer(
                self._obstore.get_async(self._store, self._key, options={"range": (start, end)})
            )
        except Exception as exc:
            if _RANGE_NOT_SATISFIABLE.search(str(exc)):
                # Range not satisfiable: the file is empty; its size is asked for apart.
                return None
            translated = self._translated(exc)
            if translated is exc:
                raise
        if translated is not None:
            # Raised outside the handler (see size).
            raise translated
        size = result.meta.get("size")
        if not isinstance(size, int):
            return None

        async def body() -> memoryview:
            return memoryview(await _answer(result.bytes_async()))

        return size, body

    async def size(self) -> int | None:
        translated: Exception | None = None
        try:
            meta = await _answer(self._obstore.head_async(self._store, self._key))
        except Exception as exc:
            translated = self._translated(exc)
            if translated is exc:
                raise
        if translated is not None:
            # Raised outside the handler, so without obstore's exception as its context:
            # that exception must not outlive the request (see forget_stores at the end).
            raise translated
        size = meta.get("size")
        return size if isinstance(size, int) else None

    async def get(self, start: int, end: int) -> Any:
        translated: Exception | None = None
        try:
            data = await _answer(
                self._obstore.get_range_async(self._store, self._key, start=start, end=end)
            )
        except Exception as exc:
            translated = self._translated(exc)
            if translated is exc:
                raise
        if translated is not None:
            # Raised outside the handler, so without obstore's exception as its context:
            # that exception must not outlive the request (see forget_stores at the end).
            raise translated
        return memoryview(data)


def obstore_client(url: str) -> ObstoreClient | None:
    """Return the obstore client of the ``s3://`` URL ``url``, or ``None`` when obstore is
    not installed or not enabled, or fsspec's settings are ones only s3fs understands."""
    if not ENABLED:
        return None
    try:
        import fsspec
        import fsspec.asyn
        import obstore
        from obstore.store import S3Store
    except ImportError:
        return None
    conf: dict[str, Any] = dict(fsspec.config.conf.get("s3", {}))
    if set(conf) - _KNOWN:
        return None
    client_kwargs = conf.get("client_kwargs") or {}
    if set(client_kwargs) - {"region_name"}:
        return None
    bucket, _, key = url.split("://", 1)[1].partition("/")
    if not bucket or not key:
        return None
    # Typed dicts of obstore's: filled key by key from fsspec's settings.
    config: Any = {}
    options: Any = {}
    endpoint = conf.get("endpoint_url") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        config["endpoint"] = endpoint
        if str(endpoint).startswith("http://"):
            options["allow_http"] = True
    for ours, theirs in (("key", "access_key_id"), ("secret", "secret_access_key")):
        if conf.get(ours):
            config[theirs] = conf[ours]
    if conf.get("token"):
        config["token"] = conf["token"]
    if conf.get("anon"):
        config["skip_signature"] = True
    region = client_kwargs.get("region_name")
    if region:
        config["region"] = region
    cache_key = (bucket, tuple(sorted({**config, **options}.items())))
    with _lock:
        store = _stores.get(cache_key)
        if store is None:
            store = S3Store(
                bucket,
                config=config,
                client_options=options,
                retry_config={"max_retries": 0},  # the range file retries, within its budget
            )
            _stores[cache_key] = store
    return ObstoreClient(obstore, store, key, url, fsspec.asyn.get_loop())


def forget_stores() -> None:
    """Drop the cached stores (their connections), for tests that move the endpoint."""
    with _lock:
        _stores.clear()


def _settle_at_exit() -> None:
    """Wait (bounded) for obstore's requests still running, then drop the stores.

    At exit (atexit runs while the interpreter is still whole): an answer delivered
    later, or a store dropped with the module's globals, would call into an interpreter
    that is finalizing, and the process would abort.
    """
    deadline = time.monotonic() + _EXIT_WAIT
    while time.monotonic() < deadline and (
        _in_flight or time.monotonic() < _last_answer + _EXIT_AFTER_ANSWER
    ):
        time.sleep(0.005)
    forget_stores()


atexit.register(_settle_at_exit)
