"""Batching: ``batch``, ``shuffle_batch``, their ``_join`` and ``maybe_`` variants.

Each function checks its example sources, describes what it was asked for in a
:class:`~.batcher.BatchSpec` and returns the :class:`~.batcher.Batcher` built from it,
as ``tf.compat.v1.train.batch`` and its relatives build a queue and a QueueRunner. The
Batcher makes the queue (a FIFOQueue, a PaddingFIFOQueue with ``dynamic_pad=True``, a
RandomShuffleQueue for the shuffle variants) and the runner tasks that fill it.

Sources. ``tensors`` is an async callable returning one example, or an async iterable of
examples (an async generator, a :class:`SliceProducer`, ...). The runner tasks call it until
it raises :class:`~asyncreader.OutOfRangeError` (an async iterable ends the same way when it
is exhausted). ``tensors_list`` gives one such source per task (the ``_join`` variants).
See :mod:`.sources`.

Examples. An example is a tuple, named tuple, list, dict or a single value; each component
is a number, ``str`` / ``bytes``, or an array. Batches come back in the same layout with
each component stacked into a numpy array with a leading batch dimension (see
:mod:`.structure`). With ``enqueue_many=True`` the source returns a *batch* of examples
(every component has the same leading dimension) which is sliced into the queue in one
``enqueue_many``: the fast path. A :class:`~asyncreader.RecordBatch` result (``read_batch``)
is then the example ``(keys, values)``, as ``read_up_to`` returns it, and a RecordBatch
component is its records (see :mod:`.sources`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Literal

from .._errors import InvalidArgumentError
from .batcher import Batcher, BatchSpec

#: What a ranked session's batcher does with the examples left at the epoch's end.
Remainder = Literal["drop", "pad", "smaller"]

if TYPE_CHECKING:
    from collections.abc import Sequence

    from .._queues.record_refs import RecordRefsArg
    from .._runtime.coordinator import Coordinator
    from .sources import ExampleSource

__all__ = [
    "batch",
    "batch_join",
    "maybe_batch",
    "maybe_batch_join",
    "maybe_shuffle_batch",
    "maybe_shuffle_batch_join",
    "shuffle_batch",
    "shuffle_batch_join",
]


def _check_list(tensors_list: object, what: str) -> list[object]:
    if not isinstance(tensors_list, (list, tuple)) or not tensors_list:
        raise InvalidArgumentError(f"Expected at least one set of tensors in {what}()")
    return list(tensors_list)


def _check_tensors(tensors: object, what: str) -> object:
    if tensors is None:
        raise InvalidArgumentError(f"Expected at least one tensor in {what}().")
    return tensors


# -- the public functions ----------------------------------------------------------------


def batch(
    tensors: ExampleSource,
    batch_size: int,
    num_threads: int = 1,
    capacity: int | None = 32,
    enqueue_many: bool = False,
    shapes: object = None,
    dynamic_pad: bool = False,
    allow_smaller_final_batch: bool = False,
    *,
    coord: Coordinator | None = None,
    record_refs: RecordRefsArg = None,
    remainder: Remainder | None = None,
) -> Batcher:
    """Batch the examples that ``tensors`` produces, in order.

    Starts ``num_threads`` runner tasks in the Coordinator; each calls ``tensors`` and
    enqueues the result into a FIFOQueue (a PaddingFIFOQueue with ``dynamic_pad=True``)
    until the source raises :class:`~asyncreader.OutOfRangeError`. When the last task
    ends the queue closes. With ``num_threads=1`` batches keep the input order exactly.

    Args:
        tensors: An async callable returning one example (a tuple, named tuple, list, dict
            or single value of numbers, strings or arrays), or an async iterable of
            examples. With ``enqueue_many=True`` each result is a batch of examples, and a
            bare :class:`~asyncreader.RecordBatch` (from ``read_batch``) is the two
            components ``(keys, values)``, exactly as ``read_up_to`` returns them (without
            ``enqueue_many`` it is refused: it is not one example).
        batch_size: Examples per batch (at least 1).
        num_threads: Runner tasks calling ``tensors`` concurrently.
        capacity: The queue's capacity; ``None`` for unbounded.
        enqueue_many: Each result is a batch to slice along its first dimension (the fast
            path: examples move in chunks).
        shapes: One shape per component (a list in component order, or a dict for dict
            examples), without the batch dimension. Default: the first example's shapes.
        dynamic_pad: Allow ``None`` dimensions (all dimensions when ``shapes`` is not
            given) and pad each batch to its longest example with 0 / ``b""`` (also the
            batches of a cluster's epoch tail, which join examples of several ranks).
        allow_smaller_final_batch: Hand out a last batch smaller than ``batch_size`` at
            the end of input instead of dropping it.
        coord: The Coordinator to run in; default the current one.
        record_refs: The example components holding a reader's record keys and values,
            saved in checkpoints as references instead of bytes: a
            :class:`~asyncreader.RecordRefs` (``key`` / ``value`` are tuple indices or
            dict keys of the example), or a reader for components 0 and 1.
        remainder: Only in a Session with a cluster, where every rank gets the same
            number of batches per epoch: what the examples left at the epoch's end
            (fewer than one batch per rank) become. ``"drop"`` (counted in
            ``statistics().remainder_dropped``), ``"smaller"`` (one more batch each,
            sizes differing by at most one) or ``"pad"`` (one more full batch each,
            repeating examples; ``statistics().last_batch_padding`` says how many rows).
            Default: ``"smaller"`` with ``allow_smaller_final_batch=True``, else
            ``"drop"``. See the scale-out guide's "Equal steps".

    Returns:
        A :class:`Batcher`.

    Raises:
        InvalidArgumentError: ``tensors`` is ``None`` or neither an async callable nor an
            async iterable; ``batch_size``, ``num_threads`` or ``capacity`` is out of range;
            ``shapes`` is malformed or not fully defined without ``dynamic_pad``. (Examples
            that do not fit, such as a RecordBatch without ``enqueue_many``, fail the
            runner task, and the Coordinator raises the error.)
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
    """
    return Batcher(
        BatchSpec(
            what="batch",
            sources=[_check_tensors(tensors, "batch")],
            threads_per_source=num_threads,
            batch_size=batch_size,
            capacity=capacity,
            kind="padding" if dynamic_pad else "fifo",
            enqueue_many=enqueue_many,
            shapes=shapes,
            allow_smaller_final_batch=allow_smaller_final_batch,
            coord=coord,
            record_refs=record_refs,
            remainder=remainder,
        )
    )


def maybe_batch(
    tensors: ExampleSource,
    keep_input: object,
    batch_size: int,
    num_threads: int = 1,
    capacity: int | None = 32,
    enqueue_many: bool = False,
    shapes: object = None,
    dynamic_pad: bool = False,
    allow_smaller_final_batch: bool = False,
    *,
    coord: Coordinator | None = None,
    record_refs: RecordRefsArg = None,
    remainder: Remainder | None = None,
) -> Batcher:
    """Like :func:`batch`, but enqueue only the examples ``keep_input`` accepts.

    The other arguments are as for :func:`batch`.

    Args:
        keep_input: A bool, a bool vector (only with ``enqueue_many=True``: one flag per
            row of each batch), or a callable taking the example (or batch; a RecordBatch
            as the tuple ``(keys, values)``) and returning one of those (it may be async).
            Examples whose flag is false are skipped.

    Returns:
        A :class:`Batcher`.

    Raises:
        InvalidArgumentError: ``keep_input`` has more than one dimension
            (`` `keep_input` must be 0 or 1 dimensions.``), is a vector without
            ``enqueue_many`` (`` `keep_input` cannot be a vector when `enqueue_many=False`.``)
            or is not boolean; and everything :func:`batch` raises. A callable's result is
            checked the same way each time, failing that runner task.
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
    """
    return Batcher(
        BatchSpec(
            what="maybe_batch",
            sources=[_check_tensors(tensors, "maybe_batch")],
            threads_per_source=num_threads,
            batch_size=batch_size,
            capacity=capacity,
            kind="padding" if dynamic_pad else "fifo",
            enqueue_many=enqueue_many,
            shapes=shapes,
            allow_smaller_final_batch=allow_smaller_final_batch,
            keep_input=keep_input,
            coord=coord,
            record_refs=record_refs,
            remainder=remainder,
        )
    )


def batch_join(
    tensors_list: Sequence[ExampleSource],
    batch_size: int,
    capacity: int | None = 32,
    enqueue_many: bool = False,
    shapes: object = None,
    dynamic_pad: bool = False,
    allow_smaller_final_batch: bool = False,
    *,
    coord: Coordinator | None = None,
    record_refs: RecordRefsArg = None,
    remainder: Remainder | None = None,
) -> Batcher:
    """Batch examples from several sources, one runner task per source.

    Task ``i`` draws from ``tensors_list[i]``; batches mix the sources in whatever order
    they deliver, while each source's own order is kept. Every source must produce
    examples of the same layout and dtypes.

    The other arguments are as for :func:`batch`.

    Args:
        tensors_list: The example sources (each as ``tensors`` of :func:`batch`).

    Returns:
        A :class:`Batcher`.

    Raises:
        InvalidArgumentError: ``tensors_list`` is empty
            (``Expected at least one set of tensors``), and everything :func:`batch`
            raises. A source whose examples differ in layout fails its runner task with
            ``Expected types to be consistent`` (dict keys:
            ``All dictionaries in tensors_list must have the same keys``).
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
    """
    return Batcher(
        BatchSpec(
            what="batch_join",
            sources=_check_list(tensors_list, "batch_join"),
            threads_per_source=1,
            batch_size=batch_size,
            capacity=capacity,
            kind="padding" if dynamic_pad else "fifo",
            enqueue_many=enqueue_many,
            shapes=shapes,
            allow_smaller_final_batch=allow_smaller_final_batch,
            coord=coord,
            record_refs=record_refs,
            remainder=remainder,
        )
    )


def maybe_batch_join(
    tensors_list: Sequence[ExampleSource],
    keep_input: object,
    batch_size: int,
    capacity: int | None = 32,
    enqueue_many: bool = False,
    shapes: object = None,
    dynamic_pad: bool = False,
    allow_smaller_final_batch: bool = False,
    *,
    coord: Coordinator | None = None,
    record_refs: RecordRefsArg = None,
    remainder: Remainder | None = None,
) -> Batcher:
    """Like :func:`batch_join`, but enqueue only the examples ``keep_input`` accepts.

    The other arguments are as for :func:`batch_join`.

    Args:
        keep_input: As for :func:`maybe_batch`.

    Returns:
        A :class:`Batcher`.

    Raises:
        InvalidArgumentError: as for :func:`maybe_batch` and :func:`batch_join`.
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
    """
    return Batcher(
        BatchSpec(
            what="maybe_batch_join",
            sources=_check_list(tensors_list, "maybe_batch_join"),
            threads_per_source=1,
            batch_size=batch_size,
            capacity=capacity,
            kind="padding" if dynamic_pad else "fifo",
            enqueue_many=enqueue_many,
            shapes=shapes,
            allow_smaller_final_batch=allow_smaller_final_batch,
            keep_input=keep_input,
            coord=coord,
            record_refs=record_refs,
            remainder=remainder,
        )
    )


def shuffle_batch(
    tensors: ExampleSource,
    batch_size: int,
    capacity: int | None,
    min_after_dequeue: int,
    num_threads: int = 1,
    seed: int | None = None,
    enqueue_many: bool = False,
    shapes: object = None,
    allow_smaller_final_batch: bool = False,
    *,
    coord: Coordinator | None = None,
    record_refs: RecordRefsArg = None,
    remainder: Remainder | None = None,
) -> Batcher:
    """Batch the examples that ``tensors`` produces, in random order.

    Examples go through a RandomShuffleQueue that, while the input lasts, keeps at least
    ``min_after_dequeue`` of them to draw from. At the end of input the rest drain in
    random order, ignoring ``min_after_dequeue``. The same ``seed`` and the same input
    order give the same batches.

    The other arguments are as for :func:`batch`.

    Args:
        capacity: The queue's capacity, bigger than ``min_after_dequeue``.
        min_after_dequeue: Examples kept in the queue while open, for mixing.
        seed: Seed of the queue's random order.

    Returns:
        A :class:`Batcher`.

    Raises:
        InvalidArgumentError: ``capacity`` is not bigger than ``min_after_dequeue``
            (``capacity <c> must be bigger than min_after_dequeue <m>.``), and everything
            :func:`batch` raises.
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
    """
    return Batcher(
        BatchSpec(
            what="shuffle_batch",
            sources=[_check_tensors(tensors, "shuffle_batch")],
            threads_per_source=num_threads,
            batch_size=batch_size,
            capacity=capacity,
            kind="shuffle",
            min_after_dequeue=min_after_dequeue,
            seed=seed,
            enqueue_many=enqueue_many,
            shapes=shapes,
            allow_smaller_final_batch=allow_smaller_final_batch,
            coord=coord,
            record_refs=record_refs,
            remainder=remainder,
        )
    )


def maybe_shuffle_batch(
    tensors: ExampleSource,
    batch_size: int,
    capacity: int | None,
    min_after_dequeue: int,
    keep_input: object,
    num_threads: int = 1,
    seed: int | None = None,
    enqueue_many: bool = False,
    shapes: object = None,
    allow_smaller_final_batch: bool = False,
    *,
    coord: Coordinator | None = None,
    record_refs: RecordRefsArg = None,
    remainder: Remainder | None = None,
) -> Batcher:
    """Like :func:`shuffle_batch`, but enqueue only the examples ``keep_input`` accepts.

    The other arguments are as for :func:`shuffle_batch`.

    Args:
        keep_input: As for :func:`maybe_batch`.

    Returns:
        A :class:`Batcher`.

    Raises:
        InvalidArgumentError: as for :func:`maybe_batch` and :func:`shuffle_batch`.
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
    """
    return Batcher(
        BatchSpec(
            what="maybe_shuffle_batch",
            sources=[_check_tensors(tensors, "maybe_shuffle_batch")],
            threads_per_source=num_threads,
            batch_size=batch_size,
            capacity=capacity,
            kind="shuffle",
            min_after_dequeue=min_after_dequeue,
            seed=seed,
            enqueue_many=enqueue_many,
            shapes=shapes,
            allow_smaller_final_batch=allow_smaller_final_batch,
            keep_input=keep_input,
            coord=coord,
            record_refs=record_refs,
            remainder=remainder,
        )
    )


def shuffle_batch_join(
    tensors_list: Sequence[ExampleSource],
    batch_size: int,
    capacity: int | None,
    min_after_dequeue: int,
    seed: int | None = None,
    enqueue_many: bool = False,
    shapes: object = None,
    allow_smaller_final_batch: bool = False,
    *,
    coord: Coordinator | None = None,
    record_refs: RecordRefsArg = None,
    remainder: Remainder | None = None,
) -> Batcher:
    """Batch examples from several sources in random order, one task per source.

    The other arguments are as for :func:`shuffle_batch`.

    Args:
        tensors_list: The example sources (each as ``tensors`` of :func:`batch`).

    Returns:
        A :class:`Batcher`.

    Raises:
        InvalidArgumentError: as for :func:`batch_join` and :func:`shuffle_batch`.
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
    """
    return Batcher(
        BatchSpec(
            what="shuffle_batch_join",
            sources=_check_list(tensors_list, "shuffle_batch_join"),
            threads_per_source=1,
            batch_size=batch_size,
            capacity=capacity,
            kind="shuffle",
            min_after_dequeue=min_after_dequeue,
            seed=seed,
            enqueue_many=enqueue_many,
            shapes=shapes,
            allow_smaller_final_batch=allow_smaller_final_batch,
            coord=coord,
            record_refs=record_refs,
            remainder=remainder,
        )
    )


def maybe_shuffle_batch_join(
    tensors_list: Sequence[ExampleSource],
    batch_size: int,
    capacity: int | None,
    min_after_dequeue: int,
    keep_input: object,
    seed: int | None = None,
    enqueue_many: bool = False,
    shapes: object = None,
    allow_smaller_final_batch: bool = False,
    *,
    coord: Coordinator | None = None,
    record_refs: RecordRefsArg = None,
    remainder: Remainder | None = None,
) -> Batcher:
    """Like :func:`shuffle_batch_join`, but enqueue only what ``keep_input`` accepts.

    The other arguments are as for :func:`shuffle_batch_join`.

    Args:
        keep_input: As for :func:`maybe_batch`.

    Returns:
        A :class:`Batcher`.

    Raises:
        InvalidArgumentError: as for :func:`maybe_batch` and :func:`shuffle_batch_join`.
        FailedPreconditionError: no ``coord`` was given and no Coordinator is current.
    """
    return Batcher(
        BatchSpec(
            what="maybe_shuffle_batch_join",
            sources=_check_list(tensors_list, "maybe_shuffle_batch_join"),
            threads_per_source=1,
            batch_size=batch_size,
            capacity=capacity,
            kind="shuffle",
            min_after_dequeue=min_after_dequeue,
            seed=seed,
            enqueue_many=enqueue_many,
            shapes=shapes,
            allow_smaller_final_batch=allow_smaller_final_batch,
            keep_input=keep_input,
            coord=coord,
            record_refs=record_refs,
            remainder=remainder,
        )
    )
