"""IdentityReader: the work item itself as the record (SPEC §3.7)."""

from __future__ import annotations

from typing import ClassVar

from .base import ReaderBase
from .keys import WorkItemKeys

__all__ = ["IdentityReader"]


class IdentityReader(WorkItemKeys, ReaderBase):
    """A reader that outputs each work item as both key and value.

    Useful to pass work items through a reader pipeline unchanged. No I/O: the records
    are made on the event loop. State is TensorFlow's ``ReaderBaseState``, interchangeable
    with ``tf.compat.v1.IdentityReader``.

    Args:
        name: The reader's name in messages.
        on_error: What to do with bad input: ``\"raise\"`` (the default, as
            TensorFlow), ``\"skip\"`` or an :class:`~asyncreader.ErrorPolicy`.
    """

    _tf_state: ClassVar[bool] = True
    _rereadable: ClassVar[bool] = True
    _reread_blocks: ClassVar[bool] = False

    def _reread(self, work: bytes, wanted: list[int]) -> list[bytes]:
        return [work]

    async def read_one(self) -> tuple[bytes, bytes, bool]:
        return self._work, self._work, True
