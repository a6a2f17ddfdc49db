"""shared_name through the process-wide resource manager (outside any Session)."""

from __future__ import annotations

import contextlib
import itertools
import re
from typing import TYPE_CHECKING

import pytest

import asyncreader as ar
from asyncreader._runtime.resources import _process_resources

if TYPE_CHECKING:
    from collections.abc import Iterator

pytestmark = pytest.mark.anyio

_ids = itertools.count()


@pytest.fixture
def shared_name() -> Iterator[str]:
    name = f"queues-test-{next(_ids)}"
    yield name
    for kind in ("queue",):
        with contextlib.suppress(ar.NotFoundError):
            _process_resources.delete(None, name, kind=kind)


async def test_same_configuration_shares_one_queue(shared_name: str) -> None:
    a = ar.FIFOQueue(10, ["int32"], [[]], shared_name=shared_name)
    b = ar.FIFOQueue(10, ["int32"], [[]], shared_name=shared_name)
    assert a is b
    assert a.name == shared_name
    assert a.shared_name == shared_name
    await a.enqueue(1)
    assert b.size() == 1


@pytest.mark.parametrize(
    ("first", "second", "message"),
    [
        (
            lambda n: ar.FIFOQueue(10, shared_name=n),
            lambda n: ar.FIFOQueue(20, shared_name=n),
            "has capacity 10 but requested capacity was 20",
        ),
        (
            lambda n: ar.FIFOQueue(10, ["int32"], shared_name=n),
            lambda n: ar.FIFOQueue(10, ["int64"], shared_name=n),
            "has dtypes ('int32',) but requested dtypes was ('int64',)",
        ),
        (
            lambda n: ar.FIFOQueue(10, ["int32"], [[2]], shared_name=n),
            lambda n: ar.FIFOQueue(10, ["int32"], [[3]], shared_name=n),
            "has shapes ((2,),) but requested shapes was ((3,),)",
        ),
        (
            lambda n: ar.RandomShuffleQueue(10, 2, seed=1, shared_name=n),
            lambda n: ar.RandomShuffleQueue(10, 3, seed=1, shared_name=n),
            "has min_after_dequeue 2 but requested min_after_dequeue was 3",
        ),
        (
            lambda n: ar.RandomShuffleQueue(10, 2, seed=1, shared_name=n),
            lambda n: ar.RandomShuffleQueue(10, 2, seed=2, shared_name=n),
            "has seed 1 but requested seed was 2",
        ),
        (
            lambda n: ar.FIFOQueue(10, shared_name=n),
            lambda n: ar.RandomShuffleQueue(10, 2, shared_name=n),
            "expected RandomShuffleQueue, found FIFOQueue",
        ),
    ],
)
def test_mismatched_configuration_is_rejected(
    shared_name: str, first: object, second: object, message: str
) -> None:
    existing = first(shared_name)  # type: ignore[operator]
    with pytest.raises(ar.InvalidArgumentError, match=re.escape(message)):
        second(shared_name)  # type: ignore[operator]
    assert existing.capacity == 10


def test_containers_separate_shared_queues(shared_name: str) -> None:
    a = ar.FIFOQueue(1, shared_name=shared_name)
    b = ar.FIFOQueue(1, shared_name=shared_name, container="other")
    try:
        assert a is not b
        assert b.container == "other"
    finally:
        _process_resources.delete("other", shared_name, kind="queue")
