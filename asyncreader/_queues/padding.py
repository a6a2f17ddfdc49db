"""PaddingFIFOQueue: a FIFOQueue whose batches pad variable-size components."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, SupportsIndex

from .._errors import InvalidArgumentError
from .._typing import ElementT
from .elements import TypedCodec, split_shapes
from .fifo import _DequeStorage

if TYPE_CHECKING:
    import numpy as np

    from .record_refs import RecordRefsArg

__all__ = ["PaddingFIFOQueue"]


class PaddingFIFOQueue(_DequeStorage[ElementT]):
    """A FIFOQueue whose components may have dimensions of unknown size.

    Each shape has a known rank, but a dimension may be ``None``. An enqueued value must
    match the known dimensions; ``dequeue()`` returns it exactly as enqueued.
    ``dequeue_many(n)`` / ``dequeue_up_to(n)`` pad every unknown dimension to its maximum
    over the batch: each element is copied to the low-index corner and the rest is filled
    with the dtype's zero (``0``, ``False``, ``b""``). ``dequeue_many(0)`` returns arrays of
    shape ``[0] + shape`` with unknown dimensions as 0 (SPEC §2.6). Unlike TensorFlow, any
    rank can be padded.

    Everything else (ordering, closing, put-back, fairness) is
    :class:`~asyncreader.FIFOQueue` behaviour. As in TensorFlow, messages of enqueue and
    single dequeue say ``FIFOQueue``, those of batched dequeues ``PaddingFIFOQueue``.

    Args:
        capacity: Maximum number of stored elements; ``None`` or negative means unbounded.
        dtypes: One dtype per component (mandatory).
        shapes: One shape per component (mandatory), ``None`` for an unknown dimension.
        names: One name per component; elements are then dicts.
        name: The name used in error messages.
        shared_name: Share the queue under this name.
        container: The container for ``shared_name``.
        record_refs: Save reader records as references in checkpoints, as in
            :class:`~asyncreader.FIFOQueue`.

    Raises:
        InvalidArgumentError: shapes missing or not one per component, inconsistent
            dtypes / names, or a ``shared_name`` taken by another type or configuration.
    """

    # Public as asyncreader.<name>: tracebacks and docs show the public path.
    __module__ = "asyncreader"

    _kind_name: ClassVar[str] = "FIFOQueue"
    _kind_name_many: ClassVar[str] = "PaddingFIFOQueue"

    def __init__(
        self,
        capacity: SupportsIndex | None,
        dtypes: Any,
        shapes: Any,
        names: Any = None,
        *,
        name: str | None = None,
        shared_name: str | None = None,
        container: str | None = None,
        record_refs: RecordRefsArg = None,
    ) -> None:
        if dtypes is None:
            raise InvalidArgumentError("PaddingFIFOQueue needs dtypes")
        if shapes is None:
            raise InvalidArgumentError(
                "When providing partial shapes, a list of shapes must be provided."
            )
        count = len(dtypes) if isinstance(dtypes, (list, tuple)) else 1
        given = len(split_shapes(shapes))
        if given != count:
            raise InvalidArgumentError(
                "Shapes must be provided for all components, but received "
                f"{count} dtypes and {given} shapes."
            )
        codec = TypedCodec(dtypes, shapes, names, partial_shapes=True)
        super().__init__(capacity, codec, name, record_refs)
        self._init_storage()

    async def _dequeue_shaped(
        self, n: SupportsIndex, *, up_to: bool
    ) -> tuple[Any, list[np.ndarray[Any, Any]]]:
        """:meth:`dequeue_up_to` (``up_to``) or :meth:`dequeue_many`, and each element's
        own shape per component (see :meth:`TypedCodec.row_shapes`): what a batch padded
        to the maximum of other elements needs to pad them again."""
        rows = await self._dequeue_rows(n, up_to)
        codec = self._codec
        assert isinstance(codec, TypedCodec)
        return codec.decode_many(rows), codec.row_shapes(rows)
