"""Ranks in separate processes share one work queue on a real local Ray cluster.

Three driver processes (``rank_driver.py``) join the cluster, race to create the same
shared queues, and together read TFRecord files from the work queue: every record is read
exactly once, by some rank, and every rank found the same actors. When the last rank's
session ends the job's actors are gone. Ray listens on loopback only.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import TYPE_CHECKING

import pytest

import asyncreader as ar

from .conftest import descendants, listening_addresses

if TYPE_CHECKING:
    from .conftest import RayEnv

pytestmark = pytest.mark.timeout(120)

DRIVER = Path(__file__).with_name("rank_driver.py")


def write_files(root: Path, files: int, records: int) -> tuple[list[str], list[str]]:
    paths, values = [], []
    for f in range(files):
        path = root / f"part-{f:03d}.tfrecord"
        with ar.TFRecordWriter(str(path)) as writer:
            for r in range(records):
                value = f"{f}-{r}"
                writer.write(value.encode())
                values.append(value)
        paths.append(str(path))
    return paths, values


def test_three_ranks_read_each_record_once(ray_env: RayEnv, namespace: str, tmp_path: Path) -> None:
    paths, expected = write_files(tmp_path, files=12, records=40)
    world = 3
    procs = [
        subprocess.Popen(
            [sys.executable, str(DRIVER), ray_env.address, namespace, str(r), str(world), *paths],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
            env=ray_env.env,
        )
        for r in range(world)
    ]
    outputs = []
    try:
        for p in procs:
            out, err = p.communicate(timeout=90)
            assert p.returncode == 0, err[-3000:]
            outputs.append(json.loads(out.strip().splitlines()[-1]))
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
    got = [v for o in outputs for v in o["values"]]
    assert sorted(got) == sorted(expected)  # each record once: none lost, none twice
    assert len({tuple(o["actors"]) for o in outputs}) == 1  # one actor per shared name
    assert all(o["values"] for o in outputs), [len(o["values"]) for o in outputs]
    # The last rank out deleted the job's actors (the namespace fixture checks too).
    assert ray_env.named_actors(namespace) == []


def test_ray_listens_on_loopback_only(ray_env: RayEnv) -> None:
    import os

    addresses = listening_addresses(descendants(os.getpid()) | {os.getpid()})
    assert addresses, "found no listening socket of the cluster"
    outside = [a for a in addresses if not a.startswith(("127.0.0.1:", "[::ffff:127.0.0.1]:"))]
    assert outside == []
