"""Awaiting a Ray ObjectRef from anyio code, on asyncio and on trio, without a thread.

``ref.future()`` gives a ``concurrent.futures.Future`` that Ray completes from its own
thread; a done callback hands the wakeup to the waiting task's event loop (asyncio's
``call_soon_threadsafe``, trio's token). A callback that fires after the loop or the run
ended does nothing. Cancelling the wait only stops waiting: the call goes on in the actor
(the remote queue withdraws it there).
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel

if TYPE_CHECKING:
    import concurrent.futures
    from collections.abc import Callable

__all__ = ["wait_ref"]


def _waker(event: anyio.Event) -> Callable[[object], None]:
    """Return a callback, safe to call from any thread, that sets ``event`` on its loop."""
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # not asyncio: trio
        import trio

        token = trio.lowlevel.current_trio_token()

        def wake_trio(_: object) -> None:
            with contextlib.suppress(trio.RunFinishedError):
                token.run_sync_soon(event.set)

        return wake_trio

    def wake_asyncio(_: object) -> None:
        with contextlib.suppress(RuntimeError):  # the loop was closed meanwhile
            loop.call_soon_threadsafe(event.set)

    return wake_asyncio


async def wait_ref(ref: Any) -> Any:
    """Wait for ``ref`` and return its value (or raise what ``ray.get`` would raise)."""
    future: concurrent.futures.Future[Any] = ref.future()
    if not future.done():
        event = anyio.Event()
        future.add_done_callback(_waker(event))
        await event.wait()
    else:
        await anyio.lowlevel.checkpoint()
    return future.result()
