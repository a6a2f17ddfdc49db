"""A real local Ray cluster for the distributed tests, on loopback only.

One cluster serves the ``tests/distributed`` tests of a test process (starting one takes
seconds; the suite's worker processes run these tests in two groups, see tests/conftest.py):
every Ray socket listens on 127.0.0.1, token authentication uses a fresh token passed in
the environment (nothing is written to ``$HOME``), and Ray's files go to a temporary
directory. Each test uses its own namespace and leaves no actor behind; when the package
is done the cluster is shut down and no process of it may remain.
"""

from __future__ import annotations

import os
import re
import secrets
import shutil
import subprocess
import tempfile
import time
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator

# Read by Ray when it is imported, so set before any test imports it: with the first,
# Ray's GCS, raylet and workers bind 127.0.0.1 instead of every interface; the others turn
# on token authentication with a token of this run only, which rank processes inherit.
_RAY_ENV = {
    "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
    "RAY_AUTH_MODE": "token",
    "RAY_AUTH_TOKEN": secrets.token_hex(32),
}
_SAVED_ENV = {name: os.environ.get(name) for name in _RAY_ENV}
os.environ.update(_RAY_ENV)


def short_temp_dir(prefix: str) -> Path:
    """A new directory with a short path: Ray puts Unix sockets under it, and a socket's
    path may not exceed 107 bytes (pytest's own temporary paths can be too long)."""
    return Path(tempfile.mkdtemp(prefix=prefix, dir="/tmp" if os.path.isdir("/tmp") else None))


def descendants(pid: int) -> set[int]:
    """The process ids of every descendant of ``pid`` still running."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        ppid = int(stat.rpartition(")")[2].split()[1])
        children.setdefault(ppid, []).append(int(entry.name))
    found: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found.add(child)
                todo.append(child)
    return found


def listening_addresses(pids: set[int]) -> list[str]:
    """The local addresses of the TCP sockets listening in processes ``pids`` (via ``ss``)."""
    out = subprocess.run(["ss", "-Hltnp"], capture_output=True, text=True, check=True).stdout
    found = []
    for line in out.splitlines():
        owners = {int(p) for p in re.findall(r"pid=(\d+)", line)}
        if owners & pids:
            found.append(line.split()[3])
    return found


class RayEnv:
    """The running cluster: its address and the environment a rank process needs."""

    def __init__(self, ray: Any, address: str, env: dict[str, str]) -> None:
        self.ray = ray
        self.address = address
        self.env = env

    def namespace(self) -> str:
        """A namespace no other test uses."""
        return f"t-{uuid.uuid4().hex[:12]}"

    def named_actors(self, namespace: str | None = None) -> list[dict[str, str]]:
        found = self.ray.util.list_named_actors(all_namespaces=True)
        return [a for a in found if namespace is None or a["namespace"] == namespace]


@pytest.fixture(scope="package")
def ray_env() -> Iterator[RayEnv]:
    ray = pytest.importorskip("ray", reason='Ray is not installed: pip install "asyncreader[ray]"')
    from ray._private import ray_constants

    if ray.is_initialized():
        pytest.skip("Ray is already running in this process")
    ray_constants.ENABLE_RAY_CLUSTER = False  # in case Ray was imported before the env was set
    temp_dir = short_temp_dir("ar-ray-")
    # Servers other test modules of this process started (a session's PostgreSQL) are not
    # the cluster's.
    before = descendants(os.getpid())
    context = ray.init(
        num_cpus=2,
        include_dashboard=False,
        log_to_driver=False,
        configure_logging=False,
        _temp_dir=str(temp_dir),
        namespace="asyncreader-tests",
    )
    env = dict(os.environ)
    try:
        yield RayEnv(ray, context.address_info["gcs_address"], env)
        assert ray.util.list_named_actors(all_namespaces=True) == []
    finally:
        ray.shutdown()
        for name, value in _SAVED_ENV.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
    left = descendants(os.getpid()) - before
    assert left == set(), f"Ray processes left after shutdown: {left}"
    shutil.rmtree(temp_dir, ignore_errors=True)


@pytest.fixture
def namespace(ray_env: RayEnv) -> Iterator[str]:
    """A fresh namespace; the test must leave no named actor in it."""
    name = ray_env.namespace()
    yield name
    # A killed actor leaves the cluster's name table a moment later (longer on a busy
    # machine): wait for that, within a bound, rather than read it once.
    deadline = time.monotonic() + 15
    while ray_env.named_actors(name) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert ray_env.named_actors(name) == [], "the job's actors were not deleted"
