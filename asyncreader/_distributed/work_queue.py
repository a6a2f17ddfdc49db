"""The leases of a shared work queue, kept in the queue's actor (the actor side).

A reader of a shared queue does not pop work items, it leases them
(:class:`~asyncreader._readers.work.LeasedWork`): the item stays the rank's until every
record the rank read from it is *acknowledged* (``Session.ack``: the step that consumed
the records is done) or the rank leaves the job normally. A rank reports, with each ack,
how far each of its leases has read (the *offset*: records of the item passed so far) and,
when the reader is between operations, its position (``serialize_state()`` bytes); its
next take of a work item tells that the reader is done with the previous one.

When a rank dies (its anchor actor dies with its process, or it is silent for
``lease_timeout``) it is *fenced*: its later calls are refused. Each lease it held goes
back to the front of the pending items with the keys already acknowledged and the offset
reached; the rank that takes it reads the item again from its start (or from the last
reported position before which every record was acknowledged), skipping the acknowledged
keys. Records the dead rank read but had not acknowledged are thus delivered again, once;
acknowledged ones never.

Fast ranks take more items: a rank asks for the next one when its reader needs it.
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import time
from typing import Any

from .._errors import (
    DataLossError,
    FailedPreconditionError,
    InvalidArgumentError,
    OutOfRangeError,
)

__all__ = ["LeaseBook"]

#: How often (at most) the actor checks for ranks silent for their lease_timeout.
_WATCH_INTERVAL = 1.0
#: How long a watcher waits before asking again after ActorUnavailableError (node loss).
_SUSPECT_RETRY = 1.0


@dataclasses.dataclass(eq=False)
class Lease:
    """One work item held by a rank (or pending again, when ``client`` is ``None``)."""

    item: Any
    client: str | None = None
    lid: int = -1
    #: Records of the item passed so far (delivered or skipped), as last reported.
    offset: int = 0
    #: The reader still reads the item (its next take ends that).
    reading: bool = True
    #: Keys of the item's records acknowledged, by any rank.
    consumed: set[bytes] = dataclasses.field(default_factory=set)
    #: A reported reader state before which every record was acknowledged, and its offset.
    resume: tuple[bytes, int] | None = None


@dataclasses.dataclass(eq=False)
class Rank:
    """A client (one rank's session) that leases: how it is watched."""

    lease_timeout: float
    seen: float
    watcher: asyncio.Task[None] | None = None


class LeaseBook:
    """The leases of one hosted queue (see the module).

    Args:
        queue: The hosted queue (the library's own) the work items come from.
        name: The queue's shared name, for messages.
    """

    def __init__(self, queue: Any, name: str) -> None:
        self._queue = queue
        self._name = name
        self._pending: collections.deque[Lease] = collections.deque()
        self._leases: dict[int, Lease] = {}
        self._next_id = 0
        self._ranks: dict[str, Rank] = {}
        self._fenced: dict[str, str] = {}  # client -> why it was declared dead
        self._changed = asyncio.Event()
        self._watchdog: asyncio.Task[None] | None = None
        self._ledger: collections.Counter[bytes] | None = None
        self._taking = 0  # lease calls in progress
        self.events: list[tuple[float, str, str, int]] = []

    # -- ranks -------------------------------------------------------------------------

    def register(self, client: str, anchor: Any, lease_timeout: float) -> None:
        """Watch ``client``: its ``anchor`` actor's death, or ``lease_timeout`` of silence,
        makes it dead."""
        self._check_alive(client)
        if client in self._ranks:
            return
        rank = self._ranks[client] = Rank(lease_timeout, time.monotonic())
        rank.watcher = asyncio.ensure_future(self._watch_anchor(client, anchor))
        if self._watchdog is None:
            self._watchdog = asyncio.ensure_future(self._watch_silence())

    def seen(self, client: str) -> None:
        """``client`` called: it is alive now."""
        rank = self._ranks.get(client)
        if rank is not None:
            rank.seen = time.monotonic()

    def _check_alive(self, client: str) -> None:
        why = self._fenced.get(client)
        if why is not None:
            raise FailedPreconditionError(
                f"queue '{self._name}': this rank was declared dead ({why}); its leases "
                "went to other ranks and its calls are refused"
            )

    async def _watch_anchor(self, client: str, anchor: Any) -> None:
        import ray

        while client in self._ranks:
            try:
                await anchor.block.remote()
            except ray.exceptions.ActorUnavailableError:
                # A node that may come back: suspect only (lease_timeout still applies).
                await asyncio.sleep(_SUSPECT_RETRY)
                continue
            except ray.exceptions.RayActorError as exc:
                self.rank_died(client, f"its process ended: {type(exc).__name__}")
                return
            except ray.exceptions.RayError:
                await asyncio.sleep(_SUSPECT_RETRY)
                continue

    async def _watch_silence(self) -> None:
        while True:
            interval = min([_WATCH_INTERVAL] + [r.lease_timeout / 4 for r in self._ranks.values()])
            await asyncio.sleep(interval)
            now = time.monotonic()
            for client, rank in list(self._ranks.items()):
                if now - rank.seen > rank.lease_timeout:
                    self.rank_died(client, f"silent for more than {rank.lease_timeout:g} s")

    def rank_died(self, client: str, why: str) -> None:
        """Fence ``client``; its leases go back to the front of the pending items."""
        rank = self._ranks.pop(client, None)
        if rank is None:
            return  # left normally, or already dead
        self._fenced[client] = why
        if rank.watcher is not None and rank.watcher is not asyncio.current_task():
            rank.watcher.cancel()
        back = [lease for lease in self._leases.values() if lease.client == client]
        for lease in reversed(back):
            self._give_back(lease)
        self.events.append((time.time(), client, why, len(back)))
        self._notify()

    def left(self, client: str) -> None:
        """``client``'s session ended normally: its leases are done, whatever is unacked."""
        rank = self._ranks.pop(client, None)
        if rank is not None and rank.watcher is not None:
            rank.watcher.cancel()
        for lid in [lid for lid, lease in self._leases.items() if lease.client == client]:
            del self._leases[lid]
        self._notify()

    def _give_back(self, lease: Lease) -> None:
        del self._leases[lease.lid]
        lease.client, lease.lid, lease.reading = None, -1, True
        self._pending.appendleft(lease)

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # -- leasing -----------------------------------------------------------------------

    async def lease(
        self, client: str, finished: list[tuple[int, int]]
    ) -> tuple[int, Any, bytes | None, list[bytes], int]:
        """Take the next work item for a reader of ``client`` (the reader's ``dequeue``).

        ``finished``: ``(lease id, final offset)`` of the items the rank's readers are
        done with. Items given back by dead ranks come first, then the queue's own.

        Returns:
            ``(lease id, item, position, skip keys, offset of the position)``.

        Raises:
            OutOfRangeError: the queue is closed and empty and no other live rank still
                reads an item it could give back.
            FailedPreconditionError: ``client`` was declared dead.
        """
        self._check_alive(client)
        self.seen(client)
        self._taking += 1
        try:
            return await self._lease(client, finished)
        finally:
            self._taking -= 1

    async def _lease(
        self, client: str, finished: list[tuple[int, int]]
    ) -> tuple[int, Any, bytes | None, list[bytes], int]:
        for lid, offset in finished:
            lease = self._leases.get(lid)
            if lease is not None and lease.client == client:
                lease.offset = max(lease.offset, offset)
                lease.reading = False
                self._settle(lease)
        if finished:
            self._notify()  # takes waiting at the end see fewer items being read
        while True:
            if self._pending:
                return self._grant(client, self._pending.popleft())
            changed = self._changed
            try:
                item = await self._dequeue_unless(changed)
            except OutOfRangeError:
                if not any(
                    lease.reading and lease.client != client for lease in self._leases.values()
                ):
                    raise
                await changed.wait()  # an item may come back from a rank that dies
                item = None
            self._check_alive(client)
            if item is not None:
                return self._grant(client, Lease(item))

    async def _dequeue_unless(self, changed: asyncio.Event) -> Any:
        """The queue's next element, or ``None`` when ``changed`` is set first."""
        take = asyncio.ensure_future(self._queue.dequeue())
        wake = asyncio.ensure_future(changed.wait())
        try:
            await asyncio.wait({take, wake}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            wake.cancel()
            if not take.done():
                take.cancel()
                await asyncio.wait({take})  # a cancelled dequeue takes nothing
        if take.cancelled():
            return None
        return take.result()

    def _grant(self, client: str, lease: Lease) -> tuple[int, Any, bytes | None, list[bytes], int]:
        lease.client, lease.lid = client, self._next_id
        self._next_id += 1
        self._leases[lease.lid] = lease
        lease.reading = True
        if lease.resume is not None:
            position, base = lease.resume
        else:
            position, base = None, 0
        return lease.lid, lease.item, position, sorted(lease.consumed), base

    def withdraw(self, reply: tuple[int, Any, bytes | None, list[bytes], int]) -> None:
        """A lease's grant never reached its reader: the item is pending again."""
        lease = self._leases.get(reply[0])
        if lease is not None:
            self._give_back(lease)
            self._notify()

    def _settle(self, lease: Lease) -> None:
        """Drop ``lease`` once it is read to the end and every record is acknowledged."""
        if not lease.reading and len(lease.consumed) >= lease.offset:
            del self._leases[lease.lid]
            self._notify()

    # -- acknowledgements -----------------------------------------------------------------

    def ack(
        self, client: str, updates: list[tuple[int, int, bytes | None, int, list[bytes]]]
    ) -> list[int]:
        """Record ``client``'s step: per lease ``(id, offset, position or None, offset of
        the position, keys acknowledged)``.

        Returns:
            The ids of the leases now done (read and acknowledged to the end).

        Raises:
            FailedPreconditionError: ``client`` was declared dead (nothing is recorded).
            InvalidArgumentError: a lease is not ``client``'s, or a key was acknowledged
                before (nothing is recorded).
            DataLossError: items given back by dead ranks can no longer be read (see
                :meth:`_check_stranded`); the step itself is recorded.
        """
        self._check_alive(client)
        self.seen(client)
        updates_by_id = {update[0]: update for update in updates}
        leases = []
        done = []
        for lid, _, _, _, keys in updates:
            lease = self._leases.get(lid)
            if lease is None and not keys:
                done.append(lid)  # settled when its reader moved on: nothing to record
                continue
            if lease is None or lease.client != client:
                raise InvalidArgumentError(
                    f"queue '{self._name}': lease {lid} is not held by this rank"
                )
            again = lease.consumed.intersection(keys)
            if again or len(set(keys)) != len(keys):
                shown = sorted(again)[:3] if again else keys[:3]
                raise InvalidArgumentError(
                    f"queue '{self._name}': records of {lease.item!r} acknowledged twice: {shown!r}"
                )
            leases.append((lease, keys))
        for lease, keys in leases:
            _, offset, position, position_offset, _ = updates_by_id[lease.lid]
            lease.consumed.update(keys)
            if self._ledger is not None:
                self._ledger.update(keys)
            lease.offset = max(lease.offset, offset)
            if position is not None and len(lease.consumed) >= position_offset:
                # Every record before the position was acknowledged by now (acks only
                # name records read before it): a rank taking the item over seeks there.
                lease.resume = (position, position_offset)
            if not lease.reading and len(lease.consumed) >= lease.offset:
                done.append(lease.lid)
                self._settle(lease)
        self._check_stranded()  # after recording this step: it was delivered
        return done

    def _check_stranded(self) -> None:
        """Raise when items given back by dead ranks can no longer be read: every reader
        has ended (the queue is closed and empty, nobody reads or takes an item).

        Raises:
            DataLossError: naming the items and how many of their records are unacked.
        """
        if (
            not self._pending
            or self._taking
            or any(lease.reading for lease in self._leases.values())
        ):
            return
        queue = self._queue
        if not (queue.is_closed() and queue.size() == 0):
            return
        items = [(lease.item, lease.offset - len(lease.consumed)) for lease in self._pending]
        raise DataLossError(
            f"queue '{self._name}': {len(items)} work item(s) given back by dead ranks "
            f"({', '.join(sorted(set(self._fenced.values())))}) after every reader had "
            f"ended; their unacknowledged records are not delivered in this epoch "
            f"(item, records read and not acknowledged at least): {items[:5]!r}"
        )

    def heartbeat(self, client: str) -> bool:
        """``client`` is alive; return ``False`` when it was declared dead."""
        if client in self._fenced:
            return False
        self.seen(client)
        return True

    # -- inspection (tests, benchmarks) ---------------------------------------------------

    def keep_ledger(self) -> None:
        """Count every acknowledged key from now on (see :meth:`ledger`)."""
        if self._ledger is None:
            self._ledger = collections.Counter()

    def ledger(self) -> dict[bytes, int]:
        """How many times each key was acknowledged since :meth:`keep_ledger`."""
        return dict(self._ledger or {})

    def status(self) -> dict[str, Any]:
        """Pending items given back, leases held, dead ranks and their events."""
        return {
            "pending": len(self._pending),
            "leases": [
                (lease.client, lease.item, lease.offset, len(lease.consumed), lease.reading)
                for lease in self._leases.values()
            ],
            "dead": dict(self._fenced),
            "events": list(self.events),
        }

    def close(self) -> None:
        """Stop watching (the actor is going away)."""
        for rank in self._ranks.values():
            if rank.watcher is not None:
                rank.watcher.cancel()
        if self._watchdog is not None:
            self._watchdog.cancel()

    # -- job checkpoints (see job_checkpoint) -----------------------------------------------

    def job_leases(self) -> list[Lease]:
        """Every item a job checkpoint must resume: those given back, then those held."""
        return [*self._pending, *self._leases.values()]

    def job_restore(
        self, entries: list[tuple[Any, set[bytes], int, tuple[bytes, int] | None]]
    ) -> None:
        """Make each ``(item, acknowledged keys, offset, resume position)`` of a job
        checkpoint a pending item, resumed as a dead rank's lease is."""
        for item, consumed, offset, resume in entries:
            self._pending.append(Lease(item, offset=offset, consumed=consumed, resume=resume))
        self._notify()
