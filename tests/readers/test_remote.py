"""Work items as URLs through fsspec: ``memory://`` and ``http://`` from a real nginx."""

from __future__ import annotations

import select
import socket
import threading
import time
from typing import TYPE_CHECKING

import anyio
import pytest
from queue_util import work_queue
from readers_util import (
    drain,
    read_verb,  # noqa: F401 (runs each test with both verbs)
    tfrecord_bytes,
)
from servers_util import nginx_server

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Iterator
    from pathlib import Path

fsspec = pytest.importorskip("fsspec", reason="fsspec (asyncreader[remote]) is not installed")
pytest.importorskip("aiohttp", reason="aiohttp (asyncreader[remote]) is not installed")

pytestmark = pytest.mark.anyio

PAYLOADS = [b"record-%06d-" % i + b"x" * (i % 300) for i in range(20_000)]
LINES = b"".join(b"line %d\n" % i for i in range(50_000))


@pytest.fixture(scope="module")
def nginx(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """Start nginx on a free local port serving a fresh directory; yield (base URL, log)."""
    root = tmp_path_factory.mktemp("nginx")
    www = root / "www"
    www.mkdir()
    (www / "data.tfrecord").write_bytes(tfrecord_bytes(PAYLOADS))
    (www / "lines.txt").write_bytes(LINES)
    with nginx_server(root) as served:
        yield served


@pytest.mark.both_backends
async def test_memory_urls_are_read_through_fsspec() -> None:
    mem = fsspec.filesystem("memory")
    mem.pipe("/ar-test/a.tfrecord", tfrecord_bytes([b"one", b"two"]))
    mem.pipe("/ar-test/b.txt", b"x\ny\n")
    try:
        async with ar.TFRecordReader() as reader:
            got = await drain(reader, await work_queue(["memory://ar-test/a.tfrecord"]))
        assert got == [
            (b"memory://ar-test/a.tfrecord:0", b"one"),
            (b"memory://ar-test/a.tfrecord:19", b"two"),
        ]
        async with ar.WholeFileReader() as whole:
            assert await whole.read(await work_queue(["memory://ar-test/b.txt"])) == (
                b"memory://ar-test/b.txt",
                b"x\ny\n",
            )
        async with ar.TextLineReader() as text:
            with pytest.raises(ar.NotFoundError, match="memory://ar-test/missing"):
                await text.read(await work_queue(["memory://ar-test/missing"]))
    finally:
        mem.rm("/ar-test", recursive=True)


def test_unknown_scheme_is_a_clear_error() -> None:
    from asyncreader._io.filesystem import open_work_item

    with pytest.raises(ar.FailedPreconditionError, match="no filesystem for 'nosuchscheme://x'"):
        open_work_item("nosuchscheme://x")


@pytest.mark.network
async def test_http_tfrecord_and_text_files(nginx: tuple[str, Path]) -> None:
    base, _ = nginx
    async with ar.TFRecordReader() as reader:
        got = await drain(reader, await work_queue([f"{base}/data.tfrecord"]))
    assert [v for _, v in got] == PAYLOADS
    assert got[1][0] == f"{base}/data.tfrecord:{16 + len(PAYLOADS[0])}".encode()
    async with ar.TextLineReader() as text:
        lines = await drain(text, await work_queue([f"{base}/lines.txt"]))
    assert len(lines) == 50_000
    assert lines[-1] == (f"{base}/lines.txt:50000".encode(), b"line 49999")


@pytest.mark.network
async def test_http_missing_file_is_not_found(nginx: tuple[str, Path]) -> None:
    base, _ = nginx
    async with ar.TFRecordReader() as reader:
        with pytest.raises(ar.NotFoundError, match=r"nope\.tfrecord"):
            await reader.read(await work_queue([f"{base}/nope.tfrecord"]))


@pytest.mark.network
@pytest.mark.both_backends
async def test_http_restore_mid_file_uses_range_reads(nginx: tuple[str, Path]) -> None:
    base, log = nginx
    url = f"{base}/data.tfrecord"
    q = await work_queue([url])
    async with ar.TFRecordReader() as first:
        head = [await first.read(q) for _ in range(12_345)]
        state = first.serialize_state()
    size_before = log.stat().st_size
    async with ar.TFRecordReader() as second:
        second.restore_state(state)
        rest = await drain(second, q)
    assert [v for _, v in head + rest] == PAYLOADS
    requests = log.read_bytes()[size_before:]
    assert b'" 206 ' in requests  # partial content: the restore seeked instead of re-reading


@pytest.mark.network
async def test_http_records_are_read_again_by_key_with_range_reads(
    nginx: tuple[str, Path],
) -> None:
    """What a restore of a queue saved with record_refs does over HTTP."""
    base, log = nginx
    url = f"{base}/data.tfrecord"
    async with ar.TFRecordReader() as reader:
        records = await drain(reader, await work_queue([url]))
        wanted = sorted({reader._split_key(k)[1] for k, _ in records[-3:] + records[7_000:7_002]})
        size_before = log.stat().st_size
        got = await anyio.to_thread.run_sync(reader._reread, url.encode(), wanted)
    by_offset = {reader._split_key(k)[1]: v for k, v in records}
    assert got == [by_offset[o] for o in wanted]
    assert b'" 206 ' in log.read_bytes()[size_before:]  # seeked to them: range requests


class _SilentServer:
    """A loopback HTTP server that accepts connections and then never answers; with
    ``head_size`` it answers ``HEAD`` (that size) and stays silent on every ``GET``.

    ``waiting`` counts the open connections whose request it left unanswered, ``dropped``
    those the client closed while waiting. It stops by itself after ``lifetime`` seconds,
    or when closed.
    """

    def __init__(self, head_size: int | None = None, lifetime: float = 20.0) -> None:
        self.head_size = head_size
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.05)
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}/data.txt"
        self.accepted = 0
        self.waiting = 0
        self.dropped = 0
        self.stop = threading.Event()
        self.deadline = time.monotonic() + lifetime
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        # Each connection, and whether it waits for an answer.
        held: dict[socket.socket, bool] = {}
        try:
            while not self.stop.is_set() and time.monotonic() < self.deadline:
                try:
                    conn, _ = self.sock.accept()
                except TimeoutError:
                    pass
                else:
                    self.accepted += 1
                    conn.setblocking(False)
                    held[conn] = False
                self._take_requests(held)
                self.waiting = sum(held.values())
        finally:
            for conn in held:
                conn.close()
            self.sock.close()

    def _take_requests(self, held: dict[socket.socket, bool]) -> None:
        if not held:
            return
        readable, _, _ = select.select(list(held), [], [], 0)
        for conn in readable:
            try:
                request = conn.recv(4096)
            except OSError:
                request = b""
            if not request:  # closed by the client
                self.dropped += held.pop(conn)
                conn.close()
            elif request.startswith(b"HEAD ") and self.head_size is not None:
                conn.sendall(
                    b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n"
                    b"Accept-Ranges: bytes\r\n\r\n" % self.head_size
                )
                held[conn] = False
            else:
                held[conn] = True  # never answered

    def close(self) -> None:
        self.stop.set()
        self.thread.join(timeout=5)


