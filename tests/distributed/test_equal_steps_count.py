"""The rank's side of the epoch's tail counts a restored batcher's batches on.

Ranks restored from one job checkpoint may have taken part in it at different steps
(one from a reader waiting for work while its trainer waited for a batch, the other
from its ``checkpoint()`` call). The tail's pool levels ranks by their batch counts, so
each rank's count must go on from its batcher's restored count, not from zero: the
pool then gives the rank that is behind the batches it still owes it.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import anyio
import pytest

import asyncreader as ar
from asyncreader._distributed.tail import EqualSteps

pytestmark = pytest.mark.anyio


def _steps(batches: int, calls: list[tuple[str, tuple[Any, ...]]]) -> EqualSteps:
    backend: Any = SimpleNamespace(
        deterministic=True,
        world_size=2,
        _client="0-a",
        _cluster=SimpleNamespace(lease_timeout=5.0),
        _steps=[],
    )
    started: list[str] = []
    batcher: Any = SimpleNamespace(
        _kind="fifo",
        _batches=batches,
        _tail_restore=None,
        _structure=None,
        _queue=None,
        _batch_size=8,
        _what="batch",
        _coord=SimpleNamespace(start_soon=lambda fn, name: started.append(name)),
    )
    queue: Any = SimpleNamespace(name="files")  # _call is replaced: no actor is called
    steps = EqualSteps(backend, queue=queue, batcher=batcher, remainder="pad")

    async def call(method: str, *args: Any) -> Any:
        calls.append((method, args))
        if method == "tail_take":
            return ("end", 0, 0)
        return None

    steps._call = call  # type: ignore[method-assign]
    return steps


@pytest.mark.parametrize("batches", [0, 11])
async def test_the_tail_is_joined_with_the_batchers_count(batches: int) -> None:
    calls: list[tuple[str, tuple[Any, ...]]] = []
    steps = _steps(batches, calls)
    ended = f"the epoch ended on every rank after {batches} batches each"
    with anyio.fail_after(5), pytest.raises(ar.OutOfRangeError, match=ended):
        await steps.next()  # no input: joins the tail, and the pool says the epoch ended
    joins = [args for method, args in calls if method == "tail_join"]
    assert len(joins) == 1
    client, count = joins[0][:2]
    assert (client, count) == ("0-a", batches)
