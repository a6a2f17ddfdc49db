"""A queue's blocked attempts and the wakeups they wait on.

An *attempt* is one blocked queue operation (an enqueue, a plain close, a dequeue) waiting
in its side's arrival-ordered list; see :mod:`.base` for the algorithm. It waits on a
one-shot *wakeup*: a bare future on asyncio, a parked task on trio.
"""

from __future__ import annotations

import asyncio
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["BATCH", "CLOSE", "ENQUEUE", "REREAD", "SINGLE", "Attempt", "Wakeup", "new_wakeup"]

# Kinds of attempt.
ENQUEUE = 0
CLOSE = 1
SINGLE = 2  # dequeue()
BATCH = 3  # dequeue_many() / dequeue_up_to()
REREAD = 4  # a restored queue's stored elements, while their records are read again


class _AsyncioWakeup:
    """A one-shot wakeup for a task waiting on asyncio: a bare future.

    Cheaper than an Event; anyio cancel scopes cancel the awaiting task as usual.
    """

    __slots__ = ("_future",)

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._future: asyncio.Future[None] = loop.create_future()

    def set(self) -> None:
        if not self._future.done():  # done: already woken, or cancelled with its task
            self._future.set_result(None)

    async def wait(self) -> None:
        await self._future


class Wakeup(Protocol):
    """What a blocked attempt waits on: set once by whoever unblocks it."""

    def set(self) -> None: ...

    async def wait(self) -> None: ...


#: The trio wakeup class, imported the first time a queue waits on trio (so asyncio-only
#: programs never import trio, and no wakeup pays for an import statement).
_trio_wakeup: Callable[[], Wakeup] | None = None


def new_wakeup() -> Wakeup:
    global _trio_wakeup  # filled once, on the first wait on trio
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio: anyio's other backend, trio
        if _trio_wakeup is None:
            from .trio_wakeup import TrioWakeup

            _trio_wakeup = TrioWakeup
        return _trio_wakeup()
    return _AsyncioWakeup(loop)


class Attempt:
    """One blocked attempt."""

    __slots__ = (
        "error",
        "event",
        "ghost",
        "items",
        "kind",
        "need",
        "pos",
        "since",
        "taken",
        "unread",
        "up_to",
        "woken",
    )

    def __init__(self, kind: int) -> None:
        self.kind = kind
        # A restored enqueue (or close) whose task is gone: the queue runs it itself.
        self.ghost = False
        self.woken = True  # True while the attempt runs: nobody needs to wake it
        self.event: Wakeup | None = None
        # When the attempt last started waiting (``time.monotonic()``): the queue's time
        # blocked counts it while it waits.
        self.since = 0.0
        self.error: BaseException | None = None
        self.items: list[Any] = []
        self.pos = 0
        self.need = 0
        self.taken: list[Any] = []
        self.up_to = False
        # A restored ghost whose records are still being read again: their references.
        self.unread: Any = None
