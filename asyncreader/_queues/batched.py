"""The batched dequeues: ``dequeue_many`` and ``dequeue_up_to``, waiting or not.

A batched dequeue takes a whole batch at once when the queue holds enough elements and no
earlier dequeue waits; otherwise it joins the dequeue side as a batch attempt and collects
elements as they arrive (see :mod:`.base` for the waiter algorithm). :class:`BatchedDequeue`
is mixed into :class:`~asyncreader._queues.base.QueueBase`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, SupportsIndex

import anyio
import anyio.lowlevel

from .._errors import InvalidArgumentError, OutOfRangeError
from .attempts import BATCH
from .elements import as_int

if TYPE_CHECKING:
    from collections import deque
    from collections.abc import Callable

    from .attempts import Attempt
    from .elements import TypedCodec, UntypedCodec

__all__ = ["BatchedDequeue"]


class BatchedDequeue:
    """``dequeue_many`` / ``dequeue_up_to`` and their ``_nowait`` forms."""

    # The queue state it reads and writes (see QueueBase).
    _buf: Any
    _closed: bool
    _hold: int
    _codec: TypedCodec | UntypedCodec
    _enqueuers: deque[Attempt]
    _dequeuers: deque[Attempt]
    _total_out: int
    _yield_due: Callable[[], bool]
    _kind_name_many: ClassVar[str]

    if TYPE_CHECKING:

        def _pop_list(self, k: int) -> list[Any]: ...
        def _insufficient(self, requested: int, size: int, many: bool) -> OutOfRangeError: ...
        def _notify(self) -> None: ...
        async def _dequeue_slow(self, n: int, kind: int, *, up_to: bool = False) -> list[Any]: ...

    @staticmethod
    def _check_count(n: SupportsIndex, up_to: bool) -> int:
        op = "DequeueUpToOp" if up_to else "DequeueManyOp"
        count = as_int(n)
        if count is None:
            raise InvalidArgumentError(f"{op} requested a non-integer count {n!r}")
        if count < 0:
            raise InvalidArgumentError(f"{op} requested {count} < 0 elements")
        return count

    def _check_n(self, n: SupportsIndex, up_to: bool) -> int:
        """Validate a batch size and that the queue can batch; return it as an int."""
        count = self._check_count(n, up_to)
        self._codec.check_batchable(self._kind_name_many)
        return count

    def _try_take_many(self, n: int, up_to: bool) -> list[Any] | None:
        """Take a whole batch now if this is possible without waiting, else None.

        Raises:
            OutOfRangeError: the queue is closed and cannot supply the batch.
        """
        size = len(self._buf)
        if self._closed:
            if size >= n:
                return self._pop_list(n)
            if up_to and size > 0:
                return self._pop_list(size)
            raise self._insufficient(n, size, many=True)
        if size - self._hold >= n:
            return self._pop_list(n)
        return None

    async def dequeue_many(self, n: SupportsIndex) -> Any:
        """Remove and return exactly ``n`` elements, waiting until that many arrived.

        Not atomic while open (FIFO, RandomShuffle, Padding queues; as in TensorFlow):
        elements are taken as they arrive and held until ``n`` are collected, so ``size()``
        drops meanwhile. If the queue closes before ``n`` are collected, or the call is
        cancelled, the elements taken are put back at the front in their order, so none is
        lost. ``n == 0`` returns an empty batch at once.

        Args:
            n: Batch size, at least 0.

        Returns:
            A list of ``n`` elements for an untyped queue; for a typed queue each component
            stacked into one array of shape ``[n] + shape``, in the element structure.

        Raises:
            InvalidArgumentError: ``n < 0``, or a typed queue has no declared shapes.
            OutOfRangeError: the queue is (or becomes) closed with fewer than the still
                needed number of elements; the message gives the number still requested and
                the size before the put-back.
        """
        return await self._dequeue_batch(n, up_to=False)

    async def dequeue_up_to(self, n: SupportsIndex) -> Any:
        """Remove and return up to ``n`` elements.

        While the queue is open this waits for a full batch, like :meth:`dequeue_many`;
        once it is closed it returns whatever is left (at least one element).

        Args:
            n: Maximum batch size, at least 0.

        Returns:
            As :meth:`dequeue_many`, with a batch dimension between 1 and ``n``.

        Raises:
            InvalidArgumentError: ``n < 0``, or a typed queue has no declared shapes.
            OutOfRangeError: the queue is closed and empty.
        """
        return await self._dequeue_batch(n, up_to=True)

    def dequeue_many_nowait(self, n: SupportsIndex) -> Any:
        """Remove and return exactly ``n`` elements if they can be taken right now.

        Raises:
            anyio.WouldBlock: fewer than ``n`` can be taken now, or dequeues are waiting.
            InvalidArgumentError: as for :meth:`dequeue_many`.
            OutOfRangeError: the queue is closed with fewer than ``n`` elements.
        """
        return self._dequeue_batch_nowait(n, up_to=False)

    def dequeue_up_to_nowait(self, n: SupportsIndex) -> Any:
        """Like :meth:`dequeue_up_to`, but raise instead of waiting.

        Raises:
            anyio.WouldBlock: the queue is open and fewer than ``n`` can be taken now, or
                dequeues are waiting.
            InvalidArgumentError: as for :meth:`dequeue_up_to`.
            OutOfRangeError: the queue is closed and empty.
        """
        return self._dequeue_batch_nowait(n, up_to=True)

    def _dequeue_batch_nowait(self, n: SupportsIndex, up_to: bool) -> Any:
        n = self._check_n(n, up_to)
        if n == 0:
            return self._codec.decode_many([])
        if self._dequeuers:
            raise anyio.WouldBlock
        taken = self._try_take_many(n, up_to)
        if taken is None:
            raise anyio.WouldBlock
        self._total_out += len(taken)
        if self._enqueuers:
            self._notify()
        return self._codec.decode_many(taken)

    async def _dequeue_batch(self, n: SupportsIndex, up_to: bool) -> Any:
        return self._codec.decode_many(await self._dequeue_rows(n, up_to))

    async def _dequeue_rows(self, n: SupportsIndex, up_to: bool) -> list[Any]:
        """The stored elements of a batched dequeue, not decoded yet."""
        n = self._check_n(n, up_to)
        if self._yield_due():
            await anyio.lowlevel.checkpoint()  # a scheduling point
        if n == 0:
            return []
        taken = None if self._dequeuers else self._try_take_many(n, up_to)
        if taken is not None:
            self._total_out += len(taken)
            if self._enqueuers:
                self._notify()
        else:
            taken = await self._dequeue_slow(n, BATCH, up_to=up_to)
        return taken
