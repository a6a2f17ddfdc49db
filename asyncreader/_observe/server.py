"""The stand-alone metrics endpoint: :func:`serve_metrics`, a small HTTP/1.1 server.

It runs the ASGI application of :mod:`.asgi` on an anyio TCP listener in the session's
own event loop (so the stages are read where they live), one request per connection.
"""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskStatus

from .asgi import metrics_app

if TYPE_CHECKING:
    from .._runtime.session import Session
    from .asgi import ASGIApp, Message

__all__ = ["serve_metrics"]

# The endpoint only expects short GETs; a larger request head is refused.
_MAX_HEAD = 8192
# A client that sends no whole request head within this many seconds is dropped.
_HEAD_TIMEOUT = 10.0
_REASONS = {200: "OK", 400: "Bad Request", 404: "Not Found", 405: "Method Not Allowed"}


async def _respond(client: SocketStream, app: ASGIApp) -> None:
    head = b""
    with anyio.move_on_after(_HEAD_TIMEOUT):
        while b"\r\n\r\n" not in head and len(head) < _MAX_HEAD:
            head += await client.receive()
    line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
    if b"\r\n\r\n" not in head or len(line) != 3:
        await client.send(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n")
        return
    method, target, _ = line
    path, _, query = target.partition("?")
    scope: dict[str, Any] = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode("latin-1"),
        "query_string": query.encode("latin-1"),
        "root_path": "",
        "headers": [],
    }
    parts: list[bytes] = []
    status = 500
    headers: list[tuple[bytes, bytes]] = []

    async def receive() -> Message:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Message) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status, headers = message["status"], list(message.get("headers", []))
        else:
            parts.append(message.get("body", b""))

    await app(scope, receive, send)
    lines = [f"HTTP/1.1 {status} {_REASONS.get(status, 'Error')}".encode()]
    lines += [name + b": " + value for name, value in headers]
    lines.append(b"connection: close")
    await client.send(b"\r\n".join(lines) + b"\r\n\r\n" + b"".join(parts))


async def serve_metrics(
    session: Session,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``session``'s metrics and live page over HTTP until cancelled.

    Listens on ``host`` only (loopback by default: give another address, such as
    ``"0.0.0.0"``, only to let other machines scrape it) and answers the routes of
    :func:`metrics_app`: ``/`` the live page, ``/metrics`` the Prometheus text format,
    ``/stages`` JSON. Run it in the session's task group, e.g.
    ``port = await tg.start(functools.partial(ar.serve_metrics, sess, port=9464))``, or
    ``sess.start_soon(...)`` so the session's stop ends it.

    Args:
        session: The session whose stages are served.
        host: The address to listen on.
        port: The TCP port; 0 picks a free one.
        task_status: Receives the bound port (for ``TaskGroup.start``).

    Raises:
        FailedPreconditionError: ``prometheus_client`` is not installed
            (``pip install 'asyncreader[metrics]'``).
        OSError: The address cannot be bound (e.g. the port is taken).
    """
    app = metrics_app(session)

    async def handle(client: SocketStream) -> None:
        async with client:
            # A client that goes away mid-request is its own business.
            with contextlib.suppress(anyio.EndOfStream, anyio.BrokenResourceError):
                await _respond(client, app)

    async with await anyio.create_tcp_listener(local_host=host, local_port=port) as listener:
        task_status.started(listener.extra(SocketAttribute.local_port))
        await listener.serve(handle)
