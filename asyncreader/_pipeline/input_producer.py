"""InputProducer: the enqueue op behind every input producer, and its checkpoints.

An input producer's QueueRunner has one task whose op is an :class:`InputProducer`. Each
call enqueues one whole epoch of the input's rows (freshly permuted when shuffling) with a
single ``enqueue_many``, and after ``num_epochs`` epochs raises
:class:`~asyncreader.OutOfRangeError`. It keeps the epoch counter, the random generator and
a log of the epochs still partly in the queue, so it can say where consumers stand
(:meth:`InputProducer.state`) and resume there (:meth:`InputProducer.restore`). Its
checkpoint also carries a fingerprint of the input, so a restore over other inputs is
refused instead of silently skipping or repeating rows.

A producer made with glob patterns (``string_input_producer(..., glob=True)``) lists the
files in its runner task, on the I/O executor, before its first epoch: construction does
no I/O, and the listing never blocks the event loop. Its input, in checkpoints too, is the
expanded list of files, so a checkpoint restored before the listing is held until the
files are known and checked against them then.
"""

from __future__ import annotations

import functools
import hashlib
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import anyio
import numpy as np

from .._errors import FailedPreconditionError, InvalidArgumentError, OutOfRangeError
from .._io.executor import IoCall, run_io_abandoning
from .._io.filesystem import match_work_items, pattern_names
from .._messages import short_repr

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping, Sequence

    from .._queues.fifo import FIFOQueue

__all__ = ["InputProducer", "ProducerState", "ProducerStatistics"]


def _fingerprint(rows: np.ndarray[Any, Any]) -> dict[str, Any]:
    """What identifies one input array in a producer's checkpoint.

    Strings (file names, above all) are stored as they are, so a restore over other
    inputs can say which one differs; other rows by count, dtype, row shape and a SHA-256
    of their bytes (object rows that are not strings: of their ``repr``).
    """
    flat = rows.reshape(-1)
    out: dict[str, Any] = {
        "count": len(rows),
        "dtype": rows.dtype.str,
        "shape": list(rows.shape[1:]),
    }
    if rows.dtype.kind == "O":
        items = flat.tolist()
        if all(isinstance(v, (str, bytes)) for v in items):
            out["values"] = items
            return out
        digest = hashlib.sha256()
        for v in items:
            digest.update(repr(v).encode("utf-8", "backslashreplace") + b"\0")
    else:
        digest = hashlib.sha256(memoryview(np.ascontiguousarray(rows).data).cast("B"))
    out["sha256"] = digest.hexdigest()
    return out


def _fingerprint_difference(saved: Any, mine: dict[str, Any], what: str) -> str | None:
    """Describe how a saved input fingerprint differs from ``mine`` (``None``: it doesn't)."""
    if not isinstance(saved, dict):
        return "the checkpoint's description of the input is malformed"
    if saved.get("count") != mine["count"]:
        return f"the checkpoint's {what} has {saved.get('count')!r} rows, this one {mine['count']}"
    for field in ("dtype", "shape"):
        if saved.get(field) != mine[field]:
            return (
                f"the checkpoint's {what} has rows of {field} {short_repr(saved.get(field))}, "
                f"this one {short_repr(mine[field])}"
            )
    if "values" in mine:
        theirs = saved.get("values")
        if not isinstance(theirs, list) or len(theirs) != len(mine["values"]):
            return f"the checkpoint's {what} is not stored as {mine['count']} strings"
        for index, (a, b) in enumerate(zip(theirs, mine["values"], strict=True)):
            if a != b:
                return (
                    f"{what} row {index} differs: the checkpoint has {short_repr(a)}, "
                    f"this one {short_repr(b)}"
                )
        return None
    if saved.get("sha256") != mine["sha256"]:
        return (
            f"the checkpoint's {what} has other contents (same {mine['count']} rows, dtype "
            "and shape, different SHA-256)"
        )
    return None


