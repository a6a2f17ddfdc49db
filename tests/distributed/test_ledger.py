"""The ledger: each record acknowledged exactly once across ranks, with ranks killed.

Ranks are separate driver processes (``ledger_rank.py``) reading skewed TFRecord files
from one shared work queue through a shuffle buffer, acknowledging each step. Some are
SIGKILLed at a random moment while the files are being read. The work queue's actor
counts every acknowledged key (its ledger); the expected keys come from one local read
of the files. Every key must be acknowledged exactly once: none lost, none twice.
"""

from __future__ import annotations

import collections
import json
import random
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import anyio
import pytest

import asyncreader as ar

from .shuffled_steps import local_keys

if TYPE_CHECKING:
    from .conftest import RayEnv

pytestmark = pytest.mark.timeout(180)

DRIVER = Path(__file__).with_name("ledger_rank.py")


def skewed_files(root: Path, count: int, rng: random.Random) -> list[str]:
    paths = []
    for f in range(count):
        path = root / f"part-{f:02d}.tfrecord"
        with ar.TFRecordWriter(str(path)) as writer:
            for r in range(rng.choice([20, 80, 300, 600])):
                writer.write(f"{f}:{r}".encode() * 3)
        paths.append(str(path))
    return paths


def wait_for(predicate: Any, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{what} within {timeout:g} s")
        time.sleep(0.02)


def run_ledger(
    ray_env: RayEnv, namespace: str, root: Path, *, seed: int, ranks: int, kills: int
) -> None:
    rng = random.Random(seed)
    paths = skewed_files(root, 14, rng)
    expected = collections.Counter(anyio.run(local_keys, paths))
    # This process is one more rank of the job, which reads nothing: while it is inside,
    # the job (and the work queue's ledger) outlives the reading ranks, dead or done; it
    # is the last rank out.
    observer = ar.Session(cluster=ar.RayCluster(namespace=namespace), rank=ranks,
                          world_size=ranks + 1)  # fmt: skip
    with (
        anyio.from_thread.start_blocking_portal() as portal,
        portal.wrap_async_context_manager(observer),
    ):
        logs = [root / f"rank-{r}.out" for r in range(ranks)]
        procs = []
        for r in range(ranks):
            with logs[r].open("w") as out:
                args = [ray_env.address, namespace, str(r), str(ranks + 1), str(seed), *paths]
                procs.append(
                    subprocess.Popen(
                        [sys.executable, str(DRIVER), *args],
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        env=ray_env.env,
                    )
                )
        victims = rng.sample(range(ranks), kills)
        try:
            # Every rank is reading and acking; then kill while the files are being read.
            wait_for(lambda: all("started" in log.read_text() for log in logs), 90, "ranks started")
            for victim in victims:
                time.sleep(rng.uniform(0.0, 0.3))
                procs[victim].send_signal(signal.SIGKILL)
            for r, p in enumerate(procs):
                p.wait(timeout=120)
                if r not in victims:
                    assert p.returncode == 0, logs[r].read_text()[-3000:]
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait()
        ray = ray_env.ray
        [name] = [
            a["name"] for a in ray_env.named_actors(namespace) if a["name"].endswith("/files")
        ]
        actor = ray.get_actor(name, namespace=namespace)
        ledger = collections.Counter(ray.get(actor.ledger.remote(), timeout=30))
        status = ray.get(actor.lease_status.remote(), timeout=30)
    lost = [k for k in expected if ledger[k] == 0]
    twice = {k: n for k, n in ledger.items() if n > 1}
    unknown = [k for k in ledger if k not in expected]
    assert (len(lost), len(twice), unknown) == (0, 0, []), (
        f"lost {lost[:5]}, twice {twice}, victims {victims}, actor: {status}"
    )
    assert sum(ledger.values()) == sum(expected.values())
    assert len(status["dead"]) == kills, status
    assert sum(returned for *_, returned in status["events"]) >= kills  # work came back
    assert (status["pending"], status["leases"]) == (0, [])
    summaries = [json.loads(log.read_text().splitlines()[-1]) for r, log in enumerate(logs)
                 if r not in victims]  # fmt: skip
    assert all(s["steps"] > 0 for s in summaries)


def test_ledger_one_rank_killed(ray_env: RayEnv, namespace: str, tmp_path: Path) -> None:
    run_ledger(ray_env, namespace, tmp_path, seed=1, ranks=3, kills=1)


@pytest.mark.stress
@pytest.mark.parametrize("seed", range(2, 12))
def test_ledger_ranks_killed_stress(
    ray_env: RayEnv, namespace: str, tmp_path: Path, seed: int
) -> None:
    run_ledger(ray_env, namespace, tmp_path, seed=seed, ranks=4, kills=1 + seed % 2)
