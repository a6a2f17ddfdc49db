"""The read-ahead buffer: records a reader has read but not delivered yet.

A buffered reader (:mod:`asyncreader._readers.buffered`) frames a *record run* per
executor hop, ``(keys, values, at_end)``: records of one work item, in order, and whether
the item ends with them. The run waits in a :class:`ReadAheadBuffer`, from which ``read``
and ``read_up_to`` are served on the event loop. Any reader's buffer also holds the
records a cancelled call put back and those an abandoned hook call read.

The buffer is a plain object with public slots: the readers' fast paths read ``pos``,
``n``, ``keys`` and ``values`` directly (an attribute of a local is as cheap as one of the
reader), so serving a record costs no method call.
"""

from __future__ import annotations

from typing import TypeAlias

from .._records.batch import RecordBatch, concat

__all__ = ["BatchRun", "ReadAheadBuffer", "RecordRun"]

#: ``(keys, values, at_end)``: consecutive records of one work item, and whether the item
#: ends with them (what a buffered reader's ``_fill`` returns).
RecordRun: TypeAlias = tuple[list[bytes], list[bytes], bool]
#: ``(batch, at_end)``: the same as a :class:`~asyncreader.RecordBatch` (what a buffered
#: reader's ``_fill_batch`` returns for ``read_batch``).
BatchRun: TypeAlias = tuple[RecordBatch, bool]


class ReadAheadBuffer:
    """Records ``keys[pos:n]`` / ``values[pos:n]``, or ``batch[bpos:]``, are read and not
    yet delivered.

    The buffer holds records as lists (what ``read`` and ``read_up_to`` serve) or as a
    :class:`~asyncreader.RecordBatch` (what ``read_batch`` serves), never both: while a
    batch is held the lists are empty (``pos == n == 0``), so the verbs' list fast paths
    fall to the locked path, which converts the batch first (:meth:`unbatch`).

    Attributes:
        keys, values: The records (the first ``pos`` of them already delivered).
        pos: The next record to deliver.
        n: ``len(keys)``.
        batch: The records as a batch (the first ``bpos`` delivered), or ``None``.
        bpos: The next record of ``batch`` to deliver.
        at_end: Whether the current work item ends with the last of them.
    """

    __slots__ = ("at_end", "batch", "bpos", "keys", "n", "pos", "values")

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.values: list[bytes] = []
        self.pos = 0
        self.n = 0
        self.batch: RecordBatch | None = None
        self.bpos = 0
        self.at_end = False

    @property
    def waiting(self) -> int:
        """How many records wait to be delivered."""
        batch = self.batch
        if batch is not None:
            return len(batch) - self.bpos
        return self.n - self.pos

    @property
    def delivered(self) -> int:
        """How many of the held records were delivered (``pos`` or ``bpos``)."""
        return self.pos if self.batch is None else self.bpos

    def clear(self) -> None:
        """Drop every record (and the end of the work item with them)."""
        self.keys, self.values, self.pos, self.n = [], [], 0, 0
        self.batch, self.bpos = None, 0
        self.at_end = False

    def hold(self, keys: list[bytes], values: list[bytes], at_end: bool) -> None:
        """Hold a new run in place of the (delivered) records."""
        self.keys, self.values, self.pos, self.n = keys, values, 0, len(keys)
        self.batch, self.bpos = None, 0
        self.at_end = at_end

    def hold_batch(self, batch: RecordBatch, at_end: bool) -> None:
        """Hold a new run, as a batch, in place of the (delivered) records."""
        self.keys, self.values, self.pos, self.n = [], [], 0, 0
        self.batch, self.bpos = batch, 0
        self.at_end = at_end

    def take_batch(self, count: int) -> RecordBatch:
        """Deliver the next ``count`` (<= :attr:`waiting`) records of the held batch."""
        batch = self.batch
        assert batch is not None
        i = self.bpos
        self.bpos = i + count
        return batch[i : i + count]

    def unbatch(self) -> int:
        """Hold the batch's waiting records as lists; return how many delivered records
        were dropped from the head (the caller moves its restart mark past them)."""
        batch = self.batch
        if batch is None:
            return 0
        dropped = self.bpos
        rest = batch[dropped:]
        self.keys, self.values = rest.keys(), rest.tolist()
        self.pos, self.n = 0, len(self.keys)
        self.batch, self.bpos = None, 0
        return dropped

    def to_batch(self, work: bytes | None) -> int:
        """Hold the waiting list records as a batch (joined once); return how many
        delivered records were dropped from the head (see :meth:`unbatch`)."""
        if self.batch is not None:
            return 0
        dropped = self.pos
        batch = RecordBatch.from_records(
            self.keys[dropped : self.n], self.values[dropped : self.n], work=work
        )
        self.keys, self.values, self.pos, self.n = [], [], 0, 0
        self.batch, self.bpos = batch, 0
        return dropped

    def put_back(self, keys: list[bytes], values: list[bytes]) -> None:
        """Put records taken from the buffer (or read past it) back before the rest."""
        if self.batch is not None:
            self.unbatch()  # the caller's mark restarts at the records put back
        rest = slice(self.pos, self.n)
        self.keys = keys + self.keys[rest]
        self.values = values + self.values[rest]
        self.pos, self.n = 0, len(self.keys)

    def append(self, keys: list[bytes], values: list[bytes], at_end: bool) -> int:
        """Add records after the waiting ones, dropping the delivered head; return how many
        delivered records were dropped."""
        dropped = self.unbatch()
        i = self.pos
        if i:
            keys = self.keys[i : self.n] + keys
            values = self.values[i : self.n] + values
        elif self.n:
            keys = self.keys + keys
            values = self.values + values
        self.keys, self.values, self.pos, self.n = keys, values, 0, len(keys)
        self.at_end = at_end
        return dropped + i


def join_batches(parts: list[RecordBatch]) -> RecordBatch:
    """The records of ``parts`` as one batch (an empty one when there are none)."""
    if not parts:
        return RecordBatch.from_records([], [])
    return concat(parts)
