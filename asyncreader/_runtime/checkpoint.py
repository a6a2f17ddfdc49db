"""Pipeline checkpoints: one consistent cut through running stages, as bytes.

A pipeline's data lives in three kinds of places: *components* (producers' epoch and
position, readers' positions in their work items, queues' contents, batchers' queues and
examples in hand), *tasks* in the middle of an operation (a record read but not yet
enqueued), and the consumer. Only the first kind can be saved, so
:meth:`Session.checkpoint <asyncreader.Session.checkpoint>` first brings every stage task
(the tasks of :class:`~asyncreader.QueueRunner`\\ s, which run producers and batchers) to a
point where it holds nothing else:

* *parked* between two operations: at a pause, a runner task finishes the operation it is in
  and waits before the next one;
* or *blocked in a queue operation*: a blocked enqueue's elements are saved with the queue
  (a restored queue inserts them itself, ahead of any new enqueue), a blocked dequeue
  holds nothing (elements a ``dequeue_many`` collected count as stored).

A parked task is let through for one more operation while another stage task waits on its
queue (a reader waiting for a work item needs the producer), so the pause always settles.
Then every component is saved synchronously, in one step of the event loop, and the
tasks go on. Components find their saved state by kind and creation order (the same
pipeline code builds them in the same order), and restore themselves as they are built
inside ``Session(restore=...)``; a queue that saved reader records as references
(``record_refs``) reads them again in a task of the session's coordinator, and holds
every other operation back until they are in.

Deterministic mode (``Session(deterministic=True)``) removes the timing dependence that
makes a restored stream differ from an uninterrupted one: see ``docs/guides/checkpoints.md``.
"""

from __future__ import annotations

import contextlib
import math
import weakref
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any, Final

import anyio

from .._errors import FailedPreconditionError, InvalidArgumentError
from . import state_codec

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator

__all__ = ["Checkpointer", "StageTask", "current_stage", "owned_resources"]

#: How often a pause checks whether every stage task settled (seconds).
_POLL: Final = 0.0005

_stage: ContextVar[StageTask | None] = ContextVar("asyncreader_stage", default=None)
_owned: ContextVar[bool] = ContextVar("asyncreader_owned_resources", default=False)


def current_stage() -> StageTask | None:
    """Return the stage task running in the current context, or ``None``."""
    return _stage.get()


@contextlib.contextmanager
def owned_resources() -> Iterator[None]:
    """Resources built in this block belong to a component that saves them itself
    (a producer's or batcher's queue), so the session does not save them on their own."""
    token = _owned.set(True)
    try:
        yield
    finally:
        _owned.reset(token)


class StageTask:
    """Where one stage task is, as a pause sees it."""

    __slots__ = ("go", "name", "parked", "queue", "waiter")

    def __init__(self, name: str, queue: Any) -> None:
        self.name = name
        self.queue = queue  # the queue it fills, if any
        self.parked = False
        self.go: anyio.Event | None = None
        self.waiter: Any = None  # the queue attempt it is blocked in

    def settled(self) -> bool:
        """Whether the task holds nothing outside the components right now."""
        if self.parked:
            return self.go is None or not self.go.is_set()
        w = self.waiter
        return w is not None and not w.woken

    def needed(self) -> bool:
        """Whether another stage task is blocked waiting for this task's queue."""
        waiting = getattr(self.queue, "_dequeuers", ())
        return any(w.stage and not w.woken for w in waiting)


