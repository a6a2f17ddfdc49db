"""The wakeup of a queue waiter on trio, kept apart so that only trio runs import trio."""

from __future__ import annotations

import trio

__all__ = ["TrioWakeup"]


class TrioWakeup:
    """A one-shot wakeup for a task waiting on trio: park and reschedule the task."""

    __slots__ = ("_done", "_task")

    def __init__(self) -> None:
        self._task = trio.lowlevel.current_task()
        self._done = False

    def set(self) -> None:
        """Wake the waiting task, unless it was already woken or its wait was cancelled."""
        if not self._done:
            self._done = True
            trio.lowlevel.reschedule(self._task)

    async def wait(self) -> None:
        """Park the current task until :meth:`set` (or a cancellation) wakes it."""

        def abort(_: object) -> trio.lowlevel.Abort:
            self._done = True
            return trio.lowlevel.Abort.SUCCEEDED

        await trio.lowlevel.wait_task_rescheduled(abort)
