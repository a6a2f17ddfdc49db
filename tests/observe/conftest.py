"""A running pipeline to watch: a file name producer, a line reader, a batch queue."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

import anyio
import pytest

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

    from asyncreader._observe.asgi import ASGIApp


@pytest.fixture
def lines_file(tmp_path: Path) -> str:
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"line {i}\n" for i in range(200)))
    return str(path)


def build_pipeline(path: str, *, decode_seconds: float = 0.0) -> ar.Batcher[Any]:
    """Build, in the current session: producer 'filenames' -> reader 'lines' -> batches."""
    files = ar.string_input_producer([path], num_epochs=None, name="filenames", capacity=4)
    reader = ar.TextLineReader(name="lines")

    async def example() -> tuple[bytes]:
        _, line = await reader.read(files)
        if decode_seconds:
            await anyio.sleep(decode_seconds)
        return (line,)

    return ar.batch(example, batch_size=4, capacity=8, num_threads=1)


async def wait_until(check: Callable[[], bool], seconds: float = 10.0) -> None:
    with anyio.fail_after(seconds):
        # The states polled here change inside the library, which signals no event.
        while not check():  # noqa: ASYNC110
            await anyio.sleep(0.01)


async def call(
    app: ASGIApp, path: str, *, method: str = "GET", root_path: str = ""
) -> tuple[int, dict[str, str], bytes]:
    """Call an ASGI application once; return the status, headers and body."""
    messages: list[dict[str, Any]] = []
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": method,
        "scheme": "http",
        "path": path,
        "raw_path": path.encode(),
        "query_string": b"",
        "root_path": root_path,
        "headers": [],
    }

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: Any) -> None:
        messages.append(message)

    await app(scope, receive, send)
    start, body = messages[0], messages[1]
    assert start["type"] == "http.response.start"
    headers = {k.decode(): v.decode() for k, v in start["headers"]}
    return start["status"], headers, body["body"]


async def stages_json(app: ASGIApp) -> list[dict[str, Any]]:
    status, _, body = await call(app, "/stages")
    assert status == 200
    rows: list[dict[str, Any]] = json.loads(body)["stages"]
    return rows
