"""Which watched tasks are waiting for input right now.

A ranked session's reader that waits for work at the end of an epoch may run in a
background task (a queue runner, a batcher's runner) while the rank's acknowledging task
waits for the examples that reader would make. The other ranks then wait for this rank
in a job checkpoint, and its acknowledging task cannot call ``checkpoint()``. The reader
takes part for the rank only while that task is *waiting for input* (blocked taking
elements out of a queue, or waiting for its batcher's next batch): it then holds no step
in progress, so its tracked states are those between two steps.

Only tasks a session watches are counted, so a pipeline without a cluster pays one empty
set test per blocking wait.
"""

from __future__ import annotations

import anyio

__all__ = ["enter", "is_waiting", "leave", "unwatch", "watch", "watched"]

#: Task ids (``anyio.TaskInfo.id``) whose waits are counted.
watched: set[int] = set()
_waiting: dict[int, int] = {}


def watch(task: int) -> None:
    """Count the input waits of ``task`` from now on."""
    watched.add(task)


def unwatch(task: int) -> None:
    """Stop counting ``task``'s input waits."""
    watched.discard(task)
    _waiting.pop(task, None)


def enter() -> int | None:
    """Mark the current task as waiting for input; return what :func:`leave` needs
    (``None`` when the task is not watched)."""
    task = anyio.get_current_task().id
    if task not in watched:
        return None
    _waiting[task] = _waiting.get(task, 0) + 1
    return task


def leave(task: int | None) -> None:
    """End the wait :func:`enter` marked."""
    if task is None:
        return
    left = _waiting.get(task, 0) - 1
    if left > 0:
        _waiting[task] = left
    else:
        _waiting.pop(task, None)


def is_waiting(task: int) -> bool:
    """Whether ``task`` (a watched one) is waiting for input right now."""
    return _waiting.get(task, 0) > 0
