"""A job checkpoint taken by rank processes, the job stopped, and restored by another
number of rank processes.

Ranks are separate driver processes (``checkpoint_rank.py``), as in ``test_ledger.py``. A
job of 3 ranks reads TFRecord files through shuffle buffers, acknowledging each step,
takes the collective job checkpoint mid-epoch, goes on a few steps and is stopped (every
rank SIGKILLed, the job's actors deleted). A new job of 2 (or 4) rank processes restores
the checkpoint and reads to the end. The ledger: the keys acknowledged before the
checkpoint plus those acknowledged after the restore are every record exactly once.
"""

from __future__ import annotations

import collections
import json
import signal
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import anyio
import pytest

import asyncreader as ar
from asyncreader._runtime import state_codec

from .test_leases import write_files
from .test_ledger import wait_for

if TYPE_CHECKING:
    from .conftest import RayEnv

pytestmark = pytest.mark.timeout(180)

DRIVER = Path(__file__).with_name("checkpoint_rank.py")
SIZES = [40, 7, 65, 12, 51, 3, 30, 70, 18, 45, 25, 60]


def start_ranks(
    ray_env: RayEnv, namespace: str, root: Path, ranks: int, mode: str, paths: list[str]
) -> tuple[list[subprocess.Popen[bytes]], list[Path], list[Path]]:
    logs = [root / f"{mode}-{r}.log" for r in range(ranks)]
    outs = [root / f"{mode}-{r}.json" for r in range(ranks)]
    procs = []
    for r in range(ranks):
        args = [ray_env.address, namespace, str(r), str(ranks), mode,
                str(root / "job.ckpt"), str(outs[r]), *paths]  # fmt: skip
        with logs[r].open("w") as log:
            procs.append(
                subprocess.Popen(
                    [sys.executable, str(DRIVER), *args],
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    env=ray_env.env,
                )
            )
    return procs, logs, outs


def stop(procs: list[subprocess.Popen[bytes]]) -> None:
    for p in procs:
        if p.poll() is None:
            p.send_signal(signal.SIGKILL)
        p.wait(timeout=30)


def acked(outs: list[Path]) -> list[bytes]:
    return [bytes.fromhex(k) for out in outs for k in json.loads(out.read_text())]


def run_restore(ray_env: RayEnv, namespace: str, root: Path, after: int) -> None:
    paths, keys = anyio.run(write_files, root, SIZES)
    procs, logs, outs = start_ranks(ray_env, namespace, root, 3, "before", paths)
    try:
        wait_for(lambda: all("stopping" in log.read_text() for log in logs), 90,
                 "ranks checkpointed")  # fmt: skip
    finally:
        stop(procs)  # the job is stopped mid-epoch, leases held and buffers full
    assert all("checkpointed" in log.read_text() for log in logs)
    # Nobody is left in the job to delete its actors: do it, as after a lost job.
    anyio.run(ar.RayCluster(namespace=namespace).delete_job)
    before = acked(outs)
    checkpoint = (root / "job.ckpt").read_bytes()
    queues = state_codec.decode(checkpoint)["queues"]
    [snapshot] = [queue for name, queue in queues.items() if name.endswith("files")]
    # The cut is in the middle of the epoch: leased files with records acknowledged.
    assert 0 < len(before) < len(keys)
    assert any(lease[1] for lease in snapshot["leases"]), snapshot

    again = ray_env.namespace()
    procs, logs, outs = start_ranks(ray_env, again, root, after, "after", paths)
    try:
        for r, p in enumerate(procs):
            p.wait(timeout=120)
            assert p.returncode == 0, logs[r].read_text()[-3000:]
    finally:
        stop(procs)
    delivered = acked(outs)
    ledger = collections.Counter(before + delivered)
    lost = [k for k in keys if ledger[k] == 0]
    twice = {k: n for k, n in ledger.items() if n > 1}
    unknown = [k for k in ledger if k not in set(keys)]
    assert (lost, twice, unknown) == ([], {}, [])
    assert sum(ledger.values()) == len(keys)
    # The restored job cleaned up after itself: its last rank out deleted its actors.
    wait_for(lambda: not ray_env.named_actors(again), 15, "restored job's actors deleted")


def test_rank_processes_restore_a_job_checkpoint_with_fewer_ranks(
    ray_env: RayEnv, namespace: str, tmp_path: Path
) -> None:
    run_restore(ray_env, namespace, tmp_path, after=2)


@pytest.mark.stress
def test_rank_processes_restore_a_job_checkpoint_with_more_ranks(
    ray_env: RayEnv, namespace: str, tmp_path: Path
) -> None:
    run_restore(ray_env, namespace, tmp_path, after=4)
