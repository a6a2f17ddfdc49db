"""The metrics endpoint as an ASGI application: metrics, the live page and its data.

Routes, relative to where the application is mounted:

* ``GET /`` — the live page (``page.html``: one self-contained file, no build step and
  nothing fetched from elsewhere), polling ``stages``;
* ``GET /metrics`` — the Prometheus text format;
* ``GET /stages`` — one sample of every stage as JSON, ``{"time": <the server's
  monotonic clock, seconds>, "stages": [...]}`` (what the page and ``asyncreader watch``
  read; rates are differences over the server's time, so a throttled page stays right).

Any other path answers 404, any other method 405.
"""

from __future__ import annotations

import json
from importlib import resources
from typing import TYPE_CHECKING, Any

from .prometheus import CONTENT_TYPE, render
from .snapshot import Sampler

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, MutableMapping

    from .._runtime.session import Session

    Scope = MutableMapping[str, Any]
    Message = MutableMapping[str, Any]
    Receive = Callable[[], Awaitable[Message]]
    Send = Callable[[Message], Awaitable[None]]
    ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]

__all__ = ["metrics_app"]


# Read when the package is imported, not in the event loop that serves it.
_PAGE = resources.files(__package__).joinpath("page.html").read_bytes()


def metrics_app(session: Session) -> ASGIApp:
    """Return an ASGI application serving ``session``'s metrics and live page.

    Mount it in any ASGI framework (``Mount("/pipeline", app=...)`` in Starlette, ``app.
    mount(...)`` in FastAPI) or serve it alone with :func:`serve_metrics`. Routes:
    ``/`` the live page (it reads ``stages`` relative to its own address, so open it with
    a trailing slash when mounted: ``/pipeline/``), ``/metrics`` the Prometheus text
    format, ``/stages`` one sample of every stage as JSON. Each request takes
    :meth:`Session.stage_statistics <asyncreader.Session.stage_statistics>` once.

    Args:
        session: The session whose stages are shown. Call this in its event loop.

    Returns:
        An ASGI 3 application (``async def app(scope, receive, send)``); it also answers
        the ``lifespan`` protocol.

    Raises:
        FailedPreconditionError: ``prometheus_client`` is not installed
            (``pip install 'asyncreader[metrics]'``).
    """
    from .prometheus import _client

    _client()
    sampler = Sampler(session)
    page = _PAGE

    async def snapshot() -> dict[str, Any]:
        return await sampler.take()

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        path: str = scope["path"]
        root: str = scope.get("root_path", "")
        if root and path.startswith(root):  # mounted: the route is what follows the mount
            path = path[len(root) :]
        path = path.rstrip("/") or "/"
        status, content_type, body = 200, "text/plain; charset=utf-8", b""
        if path not in ("/", "/metrics", "/stages"):
            status, body = 404, f"no such path: {path}\n".encode()
        elif scope["method"] not in ("GET", "HEAD"):
            status, body = 405, f"{scope['method']} is not allowed; use GET\n".encode()
        elif path == "/":
            content_type, body = "text/html; charset=utf-8", page
        elif path == "/metrics":
            content_type, body = CONTENT_TYPE, render((await snapshot())["stages"])
        else:
            content_type = "application/json"
            body = json.dumps(await snapshot()).encode()
        headers = [
            (b"content-type", content_type.encode()),
            (b"content-length", str(len(body)).encode()),
            (b"cache-control", b"no-store"),
        ]
        if status == 405:
            headers.append((b"allow", b"GET, HEAD"))
        await send({"type": "http.response.start", "status": status, "headers": headers})
        await send(
            {"type": "http.response.body", "body": b"" if scope["method"] == "HEAD" else body}
        )

    return app
