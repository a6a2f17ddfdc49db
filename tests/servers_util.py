"""Real servers on loopback for the tests: nginx (HTTP) and moto's S3 server.

Each starts as a subprocess on a free port and is stopped when its ``with`` block ends.
Shared by the reader tests (tests/readers) and the command line tests (tests/cli).
"""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator


def free_port() -> int:
    """Return a TCP port on 127.0.0.1 that nothing listens on."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def wait_for_server(
    proc: subprocess.Popen[bytes], port: int, what: str, timeout: float, log: Path | None = None
) -> None:
    """Wait until ``proc`` accepts connections on 127.0.0.1:``port``; fail the test (killing
    ``proc``) if it exits or ``timeout`` seconds pass first, naming ``what`` and showing
    ``log`` when given."""
    deadline = time.monotonic() + timeout
    while True:
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                proc.kill()
                proc.wait()
                shown = f": {log.read_text(errors='replace')}" if log is not None else ""
                pytest.fail(f"{what} did not start{shown}")
            time.sleep(0.02)


@contextlib.contextmanager
def s3_server() -> Iterator[str]:
    """Run moto's S3 server (``moto[server]``) on a free loopback port; yield its endpoint
    URL. Its credentials are any key and secret (the tests use ``test``)."""
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    wait_for_server(proc, port, "moto's S3 server", timeout=30)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@contextlib.contextmanager
def nginx_server(root: Path) -> Iterator[tuple[str, Path]]:
    """Run nginx on a free loopback port serving ``root / "www"`` (created if missing);
    yield (base URL, access log). Skips the test when nginx is not installed."""
    binary = shutil.which("nginx") or (
        "/usr/sbin/nginx" if Path("/usr/sbin/nginx").exists() else None
    )
    if binary is None:
        pytest.skip("nginx is not installed (Debian package 'nginx'): HTTP tests need it")
    www = root / "www"
    www.mkdir(exist_ok=True)
    port = free_port()
    log = root / "access.log"
    conf = root / "nginx.conf"
    temp = root / "tmp"
    temp.mkdir(exist_ok=True)
    conf.write_text(
        f"""
daemon off;
master_process off;
pid {root}/nginx.pid;
error_log {root}/error.log;
events {{ worker_connections 64; }}
http {{
    access_log {log};
    client_body_temp_path {temp};
    proxy_temp_path {temp};
    fastcgi_temp_path {temp};
    uwsgi_temp_path {temp};
    scgi_temp_path {temp};
    server {{
        listen 127.0.0.1:{port};
        root {www};
    }}
}}
"""
    )
    proc = subprocess.Popen(
        [binary, "-c", str(conf), "-p", str(root)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.STDOUT,
    )
    wait_for_server(proc, port, "nginx", timeout=10, log=root / "error.log")
    try:
        yield f"http://127.0.0.1:{port}", log
    finally:
        proc.terminate()
        proc.wait(timeout=10)
