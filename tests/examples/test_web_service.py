"""``examples/web_service.py``: a real server on 127.0.0.1, real HTTP requests, clean shutdown."""

from __future__ import annotations

import json
import runpy
from pathlib import Path
from typing import Any

import anyio
import pytest

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]

LINES = [f"line {i}" for i in range(1, 6)]


EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "web_service.py"


@pytest.fixture(scope="module")
def serve() -> Any:
    """The example's ``serve(paths, host, port, *, task_status)``."""
    return runpy.run_path(str(EXAMPLE))["serve"]


@pytest.fixture
def text_file(tmp_path: Path) -> str:
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"{line}\n" for line in LINES))
    return str(path)


async def request(port: int, raw: bytes) -> tuple[int, dict[str, Any]]:
    """Send ``raw`` to the server and return the status code and the JSON body."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(raw)
        answer = b""
        try:
            while True:
                answer += await stream.receive()
        except anyio.EndOfStream:
            pass  # the server closes the connection after its response
    head, body = answer.split(b"\r\n\r\n", 1)
    status_line, *headers = head.decode("latin-1").split("\r\n")
    assert f"Content-Length: {len(body)}" in headers
    return int(status_line.split()[1]), json.loads(body)


async def get(port: int, path: str) -> tuple[int, dict[str, Any]]:
    return await request(port, f"GET {path} HTTP/1.1\r\nHost: test\r\n\r\n".encode())


async def test_next_returns_records_in_order_and_cycles(serve: Any, text_file: str) -> None:
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve, [text_file], "127.0.0.1", 0)
        answers = [await get(port, "/next") for _ in range(len(LINES) + 2)]
        assert {status for status, _ in answers} == {200}
        # The file name queue repeats the file for ever: the service never runs dry.
        assert [body["value"] for _, body in answers] == [*LINES, *LINES[:2]]
        assert answers[0][1]["key"] == f"{text_file}:1"
        status, stats = await get(port, "/stats")
        assert status == 200
        assert stats["records"] == len(LINES) + 2
        tg.cancel_scope.cancel()


async def test_concurrent_requests_share_one_reader(serve: Any, text_file: str) -> None:
    values: list[str] = []

    async def fetch(port: int) -> None:
        status, body = await get(port, "/next")
        assert status == 200
        values.append(body["value"])

    async with anyio.create_task_group() as tg:
        port = await tg.start(serve, [text_file], "127.0.0.1", 0)
        async with anyio.create_task_group() as clients:
            for _ in range(len(LINES)):
                clients.start_soon(fetch, port)
        tg.cancel_scope.cancel()
    # Each request got its own record: together they are the file, once.
    assert sorted(values) == LINES


async def test_bad_requests_get_error_statuses(serve: Any, text_file: str) -> None:
    async with anyio.create_task_group() as tg:
        port = await tg.start(serve, [text_file], "127.0.0.1", 0)
        assert (await get(port, "/missing"))[0] == 404
        assert (await request(port, b"POST /next HTTP/1.1\r\n\r\n"))[0] == 405
        assert (await request(port, b"nonsense\r\n\r\n"))[0] == 400
        # A client that hangs up without a request does not disturb the service.
        async with await anyio.connect_tcp("127.0.0.1", port):
            pass
        status, body = await get(port, "/next")
        assert (status, body["value"]) == (200, LINES[0])
        tg.cancel_scope.cancel()


async def test_shutdown_closes_the_listener(serve: Any, text_file: str) -> None:
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            port = await tg.start(serve, [text_file], "127.0.0.1", 0)
            assert (await get(port, "/next"))[0] == 200
            tg.cancel_scope.cancel()
    with pytest.raises(OSError, match=r"(?i)connect|refused"):
        await anyio.connect_tcp("127.0.0.1", port)


async def raw_get(port: int, path: str) -> tuple[int, dict[str, str], bytes]:
    """GET ``path``; return the status, the headers (lower-case names) and the raw body."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(f"GET {path} HTTP/1.1\r\nHost: test\r\n\r\n".encode())
        answer = b""
        with anyio.fail_after(10):
            try:
                while True:
                    answer += await stream.receive()
            except anyio.EndOfStream:
                pass
    head, body = answer.split(b"\r\n\r\n", 1)
    status_line, *lines = head.decode("latin-1").split("\r\n")
    headers = {k.lower(): v for k, v in (line.split(": ", 1) for line in lines)}
    assert int(headers["content-length"]) == len(body)
    return int(status_line.split()[1]), headers, body


async def test_the_service_exposes_its_pipeline_metrics_and_page(
    serve: Any, text_file: str
) -> None:
    pytest.importorskip("prometheus_client", reason="needs asyncreader[metrics]")
    with anyio.fail_after(10):
        async with anyio.create_task_group() as tg:
            port = await tg.start(serve, [text_file], "127.0.0.1", 0)
            for _ in range(3):
                assert (await get(port, "/next"))[0] == 200
            status, headers, body = await raw_get(port, "/metrics")
            assert status == 200
            assert headers["content-type"].startswith("text/plain; version=0.0.4")
            assert b'asyncreader_reader_records_total{stage="lines"} 3.0' in body
            status, headers, body = await raw_get(port, "/pipeline/")
            assert (status, headers["content-type"]) == (200, "text/html; charset=utf-8")
            assert b"asyncreader pipeline" in body
            status, _, body = await raw_get(port, "/pipeline/stages")
            assert status == 200
            reader = next(s for s in json.loads(body)["stages"] if s["kind"] == "reader")
            assert (reader["name"], reader["records_total"]) == ("lines", 3)
            tg.cancel_scope.cancel()
