"""How a queue saves itself in a Session's checkpoint and restores itself from one.

A saved queue is its stored elements (those a blocked ``dequeue_many`` holds count as
stored), the enqueues and plain closes still waiting (a restored queue runs them itself,
as *ghost* attempts ahead of any new enqueue, as room frees), its counters and its
storage's own state. A queue with ``record_refs`` saves reader records as references and
reads them again, in a task of the session's coordinator, before it hands anything out.

The runtime knows queues through :class:`~asyncreader._runtime.checkpoint.Checkpointable`;
:class:`QueueCheckpointing` is the queue's side of that protocol, mixed into
:class:`~asyncreader._queues.base.QueueBase`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from .._errors import FailedPreconditionError, InvalidArgumentError
from .._runtime.checkpoint import RestoredWork, as_work_item, note_payload
from .._runtime.context import current_coordinator
from .attempts import CLOSE, ENQUEUE, REREAD, Attempt

if TYPE_CHECKING:
    from collections import deque
    from collections.abc import Callable, Iterator

    from .elements import TypedCodec, UntypedCodec
    from .record_refs import RefLayout

__all__ = ["QueueCheckpointing"]


def _snapshot_strings(snapshot: Any) -> Iterator[bytes]:
    """The strings in a queue's saved elements (typed: stacked or rows; untyped: a list)."""
    if isinstance(snapshot, dict):
        parts: list[Any] = []
        if isinstance(snapshot.get("stacked"), list):
            for array in snapshot["stacked"]:
                if isinstance(array, np.ndarray):
                    parts.extend(array.reshape(-1).tolist())
        if isinstance(snapshot.get("rows"), list):
            for row in snapshot["rows"]:
                parts.extend(row if isinstance(row, list) else [row])
        snapshot = parts
    if isinstance(snapshot, list):
        for element in snapshot:
            item = as_work_item(element)
            if item is not None:
                yield item


