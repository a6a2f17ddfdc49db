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

Fast ranks take more items: a rank asks for the next one when its reader needs it. In a
deterministic job (``Session(deterministic=True)``) they do not: a fixed schedule gives
each rank every ``world_size``-th item (see :mod:`.schedule`).

After a restore from a job checkpoint, a rank whose restored pipeline holds records of
an item (*holdings*, given when it registers) delivers them itself: a lease of that item
skips them for any reader, until that rank dies or leaves (then they are read again).
"""

from __future__ import annotations

import asyncio
import collections
import dataclasses
import time
from typing import TYPE_CHECKING, Any

from .._errors import (
    DataLossError,
    FailedPreconditionError,
    InvalidArgumentError,
    OutOfRangeError,
)
from .._readers.work import work_item_bytes
from .schedule import Schedule, rank_of

if TYPE_CHECKING:
    from collections.abc import Callable

__all__ = ["Grant", "JoinCheckpoint", "LeaseBook"]

#: A lease granted: ``(lease id, item, position, skip keys, offset of the position,
#: held records)`` (see :meth:`LeaseBook.lease`).
Grant = tuple[int, Any, bytes | None, list[bytes], int, list[int]]


def _item_bytes(item: Any) -> bytes | None:
    """A work item as the reader sees it (``None`` when it is not one: never equal)."""
    try:
        return work_item_bytes(item)
    except InvalidArgumentError:
        return None


#: How often (at most) the actor checks for ranks silent for their lease_timeout.
_WATCH_INTERVAL = 1.0
#: How long a watcher waits before asking again after ActorUnavailableError (node loss).
_SUSPECT_RETRY = 1.0


@dataclasses.dataclass(frozen=True)
class JoinCheckpoint:
    """What a lease call returns instead of an item: job checkpoint ``number`` waits for
    this rank, whose reader waits for work that only the waiting ranks can give back."""

    number: int


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
    #: Keys of records moved to the epoch's tail pool (another rank acknowledges them).
    pooled: set[bytes] = dataclasses.field(default_factory=set)
    #: The item's number in a deterministic job's schedule (-1: none).
    position: int = -1
    #: Given back by a rank that died (not a grant withdrawn, nor a restore).
    orphaned: bool = False
    #: Records (record keys: the numbers in the item's keys) that rank ``held_by``
    #: holds in the buffers of its pipeline, restored from a job checkpoint: every rank
    #: reading the item skips them while that rank is alive (it delivers them).
    held: set[int] = dataclasses.field(default_factory=set)
    held_by: int = -1


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
        self._told: set[str] = set()  # clients an ack raised a loss to (_check_stranded)
        self._changed = asyncio.Event()
        self._watchdog: asyncio.Task[None] | None = None
        self._ledger: collections.Counter[bytes] | None = None
        self._drops: collections.Counter[bytes] | None = None
        self._taking = 0  # lease calls in progress
        # A reader has ended (was told the queue is done): before that, pending items
        # (a restore's) are not stranded, only not taken yet.
        self._reader_ended = False
        self.events: list[tuple[float, str, str, int]] = []
        #: Called with a client that died (``True``) or left (the tail pool's rounds).
        self.listeners: list[Callable[[str, bool], None]] = []
        #: Whether a dead client's items need no reading again: every record it read is
        #: in the tail pool, acknowledged, or was dropped by its pipeline's filter.
        self.read_out: Callable[[str], bool] = lambda client: False
        #: Whether another rank may still give items back (the tail pool: it has not
        #: pushed its last example): a reader then waits instead of ending.
        self.others_busy: Callable[[str], bool] = lambda client: False
        self._takers: collections.Counter[str] = collections.Counter()
        # Leases of ranks that left, by item: records of them in the tail pool are still
        # acknowledged by other ranks.
        self._released: dict[bytes, Lease] = {}
        # The job checkpoint waiting for ranks (its number and theirs), and the clients
        # told to take part in it from their lease call.
        self._wanted: tuple[int, frozenset[int]] | None = None
        self._joined: set[str] = set()
        #: A deterministic job's fixed schedule (``None``: ranks take items dynamically).
        self.schedule: Schedule | None = None
        self._pulling = False  # a scheduled lease takes from the queue now
        # A job checkpoint's schedule, for the items it restores: (world size, next number).
        self._restored_schedule: tuple[int, int] | None = None
        # Records ranks hold in their restored pipelines, by rank and item, until the
        # item's restored lease is known; ranks whose holdings no longer count (gone).
        self._holdings: dict[int, dict[bytes, set[int]]] = {}
        self._void: set[int] = set()

    # -- ranks -------------------------------------------------------------------------

    def register(
        self,
        client: str,
        anchor: Any,
        lease_timeout: float,
        schedule: int | None = None,
        holdings: dict[bytes, list[int]] | None = None,
    ) -> None:
        """Watch ``client``: its ``anchor`` actor's death, or ``lease_timeout`` of silence,
        makes it dead. ``schedule``: the world size of a deterministic job (its ranks
        lease by the fixed schedule), or ``None``. ``holdings``: the records, by work
        item, that ``client``'s pipeline restored from a job checkpoint holds (see
        :meth:`job_restore`).

        Raises:
            InvalidArgumentError: ``client`` and the ranks registered before it disagree
                on deterministic mode or on the world size.
        """
        self._check_alive(client)
        if client in self._ranks:
            return
        have = None if self.schedule is None else self.schedule.world_size
        if self._ranks or self._fenced or self.schedule is not None:
            if have != schedule:
                raise InvalidArgumentError(
                    f"queue '{self._name}': rank {client.partition('-')[0]} leases "
                    f"{_mode(schedule)}, the job's other ranks {_mode(have)}: every rank "
                    "of a job must be given the same deterministic= and world_size"
                )
        elif schedule is not None:
            self.schedule = Schedule(schedule)
        rank = self._ranks[client] = Rank(lease_timeout, time.monotonic())
        rank.watcher = asyncio.ensure_future(self._watch_anchor(client, anchor))
        if self._watchdog is None:
            self._watchdog = asyncio.ensure_future(self._watch_silence())
        number = rank_of(client)
        if holdings and number not in self._void:
            self._holdings[number] = {bytes(w): {int(r) for r in rs} for w, rs in holdings.items()}
            self._apply_holdings()

    def seen(self, client: str) -> None:
        """``client`` called: it is alive now."""
        rank = self._ranks.get(client)
        if rank is not None:
            rank.seen = time.monotonic()

    def check_watched(self, client: str) -> None:
        """Raise unless ``client`` is a live rank this book watches.

        Raises:
            FailedPreconditionError: ``client`` was declared dead, or never registered.
        """
        self._check_alive(client)
        if client not in self._ranks:
            raise FailedPreconditionError(
                f"queue '{self._name}': this rank is not registered with the queue"
            )

    def taking(self, client: str) -> bool:
        """Whether a reader of ``client`` waits for a work item now."""
        return client in self._takers

    def holds(self, client: str) -> bool:
        """Whether ``client`` holds a lease (an item read or acknowledged only in part):
        if it dies, the item comes back."""
        return any(lease.client == client for lease in self._leases.values())

    def lease_timeout(self, client: str) -> float:
        """How long ``client`` may be silent before it is declared dead (0: not a live
        rank)."""
        rank = self._ranks.get(client)
        return 0.0 if rank is None else rank.lease_timeout

    def clients(self) -> list[str]:
        """The live ranks registered (their client names)."""
        return list(self._ranks)

    def wake(self) -> None:
        """Readers waiting for an item look again (a rank's state changed)."""
        self._notify()

    def pending(self) -> int:
        """How many items given back by dead ranks (or waiting for their rank in a
        deterministic job) wait to be leased."""
        held = 0 if self.schedule is None else self.schedule.held_count()
        return len(self._pending) + held

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
            self._check_absent(now)

    def _check_absent(self, now: float) -> None:
        """End a deterministic job's schedule when the queue has ended and, for a
        ``lease_timeout``, items have waited for a rank that never leased from it (its
        share would keep the other ranks' last take waiting forever)."""
        schedule = self.schedule
        if schedule is None or not schedule.active or schedule.ended_at is None:
            return
        timeout = max([r.lease_timeout for r in self._ranks.values()], default=0.0)
        if now - schedule.ended_at <= timeout:
            return
        present = {rank_of(client) for client in self._ranks}
        absent = [r for r, items in schedule.waiting.items() if items and r not in present]
        if absent:
            self._give_up_schedule(
                f"rank(s) {absent} took no item of their share within {timeout:g} s of "
                "the queue's end"
            )
            self._notify()

    def rank_died(self, client: str, why: str) -> None:
        """Fence ``client``; its leases go back to the front of the pending items."""
        rank = self._ranks.pop(client, None)
        if rank is None:
            return  # left normally, or already dead
        self._fenced[client] = why
        if rank.watcher is not None and rank.watcher is not asyncio.current_task():
            rank.watcher.cancel()
        self._void_holdings(rank_of(client))  # its buffers are gone: read them again
        self._give_up_schedule(f"rank {client.partition('-')[0]} died: {why}")
        back = [lease for lease in self._leases.values() if lease.client == client]
        if self.read_out(client):
            for lease in back:
                self._release(lease)
            back = []
        for lease in reversed(back):
            lease.orphaned = True
            self._give_back(lease)
        self.events.append((time.time(), client, why, len(back)))
        for listener in self.listeners:
            listener(client, True)
        self._notify()

    def left(self, client: str) -> None:
        """``client``'s session ended normally: its leases are done, whatever is unacked."""
        rank = self._ranks.pop(client, None)
        if rank is not None and rank.watcher is not None:
            rank.watcher.cancel()
        self._void_holdings(rank_of(client))
        schedule = self.schedule
        if schedule is not None and schedule.active:
            number = rank_of(client)
            if not schedule.ended or schedule.waiting.get(number):
                # Its share is not read: the live ranks read it instead.
                self._give_up_schedule(f"rank {number} left before its share was read")
        for lease in [lease for lease in self._leases.values() if lease.client == client]:
            self._release(lease)
        for listener in self.listeners:
            listener(client, False)
        self._notify()

    def _release(self, lease: Lease) -> None:
        """Forget ``lease`` (done), but keep it for the acks of its records in the pool."""
        del self._leases[lease.lid]
        if lease.pooled or lease.client in self._fenced:
            self._released[work_item_bytes(lease.item)] = lease

    def unacked(self, keys: list[bytes]) -> list[bytes]:
        """Those of ``keys`` neither acknowledged nor in the tail pool. A key of no lease
        known any more is acknowledged: its lease settled (every record acknowledged)."""
        out: list[bytes] = []
        for lease, group in self._match(keys, settled_ok=True):
            out += [k for k in group if k not in lease.consumed and k not in lease.pooled]
        return out

    def _give_back(self, lease: Lease) -> None:
        del self._leases[lease.lid]
        lease.client, lease.lid, lease.reading = None, -1, True
        schedule = self.schedule
        if schedule is not None and schedule.active and lease.position >= 0:
            schedule.place(lease)  # still its rank's next item
        else:
            self._pending.appendleft(lease)

    def _give_up_schedule(self, why: str) -> None:
        """End a deterministic job's schedule: every item waiting for its rank is pending
        for any live rank (after those a dead rank gives back)."""
        schedule = self.schedule
        if schedule is not None and schedule.active:
            self._pending.extend(schedule.give_up(why))
            self.events.append((time.time(), "schedule", why, 0))

    def _notify(self) -> None:
        self._changed.set()
        self._changed = asyncio.Event()

    # -- leasing -----------------------------------------------------------------------

    async def lease(self, client: str, finished: list[tuple[int, int]]) -> Grant | JoinCheckpoint:
        """Take the next work item for a reader of ``client`` (the reader's ``dequeue``).

        ``finished``: ``(lease id, final offset)`` of the items the rank's readers are
        done with. Items given back by dead ranks come first, then the queue's own.

        Returns:
            ``(lease id, item, position, skip keys, offset of the position, held
            records)`` (held: record keys of the item a live rank's restored pipeline
            holds, which the reader skips too); or, when
            the reader waits for other ranks to end their items while a job checkpoint
            waits for this rank (see :meth:`checkpoint_wanted`), :class:`JoinCheckpoint`.

        Raises:
            OutOfRangeError: the queue is closed and empty and no other live rank still
                reads an item it could give back.
            FailedPreconditionError: ``client`` was declared dead.
        """
        self._check_alive(client)
        self.seen(client)
        self._taking += 1
        self._takers[client] += 1
        self._notify()  # a rank busy in the tail may now be waiting for an item
        try:
            return await self._lease(client, finished)
        except OutOfRangeError:
            self._reader_ended = True
            raise
        finally:
            self._taking -= 1
            self._takers[client] -= 1
            if not self._takers[client]:
                del self._takers[client]

    async def _lease(self, client: str, finished: list[tuple[int, int]]) -> Grant | JoinCheckpoint:
        for lid, offset in finished:
            lease = self._leases.get(lid)
            if lease is not None and lease.client == client:
                lease.offset = max(lease.offset, offset)
                lease.reading = False
                self._settle(lease)
        if finished:
            self._notify()  # takes waiting at the end see fewer items being read
        if self.schedule is not None and self.schedule.active:
            scheduled = await self._take_scheduled(client)
            if isinstance(scheduled, JoinCheckpoint):
                return scheduled
            if scheduled is not None:
                return self._grant(client, scheduled)
        while True:
            lease = self._next_pending(client)
            if lease is not None:
                return self._grant(client, lease)
            changed = self._changed
            try:
                item = await self._dequeue_unless(changed)
            except OutOfRangeError:
                if (
                    not self._pending
                    and not any(
                        lease.reading and lease.client != client for lease in self._leases.values()
                    )
                    and not self.others_busy(client)
                ):
                    raise
                number = self._join_checkpoint(client)
                if number is not None:
                    # The ranks this one waits for wait in a job checkpoint for it: it
                    # takes part from here (nothing of the queue is being read by it).
                    return JoinCheckpoint(number)
                # An item may come back from a rank that dies, or one set aside below
                # becomes this rank's to read once its other reader is done with it.
                await changed.wait()
                item = None
            self._check_alive(client)
            if item is not None:
                if _item_bytes(item) in self._reading_items(client):
                    self._pending.append(Lease(item))  # for another rank, or later
                    self._notify()
                    continue
                return self._grant(client, Lease(item))

    def checkpoint_wanted(self, number: int, ranks: list[int]) -> None:
        """Job checkpoint ``number`` waits for ``ranks`` (none: it is over).

        A reader of one of those ranks waiting at the end of the queue for the other
        ranks' items then returns :class:`JoinCheckpoint` (once per checkpoint): the
        others cannot go on before it takes part, so it takes part from there.
        """
        wanted = (number, frozenset(ranks)) if ranks else None
        if wanted == self._wanted:
            return
        if wanted is None or self._wanted is None or self._wanted[0] != number:
            self._joined.clear()
        self._wanted = wanted
        self._notify()

    def checkpoint_for(self, client: str) -> int | None:
        """The job checkpoint ``client`` takes part in from a wait in the epoch's tail
        (its trainer waits there for a batch, which the ranks the tail waits for cannot
        make while they wait in that checkpoint for it), as :meth:`checkpoint_wanted`
        lets a waiting reader take part; ``None``: none waits for it."""
        return self._join_checkpoint(client)

    def _join_checkpoint(self, client: str) -> int | None:
        """The checkpoint ``client``'s waiting reader takes part in, if any (see above)."""
        wanted = self._wanted
        if wanted is None or client in self._joined:
            return None
        rank = client.partition("-")[0]
        if not rank.isdigit() or int(rank) not in wanted[1]:
            return None
        if any(lease.client == client and lease.reading for lease in self._leases.values()):
            return None  # another reader of the rank reads on: the rank comes itself
        self._joined.add(client)
        return wanted[0]

    async def _take_scheduled(self, client: str) -> Lease | JoinCheckpoint | None:
        """``client``'s next item by the fixed schedule; ``None`` when the schedule was
        given up meanwhile (a rank died or left: items are then taken dynamically);
        :class:`JoinCheckpoint` when its share is read and a job checkpoint waits for it.

        One lease at a time takes items from the queue, so that they are numbered in
        the queue's order; each goes to its rank's waiting items.

        Raises:
            OutOfRangeError: the queue is closed and empty, this rank's share is read,
                and no other live rank could still give an item back.
        """
        schedule = self.schedule
        assert schedule is not None
        rank = rank_of(client)
        while schedule.active:
            self._absorb(schedule)
            lease = schedule.next_for(rank, self._reading_items(client), _item_bytes)
            if lease is not None:
                return lease
            changed = self._changed
            if schedule.ended:
                self._check_share_read(client, rank, schedule)
                number = self._join_checkpoint(client)
                if number is not None:
                    return JoinCheckpoint(number)  # as at the end of a dynamic queue
                await changed.wait()
            elif self._pulling:
                await changed.wait()  # another lease numbers the next item
            else:
                self._pulling = True
                try:
                    item = await self._dequeue_unless(changed)
                except OutOfRangeError:
                    schedule.ended = True
                    if schedule.ended_at is None:
                        schedule.ended_at = time.monotonic()
                    item = None
                finally:
                    self._pulling = False
                    self._notify()
                if item is not None:
                    if schedule.broken is None:  # the schedule still holds
                        self._absorb(schedule)  # restored items come before the queue's
                        schedule.route(Lease(item))
                    else:
                        # A rank died while the item was on its way: the schedule was
                        # given up and its items are pending, for every live rank now.
                        self._pending.append(Lease(item))
            self._check_alive(client)
        return None

    def _check_share_read(self, client: str, rank: int, schedule: Schedule) -> None:
        """Raise OutOfRangeError when ``client`` has nothing left to wait for (see
        :meth:`_take_scheduled`); return when it must wait."""
        if schedule.waiting[rank]:
            return  # its next item is read by its other reader: wait for it
        if (
            self._pending
            or schedule.others_hold(rank)
            or any(lease.reading and lease.client != client for lease in self._leases.values())
            or self.others_busy(client)
        ):
            return  # another rank may still die and give its items back
        raise OutOfRangeError(
            f"queue '{self._name}' is closed and rank {rank}'s share of its items (every "
            f"{schedule.world_size}th from item {rank}) is read"
        )

    def _absorb(self, schedule: Schedule) -> None:
        """Put the items a job checkpoint restored into the schedule: with as many ranks
        as the checkpoint's job, each to the rank that had it, at its number; else
        numbered anew, in the checkpoint's order. Once the schedule is given up the
        pending items are no longer its (a dead rank's, for any live rank): a schedule
        nobody takes from would hold them for ever."""
        if not self._pending or not schedule.active:
            return
        restored = self._restored_schedule
        same = restored is not None and restored[0] == schedule.world_size
        items = list(self._pending)
        self._pending.clear()
        if same:
            assert restored is not None
            schedule.position = max(schedule.position, restored[1])
            for lease in sorted(
                (lease for lease in items if lease.position >= 0), key=lambda x: x.position
            ):
                schedule.waiting[lease.position % schedule.world_size].append(lease)
        for lease in items:
            if not same or lease.position < 0:
                schedule.route(lease)
        self._restored_schedule = None

    def _reading_items(self, client: str) -> set[bytes | None]:
        """The items a reader of ``client`` is reading now."""
        busy = {
            _item_bytes(lease.item)
            for lease in self._leases.values()
            if lease.client == client and lease.reading
        }
        busy.discard(None)  # not a work item: its reader fails on it
        return busy

    def _next_pending(self, client: str) -> Lease | None:
        """Take the first pending item that no reader of ``client`` is reading now.

        A rank never reads one item in two leases at once (the same file of two epochs,
        by two of its readers): its acknowledged keys, which name only the item, then
        always tell which lease they belong to (see ``LeaseClient.match``).
        """
        if not self._pending:
            return None
        busy = self._reading_items(client)
        for i, lease in enumerate(self._pending):
            if _item_bytes(lease.item) not in busy:
                del self._pending[i]
                return lease
        return None

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

    def _grant(self, client: str, lease: Lease) -> Grant:
        lease.client, lease.lid = client, self._next_id
        self._next_id += 1
        self._leases[lease.lid] = lease
        lease.reading = True
        if lease.resume is not None:
            position, base = lease.resume
        else:
            position, base = None, 0
        skip = sorted(lease.consumed | lease.pooled)
        return lease.lid, lease.item, position, skip, base, sorted(lease.held)

    def withdraw(self, reply: Grant) -> None:
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
        self,
        client: str,
        updates: list[tuple[int, int, bytes | None, int, list[bytes]]],
        foreign: list[bytes] | None = None,
    ) -> list[int]:
        """Record ``client``'s step: per lease ``(id, offset, position or None, offset of
        the position, keys acknowledged)``, and ``foreign`` keys: records of other ranks'
        leases that reached ``client`` through the epoch's tail pool.

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
        others = self._match(foreign) if foreign else []
        for lease, keys in others:
            again = lease.consumed.intersection(keys)
            if again or len(set(keys)) != len(keys):
                shown = sorted(again)[:3] if again else keys[:3]
                raise InvalidArgumentError(
                    f"queue '{self._name}': records of {lease.item!r} acknowledged twice: {shown!r}"
                )
        for lease, keys in others:
            self._credit(lease, keys, ledger=True)
            if lease.lid in self._leases and not lease.reading:
                self._settle(lease)
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
        self._check_stranded(client)  # after recording this step: it was delivered
        return done

    def _match(
        self, keys: list[bytes], *, settled_ok: bool = False
    ) -> list[tuple[Lease, list[bytes]]]:
        """Group ``keys`` by the lease (of any rank, held, pending or released) of their item;
        with ``settled_ok``, leave out keys of no known lease (settled ones).

        Raises:
            InvalidArgumentError: a key is a record of no item the queue leased.
        """
        index: dict[bytes, Lease] = dict(self._released)
        waiting = [] if self.schedule is None else self.schedule.in_order()
        for held in [*self._pending, *waiting, *self._leases.values()]:
            index[work_item_bytes(held.item)] = held
        found: dict[int, tuple[Lease, list[bytes]]] = {}
        for key in keys:
            # WholeFileReader's key is the work item itself.
            lease = index.get(key) or index.get(key.rpartition(b":")[0])
            if lease is None and settled_ok:
                continue
            if lease is None:
                raise InvalidArgumentError(
                    f"queue '{self._name}': acknowledged key {key!r} is not a record of a "
                    "work item of this queue"
                )
            found.setdefault(id(lease), (lease, []))[1].append(key)
        return list(found.values())

    def _credit(self, lease: Lease, keys: list[bytes], *, ledger: bool) -> None:
        lease.consumed.update(keys)
        lease.pooled.difference_update(keys)
        if ledger and self._ledger is not None:
            self._ledger.update(keys)

    def pooled(self, keys: list[bytes], *, again: bool = False) -> None:
        """Records ``keys`` moved to the tail pool: a rank taking their item over after
        its reader's death skips them (the pool delivers them). ``again``: a rank
        restored in the tail pushes the examples it had pushed before the checkpoint,
        some of which other ranks had acknowledged then: keys of leases settled since
        are left out (else they are refused).

        Raises:
            InvalidArgumentError: a key is a record of no item the queue leased.
        """
        for lease, group in self._match(keys, settled_ok=again):
            lease.pooled.update(group)

    def dropped(self, keys: list[bytes]) -> None:
        """Records ``keys`` dropped by the tail's remainder: done, not delivered (those
        done before, as in a tail planned again after a restore, count once)."""
        for lease, group in self._match(keys, settled_ok=True):
            group = [key for key in group if key not in lease.consumed]
            self._credit(lease, group, ledger=False)
            if self._drops is not None:
                self._drops.update(group)
            if lease.lid in self._leases and not lease.reading:
                self._settle(lease)

    def _check_stranded(self, client: str) -> None:
        """Raise to ``client`` when items given back by dead ranks can no longer be read
        (see :meth:`stranded`).

        Raises:
            DataLossError: naming the items and how many of their records are unacked.
        """
        message = self.stranded()
        if message is not None:
            self._told.add(client)
            raise DataLossError(message)

    def stranded(self, *, leaving: str | None = None) -> str | None:
        """What was lost when items given back by dead ranks can no longer be read: every
        reader has ended (the queue is closed and empty, nobody reads or takes an item).
        ``None`` when nothing is lost (yet).

        Args:
            leaving: A client leaving the job, for whom the loss is its last news: only
                when a dead rank's leases are among those items (not merely items of a
                restore, or of a share a rank left unread, in a job whose ranks stop
                early), and unless an acknowledgement of the client raised it already.
        """
        if leaving is not None and (
            leaving in self._told
            or leaving in self._fenced  # it lost them itself
            or not any(lease.orphaned for lease in self._pending)
        ):
            return None
        if (
            not self._pending
            or not self._reader_ended
            or self._taking
            or any(lease.reading for lease in self._leases.values())
        ):
            return None
        queue = self._queue
        if not (queue.is_closed() and queue.size() == 0):
            return None
        items = [(lease.item, lease.offset - len(lease.consumed)) for lease in self._pending]
        return (
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
        """Count every acknowledged key, and every key the tail's remainder dropped,
        from now on (see :meth:`ledger`)."""
        if self._ledger is None:
            self._ledger = collections.Counter()
            self._drops = collections.Counter()

    def ledger(self) -> dict[bytes, int]:
        """How many times each key was acknowledged since :meth:`keep_ledger`."""
        return dict(self._ledger or {})

    def drops(self) -> dict[bytes, int]:
        """How many times each key was dropped by the tail since :meth:`keep_ledger`."""
        return dict(self._drops or {})

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
        """Every item a job checkpoint must resume: those given back, then those held,
        then (in a deterministic job) those waiting for their rank, then those released
        by ranks gone while records of them wait in the tail pool (the pool is not saved:
        a restore reads those records again)."""
        waiting = [] if self.schedule is None else self.schedule.in_order()
        released = [lease for lease in self._released.values() if lease.pooled]
        return [*self._pending, *self._leases.values(), *waiting, *released]

    def job_schedule(self, leases: list[Lease]) -> dict[str, Any] | None:
        """A deterministic job's schedule for a job checkpoint of ``leases`` (from
        :meth:`job_leases`): each one's number (-1: none), and the next number."""
        schedule = self.schedule
        if schedule is None:
            return None
        position = schedule.position
        # Items a restore gave back that no lease took yet keep their numbers only if
        # they are this schedule's (the restored job had as many ranks).
        restored = self._restored_schedule
        foreign: set[int] = set()
        if restored is not None:
            position = max(position, restored[1])
            if restored[0] != schedule.world_size:
                foreign = {id(lease) for lease in self._pending}
        active = schedule.active
        return {
            "world_size": schedule.world_size,
            "position": position,
            "positions": [
                lease.position if active and id(lease) not in foreign else -1 for lease in leases
            ],
        }

    def job_restore(
        self,
        entries: list[tuple[Any, set[bytes], int, tuple[bytes, int] | None]],
        schedule: dict[str, Any] | None = None,
    ) -> None:
        """Make each ``(item, acknowledged keys, offset, resume position)`` of a job
        checkpoint a pending item, resumed as a dead rank's lease is. ``schedule``
        (from :meth:`job_schedule`): a deterministic job restored with as many ranks
        gives each item back to the rank that had it."""
        positions = [-1] * len(entries)
        if schedule is not None:
            positions = [int(p) for p in schedule["positions"]]
            self._restored_schedule = (int(schedule["world_size"]), int(schedule["position"]))
        for (item, consumed, offset, resume), position in zip(entries, positions, strict=True):
            self._pending.append(
                Lease(item, offset=offset, consumed=consumed, resume=resume, position=position)
            )
        self._apply_holdings()
        self._notify()

    def _apply_holdings(self) -> None:
        """Give each restored lease the records a rank's restored pipeline holds of its
        item (kept until the lease is known: the program enqueues the items again)."""
        if not self._holdings:
            return
        index: dict[bytes, Lease] = {}
        waiting = [] if self.schedule is None else self.schedule.in_order()
        for lease in [*self._pending, *waiting, *self._leases.values()]:
            work = _item_bytes(lease.item)
            if work is not None:
                index.setdefault(work, lease)
        for number, items in self._holdings.items():
            for work in [w for w in items if w in index]:
                lease = index[work]
                lease.held |= items.pop(work)
                lease.held_by = number

    def _void_holdings(self, number: int) -> None:
        """Rank ``number`` is gone: the records its pipeline held are read again."""
        self._void.add(number)
        if self._holdings.pop(number, None) is None and not any(
            lease.held_by == number for lease in self._all_leases()
        ):
            return
        for lease in self._all_leases():
            if lease.held_by == number:
                lease.held, lease.held_by = set(), -1

    def _all_leases(self) -> list[Lease]:
        waiting = [] if self.schedule is None else self.schedule.in_order()
        return [*self._pending, *waiting, *self._leases.values(), *self._released.values()]


def _mode(world_size: int | None) -> str:
    """How a rank leases, for messages."""
    if world_size is None:
        return "dynamically (deterministic=False)"
    return (
        f"by the fixed schedule of a deterministic job of {world_size} ranks (deterministic=True)"
    )
