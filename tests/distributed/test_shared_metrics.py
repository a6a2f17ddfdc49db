"""The shared queues of a scale-out job in the stage statistics and the metrics endpoints.

A queue built with ``shared_name=`` in a Session with a cluster lives in a Ray actor:
``Session.shared_stage_statistics()`` asks each such actor for its stage, and the metrics
(Prometheus text, the live page's JSON) list it beside the process's own stages as
``shared:<shared_name>``, with the job's size and counters and the callers blocked in it.
"""

from __future__ import annotations

import json
from typing import Any

import anyio
import pytest

import asyncreader as ar

pytestmark = [pytest.mark.anyio, pytest.mark.timeout(120)]


async def get(app: Any, path: str) -> bytes:
    """The body of ``GET path`` from the ASGI ``app``."""
    sent: list[dict[str, Any]] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "root_path": "", "headers": []}
    await app(scope, receive, send)
    assert sent[0]["status"] == 200, sent
    return bytes(sent[1]["body"])


@pytest.mark.both_backends
async def test_shared_queues_are_stages_of_the_metrics(namespace: str) -> None:
    pytest.importorskip("prometheus_client")
    async with ar.Session(cluster=ar.RayCluster(namespace=namespace), rank=0, world_size=1) as sess:
        local = ar.FIFOQueue(10, name="local")
        work: Any = ar.FIFOQueue(8, shared_name="files")
        await work.enqueue_many(["a", "b", "c"])
        await local.enqueue(1)

        (stage,) = await sess.shared_stage_statistics()
        assert (stage.kind, stage.name, stage.state) == ("queue", "shared:files", "idle")
        assert (stage.statistics.size, stage.statistics.capacity) == (3, 8)
        assert stage.statistics.total_enqueued == 3

        taken: list[Any] = []
        with anyio.fail_after(30):
            async with anyio.create_task_group() as tg:
                await work.dequeue_many(3)

                async def blocked() -> None:
                    taken.append(await work.dequeue())  # waits in the actor

                tg.start_soon(blocked)
                for _ in range(200):  # until the actor sees the blocked caller
                    (stage,) = await sess.shared_stage_statistics()
                    if stage.tasks_blocked_dequeue:
                        break
                    await anyio.sleep(0.05)
                assert (stage.state, stage.tasks_blocked_dequeue) == ("starved", 1)

                app = ar.metrics_app(sess)
                rows = json.loads(await get(app, "/stages"))["stages"]
                by_name = {row["name"]: row for row in rows}
                assert by_name["shared:files"]["tasks_waiting_dequeue"] == 1
                assert by_name["shared:files"]["capacity"] == 8
                assert by_name["local"]["size"] == 1
                text = (await get(app, "/metrics")).decode()
                assert 'stage="shared:files"' in text
                assert 'stage="local"' in text
                await work.enqueue("d")
        assert taken == ["d"]


async def test_without_a_cluster_there_are_no_shared_stages() -> None:
    async with ar.Session() as sess:
        ar.FIFOQueue(4, shared_name="files")
        assert await sess.shared_stage_statistics() == ()
