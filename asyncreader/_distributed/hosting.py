"""The actors of a job: one per shared queue, and the job's registry of ranks.

Both are plain classes made into Ray actors by :mod:`.remote_queue` (asyncio actors: a
blocked queue operation is a coroutine, not a thread). They run in Ray's worker
processes, which import this module; it imports no Ray at the top.

No element is lost between processes: a dequeue carries a request id, and what it
returned stays *in doubt* until the client's next call confirms it. A client cancelled
while its call runs or travels sends ``withdraw(id)``: a running call is cancelled (the
hosted queue withdraws it, as a cancelled local call), a finished one's elements go back
at the front, and an id not seen yet is remembered so that the call, arriving later, does
nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from typing import Any

from .._errors import AsyncReaderError
from .job_checkpoint import CheckpointHost, ItemLog
from .tail import TailPool
from .work_queue import JoinCheckpoint, LeaseBook

__all__ = ["JobHost", "QueueHost"]

#: The verbs a client may call, and whether they hand elements out (kept in doubt).
VERBS: dict[str, bool] = {
    "enqueue": False,
    "enqueue_many": False,
    "close": False,
    "dequeue": True,
    "dequeue_many": True,
    "dequeue_up_to": True,
    "lease": True,
}

#: Withdrawn ids of calls not seen yet, remembered per client (bounded: oldest dropped).
_TOMBSTONES = 10_000


class QueueHost:
    """Hosts one of the library's queues for every process of a job.

    Args:
        cls: The queue class (``FIFOQueue``, ``RandomShuffleQueue``, ...).
        args: Its positional constructor arguments.
        kwargs: Its keyword arguments (no ``shared_name`` / ``container``).
        shared_name: The name the queue is shared under; its messages quote it.
        container: The container it is shared in.
    """

    def __init__(
        self,
        cls: type,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
        shared_name: str,
        container: str,
    ) -> None:
        queue: Any = cls(*args, **kwargs)
        queue._shared_name = shared_name
        queue._container = container
        self._queue = queue
        self._leases = LeaseBook(queue, shared_name)
        self._tail = TailPool(self._leases, queue, shared_name)
        self._items = ItemLog()
        self._clients: set[str] = set()
        self._running: dict[tuple[str, int], asyncio.Task[Any]] = {}
        self._in_doubt: dict[tuple[str, int], tuple[Any, bool | None]] = {}
        self._withdrawn: dict[tuple[str, int], None] = {}
        self._job: Any = None  # the job's registry actor (once a rank registers)

    def attach(self, client: str) -> tuple[str, dict[str, object]]:
        """Register a client; return the queue's type name and configuration."""
        self._clients.add(client)
        return type(self._queue).__name__, self._queue._shared_config()

    def detach(self, client: str, confirm: list[int]) -> tuple[int, str | None]:
        """Let go of a client: confirm its results, withdraw its running calls. Return how
        many clients are left, and what the job lost if items given back by dead ranks
        can no longer be read (the leaving rank may have nothing more to acknowledge,
        which is where it would hear of it otherwise)."""
        self._confirm(client, confirm)
        for key, task in list(self._running.items()):
            if key[0] == client:
                self._withdrawn[key] = None
                task.cancel()
        for key in [k for k in self._in_doubt if k[0] == client]:
            self._return(*self._in_doubt.pop(key))
        self._leases.left(client)
        self._clients.discard(client)
        return len(self._clients), self._leases.stranded(leaving=client)

    def _return(self, result: Any, many: bool | None) -> None:
        """Undo a dequeue (``many``: a batched one) or, ``many is None``, a lease."""
        if many is None:
            self._leases.withdraw(result)
        else:
            self._queue._return_dequeued(result, many=many)

    def _confirm(self, client: str, confirm: list[int]) -> None:
        for rid in confirm:
            self._in_doubt.pop((client, rid), None)

    async def call(
        self, client: str, rid: int, confirm: list[int], verb: str, args: tuple[Any, ...]
    ) -> tuple[Any, ...]:
        """Run ``verb(*args)`` on the queue; errors travel back as values.

        Returns:
            ``("ok", value)``, ``("error", type name, message)``, ``("withdrawn",)``, or
            for a lease ``("checkpoint", number)``: the rank takes part in job
            checkpoint ``number``, then asks again (see :meth:`LeaseBook.lease`).
        """
        self._confirm(client, confirm)
        self._leases.seen(client)
        key = (client, rid)
        if key in self._withdrawn:
            del self._withdrawn[key]
            return ("withdrawn",)
        hands_out = VERBS.get(verb)
        if hands_out is None:
            return ("error", "InvalidArgumentError", f"not a queue verb: {verb!r}")
        task = asyncio.current_task()
        assert task is not None
        self._running[key] = task
        try:
            if verb == "lease":
                value = await self._leases.lease(client, *args)
            elif verb in ("enqueue", "enqueue_many"):
                value = await self._items.enqueue(self._queue, self._leases, verb, args)
            else:
                if verb == "close":
                    self._items.close_check(self._leases._name)
                value = await getattr(self._queue, verb)(*args)
        except AsyncReaderError as exc:
            return ("error", type(exc).__name__, str(exc))
        except asyncio.CancelledError:
            if key not in self._withdrawn:
                raise
            del self._withdrawn[key]
            task.uncancel()
            return ("withdrawn",)
        finally:
            del self._running[key]
        if isinstance(value, JoinCheckpoint):
            return ("checkpoint", value.number)  # nothing handed out
        if hands_out:
            self._in_doubt[key] = (value, None if verb == "lease" else verb != "dequeue")
        return ("ok", value)

    def withdraw(self, client: str, rid: int) -> None:
        """The client gave up on call ``rid``: undo it, whatever stage it reached."""
        key = (client, rid)
        task = self._running.get(key)
        if task is not None:
            self._withdrawn[key] = None
            task.cancel()
            return
        done = self._in_doubt.pop(key, None)
        if done is not None:
            self._return(*done)
            return
        self._withdrawn[key] = None
        while len(self._withdrawn) > _TOMBSTONES:
            del self._withdrawn[next(iter(self._withdrawn))]

    def info(self) -> tuple[int, bool, Any]:
        """Return the queue's size, whether it is closed, and its statistics."""
        q = self._queue
        return q.size(), q.is_closed(), q.statistics()

    def stage(self) -> Any:
        """Return the hosted queue's :class:`~asyncreader.StageStatistics`: its state and
        the callers blocked in it, from every process of the job."""
        return self._queue._stage_statistics()

    async def ping(self) -> int:
        """Answer (the client's liveness check); return the actor's process id."""
        return os.getpid()

    # -- leases (see work_queue) -----------------------------------------------------------

    def register(
        self,
        client: str,
        anchor: Any,
        lease_timeout: float,
        schedule: int | None = None,
        job: Any = None,
        holdings: dict[bytes, list[int]] | None = None,
    ) -> tuple[Any, ...]:
        """Watch a rank that leases work items (see :meth:`LeaseBook.register`); ``job``
        is the job's registry actor, told when the queue declares a rank dead;
        ``holdings``: the records the rank's restored pipeline holds."""
        try:
            self._leases.register(client, anchor, lease_timeout, schedule, holdings)
        except AsyncReaderError as exc:
            return ("error", type(exc).__name__, str(exc))
        if job is not None and self._job is None:
            self._job = job
            self._leases.listeners.append(self._tell_job)
        return ("ok", None)

    def _tell_job(self, client: str, died: bool) -> None:
        """A rank this queue declared dead (its anchor ended, or it was silent for its
        ``lease_timeout``) has left the job: the registry stops counting on it."""
        rank = client.partition("-")[0]
        if died and self._job is not None and rank.isdigit():
            with contextlib.suppress(Exception):  # the job is being deleted
                self._job.rank_gone.remote(int(rank))

    def ack(
        self,
        client: str,
        updates: list[tuple[int, int, bytes | None, int, list[bytes]]],
        foreign: list[bytes] | None = None,
    ) -> tuple[Any, ...]:
        """Record a rank's step (see :meth:`LeaseBook.ack`); errors travel as values."""
        try:
            return ("ok", self._leases.ack(client, updates, foreign))
        except AsyncReaderError as exc:
            return ("error", type(exc).__name__, str(exc))

    # -- the epoch's tail (see tail) --------------------------------------------------------

    async def tail_wait(self, within: float) -> bool | tuple[Any, ...]:
        """Whether the job reached its tail within ``within`` s; errors travel as values."""
        try:
            return await self._tail.wait_tail(within)
        except AsyncReaderError as exc:
            return ("error", type(exc).__name__, str(exc))

    def tail_layout(self, client: str, layout: dict[str, Any] | None) -> tuple[Any, ...]:
        """A rank's examples' layout (see :meth:`TailPool.layout`)."""
        try:
            self._tail.layout(client, layout)
        except AsyncReaderError as exc:
            return ("error", type(exc).__name__, str(exc))
        return ("ok",)

    def tail_join(self, client: str, *args: Any) -> tuple[Any, ...]:
        """A rank enters the tail (see :meth:`TailPool.join`)."""
        try:
            self._tail.join(client, *args)
        except AsyncReaderError as exc:
            return ("error", type(exc).__name__, str(exc))
        return ("ok",)

    def tail_push(
        self,
        client: str,
        comps: Any,
        keys: list[bytes] | None,
        ended: bool,
        shapes: Any = None,
        again: bool = False,
    ) -> Any:
        """A rank's examples for the pool (see :meth:`TailPool.push`)."""
        try:
            self._tail.push(client, comps, keys, ended, shapes, again=again)
        except AsyncReaderError as exc:
            return ("error", type(exc).__name__, str(exc))
        return ("ok",)

    async def tail_take(self, client: str, rid: int, confirm: int) -> tuple[Any, ...]:
        """A rank's next batch in the tail (see :meth:`TailPool.take`)."""
        try:
            return await self._tail.take(client, rid, confirm)
        except AsyncReaderError as exc:
            return ("error", type(exc).__name__, str(exc))

    def tail_status(self) -> dict[str, Any]:
        """The tail's counts, pool, drops and padding (tests)."""
        return self._tail.status()

    def drops(self) -> dict[bytes, int]:
        """Keys the tail's remainder dropped since :meth:`keep_ledger` (tests)."""
        return self._leases.drops()

    def heartbeat(self, client: str) -> bool:
        """A rank is alive; ``False`` when it was declared dead."""
        return self._leases.heartbeat(client)

    def keep_ledger(self) -> None:
        """Count every acknowledged key from now on (tests)."""
        self._leases.keep_ledger()

    def ledger(self) -> dict[bytes, int]:
        """How many times each key was acknowledged since :meth:`keep_ledger` (tests)."""
        return self._leases.ledger()

    def lease_status(self) -> dict[str, Any]:
        """The leases: pending items given back, leases held, dead ranks."""
        return self._leases.status()

    # -- job checkpoints (see job_checkpoint) ----------------------------------------------

    def job_snapshot(self) -> tuple[Any, ...]:
        """The queue's part of a job checkpoint; errors travel as values."""
        try:
            return ("ok", self._items.snapshot(self._queue, self._leases, self._leases._name))
        except AsyncReaderError as exc:
            return ("error", type(exc).__name__, str(exc))

    def checkpoint_wanted(self, number: int, ranks: list[int]) -> None:
        """Job checkpoint ``number`` waits for ``ranks`` (see
        :meth:`LeaseBook.checkpoint_wanted`)."""
        self._leases.checkpoint_wanted(number, ranks)

    async def job_items(self, within: float) -> tuple[Any, ...]:
        """The work items of the restored job checkpoint's leases, once the program has
        enqueued the items again (see :meth:`ItemLog.lease_items`); errors as values."""
        items = await self._items.lease_items(within)
        if items is None:
            return (
                "error",
                "FailedPreconditionError",
                f"shared queue '{self._leases._name}' was not given its work items again "
                f"within {within:g} s of a restore from a job checkpoint",
            )
        return ("ok", items)

    def restore_job(self, snapshot: dict[str, Any]) -> tuple[Any, ...]:
        """Restore the queue from its part of a job checkpoint once the program has
        enqueued its items again (see :class:`~.job_checkpoint.ItemLog`)."""
        try:
            self._items.restore(snapshot, self._leases._name)
        except AsyncReaderError as exc:
            return ("error", type(exc).__name__, str(exc))
        return ("ok", None)


