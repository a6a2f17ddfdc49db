"""The client side: a Session's backend on Ray, and the proxy of a shared queue."""

from __future__ import annotations

import contextlib
import dataclasses
import itertools
import uuid
from typing import TYPE_CHECKING, Any

import anyio
import anyio.lowlevel
import anyio.to_thread

from .. import _errors
from .._errors import (
    AsyncReaderError,
    DataLossError,
    FailedPreconditionError,
    InvalidArgumentError,
    OutOfRangeError,
    QueueClosedError,
)
from .._queues.base import QueueBase
from .._runtime import input_waits
from .._runtime.resources import check_shared_config
from .awaiting import wait_ref
from .cluster import ACTOR_PREFIX, JOB_ACTOR, kill_actors
from .hosting import VERBS, JobHost, QueueHost
from .job_checkpoint import check_job_tree, held_records
from .rank import (
    Anchor,
    CheckpointWanted,
    Heartbeat,
    LeaseClient,
    leasing_readers,
    reader_queues,
    unknown_keys,
)
from .tail import EqualSteps

if TYPE_CHECKING:
    from .._queues.statistics import QueueStatistics
    from .._readers.work import LeasedWork
    from .._runtime.checkpoint import Checkpointer
    from .._runtime.stages import StageStatistics
    from .cluster import RayCluster

__all__ = ["RayBackend", "RemoteQueue"]

#: Concurrent calls one queue actor serves (a blocked dequeue is a coroutine there).
_MAX_CONCURRENCY = 10_000
#: Seconds a rank taking part in a job checkpoint from a waiting read gives its stage
#: tasks to settle (usually milliseconds). Bounded well below the other ranks' checkpoint
#: timeout, which they spend waiting for it; past it, its part has no pipeline. The
#: waiting read may itself be in one of those stages, which then never settles.
_JOIN_PAUSE = 2.0

_actor_classes: dict[str, Any] = {}


def _actor_class(ray: Any, host: type) -> Any:
    """The Ray actor class of ``host``, made once per process."""
    made = _actor_classes.get(host.__name__)
    if made is None:
        made = _actor_classes[host.__name__] = ray.remote(host)
    return made


def _error(type_name: str, message: str) -> AsyncReaderError:
    """The library's exception called ``type_name`` (raised in the actor), rebuilt here."""
    cls = getattr(_errors, type_name, None)
    if isinstance(cls, type) and issubclass(cls, AsyncReaderError):
        return cls(message)
    return FailedPreconditionError(f"{type_name}: {message}")


