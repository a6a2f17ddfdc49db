"""A cluster of several nodes started with ``ray start``, standing for hosts.

A head and extra nodes (``ray start --address``, custom resources ``host1``, ``host2``)
run on loopback, with their own temporary directory, port and token. The job's ranks are
actors placed on the extra nodes; they read a set of TFRecord files from one shared
work queue, one rank's process is SIGKILLed while it holds leases, and the others finish
its files: every record acknowledged exactly once. Then ``ray stop`` (of this cluster
only) leaves no process of it behind.

The cluster is this test's own: the test process stays out of it (it is connected to
the package's cluster), and ``nodes_driver.py`` drives the job.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

from .conftest import listening_addresses, short_temp_dir
from .test_ledger import skewed_files

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.timeout(300)

HERE = Path(__file__).parent
CLI = HERE / "ray_cli.py"
DRIVER = HERE / "nodes_driver.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def processes_naming(text: str) -> set[int]:
    """The processes whose command line names ``text``."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit() and int(entry.name) != os.getpid():
            try:
                cmdline = (entry / "cmdline").read_bytes()
            except OSError:
                continue
            if text.encode() in cmdline:
                found.add(int(entry.name))
    return found


class Nodes:
    """A head and extra nodes started with ``ray start`` (see the module)."""

    def __init__(self, root: Path) -> None:
        self.temp_dir = str(root)
        self.port = free_port()
        self.address = f"127.0.0.1:{self.port}"
        self.env = {
            **os.environ,
            "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0",
            "RAY_AUTH_MODE": "token",
            "RAY_AUTH_TOKEN": secrets.token_hex(32),
        }

    def ray(self, *args: str, timeout: float = 120) -> None:
        done = subprocess.run(
            [sys.executable, str(CLI), *args],
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        assert done.returncode == 0, (args, done.stdout[-2000:], done.stderr[-3000:])

    def start(self, hosts: int) -> None:
        common = ["--num-cpus=1", "--node-ip-address=127.0.0.1", "--disable-usage-stats"]
        self.ray("start", "--head", f"--port={self.port}", f"--temp-dir={self.temp_dir}",
                 "--include-dashboard=false", *common)  # fmt: skip
        for h in range(1, hosts + 1):
            self.ray("start", f"--address={self.address}", f'--resources={{"host{h}": 1}}',
                     *common)  # fmt: skip

    def processes(self) -> set[int]:
        return processes_naming(self.temp_dir) | processes_naming(self.address)

    def stop(self) -> None:
        self.ray("stop", "--only", self.temp_dir)


@pytest.fixture
def nodes() -> Iterator[Nodes]:
    pytest.importorskip("ray", reason='Ray is not installed: pip install "asyncreader[ray]"')
    cluster = Nodes(short_temp_dir("ar-nodes-"))
    try:
        yield cluster
    finally:
        cluster.stop()
    deadline = time.monotonic() + 30
    while cluster.processes() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert cluster.processes() == set(), "Ray processes left after ray stop"
    shutil.rmtree(cluster.temp_dir, ignore_errors=True)


def run_job(nodes: Nodes, root: Path, hosts: int, files: int, victim: int | None) -> None:
    import random

    nodes.start(hosts)
    ours = nodes.processes()
    outside = [
        a for a in listening_addresses(ours)
        if not a.startswith(("127.0.0.1:", "[::ffff:127.0.0.1]:"))
    ]  # fmt: skip
    assert outside == []
    paths = skewed_files(root, files, random.Random(7))
    namespace = f"nodes-{secrets.token_hex(4)}"
    done = subprocess.run(
        [
            sys.executable,
            str(DRIVER),
            nodes.address,
            namespace,
            str(-1 if victim is None else victim),
            *paths,
        ],
        env=nodes.env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    # Each rank ran on its own node (the one with its host resource).
    assert report["placed"] == {str(r): True for r in range(hosts)}
    assert report["nodes"] == hosts
    # Every record acknowledged exactly once, also when a rank died holding leases.
    assert (report["lost"], report["twice"], report["unknown"]) == (0, 0, 0), report
    assert report["dead"] == ([] if victim is None else [str(victim)])
    assert report["returned"] >= (0 if victim is None else 1)
    assert report["left"] == [0, []]
    assert all(steps > 0 for steps in report["steps"].values())


def test_a_rank_on_a_node_started_with_ray_start(nodes: Nodes, tmp_path: Path) -> None:
    # The fast subset: the command line path, placement, the ledger and the stop.
    run_job(nodes, tmp_path, hosts=1, files=3, victim=None)


@pytest.mark.stress
def test_ranks_on_two_nodes_one_killed(nodes: Nodes, tmp_path: Path) -> None:
    run_job(nodes, tmp_path, hosts=2, files=6, victim=1)
