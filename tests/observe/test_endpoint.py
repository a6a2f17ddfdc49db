"""The ASGI application's routes and the stand-alone endpoint, which listens on loopback."""

from __future__ import annotations

import functools
import json
import socket
import sys
from pathlib import Path
from typing import Any

import anyio
import pytest

import asyncreader as ar

from .conftest import build_pipeline, call, stages_json, wait_until

pytest.importorskip(
    "prometheus_client", reason="prometheus_client is not installed: asyncreader[metrics]"
)

pytestmark = pytest.mark.anyio


async def http_get(port: int, path: str, *, method: str = "GET") -> tuple[int, bytes, bytes]:
    """One request over TCP to 127.0.0.1:port; return the status, the head and the body."""
    async with await anyio.connect_tcp("127.0.0.1", port) as stream:
        await stream.send(f"{method} {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        data = b""
        with anyio.fail_after(10):
            while True:
                try:
                    data += await stream.receive()
                except anyio.EndOfStream:
                    break
    head, _, body = data.partition(b"\r\n\r\n")
    return int(head.split()[1]), head, body


@pytest.mark.both_backends
async def test_routes_of_the_application(lines_file: str) -> None:
    with anyio.fail_after(20):
        async with ar.Session() as sess:
            _batches = build_pipeline(lines_file)
            await wait_until(lambda: len(sess.stage_statistics()) == 5)
            app = ar.metrics_app(sess)
            status, headers, body = await call(app, "/")
            assert (status, headers["content-type"]) == (200, "text/html; charset=utf-8")
            assert b"<title>asyncreader pipeline</title>" in body
            # Self-contained: nothing is loaded from another address.
            assert b"http://" not in body
            assert b"https://" not in body
            assert b"src=" not in body
            rows = await stages_json(app)
            assert [(r["kind"], r["name"]) for r in rows] == [
                (s.kind, s.name) for s in sess.stage_statistics()
            ]
            assert (await call(app, "/nowhere"))[0] == 404
            status, headers, _ = await call(app, "/metrics", method="POST")
            assert (status, headers["allow"]) == (405, "GET, HEAD")
            status, headers, body = await call(app, "/metrics", method="HEAD")
            assert (status, body) == (200, b"")
            assert int(headers["content-length"]) > 0
            # Mounted under a prefix (Starlette's Mount): the routes follow it.
            status, _, body = await call(app, "/pipeline/stages", root_path="/pipeline")
            assert status == 200
            assert json.loads(body)["stages"]
            assert (await call(app, "/pipeline/", root_path="/pipeline"))[0] == 200
            sess.coord.request_stop()


async def test_the_application_answers_lifespan() -> None:
    async with ar.Session() as sess:
        app = ar.metrics_app(sess)
    incoming = iter([{"type": "lifespan.startup"}, {"type": "lifespan.shutdown"}])
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return next(incoming)

    async def send(message: Any) -> None:
        sent.append(message)

    with anyio.fail_after(5):
        await app({"type": "lifespan"}, receive, send)
    assert [m["type"] for m in sent] == [
        "lifespan.startup.complete",
        "lifespan.shutdown.complete",
    ]


def listening(port: int) -> list[str]:
    """The local addresses listening on TCP ``port`` on this machine (from /proc/net)."""
    found = []
    for name in ("tcp", "tcp6"):
        table = Path("/proc/net", name)
        if not table.exists():
            continue
        for line in table.read_text().splitlines()[1:]:
            fields = line.split()
            address, hex_port = fields[1].rsplit(":", 1)
            if int(hex_port, 16) == port and fields[3] == "0A":  # 0A: LISTEN
                found.append(address)
    return found


def other_address() -> str | None:
    """An address of this machine that is not loopback, if it has one."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("192.0.2.1", 9))  # no packet is sent: this only picks a route
        except OSError:
            return None
        address: str = s.getsockname()[0]
    return None if address.startswith("127.") else address


@pytest.mark.both_backends
async def test_serve_metrics_listens_on_loopback_only(lines_file: str) -> None:
    if not sys.platform.startswith("linux"):
        pytest.skip("reads the listening sockets from /proc/net")
    with anyio.fail_after(20):
        async with ar.Session() as sess, anyio.create_task_group() as tg:
            _batches = build_pipeline(lines_file)
            port = await tg.start(functools.partial(ar.serve_metrics, sess))
            assert listening(port) == ["0100007F"]  # 127.0.0.1, nothing else
            address = other_address()
            if address is not None:
                with pytest.raises(OSError, match=r"connection attempts failed|refused"):
                    await anyio.connect_tcp(address, port)
            status, head, body = await http_get(port, "/metrics")
            assert status == 200
            assert b"content-type: text/plain; version=0.0.4" in head
            assert b'asyncreader_queue_size_elements{stage="filenames"}' in body
            status, _, body = await http_get(port, "/stages")
            assert status == 200
            assert json.loads(body)["stages"]
            status, _, body = await http_get(port, "/")
            assert status == 200
            assert b"asyncreader pipeline" in body
            assert (await http_get(port, "/metrics", method="DELETE"))[0] == 405
            tg.cancel_scope.cancel()
            sess.coord.request_stop()
    assert listening(port) == []


async def test_serve_metrics_refuses_a_malformed_request() -> None:
    with anyio.fail_after(20):
        async with ar.Session() as sess, anyio.create_task_group() as tg:
            port = await tg.start(functools.partial(ar.serve_metrics, sess))
            async with await anyio.connect_tcp("127.0.0.1", port) as stream:
                await stream.send(b"nonsense\r\n\r\n")
                answer = await stream.receive()
            assert answer.startswith(b"HTTP/1.1 400 ")
            # It still serves the next client.
            assert (await http_get(port, "/stages"))[0] == 200
            tg.cancel_scope.cancel()


async def test_serve_metrics_on_a_taken_port_raises() -> None:
    with anyio.fail_after(20):
        async with ar.Session() as sess, anyio.create_task_group() as tg:
            port = await tg.start(functools.partial(ar.serve_metrics, sess))
            with pytest.raises(OSError, match="in use"):
                await ar.serve_metrics(sess, port=port)
            tg.cancel_scope.cancel()
