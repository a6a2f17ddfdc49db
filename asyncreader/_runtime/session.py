"""Session: the owner of a pipeline's tasks and resources.

A TensorFlow ``Session`` owns the queues and readers its graph made and the threads that run
them. ``async with ar.Session() as sess:`` does the same for a block of async code:

* ``sess.coord`` is a :class:`~asyncreader.Coordinator`, entered with the session and current
  inside it, so queue runners and producers started in the block run in it;
* ``sess.resources`` is a :class:`~asyncreader.ResourceMgr`: queues and readers built with
  ``shared_name=`` inside the block are shared through it (two ``FIFOQueue(4,
  shared_name="q")`` are one queue), and different sessions never share;
* every queue and reader built inside the block is tracked (weakly, so a long-lived session
  does not keep objects alive that nothing else uses).

Leaving the block, or ``await sess.close()``, requests a stop, waits for the coordinator's
tasks, then closes every tracked resource still alive, together (queues with
``cancel_pending_enqueues=True``, readers' open files) under a shielded scope and clears the
resource manager. Operations still blocked on those queues in other tasks end with a clear
error (a dequeue gets :class:`~asyncreader.OutOfRangeError`, an enqueue
:class:`~asyncreader.QueueClosedError`); calls made through :meth:`Session.run` are cancelled
and raise :class:`~asyncreader.FailedPreconditionError`. TensorFlow's ``Session.close()``
only cancels in-flight steps and keeps the queues; closing them is this library's extension.

A long-lived session is how a service embeds a pipeline: enter it for the lifetime of the
service, start the runners with :meth:`Session.start_soon` / ``QueueRunner.start()``, and let
request handlers in other tasks call ``await sess.run(batcher.dequeue)``.
"""

from __future__ import annotations

import os
import weakref
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Self, TypeVar, TypeVarTuple

import anyio
import anyio.lowlevel
import numpy as np

from .._errors import FailedPreconditionError, InvalidArgumentError
from . import context, stages
from .checkpoint import Checkpointable, Checkpointer, decode_trusted
from .coordinator import Coordinator, CoordinatorStatistics
from .resources import ResourceMgr, SharedBackend, SharedCluster

if TYPE_CHECKING:
    from collections.abc import Awaitable, Callable, Iterable
    from types import TracebackType

    from .stages import StageStatistics

__all__ = ["Session", "SessionStatistics"]

T = TypeVar("T")
Ts = TypeVarTuple("Ts")

_CLOSED_MESSAGE = "Attempted to use a closed Session."


def _ranks(cluster: object, rank: int | None, world_size: int | None) -> tuple[int, int]:
    """Return ``(rank, world_size)``: given, else from RANK / WORLD_SIZE with a cluster."""
    if cluster is None:
        if rank is not None or world_size is not None:
            raise InvalidArgumentError("rank and world_size need a cluster= to run in")
        return 0, 1
    r = _env_int("RANK", 0) if rank is None else rank
    n = _env_int("WORLD_SIZE", 1) if world_size is None else world_size
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise InvalidArgumentError(f"world_size must be a positive int, got {n!r}")
    if isinstance(r, bool) or not isinstance(r, int) or not 0 <= r < n:
        raise InvalidArgumentError(f"rank must be an int in [0, {n}), got {r!r}")
    return r, n


def _env_int(variable: str, default: int) -> int:
    text = os.environ.get(variable)
    if text is None or not text.strip():
        return default
    try:
        return int(text)
    except ValueError:
        raise InvalidArgumentError(
            f"the {variable} environment variable must be an integer, got {text!r}"
        ) from None


class _TrackedState:
    """A :meth:`Session.track_state` entry (held by the session)."""

    __slots__ = ("__weakref__", "_restore", "_save")

    def __init__(self, save: Callable[[], Any], restore: Callable[[Any], None]) -> None:
        self._save = save
        self._restore = restore

    def save(self) -> Any:
        return self._save()

    def restore(self, value: Any) -> None:
        self._restore(value)