@dataclass(frozen=True, slots=True)
class ProducerState:
    """Where an :class:`InputProducer` stands, to resume it with :meth:`~InputProducer.restore`.

    Attributes:
        epoch: The epoch to resume (0-based; equals ``num_epochs`` when all are done).
        position: Rows of that epoch already handed to consumers.
        rng_state: The random generator's state at the start of that epoch (``None``
            without shuffling); the epoch's permutation is drawn from it again.
    """

    epoch: int
    position: int
    rng_state: Mapping[str, Any] | None


@dataclass(frozen=True, slots=True)
class ProducerStatistics:
    """A snapshot of an :class:`InputProducer` and its queue.

    Attributes:
        epochs_started: Epochs whose enqueue has begun (TensorFlow's epoch counter).
        epochs_completed: Epochs fully enqueued.
        num_epochs: The epoch limit (``None``: unlimited).
        epoch_size: Rows per epoch.
        size: Rows in the queue now.
        capacity: The queue's capacity.
        fill_fraction: ``size / capacity``: TensorFlow's ``fraction_of_<capacity>_full``.
        closed: Whether the queue is closed.
    """

    epochs_started: int
    epochs_completed: int
    num_epochs: int | None
    epoch_size: int
    size: int
    capacity: int | None
    fill_fraction: float
    closed: bool


class _Epoch:
    """Bookkeeping for one epoch that was (or is being) enqueued."""

    __slots__ = ("first_row", "index", "rng_state", "rows", "start")

    def __init__(self, index: int, start: int, first_row: int, rows: int, rng_state: Any) -> None:
        self.index = index  # which epoch
        self.start = start  # rows skipped at its beginning (a restored position)
        self.first_row = first_row  # its first row's number in the producer's output
        self.rows = rows  # rows enqueued for it
        self.rng_state = rng_state