class JobHost:
    """The registry of a job: which ranks are in, the actors the job created, and the
    barrier of its checkpoints (see :class:`~.job_checkpoint.CheckpointHost`).

    The sessions of a job's ranks enter and leave it; when every rank of the job has
    entered and all of them have left, the last one out deletes the job's actors. A rank
    that leases work items has an anchor actor (see :mod:`.rank`), which the registry
    watches too: a rank whose process dies counts as gone, as does one a shared queue
    fenced for silence (``lease_timeout``), and when the last rank still inside is
    gone, the registry deletes the job's actors and itself.
    """

    def __init__(self, world_size: int, namespace: str) -> None:
        self._world_size = world_size
        self._namespace = namespace
        self._entered: set[int] = set()
        self._inside: set[int] = set()
        self._actors: set[str] = set()
        self._watchers: dict[int, asyncio.Task[None]] = {}
        self._deterministic: tuple[int, bool] | None = None  # the first rank's, and its mode
        # The barrier of the job's checkpoints lives here: every rank already reaches
        # this actor, and a separate one would start a worker process at the first one.
        self._checkpoints = CheckpointHost()

    async def ping(self) -> None:
        """Answer (a waiting rank's liveness check)."""

    async def arrive(
        self,
        number: int,
        rank: int,
        world_size: int,
        part: Any,
        queues: dict[str, Any],
        timeout: float | None,  # noqa: ASYNC109 - the barrier's bound, for every rank
    ) -> tuple[Any, ...]:
        """Rank ``rank`` takes the job's ``number``-th checkpoint (see
        :meth:`CheckpointHost.arrive`)."""
        return await self._checkpoints.arrive(number, rank, world_size, part, queues, timeout)

    def enter(self, rank: int, world_size: int, deterministic: bool = False) -> str | None:
        """A rank's session starts; return why it may not (or ``None``).

        A refusal about the mode starts with ``"deterministic:"`` (an invalid argument:
        every rank of a job must run in the same mode).
        """
        if world_size != self._world_size:
            return f"rank {rank} has world_size={world_size}, the job {self._world_size}"
        if self._deterministic is None:
            self._deterministic = (rank, deterministic)
        elif self._deterministic[1] != deterministic:
            first, mode = self._deterministic
            return (
                f"deterministic: rank {rank} has deterministic={deterministic}, rank {first} "
                f"of the job deterministic={mode}: every rank of a job must run in the same mode"
            )
        if rank in self._inside:
            return f"rank {rank} of this job is already running"
        self._entered.add(rank)
        self._inside.add(rank)
        return None

    def created(self, name: str) -> None:
        """Note an actor of the job (a shared queue), deleted with the job."""
        self._actors.add(name)

    def leave(self, rank: int) -> list[str] | None:
        """A rank's session ends; return the job's actors to delete when it was the last."""
        self._inside.discard(rank)
        self._stop_watching(rank)
        if not self._over():
            return None
        return sorted(self._actors)

    def _over(self) -> bool:
        return not self._inside and len(self._entered) >= self._world_size

    def watch(self, rank: int, anchor: Any) -> None:
        """Watch ``rank``'s anchor actor: when it dies, the rank has left (dead)."""
        if rank in self._inside and rank not in self._watchers:
            self._watchers[rank] = asyncio.ensure_future(self._watch(rank, anchor))

    def _stop_watching(self, rank: int) -> None:
        watcher = self._watchers.pop(rank, None)
        if watcher is not None and watcher is not asyncio.current_task():
            watcher.cancel()

    async def _watch(self, rank: int, anchor: Any) -> None:
        import ray

        while True:
            try:
                await anchor.block.remote()
            except ray.exceptions.ActorUnavailableError:
                await asyncio.sleep(1.0)  # a node that may come back: not dead yet
                continue
            except ray.exceptions.RayActorError:
                break
            except ray.exceptions.RayError:
                await asyncio.sleep(1.0)
                continue
        self._watchers.pop(rank, None)
        await self.rank_gone(rank)

    async def rank_gone(self, rank: int) -> None:
        """``rank`` died: its anchor actor ended, or a shared queue fenced it for
        silence. It has left; when it was the last rank inside, the job is deleted."""
        if rank not in self._inside:
            return  # it left normally, or is known gone
        self._inside.discard(rank)
        self._stop_watching(rank)
        if self._over():
            # Nobody is left to delete the job: its own registry does, in a thread
            # (looking actors up and killing them are blocking calls), itself last.
            await asyncio.to_thread(_delete_job_actors, self._namespace, sorted(self._actors))


def _delete_job_actors(namespace: str, names: list[str]) -> None:
    """Kill the job's actors ``names``, then the registry (the caller's own actor)."""
    import ray

    from .cluster import JOB_ACTOR, kill_actors

    kill_actors(ray, namespace, [*names, JOB_ACTOR])
