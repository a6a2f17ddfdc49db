"""The buffered path of the built-in file readers: a record run per executor hop.

:class:`ReaderBase` calls a hook per record (``read_one``) or per request
(``read_many``). :class:`BufferedReader` instead reads a *record run* per hop to the I/O
executor (:meth:`~BufferedReader._fill`: a block of megabytes framed whole, see
:mod:`asyncreader._readers.framed`) into the read-ahead buffer, from which ``read`` and
``read_up_to`` are served on the event loop without a thread hop. Records still in the
buffer are not yet *produced*: they are not counted, and saved state resumes at the first
of them.

What a subclass provides: :meth:`~BufferedReader._fill` (on a worker thread; and
:meth:`~BufferedReader._fill_batch` for ``read_batch``, which by default joins
``_fill``'s run into a batch),
:meth:`~BufferedReader._before_fill` and :meth:`~BufferedReader._run_mark` (the restart
point of the run being read: a position in the file and how many of its records were
delivered before), :meth:`~BufferedReader._rewind`, :meth:`~BufferedReader._run_state`,
``_start_state`` and, to skip a bad record under ``on_error``,
:meth:`~BufferedReader._skip_bad_record`. Everything else (locking, work items, state
bytes, abandoned calls) is :class:`ReaderBase`'s; this class overrides the few steps in
which the buffered path differs from the hook path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .._errors import AsyncReaderError, OutOfRangeError
from .._records.batch import RecordBatch
from .base import ReaderBase
from .hook_path import as_lists

if TYPE_CHECKING:
    from .._io.executor import IoCall
    from .buffer import BatchRun, RecordRun
    from .hook_path import Records

__all__ = ["BufferedReader"]


class BufferedReader(ReaderBase):
    """A reader that fills its read-ahead buffer a record run at a time (internal base)."""

    #: Records the current call still wants (a fill may frame that many in one hop).
    _want: int = 1

    # -- what a subclass provides -------------------------------------------------------

    def _fill(self) -> RecordRun:
        """Read and frame the next run of the current work item (on a worker thread)."""
        raise NotImplementedError

    def _fill_batch(self) -> BatchRun:
        """:meth:`_fill` for ``read_batch``: the next run as a batch (on a worker thread)."""
        keys, values, at_end = self._fill()
        return RecordBatch.from_records(keys, values, work=self._work), at_end

    def _before_fill(self) -> None:
        """Note where the next run starts (on the event loop, before :meth:`_fill`)."""

    def _run_mark(self) -> Any:
        """Return the restart point of the current run: where saved state resumes to
        deliver the run's first record, and how many records on from there it is."""
        raise NotImplementedError

    def _rewind(self, mark: Any, skip: int) -> None:
        """Make saved state restart at ``mark`` (from :meth:`_run_mark`), ``skip`` records
        on."""
        raise NotImplementedError

    def _run_state(self, skip: int) -> bytes:
        """Return extra state resuming at the ``skip``-th record of the current run."""
        raise NotImplementedError

    def _start_state(self) -> bytes:
        """Return the extra state of the current work item's first record."""
        raise NotImplementedError

    def _skip_bad_record(self) -> bool:
        """After a framing error, restart past the one bad record if its extent is known
        (on a worker thread); return whether it could."""
        return False

    # -- the steps in which the buffered path differs from the hook path ------------------

    def _must_close_files(self) -> bool:
        return True

    def _mark(self) -> tuple[Any, int]:
        return self._run_mark(), self._buffer.delivered

    def _drop_delivered(self, n: int) -> None:
        # The run's restart point stays; n more of its records are skipped.
        self._rewind(self._run_mark(), n)

    def _position_state(self) -> bytes:
        return self._run_state(self._buffer.delivered)

    async def _restore_position(self, extra: bytes) -> None:
        await self._call("restore_extra", extra)

    async def _read_on(self) -> tuple[bytes, bytes] | None:
        # The records go to the buffer, served from there by the caller's next turn.
        await self._refill()
        return None

    async def _read_on_many(
        self, n: int, mark: tuple[Any, int], batch: bool
    ) -> tuple[Records, bool] | None:
        self._want = n  # how many records a batch fill may frame in one hop
        await self._refill(batch=batch)
        return None

    async def _apply_pending(self, kind: str, call: IoCall[Any], info: tuple[Any, ...]) -> None:
        if kind == "fill":
            try:
                run = call.outcome()
            except Exception as exc:
                await self._fill_failed(exc)
                return
            if len(run) == 2 and not self._buffer.n and self._buffer.batch is None:
                self._buffer.hold_batch(*run)
            else:
                keys, values = as_lists(run[0]) if len(run) == 2 else run[:2]
                self._buffer_more(keys, values, run[-1])
        elif kind == "skip_bad":
            await self._after_skip_bad(info[0], call.outcome())
        else:
            await super()._apply_pending(kind, call, info)

    # -- filling the buffer ------------------------------------------------------------------

    async def _refill(self, *, batch: bool = False) -> None:
        """Replace the (exhausted) buffer with the next run of the current work item
        (``batch``: as a batch, for ``read_batch``)."""
        self._buffer.clear()
        self._before_fill()
        try:
            if batch:
                records, at_end = await self._run_blocking(self._fill_batch)
                self._buffer.hold_batch(records, at_end)
            else:
                keys, values, at_end = await self._run_blocking(self._fill)
                self._buffer.hold(keys, values, at_end)
        except Exception as exc:
            await self._fill_failed(exc)
        except BaseException:
            self._note_pending("fill")
            raise

    async def _fill_failed(self, exc: Exception) -> None:
        """Handle an error of :meth:`_fill`: skip what the policy allows, else raise."""
        if isinstance(exc, OutOfRangeError):
            # A file too short for its header: skipped as if it had never started (Q4).
            self._errors += 1
            self._started = self._finished
            await self._abandon()
            if self._skip(exc, rest=True):
                return
            raise exc
        if not isinstance(exc, AsyncReaderError):
            raise exc
        self._errors += 1
        if not self._policy.skip:
            raise exc
        try:
            skipped = await self._run_blocking(self._skip_bad_record)
        except BaseException:
            self._note_pending("skip_bad", exc)
            raise
        await self._after_skip_bad(exc, skipped)

    async def _after_skip_bad(self, exc: AsyncReaderError, skipped: bool) -> None:
        if skipped:
            if self._skip(exc, rest=False):
                return  # the next refill reads on after the bad record
        elif self._skip(exc, rest=True):
            self._buffer.at_end = True  # the rest of the work item is lost
            return
        raise exc