class Checkpointer:
    """A Session's checkpoint bookkeeping: components by key, stage tasks, the pause.

    Args:
        restore: Checkpoint bytes to restore components from as they are built.
        deterministic: Whether the session runs in deterministic mode.

    Raises:
        InvalidArgumentError: ``restore`` is not a valid checkpoint.
    """

    def __init__(self, restore: bytes | None, deterministic: bool) -> None:
        self.deterministic = bool(deterministic)
        self._saved: dict[str, Any] = {}
        if restore is not None:
            tree = state_codec.decode(restore)
            if not isinstance(tree, dict) or not isinstance(tree.get("components"), dict):
                raise InvalidArgumentError("checkpoint holds no pipeline components")
            self._saved = tree["components"]
        self._counts: dict[str, int] = {}
        # key -> (weak or strong reference to the component, save function name or callable)
        self._components: dict[str, tuple[Callable[[], Any], Callable[[Any], Any]]] = {}
        self._stages: set[StageTask] = set()
        self.paused = False

    # -- components ----------------------------------------------------------------------

    def register(
        self,
        kind: str,
        obj: object,
        save: Callable[[Any], Any],
        restore: Callable[[Any, Any], None],
        *,
        key: str | None = None,
    ) -> None:
        """Give ``obj`` the next key of ``kind`` (or ``key``) and restore it if saved.

        ``save(obj)`` returns its checkpoint tree; ``restore(obj, tree)`` loads one.
        ``obj`` is held weakly where it can be: a component nobody uses is not saved.

        Raises:
            InvalidArgumentError: the key is taken, or the saved state does not fit.
        """
        if key is None:
            index = self._counts.get(kind, 0)
            self._counts[kind] = index + 1
            key = f"{kind}/{index}"
        elif key in self._components:
            raise InvalidArgumentError(f"checkpoint key {key!r} is already used")
        try:
            ref: Callable[[], Any] = weakref.ref(obj)
        except TypeError:
            ref = lambda: obj  # noqa: E731 - a strong reference in the same shape
        self._components[key] = (ref, save)
        saved = self._saved.pop(key, None)
        if saved is not None:
            try:
                restore(obj, saved)
            except InvalidArgumentError as exc:
                exc.add_note(f"while restoring {key!r} from the checkpoint")
                raise

    @property
    def restoring(self) -> bool:
        """Whether saved components are still waiting to be built."""
        return bool(self._saved)

    def unrestored(self) -> list[str]:
        """Return the keys of saved components not built (yet) in this session."""
        return sorted(self._saved)

    def owned(self) -> bool:
        """Whether resources built now belong to a component (see :func:`owned_resources`)."""
        return _owned.get()

    # -- stage tasks ---------------------------------------------------------------------

    @contextlib.contextmanager
    def stage(self, name: str, queue: Any = None) -> Iterator[StageTask]:
        """Run the block as a stage task (that fills ``queue``)."""
        task = StageTask(name, queue)
        self._stages.add(task)
        token = _stage.set(task)
        try:
            yield task
        finally:
            _stage.reset(token)
            self._stages.discard(task)

    async def park(self, task: StageTask) -> None:
        """Wait, between two operations, until the pause ends or lets ``task`` through."""
        go = task.go = anyio.Event()
        task.parked = True
        try:
            await go.wait()
        finally:
            task.parked = False
            task.go = None

    # -- the pause -----------------------------------------------------------------------

    async def checkpoint(self, timeout: float | None, describe: Callable[[], str]) -> bytes:  # noqa: ASYNC109
        """Pause the stage tasks, save every component, resume; return the bytes.

        Raises:
            FailedPreconditionError: another checkpoint is being taken.
            TimeoutError: the stage tasks did not settle within ``timeout`` seconds.
        """
        if self.paused:
            raise FailedPreconditionError("a checkpoint is already being taken")
        self.paused = True
        try:
            deadline = math.inf if timeout is None else anyio.current_time() + timeout
            while True:
                busy = [t for t in self._stages if not t.settled()]
                if not busy:
                    break
                for t in self._stages:
                    if t.parked and t.go is not None and not t.go.is_set() and t.needed():
                        t.go.set()  # one more operation, for the stage waiting on it
                if anyio.current_time() >= deadline:
                    names = ", ".join(sorted(t.name for t in busy))
                    raise TimeoutError(
                        f"checkpoint: stage tasks did not settle within {timeout} s "
                        f"(busy: {names}); stages: {describe()}"
                    )
                await anyio.sleep(_POLL)
            tree = self._save_all()
        finally:
            self.paused = False
            for t in self._stages:
                if t.go is not None:
                    t.go.set()
        return state_codec.encode(tree)

    def _save_all(self) -> dict[str, Any]:
        components: dict[str, Any] = {}
        for key, (ref, save) in list(self._components.items()):
            obj = ref()
            if obj is None:
                del self._components[key]
                continue
            components[key] = save(obj)
        return {"deterministic": self.deterministic, "components": components}
