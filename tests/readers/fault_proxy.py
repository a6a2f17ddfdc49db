"""A fault-injecting TCP proxy on loopback, for HTTP servers (moto's S3, nginx).

It forwards each client connection to the upstream server and, at the start of each
request it sees, may inject a fault:

* ``delay``: seconds to wait before forwarding every request (``delay_requests``: only the
  next that many requests; ``None``: all);
* ``fail_requests``: answer the next that many requests with ``fail_status`` itself and
  close the connection (``fail_match``: also every request whose request line has it);
* ``reset_responses``: forward the next that many responses for ``reset_after`` bytes,
  then reset the connection (a TCP RST, as a crashed server or middlebox gives);
* :meth:`stop` / :meth:`start`: refuse connections and reset every open one, as a killed
  server does, then listen again on the same port, as a restarted one does.

Counters (``requests``, ``faults``) let tests check that the faults really happened;
``request_lines`` has the first line of every request seen, with its ``Range`` header.
"""

from __future__ import annotations

import contextlib
import socket
import struct
import threading
import time

_METHODS = (b"GET ", b"HEAD ", b"PUT ", b"POST ", b"DELETE ")


def _reset(sock: socket.socket) -> None:
    """Cut ``sock`` off abruptly (a TCP RST where the kernel can): a crashed server."""
    with contextlib.suppress(OSError):
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    with contextlib.suppress(OSError):
        # Wakes the thread blocked reading it, which a bare close() would not.
        sock.shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(OSError):
        sock.close()


class FaultProxy:
    """Forward 127.0.0.1:``port`` to 127.0.0.1:``upstream_port``, injecting faults."""

    def __init__(self, upstream_port: int) -> None:
        self.upstream = ("127.0.0.1", upstream_port)
        self.delay = 0.0
        self.delay_requests: int | None = None
        self.fail_requests = 0
        self.fail_status = 503
        self.fail_match: bytes | None = None
        self.reset_responses = 0
        self.reset_after = 64 << 10
        self.requests = 0
        self.request_lines: list[bytes] = []
        self.faults = 0
        self._lock = threading.Lock()
        self._open: set[socket.socket] = set()
        self._closed = False
        self._server: socket.socket | None = None
        self.port = 0
        self.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Listen (again, on the same port once it has one)."""
        server = socket.create_server(("127.0.0.1", self.port))
        server.settimeout(0.05)
        self.port = server.getsockname()[1]
        self._server = server
        threading.Thread(target=self._accept, args=(server,), daemon=True).start()

    def stop(self) -> None:
        """Refuse new connections and reset the open ones."""
        server, self._server = self._server, None
        if server is not None:
            server.close()
        with self._lock:
            conns, self._open = self._open, set()
        for conn in conns:
            _reset(conn)

    def close(self) -> None:
        self._closed = True
        self.stop()

    def _accept(self, server: socket.socket) -> None:
        while self._server is server:
            try:
                client, _ = server.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=self._serve, args=(client,), daemon=True).start()

    def _track(self, *socks: socket.socket) -> bool:
        with self._lock:
            if self._server is None:
                return False
            self._open.update(socks)
            return True

    def _serve(self, client: socket.socket) -> None:
        try:
            upstream = socket.create_connection(self.upstream, timeout=10)
        except OSError:
            _reset(client)
            return
        upstream.settimeout(None)
        if not self._track(client, upstream):
            _reset(client)
            _reset(upstream)
            return
        # Bytes of the current response after which to reset (None: never).
        cut: list[int | None] = [None]
        threading.Thread(target=self._answers, args=(upstream, client, cut), daemon=True).start()
        try:
            while True:
                data = client.recv(1 << 16)
                if not data:
                    break
                if data.startswith(_METHODS) and not self._on_request(client, cut, data):
                    _reset(upstream)
                    return
                upstream.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                upstream.shutdown(socket.SHUT_WR)

    def _on_request(self, client: socket.socket, cut: list[int | None], data: bytes) -> bool:
        """Count a request and inject its fault; return whether to forward it."""
        with self._lock:
            self.requests += 1
            headers = data.partition(b"\r\n\r\n")[0].split(b"\r\n")
            ranges = [h for h in headers[1:] if h.lower().startswith(b"range:")]
            self.request_lines.append(b" ".join([headers[0], *ranges]))
            delay = 0.0
            if self.delay and (self.delay_requests is None or self.delay_requests > 0):
                delay = self.delay
                if self.delay_requests is not None:
                    self.delay_requests -= 1
            line = data.partition(b"\r\n")[0]
            head = line.startswith(b"HEAD ")
            matched = self.fail_match is not None and self.fail_match in line
            fail = matched or self.fail_requests > 0
            if fail:
                if not matched:
                    self.fail_requests -= 1
                self.faults += 1
            elif self.reset_responses > 0:
                self.reset_responses -= 1
                self.faults += 1
                cut[0] = self.reset_after
        if delay:
            time.sleep(delay)
        if fail:
            body = b"" if head else b"injected fault"  # a HEAD answer has no body
            with contextlib.suppress(OSError):
                client.sendall(
                    b"HTTP/1.1 %d Injected\r\nContent-Length: %d\r\nConnection: close\r\n\r\n%s"
                    % (self.fail_status, len(body), body)
                )
            with contextlib.suppress(OSError):
                client.close()
            return False
        return True

    def _answers(
        self, upstream: socket.socket, client: socket.socket, cut: list[int | None]
    ) -> None:
        sent = 0
        try:
            while True:
                data = upstream.recv(1 << 16)
                if not data:
                    break
                limit = cut[0]
                if limit is not None and sent + len(data) >= limit:
                    client.sendall(data[: max(0, limit - sent)])
                    _reset(client)
                    _reset(upstream)
                    return
                if limit is not None:
                    sent += len(data)
                client.sendall(data)
        except OSError:
            pass
        finally:
            with contextlib.suppress(OSError):
                client.shutdown(socket.SHUT_WR)