class InputProducer:
    """The enqueue op of an input producer's QueueRunner: one call enqueues one epoch.

    Made by the producer functions; find it with :func:`producer_of`.

    Each call checks the epoch limit (raising :class:`~asyncreader.OutOfRangeError`
    ``Reached limit of <num_epochs>`` once it is reached), permutes the rows when
    shuffling, and enqueues them with one ``enqueue_many``.
    """

    __slots__ = (
        "__weakref__",
        "_completed",
        "_enqueuing",
        "_epoch",
        "_fingerprint",
        "_inputs",
        "_log",
        "_num_epochs",
        "_on_expanded",
        "_patterns",
        "_pending_state",
        "_pending_tree",
        "_queue",
        "_resume_position",
        "_rng",
        "_rows",
        "_scheduled",
        "_shuffle",
        "_what",
    )

    def __init__(
        self,
        what: str,
        rows: np.ndarray[Any, Any],
        queue: FIFOQueue,
        *,
        num_epochs: int | None,
        shuffle: bool,
        seed: int | None,
        inputs: Sequence[np.ndarray[Any, Any]] | None = None,
        patterns: Sequence[str] | None = None,
        on_expanded: Callable[[list[str]], None] | None = None,
    ) -> None:
        self._what = what
        # Glob patterns still to be listed (in the runner task): until then ``rows`` is
        # empty, and the input is the list of matching files once it is known.
        self._patterns = list(patterns) if patterns is not None else None
        self._on_expanded = on_expanded  # told the files the patterns matched
        self._pending_tree: Any = None  # a checkpoint restored before the listing
        self._pending_state: ProducerState | None = None  # restore() before the listing
        self._rows = rows
        # What the checkpoint identifies: the rows, or the arrays a slice producer indexes.
        self._inputs = [rows] if inputs is None else list(inputs)
        self._fingerprint: list[dict[str, Any]] | None = None
        self._queue = queue
        self._num_epochs = num_epochs
        self._shuffle = bool(shuffle)
        self._rng = np.random.Generator(np.random.PCG64(seed))
        self._epoch = 0
        self._completed = 0
        self._resume_position = 0
        self._scheduled = 0
        self._log: deque[_Epoch] = deque()
        self._enqueuing = False

    @property
    def queue(self) -> FIFOQueue:
        """The queue this producer fills."""
        return self._queue

    @property
    def patterns(self) -> list[str] | None:
        """The glob patterns this producer lists before its first epoch (``None``: none).

        They stay set after the listing; :meth:`files` tells the files they matched.
        """
        return None if self._patterns is None else list(self._patterns)

    def files(self) -> list[str] | None:
        """The files the patterns matched, sorted; ``None`` before the listing (or without
        patterns)."""
        if self._patterns is None or not self._expanded():
            return None
        return list(self._rows.tolist())

    def _expanded(self) -> bool:
        return self._patterns is None or len(self._rows) > 0

    async def _expand(self) -> None:
        """List the files the patterns match, then apply a restore held until now.

        Raises:
            NotFoundError: a pattern matches no file (naming it).
            InvalidArgumentError: a held checkpoint was taken over other files.
        """
        assert self._patterns is not None
        files = await run_io_abandoning(IoCall(functools.partial(match_work_items, self._patterns)))
        rows = np.empty(len(files), dtype=object)
        rows[:] = files
        self._rows = rows
        self._inputs = [rows]
        self._fingerprint = None
        if self._on_expanded is not None:
            self._on_expanded(files)
        tree, self._pending_tree = self._pending_tree, None
        state, self._pending_state = self._pending_state, None
        if tree is not None:
            try:
                self._checkpoint_restore(tree)
            except InvalidArgumentError as exc:
                exc.add_note(f"the files matching {self._patterns!r} were listed after the restore")
                raise
        elif state is not None:
            self.restore(state)

    async def __call__(self) -> None:
        """Enqueue the next epoch (listing the files first, for a producer of patterns).

        Raises:
            OutOfRangeError: once ``num_epochs`` epochs have been enqueued.
            QueueClosedError: if the queue was closed meanwhile.
            NotFoundError: a glob pattern matches no file.
        """
        if not self._expanded():
            await self._expand()
        if self._num_epochs is not None and self._epoch >= self._num_epochs:
            await anyio.lowlevel.checkpoint()
            raise OutOfRangeError(f"Reached limit of {self._num_epochs}")
        rows = self._rows
        rng_state = None
        if self._shuffle:
            rng_state = self._rng.bit_generator.state
            rows = rows[self._rng.permutation(len(rows))]
        start, self._resume_position = self._resume_position, 0
        if start:
            rows = rows[start:]
        self._forget_delivered(self._delivered())
        self._log.append(_Epoch(self._epoch, start, self._scheduled, len(rows), rng_state))
        self._epoch += 1
        self._scheduled += len(rows)
        self._enqueuing = True
        try:
            await self._queue.enqueue_many(rows)
        finally:
            self._enqueuing = False
        self._completed += 1

    def _delivered(self) -> int:
        """Rows of this producer's output that consumers have taken from the queue.

        Read from the queue's ``total_dequeued`` counter (this producer being its only
        source). Without that counter it is exact only while no epoch is being enqueued;
        during an ``enqueue_many`` it then assumes nothing of the current epoch was taken
        (so resuming repeats rows rather than skipping any).
        """
        stats = getattr(self._queue, "statistics", None)
        total = getattr(stats(), "total_dequeued", None) if stats is not None else None
        if isinstance(total, int):
            return total
        size = int(self._queue.size())
        if not self._enqueuing:
            return max(0, self._scheduled - size)
        return max(0, self._log[-1].first_row - size)

    def state(self) -> ProducerState:
        """Return where consumers stand in this producer's output.

        The state names the first row no consumer has taken: its epoch, its position in
        that epoch and the generator state that epoch's permutation came from. Give it to
        :meth:`restore` on a fresh producer with the same input and ``seed`` to continue
        from there. Assumes this producer is the queue's only source. The position
        is exact whenever the queue counts its dequeues (asyncreader's queues do).
        """
        delivered = self._delivered()
        self._forget_delivered(delivered)
        if self._log:
            entry = self._log[0]
            return ProducerState(
                epoch=entry.index,
                position=entry.start + (delivered - entry.first_row),
                rng_state=entry.rng_state,
            )
        return ProducerState(
            epoch=self._epoch,
            position=self._resume_position,
            rng_state=self._rng.bit_generator.state if self._shuffle else None,
        )

    def _forget_delivered(self, delivered: int) -> None:
        """Drop the bookkeeping of epochs consumers have taken completely."""
        log = self._log
        while log and delivered >= log[0].first_row + log[0].rows:
            log.popleft()

    def restore(self, state: ProducerState) -> None:
        """Continue from ``state`` (from :meth:`state`) instead of the first epoch.

        Call it right after creating the producer, before its first epoch is enqueued
        (the runner task starts at the next checkpoint of the calling task).

        Raises:
            FailedPreconditionError: if an epoch has already been enqueued.
            InvalidArgumentError: if the state does not fit this producer (position past
                the end of an epoch, negative epoch, a missing generator state).
        """
        if self._epoch or self._enqueuing:
            raise FailedPreconditionError(
                f"{self._what}: restore() must come before the first epoch is enqueued"
            )
        if not self._expanded():
            if state.epoch < 0 or state.position < 0:
                raise InvalidArgumentError(
                    f"{self._what}: cannot restore epoch {state.epoch} position {state.position}"
                )
            self._pending_state = state  # checked against the files once they are listed
            return
        n = len(self._rows)
        if state.epoch < 0 or not 0 <= state.position <= n:
            raise InvalidArgumentError(
                f"{self._what}: cannot restore epoch {state.epoch} position "
                f"{state.position} with {n} rows per epoch"
            )
        if self._shuffle:
            if state.rng_state is None:
                raise InvalidArgumentError(
                    f"{self._what}: a shuffling producer needs the state's rng_state"
                )
            try:
                self._rng.bit_generator.state = dict(state.rng_state)
            except (TypeError, ValueError, KeyError) as exc:
                raise InvalidArgumentError(f"{self._what}: invalid rng_state: {exc}") from exc
        epoch, position = state.epoch, state.position
        if position == n:  # that epoch was used up
            epoch, position = epoch + 1, 0
            if self._shuffle:
                self._rng.permutation(n)  # advance past the used-up epoch's permutation
        self._epoch = epoch
        self._resume_position = position

    def _inputs_fingerprint(self) -> list[dict[str, Any]]:
        # Computed once: the inputs do not change while the producer runs.
        if self._fingerprint is None:
            self._fingerprint = [_fingerprint(a) for a in self._inputs]
        return self._fingerprint

    def _checkpoint_save(self) -> dict[str, Any]:
        if not self._expanded():
            if self._pending_tree is not None:
                return dict(self._pending_tree)  # nothing was consumed since the restore
            # Nothing listed, nothing consumed: the restore starts afresh over the files
            # the patterns match then.
            return {
                "what": self._what,
                "rows": None,
                "shuffle": self._shuffle,
                "inputs": None,
                "patterns": list(self._patterns or ()),
                "epoch": 0,
                "position": 0,
                "rng_state": None,
            }
        state = self.state()
        return {
            "what": self._what,
            "rows": len(self._rows),
            "shuffle": self._shuffle,
            "inputs": self._inputs_fingerprint(),
            "epoch": state.epoch,
            "position": state.position,
            "rng_state": state.rng_state,
        }

    def _checkpoint_restore(self, tree: Any) -> None:
        if isinstance(tree, dict) and "epoch" in tree and "inputs" not in tree:
            raise InvalidArgumentError(
                f"{self._what}: the checkpoint does not identify the producer's input (it "
                "was written by an older asyncreader), so a restore cannot check that it "
                "continues over the same input"
            )
        try:
            what, rows, shuffle = tree["what"], tree["rows"], tree["shuffle"]
            inputs = tree["inputs"]
            state = ProducerState(tree["epoch"], tree["position"], tree["rng_state"])
        except (TypeError, KeyError):
            raise InvalidArgumentError(f"{self._what}: malformed checkpoint") from None
        if what != self._what:
            raise InvalidArgumentError(
                f"checkpoint of a {short_repr(what)} does not fit this {self._what}"
            )
        if inputs is None:  # saved before its patterns were listed: nothing was consumed
            if tree.get("patterns") != self._patterns or shuffle is not self._shuffle:
                raise InvalidArgumentError(
                    f"{self._what}: the checkpoint was taken over the patterns "
                    f"{short_repr(tree.get('patterns'))} with shuffle={shuffle!r}, this "
                    f"producer has {short_repr(self._patterns)} with shuffle={self._shuffle}"
                )
            return
        if not self._expanded():
            if shuffle is not self._shuffle:
                raise InvalidArgumentError(
                    f"checkpoint of a {what} with shuffle={shuffle!r} does not fit this one "
                    f"with shuffle={self._shuffle}"
                )
            self._pending_tree = tree  # checked against the files once they are listed
            return
        self._check_inputs(inputs)
        if (
            rows != len(self._rows)
            or not isinstance(state.epoch, int)
            or not isinstance(state.position, int)
        ):
            raise InvalidArgumentError(
                f"{self._what}: malformed checkpoint (rows {short_repr(rows)}, epoch "
                f"{short_repr(state.epoch)}, position {short_repr(state.position)})"
            )
        if shuffle is not self._shuffle:
            raise InvalidArgumentError(
                f"checkpoint of a {what} with shuffle={shuffle!r} does not fit this one with "
                f"shuffle={self._shuffle}: the saved position is in another order of the rows"
            )
        self.restore(state)

    def _claimed_files(self) -> list[str]:
        """The files a held checkpoint says the patterns matched, those the patterns can
        name (for the vetting of an unsigned restore, before the listing)."""
        tree = self._pending_tree
        if tree is None or self._patterns is None:
            return []
        try:
            values = tree["inputs"][0]["values"]
        except (TypeError, KeyError, IndexError):
            return []
        if not isinstance(values, list):
            return []
        return [
            v
            for v in values
            if isinstance(v, str) and any(pattern_names(p, v) for p in self._patterns)
        ]

    def _check_inputs(self, saved: Any) -> None:
        """Refuse a checkpoint whose producer ran over other inputs than this one.

        Raises:
            InvalidArgumentError: naming the first difference.
        """
        mine = self._inputs_fingerprint()
        if not isinstance(saved, list) or len(saved) != len(mine):
            count = len(saved) if isinstance(saved, list) else "?"
            raise InvalidArgumentError(
                f"checkpoint of a {self._what} over {count} input arrays does not fit this "
                f"one over {len(mine)}"
            )
        for index, (theirs, ours) in enumerate(zip(saved, mine, strict=True)):
            label = "input" if len(mine) == 1 else f"input array {index}"
            difference = _fingerprint_difference(theirs, ours, label)
            if difference is not None:
                raise InvalidArgumentError(
                    f"{self._what}: the checkpoint was taken over other inputs: {difference}. "
                    "Restore it over the same inputs, in the same order."
                )

    def statistics(self) -> ProducerStatistics:
        """Return a snapshot of the epoch counters and the queue's fill level."""
        size = int(self._queue.size())
        capacity = self._queue.capacity
        return ProducerStatistics(
            epochs_started=self._epoch,
            epochs_completed=self._completed,
            num_epochs=self._num_epochs,
            epoch_size=len(self._rows),
            size=size,
            capacity=capacity,
            fill_fraction=size / capacity if capacity else 0.0,
            closed=bool(self._queue.is_closed()),
        )

    def fill_fraction(self) -> float:
        """Return ``size / capacity`` of the queue (TensorFlow's ``fraction_of_N_full``)."""
        return self.statistics().fill_fraction

    def __repr__(self) -> str:
        s = self.statistics()
        limit = "inf" if s.num_epochs is None else str(s.num_epochs)
        return (
            f"<InputProducer {self._what} epoch={s.epochs_started}/{limit} "
            f"rows={s.epoch_size} size={s.size}/{s.capacity} closed={s.closed}>"
        )