@pytest.fixture
def short_timeouts() -> Iterator[None]:
    ar.set_remote_timeouts(connect=1.0, read=0.5)
    ar.set_remote_reading(request_timeout=2.0, retry_budget=1.0, max_attempts=2)
    try:
        yield
    finally:
        ar.set_remote_timeouts()
        ar.set_remote_reading()


@pytest.mark.both_backends
@pytest.mark.usefixtures("short_timeouts")
async def test_http_server_that_never_answers_fails_the_open_with_the_url() -> None:
    server = _SilentServer()
    try:
        async with ar.TextLineReader() as reader:
            start = time.monotonic()
            with anyio.fail_after(10):
                with pytest.raises(
                    ar.FailedPreconditionError, match=r"gave up opening.*timed out"
                ) as info:
                    await reader.read(await work_queue([server.url]))
            assert time.monotonic() - start < 5
            assert info.value.work_item == server.url.encode()
            assert server.url in str(info.value)
            assert server.accepted >= 1
    finally:
        server.close()


@pytest.mark.both_backends
@pytest.mark.usefixtures("short_timeouts")
async def test_http_read_the_server_never_answers_fails_with_the_url() -> None:
    server = _SilentServer(head_size=1000)
    try:
        async with ar.TextLineReader() as reader:
            with anyio.fail_after(10):
                with pytest.raises(
                    ar.FailedPreconditionError, match=r"gave up reading.*timed out"
                ) as info:
                    await reader.read(await work_queue([server.url]))
            assert info.value.work_item == server.url.encode()
            assert info.value.offset == 0
    finally:
        server.close()


@pytest.mark.both_backends
async def test_cancelling_a_read_from_a_silent_server_returns_promptly(
    request: pytest.FixtureRequest,
) -> None:
    # Default timeouts (a minute): only the cancellation can end this read in time; a
    # short retry budget lets the abandoned thread end soon after the server is gone.
    ar.set_remote_reading(retry_budget=1.0)
    request.addfinalizer(ar.set_remote_reading)
    server = _SilentServer(lifetime=10.0)
    try:
        async with ar.TextLineReader() as reader:
            start = time.monotonic()
            with pytest.raises(TimeoutError):
                with anyio.fail_after(0.5):
                    await reader.read(await work_queue([server.url]))
            assert time.monotonic() - start < 2.5
            assert reader.statistics().abandoned_threads == 1
    finally:
        server.close()  # the open fails now; the abandoned thread returns