class QueueCheckpointing:
    """The checkpoint half of a queue: save, restore, and the restored attempts."""

    # The queue state it reads and writes (see QueueBase).
    _buf: Any
    _cap: int
    _closed: bool
    _codec: TypedCodec | UntypedCodec
    _enqueuers: deque[Attempt]
    _dequeuers: deque[Attempt]
    _peak: int
    _total_in: int
    _total_out: int
    _refs: RefLayout | None
    _push_list: Callable[[list[Any]], None]

    if TYPE_CHECKING:

        @property
        def name(self) -> str: ...

        @property
        def dtypes(self) -> list[Any] | None: ...

        def _shared_config(self) -> dict[str, object]: ...
        def _stored_rows(self, taken: list[Any]) -> list[Any]: ...
        def _set_closed(self) -> None: ...
        def _note_inserted(self, count: int) -> None: ...
        def _notify(self) -> None: ...

    def _checkpoint_save(self) -> dict[str, Any]:
        """Return the queue's contents and waiting enqueues as a checkpoint tree.

        Synchronous, so it sees one consistent instant: elements a blocked
        ``dequeue_many`` holds count as stored (they would be put back); elements a
        blocked enqueue has not inserted yet are kept as a pending enqueue, which a
        restored queue inserts by itself, ahead of any new enqueue, as room frees.
        """
        taken: list[Any] = []
        for w in self._dequeuers:
            taken.extend(w.taken)
        stored = None
        pending: list[Any] = []
        for w in self._enqueuers:
            if w.kind == REREAD:
                stored = w.unread  # not read again yet: the queue is still empty
            elif w.kind == CLOSE:
                pending.append({"close": True})
            elif w.unread is not None:
                pending.append({"items": w.unread})
            elif w.pos < len(w.items):
                pending.append({"items": self._save_rows(w.items[w.pos :])})
        if stored is None:
            stored = self._save_rows(self._stored_rows(taken))
        tree = {
            "type": type(self).__name__,
            "config": self._shared_config(),
            "stored": stored,
            "pending": pending,
            "closed": self._closed,
            "counters": (self._peak, self._total_in, self._total_out),
            "extra": self._checkpoint_extra(),
        }
        if self._refs is not None:
            tree["record_refs"] = self._refs.header()
        return tree

    def _save_rows(self, rows: list[Any]) -> Any:
        snapshot = self._codec.snapshot_rows(rows)
        if self._refs is None:
            if len(rows):
                note_payload(f"queue '{self.name}'")
            return snapshot
        return self._refs.strip(snapshot)

    def _checkpoint_restore(self, tree: Any) -> None:
        """Load a tree from :meth:`_checkpoint_save` into this new, unused queue.

        Raises:
            InvalidArgumentError: the tree comes from a queue of another type or
                configuration, or is malformed.
        """
        try:
            kind, config = tree["type"], tree["config"]
        except (TypeError, KeyError):
            raise InvalidArgumentError(f"malformed checkpoint of queue '{self.name}'") from None
        if kind != type(self).__name__ or config != self._shared_config():
            raise InvalidArgumentError(
                f"checkpoint of {kind} {config} does not fit {type(self).__name__} "
                f"'{self.name}' {self._shared_config()}"
            )
        if self._buf or self._enqueuers or self._dequeuers or self._total_in:
            raise FailedPreconditionError(f"queue '{self.name}' was used before its restore")
        refs = self._refs
        saved_refs = tree.get("record_refs")
        if refs is None and saved_refs is not None:
            raise InvalidArgumentError(
                f"queue '{self.name}' saved its records as references: build it with the "
                "same record_refs to restore it"
            )
        if refs is not None:
            if saved_refs is None:
                raise InvalidArgumentError(
                    f"queue '{self.name}' has record_refs, but its checkpoint saved payloads"
                )
            refs.check(saved_refs)
        codec = self._codec
        if refs is None:
            self._push_list(codec.restore_rows(tree["stored"]))
        else:
            # Everything waits behind the stored elements until their records are read
            # again (by a task of the current coordinator, see _reread_records).
            w = Attempt(REREAD)
            w.ghost = True
            w.unread = tree["stored"]
            self._enqueuers.append(w)
        for entry in tree["pending"]:
            w = Attempt(CLOSE if "close" in entry else ENQUEUE)
            w.ghost = True
            if "items" in entry:
                if refs is None:
                    w.items = codec.restore_rows(entry["items"])
                else:
                    w.unread = entry["items"]
            self._enqueuers.append(w)
        if tree["closed"]:
            if refs is None:
                self._set_closed()
            else:  # closing now would end dequeues before the records are back
                w = Attempt(CLOSE)
                w.ghost = True
                self._enqueuers.append(w)
        self._peak, self._total_in, self._total_out = (int(c) for c in tree["counters"])
        self._checkpoint_restore_extra(tree["extra"])
        if refs is None:
            self._run_ghosts()
            return
        coord = current_coordinator()
        if coord is None:
            raise FailedPreconditionError(
                f"queue '{self.name}' restores records by reading them again: restore it "
                "inside a Session"
            )
        coord.start_soon(self._reread_records, name=f"{self.name}-reread")

    async def _reread_records(self) -> None:
        """Read the records of a restored queue again, then let the queue go on."""
        assert self._refs is not None
        waiting = [w for w in self._enqueuers if w.unread is not None]
        snapshots = await self._refs.restore([w.unread for w in waiting])
        for w, snapshot in zip(waiting, snapshots, strict=True):
            rows = self._codec.restore_rows(snapshot)
            w.unread = None
            if w.kind == REREAD:
                if w in self._enqueuers:  # not dropped by close(cancel_pending_enqueues)
                    self._enqueuers.remove(w)
                    self._push_list(rows)
            else:
                w.items = rows
        self._notify()

    def _checkpoint_extra(self) -> Any:
        """Storage state beyond the elements (RandomShuffleQueue's generators)."""
        return None

    def _checkpoint_restore_extra(self, extra: Any) -> None:
        """Restore what :meth:`_checkpoint_extra` returned."""

    def _run_ghosts(self) -> None:
        """Run restored enqueues at the head of the enqueue side, as far as room allows."""
        side = self._enqueuers
        while side and side[0].ghost:
            w = side[0]
            if w.kind == REREAD:
                return  # still reading the stored elements again: everything waits
            if w.kind == CLOSE:
                side.popleft()
                if not self._closed:
                    self._set_closed()
                continue
            if self._closed:  # as the enqueue it stands for would have failed
                side.popleft()
                continue
            room = self._cap - len(self._buf)
            if room <= 0:
                return
            end = min(len(w.items), w.pos + room)
            self._push_list(w.items[w.pos : end])
            self._note_inserted(end - w.pos)
            w.pos = end
            if end < len(w.items):
                return
            side.popleft()

    # -- elements held outside the queue by its owner (a batcher's example in hand) ----------

    def _save_outside(self, snapshot: Any) -> Any | None:
        """Save elements its owner holds (a snapshot of rows, as the codec makes) the way
        the queue saves its own: as record references, or ``None`` when the queue saves
        payloads (the owner then saves them as they are)."""
        return None if self._refs is None else self._refs.strip(snapshot)

    async def _restore_outside(self, saved: Any) -> Any:
        """Read the records of elements saved by :meth:`_save_outside` again; return their
        snapshot of rows.

        Raises:
            DataLossError: a record changed since the checkpoint.
        """
        if self._refs is None:
            raise InvalidArgumentError(f"queue '{self.name}' saves payloads, not record references")
        (snapshot,) = await self._refs.restore([saved])
        return snapshot

    def _checkpoint_work_items(self, tree: Any) -> RestoredWork | None:
        """The strings a restored queue of single strings (a reader's work queue) holds.

        They may be records rather than work items, so each is checked only when a reader
        takes it as its work. Record references are checked when they are read again.
        """
        if not isinstance(tree, dict) or "record_refs" in tree:
            return None
        dtypes = self.dtypes
        if dtypes is not None and (len(dtypes) != 1 or np.dtype(dtypes[0]).kind != "O"):
            return None
        snapshots = [tree.get("stored")]
        pending = tree.get("pending")
        if isinstance(pending, list):
            snapshots += [e.get("items") for e in pending if isinstance(e, dict)]
        items = tuple(item for snap in snapshots for item in _snapshot_strings(snap))
        return RestoredWork(items, when_taken=True) if items else None
