"""A rank's side of the leases: its anchor actor, its heartbeat, and what it holds.

The anchor is a small actor the rank's process owns: Ray ends it when the process dies,
which the work queue's actor notices within milliseconds (it awaits a call that never
returns). The heartbeat thread tells the queues the rank is alive at a quarter of
``lease_timeout``: a rank whose process is stopped, or cut off, falls silent.

:class:`LeaseClient` keeps, for one shared queue, the leases the rank's readers hold:
which reader reads which one, how far it got, and turns a step's acknowledged keys into
one ``ack`` call carrying every lease's offset and position.
"""

from __future__ import annotations

import asyncio
import dataclasses
import threading
import weakref
from typing import TYPE_CHECKING, Any

from .._errors import InvalidArgumentError, OutOfRangeError
from .._readers.work import LeasedWork, work_item_bytes
from .._runtime.checkpoint import current_stage

if TYPE_CHECKING:
    from .remote_queue import RayBackend, RemoteQueue
    from .work_queue import Grant

__all__ = [
    "Anchor",
    "CheckpointWanted",
    "Heartbeat",
    "LeaseClient",
    "leasing_readers",
    "reader_queues",
]

#: Readers that took work items from a shared queue: their positions are their leases',
#: so a rank's part of a job checkpoint does not save them.
leasing_readers: weakref.WeakSet[Any] = weakref.WeakSet()
#: The shared queue each leasing reader last took a work item from: a batcher whose
#: ``record_refs`` names the reader levels its epoch's tail through that queue's actor.
reader_queues: weakref.WeakKeyDictionary[Any, RemoteQueue] = weakref.WeakKeyDictionary()


class CheckpointWanted(Exception):
    """A lease call's answer: job checkpoint ``number`` waits for this rank, whose
    reader waits for the other ranks' items (see ``LeaseBook.checkpoint_wanted``)."""

    def __init__(self, number: int) -> None:
        super().__init__(number)
        self.number = number


class Anchor:
    """An actor owned by a rank's process: it lives exactly as long as the process."""

    async def block(self) -> None:
        """Never return (until the actor dies: then the caller learns the rank died)."""
        await asyncio.Event().wait()


class Heartbeat:
    """A thread telling the rank's leasing queues, every ``interval`` s, that it is alive.

    A thread and not a task: it needs no task group, and a rank whose process is stopped
    stops it too.
    """

    def __init__(self, backend: RayBackend, interval: float) -> None:
        self._backend = backend
        self._interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="asyncreader-heartbeat", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        backend = self._backend
        while not self._stop.wait(self._interval):
            for queue in list(backend._queues.values()):
                if queue._leases is not None:
                    queue._actor.heartbeat.remote(backend._client)

    def stop(self) -> None:
        """Stop the thread and wait for it."""
        self._stop.set()
        self._thread.join()


@dataclasses.dataclass(eq=False)
class Held:
    """A lease the rank holds: the reader reading it (``None`` once it moved on)."""

    lid: int
    work: bytes
    reader: Any
    produced: int  # the reader's records produced when it took the item
    base: int  # the item's offset where the reader started in it
    skip: set[bytes]
    skip_total: int
    offset: int = 0  # final, once the reader moved on
    #: Keys of the item acknowledged in this lease (or before it, by a rank that died).
    acked: set[bytes] = dataclasses.field(default_factory=set)

    def current_offset(self) -> int:
        """Records of the item passed: delivered by the reader, or skipped."""
        if self.reader is None:
            return self.offset
        skipped = self.skip_total - len(self.skip)
        produced: int = self.reader.num_records_produced()
        return self.base + produced - self.produced + skipped