class RayBackend:
    """A clustered Session's :class:`~asyncreader.ResourceMgr` backend (one per session).

    Shares queues (not readers): ``lookup_or_create`` finds or creates the queue's actor
    and returns a :class:`RemoteQueue`; closing lets go of them and, when this session is
    the job's last rank out, deletes the job's actors.
    """

    def __init__(
        self, cluster: RayCluster, rank: int, world_size: int, *, deterministic: bool = False
    ) -> None:
        self._cluster = cluster
        self._ray: Any = cluster._ray
        self.rank = rank
        self.world_size = world_size
        #: A deterministic job: ranks lease by the fixed schedule, the tail by rank order.
        self.deterministic = deterministic
        self._client = f"{rank}-{uuid.uuid4().hex}"
        self._queues: dict[tuple[str, str, str], RemoteQueue] = {}
        self._job: Any = None
        self._anchor: Any = None
        self._heartbeat: Heartbeat | None = None
        # Job checkpoints: the queues' parts of the one restored, by actor name; the
        # highest checkpoint number this rank took part in; how many times checkpoint()
        # was called; the answers of those it took part in from a waiting reader, by
        # number, for the call that comes later (see join_checkpoint).
        self._restoring: dict[str, Any] = {}
        self._checkpoint_count = 0
        self._checkpoint_calls = 0
        self._joined: dict[int, tuple[Any, ...]] = {}
        # Set while a waiting reader takes part: acknowledgements wait (the cut).
        self._joining: anyio.Event | None = None
        # The session's checkpoint bookkeeping (this rank's part of a job checkpoint is
        # saved from it, and restored into it), and the task that acknowledges its steps
        # (the one that calls checkpoint()).
        self._checkpointer: Checkpointer | None = None
        self._acker: int | None = None
        # The batchers' step sources (the tail).
        self._steps: list[EqualSteps] = []
        # A pipeline restored from a job checkpoint: the records its buffers hold, by
        # work item; the work queues their items may belong to (by actor name), each
        # with its items once they are back (its leases known), else None.
        self._held: dict[bytes, list[int]] = {}
        self._held_queues: dict[str, set[bytes] | None] = {}
        self._held_known = False
        self._held_lock = anyio.Lock()
        # The batch counts of this rank's batchers at the job checkpoint restored.
        self._restored_counts: dict[str, int] = {}

    # -- SharedBackend -------------------------------------------------------------------

    def shares(self, cls: type) -> bool:
        return issubclass(cls, QueueBase)

    async def open(self) -> None:
        await self._cluster.connect()
        cluster = self._cluster
        options = {
            "name": JOB_ACTOR,
            "namespace": cluster.namespace,
            "lifetime": "detached",
            "get_if_exists": True,
            "num_cpus": 0,
        }
        # get_if_exists asks the cluster synchronously: not on the event loop.
        job_class = _actor_class(self._ray, JobHost).options(**options)
        job = await anyio.to_thread.run_sync(job_class.remote, self.world_size, cluster.namespace)
        with anyio.move_on_after(cluster.connect_timeout) as joining:
            refused = await self._wait(
                job.enter.remote(self.rank, self.world_size, self.deterministic), "job"
            )
        if joining.cancelled_caught:
            # The job's actor may still be starting (Ray starts a worker process for it).
            raise FailedPreconditionError(
                f"cannot join the job in namespace {cluster.namespace!r}: its actor did not "
                f"answer within connect_timeout ({cluster.connect_timeout:g} s)"
            )
        if refused is not None and refused.startswith("deterministic: "):
            raise InvalidArgumentError(
                f"cannot join the job in namespace {cluster.namespace!r}: "
                f"{refused.removeprefix('deterministic: ')}"
            )
        if refused is not None:
            raise FailedPreconditionError(
                f"cannot join the job in namespace {cluster.namespace!r}: {refused}"
            )
        self._job = job

    def lookup_or_create(
        self,
        cls: type,
        container: str,
        name: str,
        kind: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> RemoteQueue:
        if self._job is None:
            raise FailedPreconditionError(
                f"shared {kind} '{name}': a Session with a cluster shares queues only inside "
                "its async with block"
            )
        # Built here first: bad arguments fail as they do locally, and give the config.
        candidate: Any = type.__call__(cls, *args, **kwargs)
        try:
            want = (type(candidate).__name__, candidate._shared_config())
        finally:
            candidate._discard()
        key = (container, kind, name)
        known = self._queues.get(key)
        if known is not None:
            check_shared_config(kind, name, known._have, want)
            return known
        ray, cluster = self._ray, self._cluster
        actor_name = f"{ACTOR_PREFIX}{container}/{kind}/{name}"
        # One blocking round trip (construction is synchronous): create the actor unless
        # it exists (Ray settles races between processes), and ask for its configuration.
        actor = (
            _actor_class(ray, QueueHost)
            .options(
                name=actor_name,
                namespace=cluster.namespace,
                lifetime="detached",
                get_if_exists=True,
                num_cpus=0,
                max_concurrency=_MAX_CONCURRENCY,
            )
            .remote(cls, args, kwargs, name, container)
        )
        try:
            have = ray.get(actor.attach.remote(self._client), timeout=cluster.connect_timeout)
        except ray.exceptions.GetTimeoutError:
            raise FailedPreconditionError(
                f"shared {kind} '{name}': its actor did not answer within "
                f"{cluster.connect_timeout:g} s"
            ) from None
        except ray.exceptions.RayError as exc:
            raise FailedPreconditionError(
                f"shared {kind} '{name}': its actor failed: {exc}"
            ) from None
        self._job.created.remote(actor_name)
        try:
            check_shared_config(kind, name, have, want)
            snapshot = self._restoring.get(actor_name)
            if snapshot is not None:
                self._restore_queue(actor, actor_name, snapshot)
        except Exception:
            actor.detach.remote(self._client, [])
            raise
        queue = RemoteQueue(self, actor, name, container, have)
        queue._actor_name = actor_name
        self._queues[key] = queue
        return queue

    async def shared_stage_statistics(self) -> list[StageStatistics]:
        """Return the stage statistics of every shared queue this process uses, taken
        concurrently (``Session.shared_stage_statistics``)."""
        queues = [q for q in self._queues.values() if not q._detached]
        found: list[StageStatistics | None] = [None] * len(queues)

        async def one(i: int, queue: RemoteQueue) -> None:
            found[i] = await queue.stage_statistics()

        async with anyio.create_task_group() as tg:
            for i, queue in enumerate(queues):
                tg.start_soon(one, i, queue)
        return [stage for stage in found if stage is not None]

    async def ack(self, keys: list[bytes]) -> None:
        """Acknowledge the records ``keys`` (see ``Session.ack``): one call per leasing queue.

        Raises:
            InvalidArgumentError: a key is not a record of an item this rank holds, or
                was acknowledged before; nothing is recorded then.
            FailedPreconditionError: this rank was declared dead.
        """
        acker = anyio.get_current_task().id
        if acker != self._acker:
            if self._acker is not None:
                input_waits.unwatch(self._acker)
            self._acker = acker
            input_waits.watch(acker)
        while self._joining is not None:
            # A reader takes part in a job checkpoint for this rank: no acknowledgement
            # may fall between its part and the queues' snapshot.
            await self._joining.wait()
        plans = []
        rest = [key for key in keys if key]  # padded rows of the tail have no key
        for queue in list(self._queues.values()):
            if queue._leases is None:
                continue
            by_lease, rest = queue._leases.match(rest)
            plans.append((queue, by_lease))
        # Records that came through a tail pool belong to other ranks' leases: the pool's
        # actor matches them. So do records a restored pipeline held, while their leases
        # are not taken again yet.
        foreign: dict[int, list[bytes]] = {}
        if rest and self._held:
            rest = await self._plan_held(rest, plans, foreign)
        if rest:
            pools = [i for i, (queue, _) in enumerate(plans) if queue._pooled]
            if not pools:
                raise unknown_keys(rest)
            for i in pools[1:]:
                # Several pools (a batcher on each work queue): a record a pool handed
                # this rank is acknowledged to that pool's actor.
                handed = plans[i][0]._pool_keys
                mine = [k for k in rest if k in handed]
                if mine:
                    foreign.setdefault(i, []).extend(mine)
                    chosen = set(mine)
                    rest = [k for k in rest if k not in chosen]
            foreign.setdefault(pools[0], []).extend(rest)
            rest = []
        for i, (queue, by_lease) in enumerate(plans):
            leases = queue._leases
            assert leases is not None
            updates = leases.updates(by_lease)
            reply = await self._wait(
                queue._actor.ack.remote(self._client, updates, foreign.get(i)),
                queue.name,
                queue._actor,
            )
            if reply[0] != "ok":
                raise _error(reply[1], reply[2])
            leases.acked(by_lease)
            leases.done(reply[1])
        for queue in self._queues.values():
            if queue._pool_keys:  # acknowledged now, however they were routed
                queue._pool_keys.difference_update(keys)

    async def _plan_held(
        self,
        keys: list[bytes],
        plans: list[tuple[RemoteQueue, dict[int, list[bytes]]]],
        foreign: dict[int, list[bytes]],
    ) -> list[bytes]:
        """Add to ``foreign`` (by plan) the ``keys`` of records the restored pipeline
        held whose leases this rank has not taken again; return the others."""
        held = self._held
        mine = {k: k if k in held else k.rpartition(b":")[0] for k in keys}
        mine = {k: work for k, work in mine.items() if work in held}
        if not mine:
            return keys
        await self._held_items()  # the queues' leases are back: their actors know them
        queues = await self._restored_queues()
        left = list(mine)
        for n, queue in enumerate(queues):
            items = self._held_queues[queue._actor_name] or set()
            # Each key to the queue its item is of (the last queue takes any other: its
            # actor then names a key of no item of its own).
            last = n == len(queues) - 1
            ours = [k for k in left if last or mine[k] in items]
            if not ours:
                continue
            index = next((i for i, (q, _) in enumerate(plans) if q is queue), None)
            if index is None:
                plans.append((queue, {}))
                index = len(plans) - 1
            foreign.setdefault(index, []).extend(ours)
            taken = set(ours)
            left = [k for k in left if k not in taken]
        return [k for k in keys if k not in mine]

    async def home_queue(self, batcher: Any) -> RemoteQueue:
        """The work queue whose items a restored batcher's buffers hold records of (its
        epoch's tail is levelled through it).

        Raises:
            InvalidArgumentError: they are of no work queue's items, or of several.
        """
        await self._held_items()
        works = batcher._restored_works
        found = [
            queue
            for queue in await self._restored_queues()
            if works & (self._held_queues[queue._actor_name] or set())
        ]
        if len(found) != 1:
            raise InvalidArgumentError(
                f"{batcher._what}: its restored buffers hold records of the items of "
                f"{len(found)} of this rank's shared work queues, not one"
            )
        found[0]._pooled = True
        return found[0]

    def part_source(self, source: Checkpointer) -> None:
        """This rank's part of a job checkpoint is saved from ``source`` (the session's
        checkpoint bookkeeping) and restored into it."""
        self._checkpointer = source

    def equal_steps(self, batcher: Any, remainder: str) -> EqualSteps | None:
        """The pool giving ``batcher`` as many batches as every other rank, or ``None``
        when this rank leases from no shared queue (nothing to level)."""
        # A restored pipeline may hand out batches before its readers lease anything.
        queues = [
            q
            for q in self._queues.values()
            if (q._leases is not None or q._actor_name in self._held_queues) and not q._detached
        ]
        if not queues:
            return None
        refs = batcher._record_refs
        home = None if refs is None else reader_queues.get(refs.reader)
        queue: RemoteQueue | None
        if home is not None and home in queues:
            queue = home
        elif len(queues) == 1:
            queue = queues[0]
        elif batcher._restored_works and self._held_queues:
            # Restored buffers, their reader not leasing yet: the queue whose items they
            # are of, found once the items are back (see EqualSteps.next).
            queue = None
        else:
            names = ", ".join(repr(q.name) for q in queues)
            raise InvalidArgumentError(
                f"{batcher._what}: this rank leases work items from several shared queues "
                f"({names}), and the batcher does not say which its examples come from: "
                "pass record_refs=<the reader that reads them> so that its epoch's tail is "
                "levelled through that reader's queue"
            )
        if queue is not None:
            queue._pooled = True
        steps = EqualSteps(self, queue, batcher, remainder)  # type: ignore[arg-type]
        self._steps.append(steps)
        restored = self._restored_counts.get(self._count_key(steps))
        if restored is not None:
            steps.restore_count(restored)
        return steps

    def _count_key(self, steps: EqualSteps) -> str:
        """What names ``steps``' batch count in a job checkpoint: its batcher's name and
        how many batchers of that name came before it in this rank."""
        what = steps._batcher._what
        before = sum(1 for s in self._steps[: self._steps.index(steps)] if s._batcher._what == what)
        return f"{what}#{before}"

    def _with_counts(self, part: dict[str, Any]) -> dict[str, Any]:
        """``part`` and the batch counts of this rank's batchers (restored with as many
        ranks, also when its pipeline is not saved)."""
        if not self._steps:
            return part
        return {**part, "batch_counts": {self._count_key(s): s.count for s in self._steps}}

    # -- job checkpoints (see job_checkpoint) --------------------------------------------

    def load_job(self, tree: Any) -> None:
        """Keep the shared queues' parts of a job checkpoint, restored as the queues are
        looked up. When the job had as many ranks, this rank's tracked states are
        restored too, and in a deterministic job its pipeline (its batchers' and
        queues' contents): the records its buffers hold are then skipped by the
        readers of their leases (see the scale-out guide).

        Raises:
            InvalidArgumentError: ``tree`` is not a job checkpoint, or is malformed.
        """
        job = check_job_tree(tree)
        self._restoring = dict(job["queues"])
        checkpointer = self._checkpointer
        if job["world_size"] != self.world_size or checkpointer is None:
            return
        part: dict[str, Any] = dict(job["ranks"][self.rank])
        counts = part.pop("batch_counts", {})
        if not isinstance(counts, dict) or not all(
            isinstance(k, str) and isinstance(v, int) and v >= 0 for k, v in counts.items()
        ):
            raise InvalidArgumentError(
                f"malformed job checkpoint (rank {self.rank}'s batch counts: {counts!r:.80})"
            )
        self._restored_counts = counts
        pipeline = part.pop("pipeline", None)
        if pipeline is None or not self.deterministic:
            checkpointer.load_components(part)
            return
        held = held_records(pipeline, self.rank)
        # The records may be of any work queue's items (leased, or done: a rank in the
        # epoch's tail holds records it pushed to the pool). A key names its item, not
        # its queue: each queue's items, once back, tell which is whose.
        works = [name for name, snap in self._restoring.items() if "examples" not in snap]
        if held and not works:
            raise InvalidArgumentError(
                f"malformed job checkpoint (rank {self.rank}'s pipeline holds records, "
                "and it has no work queue)"
            )
        self._held = held
        self._held_queues = dict.fromkeys(works) if held else {}
        # Its records are read again once the work queue's items are back and the
        # queue knows what its buffers hold (unsigned: only records of those items).
        checkpointer.load_components({**part, **pipeline}, gate=self._held_items if held else None)

    def _restore_queue(self, actor: Any, name: str, snapshot: Any) -> None:
        ray = self._ray
        try:
            reply = ray.get(
                actor.restore_job.remote(snapshot), timeout=self._cluster.connect_timeout
            )
        except ray.exceptions.RayError as exc:
            raise FailedPreconditionError(
                f"shared queue '{name}': its actor failed while restoring: {type(exc).__name__}"
            ) from None
        if reply[0] != "ok":
            raise _error(reply[1], reply[2])

    async def job_checkpoint(self, part: dict[str, Any], timeout: float | None) -> Any:  # noqa: ASYNC109
        """Take the job checkpoint with every other rank (collective); return its tree.

        Raises:
            TimeoutError: a rank did not take part within ``timeout``.
            FailedPreconditionError: a rank died first, a shared queue cannot be saved,
                or an actor failed.
        """
        if self._job is None:
            raise FailedPreconditionError(
                "the job checkpoint of a Session with a cluster is taken inside its async "
                "with block"
            )
        number = self._checkpoint_calls = self._checkpoint_calls + 1
        joined = self._joined.pop(number, None)
        if joined is not None:
            # A waiting reader took part in this one for the rank: its answer.
            await anyio.lowlevel.checkpoint()
            return self._checkpoint_answer(joined)
        self._checkpoint_count = max(self._checkpoint_count, number)
        checkpointer = self._checkpointer
        if checkpointer is None or not self._saves_pipeline():
            return await self._arrive(number, part, timeout)
        # The rank's pipeline stays paused until the cut: the positions its readers
        # report, its acknowledgements and its buffers describe one moment.
        async with checkpointer.pause(timeout):
            return await self._arrive(number, self._with_pipeline(part), timeout)

    async def _arrive(self, number: int, part: dict[str, Any], timeout: float | None) -> Any:  # noqa: ASYNC109
        part = self._with_counts(part)
        await self.ack([])  # report every reader's position: a restore seeks there
        queues = self._queue_actors()
        ref = self._job.arrive.remote(number, self.rank, self.world_size, part, queues, timeout)
        # The actor answers by the timeout; the margin covers the cut itself.
        limit = None if timeout is None else timeout + 2 * self._cluster.health_interval
        with anyio.move_on_after(limit):
            return self._checkpoint_answer(await self._wait(ref, "job", self._job))
        raise TimeoutError(f"job checkpoint {number}: no answer within {limit:g} s")

    def _saves_pipeline(self) -> bool:
        """Whether this rank's part of a job checkpoint holds its pipeline: in a
        deterministic job, before the epoch's tail or once its examples are all in the
        tail's pool (which its batchers then save as references)."""
        return self.deterministic and all(not s.in_tail or s.savable for s in self._steps)

    def _with_pipeline(self, part: dict[str, Any]) -> dict[str, Any]:
        """``part`` and, unless it holds examples it cannot name, the rank's pipeline
        (synchronous: the pipeline is paused). Readers that lease are not in it: their
        positions are the leases'."""
        assert self._checkpointer is not None
        leasing = leasing_readers
        pipeline = self._checkpointer.save_pipeline(
            lambda key, obj: key.startswith("reader/") and obj in leasing
        )
        return {**part, "pipeline": pipeline} if pipeline else part

    @staticmethod
    def _checkpoint_answer(reply: tuple[Any, ...]) -> Any:
        if reply[0] == "ok":
            return reply[1]
        if reply[1] == "TimeoutError":
            raise TimeoutError(reply[2])
        raise _error(reply[1], reply[2])

    def _queue_actors(self) -> dict[str, Any]:
        """The actors of the shared queues this rank uses, by name (for a checkpoint)."""
        return {
            f"{ACTOR_PREFIX}{container}/{kind}/{name}": queue._actor
            for (container, kind, name), queue in self._queues.items()
        }

    async def join_checkpoint(self, number: int) -> bool:
        """Take part in job checkpoint ``number`` from a reader's lease call: the reader
        waits for the other ranks' items and they wait in the checkpoint for this rank.

        Only when the waiting reader runs in the task that acknowledges this rank's
        steps, or that task waits for input (a queue's or a batcher's next elements,
        which only the rank's readers could make): it cannot call ``checkpoint()`` now,
        and holds no step in progress. The rank's part is its tracked states as they
        are; acknowledgements wait until the queues' snapshot is taken. The answer is
        kept for the rank's own ``checkpoint()`` call of that number, which returns it
        at once. A failed checkpoint fails on the ranks that called it; the reader
        just waits on.

        Returns:
            Whether the rank took part.

        Raises:
            FailedPreconditionError: the job's actor died.
        """
        acker = self._acker
        current = anyio.get_current_task().id
        if acker is not None and acker != current and not input_waits.is_waiting(acker):
            return False  # the rank's acknowledging task is free: it calls checkpoint()
        if number <= self._checkpoint_count or self._joining is not None:
            return False  # the rank arrived there already
        self._checkpoint_count = number
        queues = self._queue_actors()
        joining = self._joining = anyio.Event()
        checkpointer = self._checkpointer
        try:
            part = {} if checkpointer is None else checkpointer.tracked_states()
            async with contextlib.AsyncExitStack() as stack:
                if checkpointer is not None and self._saves_pipeline():
                    # As in checkpoint(): this task waits for work, holding nothing.
                    try:
                        await stack.enter_async_context(
                            checkpointer.pause(min(_JOIN_PAUSE, self._cluster.lease_timeout))
                        )
                    except (TimeoutError, FailedPreconditionError):
                        pass  # the stages are busy: the rank's part is without them
                    else:
                        part = self._with_pipeline(part)
                ref = self._job.arrive.remote(
                    number, self.rank, self.world_size, self._with_counts(part), queues, None
                )
                reply = await self._wait(ref, "job", self._job)
        finally:
            self._joining = None
            joining.set()
        if number > self._checkpoint_calls:
            self._joined[number] = tuple(reply)
        return bool(reply[0] == "ok")

    async def _restored_queues(self) -> list[RemoteQueue]:
        """The work queues whose items the pipeline's records may be of (waiting for the
        program to build them), each registered to lease from.

        Raises:
            FailedPreconditionError: the program did not build one within
                ``connect_timeout``.
        """
        found: list[RemoteQueue] = []
        for name in self._held_queues:
            queue = None
            with anyio.move_on_after(self._cluster.connect_timeout):
                while True:
                    queue = self._queue_actors_by_name().get(name)
                    if queue is not None:
                        break
                    await anyio.sleep(0.02)
            if queue is None:
                raise FailedPreconditionError(
                    f"the pipeline restored from the job checkpoint holds records of the "
                    f"work items of shared queue {name!r}, which this rank's session did "
                    "not build"
                )
            await queue._lease_client_ready()
            found.append(queue)
        return found

    def _queue_actors_by_name(self) -> dict[str, RemoteQueue]:
        return {
            f"{ACTOR_PREFIX}{container}/{kind}/{name}": queue
            for (container, kind, name), queue in self._queues.items()
        }

    async def _held_items(self) -> None:
        """Wait until the work queue's restored leases are back (the program enqueued
        its items again); allow their items: the restored pipeline's records may only
        be of those (see ``Checkpointer.load_components``).

        Raises:
            FailedPreconditionError: the items did not come back within
                ``lease_timeout``, or the queue's actor failed.
        """
        if self._held_known:
            return
        async with self._held_lock:
            await self._fetch_held_items()

    async def _fetch_held_items(self) -> None:
        if not self._held_known:  # asked by another task meanwhile
            # Registered now: each queue's actor learns at once which records this
            # rank's buffers hold, before any reader could take their items.
            queues = await self._restored_queues()
            allowed: list[bytes] = []
            owner: dict[bytes, str] = {}
            for queue in queues:
                reply = await self._wait(
                    queue._actor.job_items.remote(self._cluster.lease_timeout),
                    queue.name,
                    queue._actor,
                )
                if reply[0] != "ok":
                    raise _error(reply[1], reply[2])
                items = {bytes(w) for w in reply[1]}
                self._held_queues[queue._actor_name] = items
                for work in items & self._held.keys():
                    if owner.setdefault(work, queue.name) != queue.name:
                        raise InvalidArgumentError(
                            f"the pipeline restored from the job checkpoint holds records "
                            f"of {work!r}, a work item of both shared queues "
                            f"{owner[work]!r} and {queue.name!r}: which one it came from "
                            "is unknown"
                        )
                allowed += reply[1]
            if self._checkpointer is not None:
                self._checkpointer.allow_work_items(allowed)
            self._held_known = True

    async def _lease_client(self, queue: RemoteQueue) -> LeaseClient:
        """Register this rank with ``queue``'s actor as one that leases work items."""
        ray, cluster = self._ray, self._cluster
        if self._anchor is None:
            anchor_class = _actor_class(ray, Anchor).options(num_cpus=0)
            self._anchor = await anyio.to_thread.run_sync(anchor_class.remote)
            # The job's registry watches it too: if this process dies, it has left.
            self._job.watch.remote(self.rank, self._anchor)
        reply = await self._wait(
            queue._actor.register.remote(
                self._client,
                self._anchor,
                cluster.lease_timeout,
                self.world_size if self.deterministic else None,
                self._job,
                self._held if queue._actor_name in self._held_queues else None,
            ),
            queue.name,
            queue._actor,
        )
        if reply[0] != "ok":
            raise _error(reply[1], reply[2])
        if self._heartbeat is None:
            self._heartbeat = Heartbeat(self, cluster.lease_timeout / 4)
        return LeaseClient(queue)

    async def aclose(self) -> None:
        if self._acker is not None:
            input_waits.unwatch(self._acker)
        heartbeat, self._heartbeat = self._heartbeat, None
        if heartbeat is not None:
            await anyio.to_thread.run_sync(heartbeat.stop)
        queues, self._queues = list(self._queues.values()), {}
        timeout = self._cluster.connect_timeout
        lost: list[str] = []
        for queue in queues:
            queue._detached = True
            with contextlib.suppress(AsyncReaderError), anyio.move_on_after(timeout):
                confirm, queue._confirm = queue._confirm, []
                _, stranded = await self._wait(
                    queue._actor.detach.remote(self._client, confirm), queue.name
                )
                if stranded is not None:
                    lost.append(stranded)
        await self._leave()
        if lost:
            # A rank that leaves having acknowledged its last records hears of the loss
            # here rather than never.
            raise DataLossError("; ".join(lost))

    async def _leave(self) -> None:
        """Leave the job (its last rank out deletes its actors), then end this rank's anchor."""
        timeout = self._cluster.connect_timeout
        job, self._job = self._job, None
        if job is None:
            return
        doomed = None
        with contextlib.suppress(AsyncReaderError), anyio.move_on_after(timeout):
            doomed = await self._wait(job.leave.remote(self.rank), "job")
        if doomed is not None:  # the job's last rank out deletes its actors
            await anyio.to_thread.run_sync(self._delete, doomed)
        anchor, self._anchor = self._anchor, None
        if anchor is not None:
            await anyio.to_thread.run_sync(self._ray.kill, anchor)

    def _delete(self, names: list[str]) -> None:
        kill_actors(self._ray, self._cluster.namespace, [*names, JOB_ACTOR])

    # -- waiting -------------------------------------------------------------------------

    async def _wait(self, ref: Any, what: str, actor: Any = None) -> Any:
        """Await ``ref``; every ``health_interval`` check that ``actor`` still answers.

        Raises:
            FailedPreconditionError: the actor died, or did not answer a check in time.
        """
        interval = self._cluster.health_interval
        errors = self._ray.exceptions
        try:
            while True:
                with anyio.move_on_after(interval):
                    return await wait_ref(ref)
                if actor is None:
                    continue
                with anyio.move_on_after(interval):
                    await wait_ref(actor.ping.remote())
                    continue
                raise FailedPreconditionError(
                    f"the actor hosting queue '{what}' did not answer for {interval:g} s"
                )
        except errors.RayActorError as exc:
            raise FailedPreconditionError(
                f"the actor hosting queue '{what}' died or cannot be reached: {type(exc).__name__}"
            ) from None
        except errors.RayError as exc:
            raise FailedPreconditionError(f"queue '{what}': {type(exc).__name__}: {exc}") from None


class RemoteQueue:
    """A queue shared by every process of a job, hosted in a Ray actor.

    What ``FIFOQueue(..., shared_name=...)`` (and the other queue types) returns inside a
    Session with a cluster: the same verbs, blocking and errors as the local queue (the
    actor runs the library's own queue), each verb one actor call (a batched verb moves
    its whole batch in that call). Blocked callers of every process are served in the
    order their calls reach the actor.

    A call cancelled while it waits takes nothing and adds nothing more: the actor
    withdraws it, and puts back at the front any elements it had already returned. When
    the actor dies, or does not answer its liveness check, calls raise
    :class:`~asyncreader.FailedPreconditionError` naming the queue.
    """

    __module__ = "asyncreader"

    def __init__(
        self,
        backend: RayBackend,
        actor: Any,
        shared_name: str,
        container: str,
        have: tuple[str, dict[str, object]],
    ) -> None:
        self._backend = backend
        self._actor = actor
        self._shared_name = shared_name
        self._container = container
        self._have = have
        self._client = backend._client
        self._ids = itertools.count()
        self._confirm: list[int] = []
        self._detached = False
        self._leases: LeaseClient | None = None
        self._pooled = False  # a batcher levels its steps through this queue's actor
        #: Keys of the records this queue's tail pool handed this rank, until acknowledged
        #: (with several pools, an acknowledgement goes to the pool that handed it out).
        self._pool_keys: set[bytes] = set()
        self._actor_name = ""  # the actor's name (set by the backend)
        self._registering = anyio.Lock()

    # -- attributes ----------------------------------------------------------------------

    @property
    def name(self) -> str:
        """The queue's ``shared_name`` (its messages quote it)."""
        return self._shared_name

    @property
    def shared_name(self) -> str:
        """The name the queue is shared under."""
        return self._shared_name

    @property
    def container(self) -> str:
        """The container the queue is shared in."""
        return self._container

    @property
    def kind(self) -> str:
        """The hosted queue's type name (``"FIFOQueue"``, ...)."""
        return self._have[0]

    @property
    def capacity(self) -> int | None:
        """Maximum number of stored elements; ``None`` when unbounded."""
        capacity = self._have[1].get("capacity")
        return capacity if isinstance(capacity, int) else None

    def _info(self) -> tuple[int, bool, QueueStatistics]:
        ray = self._backend._ray
        try:
            info: tuple[int, bool, QueueStatistics] = ray.get(
                self._actor.info.remote(), timeout=self._backend._cluster.health_interval
            )
        except ray.exceptions.RayError as exc:
            raise FailedPreconditionError(
                f"the actor hosting queue '{self.name}' did not answer: {type(exc).__name__}"
            ) from None
        return info

    def size(self) -> int:
        """Return the number of stored elements (one short blocking round trip)."""
        return self._info()[0]

    def is_closed(self) -> bool:
        """Return whether the queue is closed (one short blocking round trip)."""
        return self._info()[1]

    def statistics(self) -> QueueStatistics:
        """Return a snapshot of the hosted queue's state (one short blocking round trip)."""
        return self._info()[2]

    async def stage_statistics(self) -> StageStatistics:
        """Return the hosted queue's stage statistics (one actor call, awaited).

        The stage is named ``shared:<shared_name>``; its blocked tasks are the callers
        of every process of the job waiting in the queue.
        """
        stage: StageStatistics = await self._backend._wait(
            self._actor.stage.remote(), self.name, self._actor
        )
        return dataclasses.replace(stage, name=f"shared:{self.name}")

    def __repr__(self) -> str:
        return f"<RemoteQueue {self.kind} {self.name!r} container={self.container!r}>"

    # -- verbs ---------------------------------------------------------------------------

    async def enqueue(self, vals: Any) -> None:
        """Add one element, waiting while the queue is full (see ``FIFOQueue.enqueue``)."""
        await self._call("enqueue", vals)

    async def enqueue_many(self, vals: Any) -> None:
        """Add a batch of elements in one call (see ``FIFOQueue.enqueue_many``)."""
        await self._call("enqueue_many", vals)

    async def dequeue(self) -> Any:
        """Remove and return one element, waiting while the queue is empty."""
        return await self._call("dequeue")

    async def dequeue_many(self, n: int) -> Any:
        """Remove and return exactly ``n`` elements in one call."""
        return await self._call("dequeue_many", n)

    async def dequeue_up_to(self, n: int) -> Any:
        """Remove and return up to ``n`` elements in one call (fewer only once closed)."""
        return await self._call("dequeue_up_to", n)

    async def take_work(self, reader: Any) -> LeasedWork:
        """Lease the next work item for ``reader`` (what readers call instead of dequeue).

        The item stays this rank's until every record read from it is acknowledged
        (``Session.ack``) or the session ends; if the rank dies first, another rank
        continues it (see the scale-out guide). Taking the next item tells the queue that
        ``reader`` is done with the previous one.

        Raises:
            OutOfRangeError: the queue is closed and empty and no other rank still reads
                an item it could give back.
            FailedPreconditionError: this rank was declared dead (its process was
                thought gone, or it was silent for ``lease_timeout``).
        """
        leases = await self._lease_client_ready()
        return await leases.take(reader)

    async def _lease_client_ready(self) -> LeaseClient:
        """This rank's leases of the queue (registering it with the actor first)."""
        if self._leases is None:
            async with self._registering:
                if self._leases is None:
                    self._leases = await self._backend._lease_client(self)
        return self._leases

    async def close(self, cancel_pending_enqueues: bool = False) -> None:
        """Close the queue for every process (see ``FIFOQueue.close``)."""
        await self._call("close", cancel_pending_enqueues)

    def enqueue_nowait(self, vals: Any) -> None:
        """Not available on a shared queue: every operation is a round trip.

        Raises:
            FailedPreconditionError: always.
        """
        raise self._no_nowait("enqueue_nowait")

    def dequeue_nowait(self) -> Any:
        """Not available on a shared queue: every operation is a round trip.

        Raises:
            FailedPreconditionError: always.
        """
        raise self._no_nowait("dequeue_nowait")

    def _no_nowait(self, verb: str) -> FailedPreconditionError:
        return FailedPreconditionError(
            f"{self.kind} '{self.name}' is shared across processes: {verb} is not "
            "available, await the blocking verb instead"
        )

    async def _call(self, verb: str, *args: Any) -> Any:
        if self._detached:
            raise self._gone(verb)
        rid = next(self._ids)
        confirm, self._confirm = self._confirm, []
        ref = self._actor.call.remote(self._client, rid, confirm, verb, args)
        try:
            reply = await self._backend._wait(ref, self.name, self._actor)
        except BaseException:
            # Cancelled, or the actor is unreachable: the call must not take effect later.
            with contextlib.suppress(Exception):
                self._actor.withdraw.remote(self._client, rid)
            raise
        if reply[0] == "ok":
            if VERBS[verb]:
                self._confirm.append(rid)
            return reply[1]
        if reply[0] == "withdrawn":  # this process's session let go of the queue meanwhile
            raise self._gone(verb)
        if reply[0] == "checkpoint":  # a lease: take part in a job checkpoint first
            raise CheckpointWanted(reply[1])
        raise _error(reply[1], reply[2])

    def _gone(self, verb: str) -> AsyncReaderError:
        message = f"{self.kind} '{self.name}': this process's Session was closed"
        if VERBS.get(verb):
            return OutOfRangeError(message)
        return QueueClosedError(message)

    async def _session_close(self) -> None:
        """The session's backend lets go of the queue; other processes keep it."""
