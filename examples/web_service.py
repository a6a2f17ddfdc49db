"""A small async web service whose request handlers share one reader and one queue.

A TensorFlow 1.x service built its input graph once, kept one ``tf.Session`` open for its
lifetime and called ``sess.run(read_op)`` from every request thread::

    filename_queue = tf.compat.v1.train.string_input_producer(files, shuffle=False)
    key, value = tf.compat.v1.TextLineReader().read(filename_queue)
    sess = tf.compat.v1.Session()
    tf.compat.v1.train.start_queue_runners(sess)
    ...
    def handle_next(request):
        return sess.run([key, value])

Here the Session is an ``async with`` block around the server, and each request handler
calls ``await sess.run(reader.read, filename_queue)``. The reader serialises concurrent
reads, so every request gets a different record, in file order, cycling through the files
for ever. Leaving the block (Ctrl-C, or cancelling :func:`serve`) stops the producer and
closes the queue and the reader's open file.

The HTTP part is a few lines on anyio's TCP listener (standard library only, no framework):

* ``GET /next``  -> ``{"key": "<file>:<line>", "value": "<the line>"}``
* ``GET /stats`` -> ``{"records": <served so far>, "queued_files": <file names queued>}``
* ``GET /metrics`` -> the pipeline's metrics in the Prometheus text format, and
  ``GET /pipeline/`` -> its live page (``asyncreader.metrics_app``, mounted at
  ``/pipeline``; they need the ``asyncreader[metrics]`` extra, else they answer 404)

Run it, then ``curl http://127.0.0.1:8000/next``, or open http://127.0.0.1:8000/pipeline/
in a browser::

    python examples/web_service.py                       # serves a small built-in text file
    python examples/web_service.py --port 8080 data/*.txt
"""

from __future__ import annotations

import argparse
import contextlib
import json
import tempfile
from pathlib import Path
from typing import Any

import anyio
from anyio.abc import SocketAttribute, SocketStream, TaskStatus

import asyncreader as ar

# A request head larger than this is refused: the service only ever expects short GETs.
MAX_HEAD_BYTES = 8192

# The pipeline's metrics endpoint (an ASGI application) answers these paths.
METRICS_PATHS = ("/metrics", "/pipeline")

REASONS = {
    200: "OK",
    400: "Bad Request",
    404: "Not Found",
    405: "Method Not Allowed",
    500: "Internal Server Error",
}


class RecordService:
    """The request handlers: one reader and one file name queue, shared through a Session."""

    def __init__(self, sess: ar.Session, paths: list[str]) -> None:
        self.sess = sess
        # Cycles through the files for ever (num_epochs=None), in order.
        self.filename_queue = ar.string_input_producer(paths, shuffle=False)
        self.reader = ar.TextLineReader(name="lines")
        try:
            self.metrics: Any = ar.metrics_app(sess)
        except ar.FailedPreconditionError:  # prometheus_client is not installed
            self.metrics = None

    async def next_record(self) -> tuple[int, dict[str, Any]]:
        try:
            key, value = await self.sess.run(self.reader.read, self.filename_queue)
        except ar.AsyncReaderError as exc:  # e.g. a file was deleted: report, keep serving
            return 500, {"error": str(exc)}
        return 200, {"key": key.decode(), "value": value.decode()}

    async def stats(self) -> tuple[int, dict[str, Any]]:
        return 200, {
            "records": self.reader.num_records_produced(),
            "queued_files": self.filename_queue.size(),
        }

    async def respond(self, method: str, path: str) -> tuple[int, dict[str, Any]]:
        routes = {"/next": self.next_record, "/stats": self.stats}
        if path not in routes:
            return 404, {"error": f"no such path: {path}"}
        if method != "GET":
            return 405, {"error": f"{method} is not allowed; use GET"}
        return await routes[path]()

    async def call_metrics(self, method: str, path: str) -> tuple[int, str, bytes]:
        """Answer a request with the metrics application (status, content type, body)."""
        root = "/pipeline" if path.startswith("/pipeline") else ""
        scope = {"type": "http", "method": method, "path": path, "root_path": root}
        answer: dict[str, Any] = {}

        async def receive() -> dict[str, Any]:
            return {"type": "http.request", "body": b"", "more_body": False}

        async def send(message: dict[str, Any]) -> None:
            answer.update(message)  # the start (status, headers), then the body

        await self.metrics(scope, receive, send)
        headers = dict(answer["headers"])
        return answer["status"], headers[b"content-type"].decode(), answer["body"]

    async def handle(self, client: SocketStream) -> None:
        """Serve one HTTP/1.1 request on ``client``, then close the connection."""
        async with client:
            head = b""
            try:
                while b"\r\n\r\n" not in head and len(head) < MAX_HEAD_BYTES:
                    head += await client.receive()
            except (anyio.EndOfStream, anyio.BrokenResourceError):
                return  # the client went away before sending a whole request
            request_line = head.split(b"\r\n", 1)[0].decode("latin-1").split()
            if (
                len(request_line) == 3
                and self.metrics
                and request_line[1].startswith(METRICS_PATHS)
            ):
                status, content_type, payload = await self.call_metrics(*request_line[:2])
            else:
                if len(request_line) != 3:
                    status, body = 400, {"error": "malformed request"}
                else:
                    status, body = await self.respond(request_line[0], request_line[1])
                content_type, payload = "application/json", json.dumps(body).encode() + b"\n"
            response = (
                f"HTTP/1.1 {status} {REASONS[status]}\r\n"
                f"Content-Type: {content_type}\r\n"
                f"Content-Length: {len(payload)}\r\n"
                "Connection: close\r\n\r\n"
            ).encode() + payload
            # The client may have gone away before reading the answer.
            with contextlib.suppress(anyio.BrokenResourceError, anyio.ClosedResourceError):
                await client.send(response)


async def serve(
    paths: list[str],
    host: str = "127.0.0.1",
    port: int = 8000,
    *,
    task_status: TaskStatus[int] = anyio.TASK_STATUS_IGNORED,
) -> None:
    """Serve records from ``paths`` until cancelled; report the bound port to ``task_status``.

    ``port=0`` picks a free port: ``port = await task_group.start(serve, paths, host, 0)``.
    """
    async with (
        ar.Session() as sess,
        await anyio.create_tcp_listener(local_host=host, local_port=port) as listener,
    ):
        service = RecordService(sess, paths)
        task_status.started(listener.extra(SocketAttribute.local_port))
        await listener.serve(service.handle)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("files", nargs="*", help="text files to serve, line by line")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--backend", choices=("asyncio", "trio"), default="asyncio")
    args = parser.parse_args(argv)

    async def run(paths: list[str]) -> None:
        async with anyio.create_task_group() as tg:
            port = await tg.start(serve, paths, args.host, args.port)
            print(f"serving {len(paths)} file(s) on http://{args.host}:{port}/next", flush=True)

    with tempfile.TemporaryDirectory() as tmp:
        paths = args.files
        if not paths:
            sample = Path(tmp, "records.txt")
            sample.write_text("".join(f"record {i}\n" for i in range(1, 11)))
            paths = [str(sample)]
        try:
            anyio.run(run, paths, backend=args.backend)
        except* KeyboardInterrupt:  # trio may deliver it inside the task group
            print("stopped")


if __name__ == "__main__":
    main()