class LeaseClient:
    """The leases a rank's readers hold from one shared queue (see the module)."""

    def __init__(self, queue: RemoteQueue) -> None:
        self._queue = queue
        self._reading: dict[int, Held] = {}  # id(reader) -> its current lease
        self._held: dict[int, Held] = {}
        self._by_work: dict[bytes, list[Held]] = {}
        self._finished: list[tuple[int, int]] = []

    async def take(self, reader: Any) -> LeasedWork:
        """The reader's next work item (it is done with the previous one)."""
        held = self._reading.pop(id(reader), None)
        if held is not None:
            held.offset = held.current_offset()
            held.reader = None
            self._finished.append((held.lid, held.offset))
        leasing_readers.add(reader)
        reader_queues[reader] = self._queue
        # The stage task waiting here holds nothing: a job checkpoint's pause need not
        # wait for its work item.
        stage = current_stage()
        if stage is not None:
            stage.leasing = True
        try:
            lid, item, position, skip, base, kept = await self._lease()
        finally:
            if stage is not None:
                stage.leasing = False
        work = work_item_bytes(item)
        keys = set(skip)
        if kept:
            # Records a restored pipeline holds (this rank's, or a live one's): skipped.
            keys.update(reader._record_keys(work, kept))
        held = Held(
            lid, work, reader, reader.num_records_produced(),
            base if position is not None else 0, keys, len(keys), acked=set(skip),
        )  # fmt: skip
        self._reading[id(reader)] = held
        self._held[lid] = held
        self._by_work.setdefault(held.work, []).append(held)
        return LeasedWork(item, position, keys)

    async def _lease(self) -> Grant:
        while True:
            try:
                grant: Grant = await self._queue._call("lease", self._finished)
            except OutOfRangeError:
                self._finished = []  # the actor recorded them
                raise
            except CheckpointWanted as wanted:
                self._finished = []
                await self._queue._backend.join_checkpoint(wanted.number)
                continue  # then wait for work again
            self._finished = []
            return grant

    def match(self, keys: list[bytes]) -> tuple[dict[int, list[bytes]], list[bytes]]:
        """Split ``keys`` by the lease whose item they belong to; return the rest too."""
        by_lease: dict[int, list[bytes]] = {}
        rest: list[bytes] = []
        credited: dict[int, set[bytes]] = {}  # by _credit, in this call
        by_work = self._by_work
        for key in keys:
            holds = by_work.get(key)  # WholeFileReader's key is the work item itself
            if holds is None:
                holds = by_work.get(key.rpartition(b":")[0])
            if holds is None:
                rest.append(key)
            elif len(holds) == 1:
                by_lease.setdefault(holds[0].lid, []).append(key)
            else:
                lid = self._credit(holds, key, credited)
                credited.setdefault(lid, set()).add(key)
                by_lease.setdefault(lid, []).append(key)
        return by_lease, rest

    @staticmethod
    def _credit(holds: list[Held], key: bytes, credited: dict[int, set[bytes]]) -> int:
        """The lease a key of an item held in several leases (epochs) belongs to.

        The queue never lets two readers of a rank read one item at once, so at most one
        of ``holds`` is being read; the others were read to their end. A key not yet
        acknowledged in a lease read to its end is a record that lease delivered: it
        goes to the oldest such lease. A key every lease read to its end has
        acknowledged is the reading lease's. (When both copies of a record are unacked
        and in flight either lease may be credited: each of them delivered that record,
        so the count of every key stays exact, and a lease only ever holds keys it
        read, which its position and a rank taking it over rely on.)
        """
        reading = None
        for held in holds:
            if key in held.acked or key in credited.get(held.lid, ()):
                continue
            if held.reader is None:
                return held.lid
            reading = held
        if reading is not None:
            return reading.lid
        return holds[0].lid  # acknowledged in every lease: the queue refuses it

    def acked(self, by_lease: dict[int, list[bytes]]) -> None:
        """The queue recorded an ack: note which lease each key was credited to."""
        for lid, keys in by_lease.items():
            held = self._held.get(lid)
            if held is not None:
                held.acked.update(keys)

    def updates(
        self, by_lease: dict[int, list[bytes]]
    ) -> list[tuple[int, int, bytes | None, int, list[bytes]]]:
        """One ack's report: every lease's offset, position and keys acknowledged."""
        out = []
        for lid, held in self._held.items():
            position: bytes | None = None
            position_offset = 0
            reader = held.reader
            if reader is not None:
                at = reader._lease_position()
                if at is not None:
                    state, produced = at
                    skipped = held.skip_total - len(held.skip)
                    position, position_offset = (
                        state,
                        held.base + produced - held.produced + skipped,
                    )
            out.append(
                (lid, held.current_offset(), position, position_offset, by_lease.get(lid, []))
            )
        return out

    def done(self, lids: list[int]) -> None:
        """Forget leases the actor reports read and acknowledged to the end."""
        for lid in lids:
            held = self._held.pop(lid, None)
            if held is None:
                continue
            holds = self._by_work[held.work]
            holds.remove(held)
            if not holds:
                del self._by_work[held.work]


def unknown_keys(keys: list[bytes]) -> InvalidArgumentError:
    """The error for acknowledged keys no lease of the rank explains."""
    return InvalidArgumentError(
        f"{len(keys)} acknowledged key(s) are not records of a work item this rank holds "
        f"from a shared queue, e.g. {keys[:3]!r}"
    )
