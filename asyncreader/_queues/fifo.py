"""FIFOQueue: first in, first out."""

from __future__ import annotations

from collections import deque
from typing import TYPE_CHECKING, Any, ClassVar, SupportsIndex

from .._typing import ElementT
from .base import QueueBase
from .elements import TypedCodec, make_codec

if TYPE_CHECKING:
    from .record_refs import RecordRefsArg

__all__ = ["FIFOQueue"]


class _DequeStorage(QueueBase[ElementT]):
    """Storage of the FIFO queue types: a deque, oldest element on the left."""

    _buf: deque[Any]

    def _init_storage(self) -> None:
        if isinstance(self._codec, TypedCodec):
            self._codec.ordered = True
        self._buf = deque()
        # Bound methods of the deque itself: the fast path makes a single C call.
        self._push = self._buf.append
        self._push_list = self._buf.extend
        self._pop = self._buf.popleft

    def _pop_list(self, k: int) -> list[Any]:
        buf = self._buf
        if k >= len(buf):
            out = list(buf)
            buf.clear()
            return out
        if 2 * k < len(buf):
            pop = buf.popleft
            return [pop() for _ in range(k)]
        # Taking most of it: one copy beats k popleft calls.
        everything = list(buf)
        buf.clear()
        buf.extend(everything[k:])
        return everything[:k]

    def _put_back(self, elems: list[Any]) -> None:
        self._buf.extendleft(reversed(elems))


class FIFOQueue(_DequeStorage[ElementT]):
    """A queue that hands out elements in the order they were enqueued.

    TensorFlow's ``tf.queue.FIFOQueue`` on anyio: blocked callers are served in arrival
    order per side, ``enqueue_many`` inserts progressively, ``dequeue_many`` collects
    progressively and puts its elements back at the front if the queue closes or the call
    is cancelled, and a plain ``close()`` takes effect after the enqueues already waiting.

    Elements are any Python object when ``dtypes`` is ``None`` (batched dequeues return a
    list); otherwise tuples of numpy values checked against ``dtypes`` / ``shapes`` /
    ``names`` (batched dequeues return stacked arrays).

    Fairness: like :class:`asyncio.Queue`, an operation that can complete at once does so
    without yielding to the event loop and without allocating, which keeps the round trip
    cheap. So that a task looping on a queue that never blocks cannot hold the event loop
    indefinitely, one operation in every 256 on a queue first passes a scheduling point (it
    yields and, if the task's scope is cancelled, raises the cancellation there, before
    touching the queue). The consequence: while a queue neither fills nor empties, a busy producer
    or consumer lets other tasks run only once per 256 of its queue operations (unless it
    awaits something else), and notices a cancellation within that many operations; this
    is not trio's rule that every async call is a scheduling point. A task that must let others
    run more often should await ``anyio.lowlevel.checkpoint()`` itself. Blocking
    operations always yield.

    Args:
        capacity: Maximum number of stored elements; ``None`` or a negative value means
            unbounded; 0 makes every enqueue wait until the queue is closed.
        dtypes: One dtype per component (numpy spellings; ``object``, ``bytes``, ``str`` or
            ``"string"`` for byte strings), a single dtype for one component, or ``None``
            for an untyped queue.
        shapes: One fully defined shape per component, or ``None``. Batched dequeues of a
            typed queue need shapes.
        names: One name per component; elements are then dicts keyed by name.
        name: The name used in error messages; defaults to the ``shared_name`` or to a
            process-unique ``"FIFOQueue_<n>"``.
        shared_name: Share the queue under this name in the current Session's (or the
            process-wide) resource manager.
        container: The container for ``shared_name``.
        record_refs: Save the reader records in the elements as references in
            checkpoints, not as their bytes: a :class:`~asyncreader.RecordRefs`, or a
            reader whose keys and values are components 0 and 1. See
            ``docs/guides/checkpoints.md``.

    Raises:
        InvalidArgumentError: inconsistent dtypes / shapes / names, a bad capacity, or a
            ``shared_name`` already used by a queue of another type or configuration.
    """

    # Public as asyncreader.<name>: tracebacks and docs show the public path.
    __module__ = "asyncreader"

    _kind_name: ClassVar[str] = "FIFOQueue"
    _kind_name_many: ClassVar[str] = "FIFOQueue"

    def __init__(
        self,
        capacity: SupportsIndex | None,
        dtypes: Any = None,
        shapes: Any = None,
        names: Any = None,
        *,
        name: str | None = None,
        shared_name: str | None = None,
        container: str | None = None,
        record_refs: RecordRefsArg = None,
    ) -> None:
        super().__init__(capacity, make_codec(dtypes, shapes, names), name, record_refs)
        self._init_storage()
