"""How the runtime and :class:`~asyncreader.RecordRefs` see a reader.

The runtime (:mod:`asyncreader._runtime`) knows readers only through small protocols it
defines: a Session saves and restores the readers built in it in its checkpoints
(``Checkpointable``: :meth:`~RuntimeProtocols._checkpoint_save`,
:meth:`~RuntimeProtocols._checkpoint_restore`,
:meth:`~RuntimeProtocols._checkpoint_work_items`) and reports where each stage of the
pipeline is (:meth:`~RuntimeProtocols._stage_statistics`). A queue with ``record_refs``
saves reader records as references and reads them again through the reader's
:meth:`~RuntimeProtocols._record_source`. :class:`RuntimeProtocols` is the reader's side of
these protocols.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar, cast

from .._errors import InvalidArgumentError
from .._runtime.checkpoint import RestoredWork
from .._runtime.stages import StageState, StageStatistics
from .reread import ReaderRecords
from .state import from_checkpoint, in_progress_tree

if TYPE_CHECKING:
    import anyio

    from .base import ReaderBase, ReaderStatistics
    from .state import ReaderState

__all__ = ["RuntimeProtocols"]


class RuntimeProtocols:
    """The reader's side of the runtime's checkpoint and stage protocols and of
    :class:`~asyncreader.RecordRefs`' re-readable source."""

    # The reader state it reads (see ReaderBase).
    _started: int
    _finished: int
    _scopes: set[anyio.CancelScope]
    _tf_state: ClassVar[bool]
    _rereadable: ClassVar[bool]

    if TYPE_CHECKING:

        @property
        def name(self) -> str: ...

        def serialize_state(self) -> bytes: ...
        def statistics(self) -> ReaderStatistics: ...
        def _check_open(self) -> None: ...
        def _opening(self) -> bool: ...
        def _native_state(self) -> bytes: ...
        def _restore(self, state: object, *, native: bool) -> None: ...
        def _parse_state(self, data: bytes, *, native: bool = False) -> ReaderState: ...

    def _checkpoint_save(self) -> Any:
        if self._tf_state and (self._finished < self._started or self._opening()):
            # TensorFlow's format cannot hold a work item in progress (its restore refuses
            # one): a session checkpoint saves it in asyncreader's format, so that the
            # restored reader retries that item instead of losing it.
            self._check_open()
            return in_progress_tree(self._native_state())
        return self.serialize_state()

    def _checkpoint_restore(self, tree: Any) -> None:
        data, native = from_checkpoint(tree, tf_state=self._tf_state)
        self._restore(data, native=native)

    def _checkpoint_work_items(self, tree: Any) -> RestoredWork | None:
        """Return the work item a session checkpoint's tree would make the reader read
        (``None`` for none, or for a tree that is not a state of this reader: the restore
        rejects it)."""
        data, native = from_checkpoint(tree, tf_state=self._tf_state)
        if not isinstance(data, bytes):
            return None
        try:
            work = self._parse_state(data, native=native).current_work
        except InvalidArgumentError:
            return None
        return RestoredWork((work,)) if work else None

    def _stage_statistics(self) -> StageStatistics:
        """Where the reader's reads are, for the runtime's stage statistics."""
        stats = self.statistics()
        # Reads that went past the buffered fast path, each in a cancel scope of the reader
        # (waiting for its lock or running). Without a work item they wait for the work queue.
        active = len(self._scopes)
        waiting_work = active if stats.current_work is None else 0
        busy = active - waiting_work
        state: StageState
        if stats.closed:
            state = "closed"
        elif waiting_work:
            state = "waiting_for_work"
        elif busy:
            state = "reading"
        else:
            state = "idle"
        return StageStatistics("reader", self.name, state, 0, waiting_work, busy, stats)

    def _record_source(self) -> ReaderRecords | None:
        """Return what reads this reader's records again from their keys, or ``None`` when
        it cannot (the ``RereadableReader`` protocol of :class:`~asyncreader.RecordRefs`)."""
        # Only ReaderBase inherits this mixin.
        return ReaderRecords(cast("ReaderBase", self)) if self._rereadable else None

    def _reread(self, work: bytes, wanted: list[int]) -> list[bytes]:
        """Return the values of records ``wanted`` (sorted, distinct) of ``work``.

        Does not touch the reader's own state. Blocks when :attr:`_reread_blocks`.

        Raises:
            NotFoundError: the file is gone.
            DataLossError: a record is corrupt or not in the file.
        """
        raise NotImplementedError