@pytest.mark.both_backends
@pytest.mark.parametrize("head_size", [None, 100_000], ids=["open", "read"])
async def test_closing_a_reader_ends_the_request_its_abandoned_read_waits_for(
    head_size: int | None,
) -> None:
    # Default timeout and retry budget (a minute each): without the close, the abandoned
    # thread would wait for the silent server that long.
    server = _SilentServer(head_size=head_size, lifetime=30.0)
    reader = ar.TextLineReader()
    try:
        with anyio.move_on_after(0.5):
            await reader.read_up_to(await work_queue([server.url]), 10)
        pending = reader._pending
        assert pending is not None
        assert reader.statistics().abandoned_threads == 1  # blocked in the open or a read
        assert pending.kind == ("start" if head_size is None else "fill")
        assert server.waiting >= 1
        start = time.monotonic()
        await reader.aclose()
        assert time.monotonic() - start < 3
        with anyio.fail_after(5):  # generous: it returns as soon as its request is ended
            while pending.call.running:  # noqa: ASYNC110 - another thread's state
                await anyio.sleep(0.02)
        # The request's connection is closed: the server sees it dropped.
        with anyio.fail_after(5):
            while server.waiting or not server.dropped:  # noqa: ASYNC110 - its count
                await anyio.sleep(0.02)
        assert reader.statistics().closed
        assert not reader._has_open_files()
    finally:
        await reader.aclose()
        server.close()


def test_remote_timeouts_are_checked() -> None:
    from asyncreader._io.filesystem import remote_timeouts

    with pytest.raises(ar.InvalidArgumentError, match="read timeout"):
        ar.set_remote_timeouts(read=0)
    with pytest.raises(ar.InvalidArgumentError, match="connect timeout"):
        ar.set_remote_timeouts(connect="1")  # type: ignore[arg-type]
    assert remote_timeouts() == (30.0, 60.0)
    ar.set_remote_timeouts(connect=None, read=5)
    try:
        assert remote_timeouts() == (None, 5.0)
    finally:
        ar.set_remote_timeouts()


def test_remote_reading_settings_are_checked_and_per_scheme() -> None:
    from asyncreader._io.remote import RemoteReading, remote_reading

    with pytest.raises(ar.InvalidArgumentError, match="read_ahead"):
        ar.set_remote_reading(read_ahead=-1)
    with pytest.raises(ar.InvalidArgumentError, match="concurrency"):
        ar.set_remote_reading(concurrency=0)
    with pytest.raises(ar.InvalidArgumentError, match="request_timeout"):
        ar.set_remote_reading(request_timeout=0)
    with pytest.raises(ar.InvalidArgumentError, match="max_attempts"):
        ar.set_remote_reading(max_attempts=True)
    with pytest.raises(ar.InvalidArgumentError, match="scheme"):
        ar.set_remote_reading(scheme="")
    assert remote_reading("s3") == RemoteReading()
    try:
        ar.set_remote_reading(scheme="S3", read_ahead=8 << 20, concurrency=2)
        assert remote_reading("s3").read_ahead == 8 << 20
        assert remote_reading("s3").part_size == 4 << 20
        assert remote_reading("https") == RemoteReading()
        ar.set_remote_reading(retry_budget=5)
        assert remote_reading("https").retry_budget == 5
        assert remote_reading("s3").retry_budget == RemoteReading().retry_budget
    finally:
        ar.set_remote_reading()  # the defaults everywhere, per-scheme settings dropped
    assert remote_reading("s3") == RemoteReading()


def test_obstore_reads_s3_only_when_asked() -> None:
    # Off by default (a process that exits after obstore failed a request can abort):
    # set_remote_reading(obstore=True) turns it on, other settings leave it, a call
    # without arguments turns it off again.
    pytest.importorskip("obstore", reason="obstore (asyncreader[obstore]) is not installed")
    from asyncreader._io.obstore_client import obstore_client

    url = "s3://bucket/file.tfrecord"
    try:
        assert obstore_client(url) is None
        ar.set_remote_reading(obstore=True)
        assert obstore_client(url) is not None
        ar.set_remote_reading(read_ahead=1 << 20)
        assert obstore_client(url) is not None
        ar.set_remote_reading()
        assert obstore_client(url) is None
    finally:
        ar.set_remote_reading()
