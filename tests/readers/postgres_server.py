"""A throwaway PostgreSQL server for the tests: Debian's ``postgresql`` binaries, run as
the ``postgres`` user (the server refuses to run as root), on a free loopback port.

The data directory and the Unix socket live in a temporary directory owned by that user;
the server listens on 127.0.0.1 only and trusts local connections (``initdb
--auth=trust``), so nothing outside the machine can reach it. :func:`postgres_server`
starts it and stops it when the block ends (``pg_ctl stop -m immediate``: the data
is thrown away). Debian's own service is never started.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
from pathlib import Path
from typing import TYPE_CHECKING

from servers_util import free_port

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = ["postgres_bin", "postgres_server"]


def postgres_bin() -> Path | None:
    """The directory of ``initdb`` and ``pg_ctl`` (the newest Debian version), or None."""
    for directory in sorted(glob.glob("/usr/lib/postgresql/*/bin"), reverse=True):
        if os.access(os.path.join(directory, "pg_ctl"), os.X_OK):
            return Path(directory)
    found = shutil.which("pg_ctl")
    return Path(found).resolve().parent if found else None


def _as_server_user(argv: list[str]) -> list[str]:
    """Run ``argv`` as ``postgres`` when we are root (PostgreSQL will not run as root)."""
    if os.geteuid() != 0:
        return argv
    return ["runuser", "-u", "postgres", "--", *argv]


@contextlib.contextmanager
def postgres_server(bindir: Path) -> Iterator[str]:
    """Run a server until the block ends; yield its URL (``postgresql://postgres@...``)."""
    root = Path(tempfile.mkdtemp(prefix="asyncreader-pg-"))
    data, log = root / "data", root / "server.log"
    if os.geteuid() == 0:
        user = pwd.getpwnam("postgres")  # KeyError: no such user (the caller skips)
        os.chown(root, user.pw_uid, user.pw_gid)
    port = free_port()
    try:
        subprocess.run(
            _as_server_user(
                [
                    str(bindir / "initdb"),
                    "-D",
                    str(data),
                    "-U",
                    "postgres",
                    "-E",
                    "UTF8",
                    "--auth=trust",
                    "--no-sync",
                    "--no-instructions",
                ]
            ),
            check=True,
            capture_output=True,
        )
        options = f"-h 127.0.0.1 -p {port} -k {root} -c fsync=off -c full_page_writes=off"
        pg_ctl = [str(bindir / "pg_ctl"), "-D", str(data), "-l", str(log)]
        started = subprocess.run(
            _as_server_user([*pg_ctl, "-o", options, "-w", "-t", "60", "start"]),
            capture_output=True,
            check=False,
        )
        try:
            if started.returncode:
                shown = log.read_text(errors="replace") if log.exists() else ""
                raise RuntimeError(f"PostgreSQL did not start: {started.stderr!r} {shown}")
            yield f"postgresql://postgres@127.0.0.1:{port}/postgres"
        finally:
            subprocess.run(
                _as_server_user([*pg_ctl, "-m", "immediate", "-w", "stop"]),
                capture_output=True,
                check=False,
            )
    finally:
        shutil.rmtree(root, ignore_errors=True)