@dataclass(frozen=True)
class SessionStatistics:
    """A snapshot of a :class:`Session`'s state.

    Attributes:
        closed: Whether the session was closed.
        resources_tracked: Tracked queues and readers still alive.
        calls_running: Calls made through :meth:`Session.run` that have not returned.
        coordinator: The statistics of the session's coordinator.
    """

    closed: bool
    resources_tracked: int
    calls_running: int
    coordinator: CoordinatorStatistics


class Session:
    """Own a coordinator, a resource manager and the resources built inside the block.

    A session is used once: after it was closed, entering it, starting tasks in it, running
    calls through it or building resources inside its block raise
    :class:`~asyncreader.FailedPreconditionError`.

    Checkpoints: ``await sess.checkpoint()`` returns the state of the whole pipeline built
    in the session as bytes; a new session given them as ``restore=`` restores each
    component as the same pipeline code builds it again, so the stream continues where it
    was. See :meth:`checkpoint`.

    Args:
        clean_stop_exception_types: Passed to the session's :class:`Coordinator`.
        stop_grace_period: Passed to the session's :class:`Coordinator`: seconds its tasks
            get to end by themselves after a stop request before they are cancelled.
        restore: Bytes from :meth:`checkpoint`: producers, readers, queues, batchers and
            tracked states built in this session continue from them. With a ``cluster``:
            a job checkpoint (any ``world_size``): the shared work queues continue from
            it once the program has enqueued their items again (see :meth:`checkpoint`).
        deterministic: Run pipelines so that, with the same seeds, the stream does not
            depend on task timing: a restored run then continues exactly as the
            uninterrupted one would. Batchers must use one task (``num_threads=1``, one
            source); shuffling producers, queues and batchers need a ``seed``; a shuffle
            batcher hands out a batch only when its queue is full (its
            ``min_after_dequeue`` becomes ``capacity - batch_size``). With a ``cluster``
            (every rank of the job must agree, else ``InvalidArgumentError``): no dynamic
            balance; rank ``r`` leases the work items ``r, r + world_size, ...`` of each
            shared queue's order, and the epoch's tail is planned in rank order, so each
            rank's batches do not depend on timing, also after a job checkpoint restored
            with the same ``world_size`` (see the scale-out guide).
        checkpoint_key: A secret key (bytes) that authenticates checkpoints:
            :meth:`checkpoint` signs what it returns (HMAC-SHA256), and ``restore=``
            must carry a valid signature made with the same key; its content is then
            trusted. Without a key, a restore refuses to make the pipeline read any work
            item (path or URL) that this session's input producers were not given.
        cluster: An :class:`~asyncreader.RayCluster`: queues built with ``shared_name=``
            in the block are then one queue for every process of the job that names them
            (see ``docs/guides/scale-out.md``). Entering the block connects to it.
            ``None`` (the default): everything stays in this process.
        rank: This process's rank in the job, ``0 <= rank < world_size``; by default the
            ``RANK`` environment variable, else 0. Only with a ``cluster``.
        world_size: How many ranks the job has; by default the ``WORLD_SIZE`` environment
            variable, else 1. Only with a ``cluster``. The job's shared queues are
            deleted when all of its ranks' sessions have ended.

    Raises:
        InvalidArgumentError: ``restore`` is not a valid checkpoint (with a ``cluster``:
            not a valid job checkpoint); its signature is missing, wrong, or present
            without a ``checkpoint_key``;
            ``checkpoint_key`` is not non-empty bytes; ``rank`` or ``world_size`` is
            given without a ``cluster``, out of range, or (from the environment) not an
            integer.

    Attributes:
        coord: The session's coordinator.
        resources: The session's resource manager.
    """

    __module__ = "asyncreader"

    def __init__(
        self,
        *,
        clean_stop_exception_types: Iterable[type[BaseException]] | None = None,
        stop_grace_period: float | None = 0.0,
        restore: bytes | None = None,
        deterministic: bool = False,
        checkpoint_key: bytes | None = None,
        cluster: SharedCluster | None = None,
        rank: int | None = None,
        world_size: int | None = None,
    ) -> None:
        self._rank, self._world_size = _ranks(cluster, rank, world_size)
        self._cluster = cluster
        local_restore = restore if cluster is None else None
        self._checkpointer = Checkpointer(local_restore, deterministic, checkpoint_key)
        self.coord = Coordinator(clean_stop_exception_types, stop_grace_period=stop_grace_period)
        backend = (
            None
            if cluster is None
            else cluster._session_backend(
                self._rank, self._world_size, deterministic=bool(deterministic)
            )
        )
        self._checkpointer.describe = self._describe_stages
        if backend is not None:
            backend.part_source(self._checkpointer)
        if backend is not None and restore is not None:
            # A job checkpoint: the shared queues restore in the cluster, this rank's
            # tracked states (and pipeline) here, when the job had as many ranks.
            backend.load_job(decode_trusted(restore, checkpoint_key))
        self._backend: SharedBackend | None = backend
        self.resources = ResourceMgr(backend=backend)
        # id -> weak reference (or the object itself when it cannot be weakly referenced).
        self._tracked: dict[int, Any] = {}
        self._runs: set[anyio.CancelScope] = set()
        self._states: list[_TrackedState] = []
        self._closed = False
        self._closing = False
        self._entered = False
        self._token: Any = None

    # -- the block -----------------------------------------------------------------------

    async def __aenter__(self) -> Self:
        self._check_open()
        if self._entered:
            raise FailedPreconditionError("this Session is already running a block")
        self._token = context._session.set(self)
        try:
            if self._backend is not None:
                await self._backend.open()
            await self.coord.__aenter__()
        except BaseException:
            context._session.reset(self._token)
            if self._backend is not None:
                with anyio.CancelScope(shield=True):
                    await self._backend.aclose()
            raise
        self._entered = True
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> bool:
        # The body's own error must be the one the coordinator records.
        self.coord.request_stop(exc if isinstance(exc, Exception) else None)
        self._cancel_runs()
        try:
            suppressed = await self.coord.__aexit__(exc_type, exc, tb)
        except BaseException:
            await self._end_block(report=False)
            raise
        # A resource that fails to close is reported only when nothing else propagates.
        await self._end_block(report=bool(suppressed) or exc is None)
        return suppressed

    async def _end_block(self, *, report: bool) -> None:
        self._entered = False
        context._session.reset(self._token)
        self._token = None
        await self._close_resources(report=report)

    def _check_open(self) -> None:
        if self._closed:
            raise FailedPreconditionError(_CLOSED_MESSAGE)

    # -- closing -------------------------------------------------------------------------

    @property
    def closed(self) -> bool:
        """Whether the session was closed."""
        return self._closed

    @property
    def cluster(self) -> SharedCluster | None:
        """The cluster given as ``cluster=``, or ``None``."""
        return self._cluster

    @property
    def rank(self) -> int:
        """This process's rank in the job (0 without a cluster)."""
        return self._rank

    @property
    def world_size(self) -> int:
        """How many ranks the job has (1 without a cluster)."""
        return self._world_size

    async def ack(self, keys: Iterable[bytes]) -> None:
        """Acknowledge that a training step consumed the records ``keys`` (a clustered job).

        In a Session with a ``cluster``, readers lease the work items of shared queues: a
        record is *delivered* once the step that consumed it is acknowledged here, with
        the record keys the readers returned (keep them in the batch, as
        ``batch([key, value])`` does). If this rank dies, the records it read and had not
        acknowledged are read again by another rank; acknowledged ones never are. Each
        call also reports how far this rank's readers got in their work items (one call
        to each shared queue the rank reads from). Call it after each step, before the
        step's effect is saved.

        Args:
            keys: The keys of the records the step consumed (``bytes``, or a numpy array
                of them).

        Raises:
            FailedPreconditionError: the session has no cluster or is closed, or this rank
                was declared dead (its leases went to other ranks: stop the rank).
            InvalidArgumentError: a key is not a record of a work item this rank holds,
                or was acknowledged before; nothing is recorded then.
            DataLossError: a rank died after every reader had ended, and the records it
                had not acknowledged can no longer be read in this epoch (this step is
                recorded; the message names the work items).
        """
        self._check_open()
        if self._backend is None:
            raise FailedPreconditionError("ack() needs a Session with a cluster=")
        await self._backend.ack([bytes(key) for key in keys])

    async def close(self) -> None:
        """Stop the session's tasks and close its resources; a no-op when already closed.

        Requests a stop, cancels calls running through :meth:`run`, waits for the
        coordinator's tasks to end (other than the caller, when a task of the session calls
        it), closes every tracked resource (concurrently: readers stuck in blocked threads
        take half a second together, not each) and clears :attr:`resources`. The waiting and
        closing are shielded, so they finish even if the caller is cancelled meanwhile. The
        coordinator's block itself ends, and reports errors, when the ``async with`` block
        is left.
        """
        if self._closed:
            await anyio.lowlevel.checkpoint()
            return
        self._closed = True
        self.coord.request_stop()
        self._cancel_runs()
        with anyio.CancelScope(shield=True):
            await self.coord._wait_tasks_done()
        await self._close_resources()

    def _cancel_runs(self) -> None:
        for scope in self._runs:
            scope.cancel()

    async def _close_resources(self, *, report: bool = True) -> None:
        if self._closing:
            return
        self._closing = True
        self._closed = True
        closes: list[Callable[[], Awaitable[None]]] = []
        while self._tracked:
            _, held = self._tracked.popitem()
            resource = held() if isinstance(held, weakref.ref) else held
            close = getattr(resource, "_session_close", None)
            if close is not None:
                closes.append(close)
        errors: dict[int, Exception] = {}

        async def close_one(i: int) -> None:
            try:
                await closes[i]()
            except Exception as exc:
                errors[i] = exc

        # Together: a reader whose thread a cancelled read abandoned waits for it a moment
        # before leaving it to close its file, and N such readers must not take N moments.
        with anyio.CancelScope(shield=True):
            async with anyio.create_task_group() as tg:
                for i in range(len(closes)):
                    tg.start_soon(close_one, i)
            if self._backend is not None:
                # After the resources: their closes let go of the shared queues first.
                try:
                    await self._backend.aclose()
                except Exception as exc:
                    errors[len(closes)] = exc
        self.resources.clear()
        if errors and report:
            raise errors[min(errors)]

    # -- resources -----------------------------------------------------------------------

    def _track(self, resource: object) -> None:
        """Take ``resource`` into the session, which closes it when it ends.

        Raises:
            FailedPreconditionError: if the session is closed.
        """
        self._check_open()
        key = id(resource)
        try:
            held: Any = weakref.ref(resource, self._forget(key))
        except TypeError:  # no __weakref__ slot: keep it alive instead
            held = resource
        self._tracked[key] = held
        if isinstance(resource, Checkpointable) and not self._checkpointer.owned():
            cls: Any = type(resource)
            self._checkpointer.register(
                resource._checkpoint_kind, resource, cls._checkpoint_save, cls._checkpoint_restore
            )

    def _forget(self, key: int) -> Callable[[weakref.ref[Any]], None]:
        session = weakref.ref(self)  # the callback must not keep the session alive

        def forget(ref: weakref.ref[Any]) -> None:
            owner = session()
            if owner is not None and owner._tracked.get(key) is ref:
                del owner._tracked[key]

        return forget

    # -- running code --------------------------------------------------------------------

    def start_soon(
        self,
        fn: Callable[[*Ts], Awaitable[Any]],
        *args: *Ts,
        name: str | None = None,
    ) -> None:
        """Start ``fn(*args)`` as a task of the session's coordinator.

        Args:
            fn: An async callable.
            *args: Positional arguments for ``fn``.
            name: The task's name (see :meth:`Coordinator.start_soon`).

        Raises:
            FailedPreconditionError: if the session is closed or its block is not running.
        """
        self._check_open()
        self.coord.start_soon(fn, *args, name=name)

    async def run(self, fn: Callable[[*Ts], Awaitable[T]], *args: *Ts) -> T:
        """Await ``fn(*args)`` in the session, from any task, and return its result.

        The session and its coordinator are current while ``fn`` runs, so resources it
        builds belong to the session. If the session closes meanwhile, the call is
        cancelled.

        Args:
            fn: An async callable.
            *args: Positional arguments for ``fn``.

        Returns:
            What ``fn`` returned.

        Raises:
            FailedPreconditionError: if the session is closed, or closes while the call runs.
            Exception: whatever ``fn`` raises.
        """
        self._check_open()
        session_token = context._session.set(self)
        coord_token = context._coordinator.set(self.coord)
        scope = anyio.CancelScope()
        self._runs.add(scope)
        try:
            with scope:
                return await fn(*args)
        finally:
            self._runs.discard(scope)
            context._coordinator.reset(coord_token)
            context._session.reset(session_token)
        # Only the session cancels this scope, so getting here means it was closed.
        raise FailedPreconditionError("The Session was closed while this call was running.")

    # -- checkpoints ---------------------------------------------------------------------

    @property
    def deterministic(self) -> bool:
        """Whether the session runs pipelines in deterministic mode (see the class)."""
        return self._checkpointer.deterministic

    async def checkpoint(self, *, timeout: float | None = 60.0) -> bytes:  # noqa: ASYNC109
        """Return the state of every pipeline component built in the session, as bytes.

        One call captures a consistent cut: input producers (epoch, position, generator
        state), readers (work counters and the position of the next record, also inside
        compressed files), queues built in the session (their elements and the elements
        of enqueues waiting for room), batchers (their queue, generators and the examples
        in hand) and states added with :meth:`track_state` / :meth:`track_rng`. To get
        it, the runner tasks are paused: each finishes the operation it is in, or stays
        blocked in a queue operation, and goes on when the call returns (usually within
        milliseconds). Batches already handed out count as consumed: call it between
        training steps, and save the model with it.

        Give the bytes to ``Session(restore=...)`` in a new process and build the same
        pipeline in it: each component restores itself as it is built, and the
        remaining stream holds exactly the records the uninterrupted run would have
        delivered (each once); in deterministic mode also in the same order and batches.

        What it cannot see: data your own tasks hold outside queues, readers and runner
        operations. An enqueue op of a :class:`~asyncreader.QueueRunner` should end with
        its one enqueue, as the ops of producers and batchers do.

        In a Session with a ``cluster``, this is the **job checkpoint**, and it is
        collective: every rank of the job calls it at the same step (after acknowledging
        that step with :meth:`ack`), and every rank gets the same bytes (save them from
        one rank); a rank whose acknowledging task waits in a reader for work at the
        epoch's end (or waits for input a background reader waiting for work would
        make) takes part from there, and its own later call for that checkpoint returns
        the same bytes at once. They hold each shared work queue (the items
        not taken yet, and every leased item with its acknowledged keys and last
        reported position) and each rank's states added with :meth:`track_state` /
        :meth:`track_rng`; in a deterministic session also each rank's pipeline (its
        batchers and local queues, paused until the queues' snapshot; reader records as
        references, ``record_refs=``), else what a rank had read and not acknowledged
        is read again after a restore. Give them to ``Session(cluster=...,
        restore=...)`` with any ``world_size``, and fill the work queue with the same
        items as before: the remaining stream holds exactly the records not
        acknowledged at the checkpoint, each once (in another order); with the same
        ``world_size`` each rank's tracked states are restored too, and in a
        deterministic session its pipeline, whose records its leases then skip: each
        rank's stream goes on as the uninterrupted run's, shuffled batches included.
        See the scale-out guide.

        Args:
            timeout: Seconds to wait for the runner tasks to settle (``None``: no limit);
                in a Session with a cluster, for every rank to call it.

        Returns:
            A versioned byte string (no pickle inside), signed when the session has a
            ``checkpoint_key``.

        Raises:
            TimeoutError: a runner task did not settle in time (it is busy in something
                other than a queue operation); the message names it. With a cluster: a
                rank did not call it within ``timeout`` (every rank that did gets this).
            FailedPreconditionError: the session is closed, or a checkpoint is already
                being taken. With a cluster: a rank that had not called it died, a
                shared queue holds elements that are not work items (examples), or a
                shared queue's actor failed.
            InvalidArgumentError: a queue holds elements a checkpoint cannot store (an
                untyped queue's elements must be numbers, strings, bytes, numpy arrays,
                or lists, tuples and dicts of them).
        """
        self._check_open()
        if self._backend is not None:
            part = self._checkpointer.tracked_states()
            tree = await self._backend.job_checkpoint(part, timeout)
            return self._checkpointer.seal(tree)
        return await self._checkpointer.checkpoint(timeout, self._describe_stages)

    def _describe_stages(self) -> str:
        return ", ".join(f"{s.kind} {s.name!r}: {s.state}" for s in self.stage_statistics())

    def track_state(
        self, name: str, save: Callable[[], Any], restore: Callable[[Any], None]
    ) -> None:
        """Include state of your own in the session's checkpoints, under ``name``.

        ``save()`` is called by :meth:`checkpoint` and returns a value made of numbers,
        strings, bytes, numpy arrays, lists, tuples and dicts with string keys. When the
        session was given ``restore=`` bytes holding ``name``, ``restore(value)`` is
        called at once, with the saved value.

        Raises:
            InvalidArgumentError: ``name`` is already tracked, or ``restore`` rejects the
                saved value.
        """
        self._check_open()
        holder = _TrackedState(save, restore)
        self._states.append(holder)
        self._checkpointer.register(
            "state", holder, _TrackedState.save, _TrackedState.restore, key=f"state/{name}"
        )

    def track_rng(self, name: str, rng: np.random.Generator) -> np.random.Generator:
        """Include a numpy ``Generator``'s state in the session's checkpoints; return it.

        Random augmentation drawn from a tracked generator continues, after a restore,
        with the draws the uninterrupted run would have made. Restores the generator at
        once when the session's ``restore=`` bytes hold ``name``.

        Raises:
            InvalidArgumentError: ``name`` is already tracked, ``rng`` is not a numpy
                ``Generator``, or the saved state does not fit its bit generator.
        """
        if not isinstance(rng, np.random.Generator):
            raise InvalidArgumentError(
                f"track_rng needs a numpy.random.Generator, not {type(rng).__name__}"
            )

        def restore(state: Any) -> None:
            try:
                rng.bit_generator.state = state
            except (TypeError, ValueError, KeyError) as exc:
                raise InvalidArgumentError(f"bad generator state for {name!r}: {exc}") from None

        self.track_state(name, lambda: rng.bit_generator.state, restore)
        return rng

    # -- introspection -------------------------------------------------------------------

    def statistics(self) -> SessionStatistics:
        """Return a snapshot of the session's state."""
        alive = sum(
            1
            for held in self._tracked.values()
            if not isinstance(held, weakref.ref) or held() is not None
        )
        return SessionStatistics(
            closed=self._closed,
            resources_tracked=alive,
            calls_running=len(self._runs),
            coordinator=self.coord.statistics(),
        )

    def stage_statistics(self) -> tuple[StageStatistics, ...]:
        """Return, for every stage the session knows, whether tasks are blocked on it.

        Lists the queues and readers built in the session (still alive, in creation order)
        and then every :class:`~asyncreader.QueueRunner` started in its coordinator,
        followed by the runner's queue when the session did not build it. A queue reports
        which side is blocked: consumers on an empty queue (``state == "starved"``: look
        upstream) or producers on a full one (``"full"``: look downstream). A reader
        reports whether its reads wait for work or are reading. See
        :class:`~asyncreader.StageStatistics`.

        Returns:
            One :class:`StageStatistics` per stage.
        """
        resources = [
            held() if isinstance(held, weakref.ref) else held for held in self._tracked.values()
        ]
        runners = list(self.coord._runners.values())
        return tuple(stages.collect([r for r in resources if r is not None], runners))

    async def shared_stage_statistics(self) -> tuple[StageStatistics, ...]:
        """Return the stage statistics of the shared queues this process uses.

        In a Session with a ``cluster=``, one :class:`~asyncreader.StageStatistics` per
        queue built with ``shared_name=`` in it, named ``shared:<shared_name>`` and taken
        from the queue's actor (one call per queue, concurrently): its size, capacity and
        counters are the job's, and its blocked tasks those of every process. Without a
        cluster, an empty tuple. The metrics endpoints add these to
        :meth:`stage_statistics`.

        Raises:
            FailedPreconditionError: a queue's actor is gone or does not answer.
        """
        if self._backend is None:
            return ()
        return tuple(await self._backend.shared_stage_statistics())

    def __repr__(self) -> str:
        state = "closed" if self._closed else ("running" if self._entered else "idle")
        return (
            f"<Session {state} resources={self.statistics().resources_tracked} "
            f"coord={self.coord!r}>"
        )
