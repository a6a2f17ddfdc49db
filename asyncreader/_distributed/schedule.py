"""The fixed lease schedule of a deterministic job (``Session(deterministic=True)``).

In a deterministic job no rank balances: the work items a queue hands out, in the order
it hands them out (the producer's order, seeded), are numbered 0, 1, 2, ...; item *k*
is rank ``k % world_size``'s. A rank's reader that wants its next item waits for it;
items that reach the queue's actor for another rank wait, in order, for that rank. So
with the same seeds and the same number of ranks every rank reads the same items in the
same order, however fast each one runs.

The schedule holds only while every rank of the job takes its share: when a rank dies or
leaves before its share ended, the schedule is given up (see :meth:`Schedule.give_up`)
and its items go to the live ranks as in a dynamic job, so that no record is lost and
no rank waits for one that will never come.
"""

from __future__ import annotations

import collections
import heapq
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .work_queue import Lease

__all__ = ["Schedule", "rank_of"]


def rank_of(client: str) -> int:
    """The rank number of a client name (``"{rank}-{id}"``)."""
    return int(client.partition("-")[0])


class Schedule:
    """Who reads which item in a deterministic job (see the module).

    Args:
        world_size: How many ranks the job has.
    """

    def __init__(self, world_size: int) -> None:
        self.world_size = world_size
        #: How many items were numbered so far: the next one's number.
        self.position = 0
        #: Items numbered and not leased yet, per rank, in order.
        self.waiting: dict[int, collections.deque[Lease]] = {
            r: collections.deque() for r in range(world_size)
        }
        #: The queue was seen closed and empty: no item will be numbered any more.
        self.ended = False
        #: When (``time.monotonic()``) it was first seen so.
        self.ended_at: float | None = None
        #: Why the schedule was given up (``None``: it holds).
        self.broken: str | None = None

    @property
    def active(self) -> bool:
        """Whether the schedule holds."""
        return self.broken is None

    def route(self, lease: Lease) -> int:
        """Number ``lease``'s item (the next in the queue's order); return its rank."""
        lease.position = self.position
        owner = self.position % self.world_size
        self.position += 1
        self.waiting[owner].append(lease)
        return owner

    def place(self, lease: Lease) -> None:
        """Put back ``lease`` (numbered before) at the front of its rank's items."""
        self.waiting[lease.position % self.world_size].appendleft(lease)

    def next_for(self, rank: int, busy: set[bytes | None], key: Any) -> Lease | None:
        """Take ``rank``'s next item unless one of its readers reads it now (``key``
        gives an item's identity, compared with ``busy``): the order is kept."""
        waiting = self.waiting[rank]
        if waiting and key(waiting[0].item) not in busy:
            return waiting.popleft()
        return None

    def others_hold(self, rank: int) -> bool:
        """Whether items wait for a rank other than ``rank``."""
        return any(items for r, items in self.waiting.items() if r != rank)

    def held_count(self) -> int:
        """How many items wait for their rank."""
        return sum(len(items) for items in self.waiting.values())

    def in_order(self) -> list[Lease]:
        """Every waiting item, in the queue's order."""
        return list(heapq.merge(*self.waiting.values(), key=lambda lease: lease.position))

    def give_up(self, why: str) -> list[Lease]:
        """End the schedule; return the waiting items in order (for every rank now)."""
        self.broken = why
        items = self.in_order()
        for waiting in self.waiting.values():
            waiting.clear()
        return items
