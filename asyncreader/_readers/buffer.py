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

__all__ = ["ReadAheadBuffer", "RecordRun"]

#: ``(keys, values, at_end)``: consecutive records of one work item, and whether the item
#: ends with them (what a buffered reader's ``_fill`` returns).
RecordRun: TypeAlias = tuple[list[bytes], list[bytes], bool]


class ReadAheadBuffer:
    """Records ``keys[pos:n]`` / ``values[pos:n]`` are read and not yet delivered.

    Attributes:
        keys, values: The records (the first ``pos`` of them already delivered).
        pos: The next record to deliver.
        n: ``len(keys)``.
        at_end: Whether the current work item ends with the last of them.
    """

    __slots__ = ("at_end", "keys", "n", "pos", "values")

    def __init__(self) -> None:
        self.keys: list[bytes] = []
        self.values: list[bytes] = []
        self.pos = 0
        self.n = 0
        self.at_end = False

    @property
    def waiting(self) -> int:
        """How many records wait to be delivered."""
        return self.n - self.pos

    def clear(self) -> None:
        """Drop every record (and the end of the work item with them)."""
        self.keys, self.values, self.pos, self.n = [], [], 0, 0
        self.at_end = False

    def hold(self, keys: list[bytes], values: list[bytes], at_end: bool) -> None:
        """Hold a new run in place of the (delivered) records."""
        self.keys, self.values, self.pos, self.n = keys, values, 0, len(keys)
        self.at_end = at_end

    def put_back(self, keys: list[bytes], values: list[bytes]) -> None:
        """Put records taken from the buffer (or read past it) back before the rest."""
        rest = slice(self.pos, self.n)
        self.keys = keys + self.keys[rest]
        self.values = values + self.values[rest]
        self.pos, self.n = 0, len(self.keys)

    def append(self, keys: list[bytes], values: list[bytes], at_end: bool) -> int:
        """Add records after the waiting ones, dropping the delivered head; return how many
        delivered records were dropped."""
        i = self.pos
        if i:
            keys = self.keys[i : self.n] + keys
            values = self.values[i : self.n] + values
        elif self.n:
            keys = self.keys + keys
            values = self.values + values
        self.keys, self.values, self.pos, self.n = keys, values, 0, len(keys)
        self.at_end = at_end
        return i
