"""Pipeline checkpoints: one consistent cut through running stages, as bytes.

A pipeline's data lives in three kinds of places: *components* (producers' epoch and
position, readers' positions in their work items, queues' contents, batchers' queues and
examples in hand), *tasks* in the middle of an operation (a record read but not yet
enqueued), and the consumer. Only the first kind can be saved, so
:meth:`Session.checkpoint <asyncreader.Session.checkpoint>` first brings every stage task
(the tasks of :class:`~asyncreader.QueueRunner`\\ s, which run producers and batchers) to a
point where it holds nothing else:

* *parked* between two operations: at a pause, a runner task finishes the operation it is in
  and waits before the next one;
* or *blocked in a queue operation*: a blocked enqueue's elements are saved with the queue
  (a restored queue inserts them itself, ahead of any new enqueue), a blocked dequeue
  holds nothing (elements a ``dequeue_many`` collected count as stored).

A parked task is let through for one more operation while another stage task waits on its
queue (a reader waiting for a work item needs the producer), so the pause always settles.
Then every component is saved synchronously, in one step of the event loop, and the
tasks go on. Components find their saved state by kind and creation order (the same
pipeline code builds them in the same order), and restore themselves as they are built
inside ``Session(restore=...)``; a queue that saved reader records as references
(``record_refs``) reads them again in a task of the session's coordinator, and holds
every other operation back until they are in.

Deterministic mode (``Session(deterministic=True)``) removes the timing dependence that
makes a restored stream differ from an uninterrupted one: see ``docs/guides/checkpoints.md``.

Checkpoints from outside: a session with a ``checkpoint_key`` signs its checkpoints with
HMAC-SHA256 and restores only checkpoints signed with that key, whose content it then
trusts. Without a key, a restore may only make the pipeline read the work items (paths,
URLs) that the restoring program's own producers were given: a reader's current work
item, the work items in a restored queue of single strings (the shape of a reader's work
queue), and the files of saved record references are checked against them.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import math
import weakref
from contextvars import ContextVar
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Final, Protocol, runtime_checkable

import anyio
import numpy as np

from .._errors import FailedPreconditionError, InvalidArgumentError
from .._messages import short_repr
from . import state_codec

if TYPE_CHECKING:
    from collections.abc import AsyncIterator, Awaitable, Callable, Iterable, Iterator

__all__ = [
    "Attempt",
    "Checkpointable",
    "Checkpointer",
    "RestoredWork",
    "StageTask",
    "as_work_item",
    "check_taken_work",
    "current_stage",
    "decode_trusted",
    "note_payload",
    "outside_stage",
    "owned_resources",
]

#: How often a pause checks whether every stage task settled (seconds).
_POLL: Final = 0.0005
#: What a signed checkpoint starts with; the HMAC-SHA256 tag and the checkpoint follow.
SIGNED_MAGIC: Final = b"ASYNCREADER-SIGNED-CHECKPOINT\n"
_TAG_SIZE: Final = hashlib.sha256().digest_size
#: What a component's restore raises on a tree of the wrong shape, besides our own errors.
_MALFORMED: Final = (TypeError, ValueError, KeyError, IndexError, AttributeError, OverflowError)

_stage: ContextVar[StageTask | None] = ContextVar("asyncreader_stage", default=None)
#: While a rank saves its pipeline for a job checkpoint: the components that saved
#: elements as payloads (see :meth:`Checkpointer.save_pipeline`).
_payloads: ContextVar[list[str] | None] = ContextVar("asyncreader_payloads", default=None)
_owned: ContextVar[bool] = ContextVar("asyncreader_owned_resources", default=False)
#: Queues restored from an unsigned checkpoint holding strings that no producer names:
#: queue -> (its Checkpointer, those strings, where they are, for messages).
_restored_work: weakref.WeakKeyDictionary[object, tuple[Checkpointer, frozenset[bytes], str]]
_restored_work = weakref.WeakKeyDictionary()


@dataclass(frozen=True, slots=True)
class RestoredWork:
    """The work items (paths, URLs) a component's saved state would make readers read.

    Attributes:
        items: The work items.
        when_taken: The strings may be records rather than work items (a restored queue of
            single strings): each is checked only when a reader takes it as its work.
    """

    items: tuple[bytes, ...]
    when_taken: bool = False


@runtime_checkable
class Checkpointable(Protocol):
    """A component that a Session saves in its checkpoints: the queues and readers built
    in it. The runtime knows them only through this protocol.

    ``_checkpoint_kind`` groups components in a checkpoint (``"queue"``, ``"reader"``);
    components of one kind find their saved state by creation order.
    """

    _checkpoint_kind: ClassVar[str]

    def _checkpoint_save(self) -> Any:
        """Return the component's state as a checkpoint tree (numbers, strings, bytes,
        arrays, lists, tuples, dicts with string keys), synchronously."""
        ...

    def _checkpoint_restore(self, tree: Any) -> None:
        """Load a tree from ``_checkpoint_save`` into this new, unused component."""
        ...

    def _checkpoint_work_items(self, tree: Any) -> RestoredWork | None:
        """Return the work items restoring ``tree`` would make readers read, if any;
        ``None`` also for a malformed tree, which the restore itself rejects."""
        ...


class Attempt(Protocol):
    """A blocked queue operation, as a pause sees it: whether it was woken to run."""

    @property
    def woken(self) -> bool:
        """Whether the operation was woken and will go on."""
        ...


def _tag(key: bytes, checkpoint: bytes) -> bytes:
    return hmac.new(key, SIGNED_MAGIC + checkpoint, hashlib.sha256).digest()


def _check_key(key: object) -> bytes | None:
    if key is None:
        return None
    if not isinstance(key, (bytes, bytearray)) or not key:
        raise InvalidArgumentError(
            f"checkpoint_key must be non-empty bytes or None, not {short_repr(key, 40)}"
        )
    return bytes(key)


def _unwrap(data: object, key: bytes | None) -> Any:
    """Return the checkpoint inside ``data``, checking its signature against ``key``.

    Raises:
        InvalidArgumentError: ``data`` is signed and ``key`` is ``None``, or ``key`` is
            given and ``data`` is unsigned or its signature does not match.
    """
    if not isinstance(data, (bytes, bytearray, memoryview)):
        return data  # the codec rejects it by type
    view = memoryview(data).cast("B")
    signed = bytes(view[: len(SIGNED_MAGIC)]) == SIGNED_MAGIC
    if key is None:
        if signed:
            raise InvalidArgumentError(
                "the checkpoint is signed: give its key as Session(checkpoint_key=...) to "
                "restore it"
            )
        return view
    if not signed:
        raise InvalidArgumentError(
            "the checkpoint is not signed, and this Session has a checkpoint_key: it "
            "restores only checkpoints signed with that key"
        )
    start = len(SIGNED_MAGIC) + _TAG_SIZE
    tag, inner = bytes(view[len(SIGNED_MAGIC) : start]), bytes(view[start:])
    if len(tag) != _TAG_SIZE or not hmac.compare_digest(tag, _tag(key, inner)):
        raise InvalidArgumentError(
            "the checkpoint's signature does not match checkpoint_key (signed with another "
            "key, or altered since)"
        )
    return inner


def decode_trusted(data: bytes, key: object) -> Any:
    """Return the tree of checkpoint bytes ``data``, checking its signature against
    ``key`` (a ``checkpoint_key``) as a restore does.

    Raises:
        InvalidArgumentError: the signature does not fit ``key``, or the bytes are not a
            checkpoint.
    """
    return state_codec.decode(_unwrap(data, _check_key(key)))


def as_work_item(element: Any) -> bytes | None:
    """The work item a reader would take from a queue element, if it is one."""
    if isinstance(element, (tuple, list)) and len(element) == 1:
        element = element[0]
    if isinstance(element, np.ndarray) and element.size == 1:
        element = element.reshape(()).item()
    if isinstance(element, str):
        return element.encode("utf-8", "surrogateescape")
    if isinstance(element, bytes):
        return element
    return None


def check_taken_work(queue: object, work: bytes) -> None:
    """Refuse a work item a reader took from ``queue`` if an unsigned restore put it there
    and no input producer of the restoring session was given it.

    Raises:
        InvalidArgumentError: naming the work item.
    """
    restored = _restored_work.get(queue)
    if restored is not None and work in restored[1]:
        checkpointer, _, where = restored
        checkpointer.check_work_items([work], where)


def note_payload(where: str) -> None:
    """A component saves elements as payloads, not as record references (called while
    saving): a rank's part of a job checkpoint cannot then tell which records it holds."""
    seen = _payloads.get()
    if seen is not None:
        seen.append(where)


def current_stage() -> StageTask | None:
    """Return the stage task running in the current context, or ``None``."""
    return _stage.get()


@contextlib.contextmanager
def outside_stage() -> Iterator[None]:
    """Run the block as no stage task: for user code a stage task awaits while the stage
    itself holds everything that code has (a map stage's ``fn``), whose own queue
    operations must not mark the stage task as blocked in them."""
    token = _stage.set(None)
    try:
        yield
    finally:
        _stage.reset(token)


@contextlib.contextmanager
def owned_resources() -> Iterator[None]:
    """Resources built in this block belong to a component that saves them itself
    (a producer's or batcher's queue), so the session does not save them on their own."""
    token = _owned.set(True)
    try:
        yield
    finally:
        _owned.reset(token)


class StageTask:
    """Where one stage task is, as a pause sees it.

    A queue tells the stage task running an operation on it when the operation blocks
    (:meth:`blocked`): a task blocked in a queue holds nothing but its attempt, which the
    queue saves, so a checkpoint may be taken.
    """

    __slots__ = (
        "blocked_on",
        "dequeuing",
        "follows",
        "go",
        "leasing",
        "name",
        "parked",
        "queue",
        "waiter",
    )

    def __init__(self, name: str, queue: object) -> None:
        self.name = name
        self.queue = queue  # the queue it fills, if any
        self.parked = False
        self.go: anyio.Event | None = None
        self.waiter: Attempt | None = None  # the queue attempt it is blocked in
        self.blocked_on: object = None  # the queue it is blocked in
        self.dequeuing = False  # whether that attempt takes elements out
        #: It waits for a shared queue to lease its reader a work item: it holds nothing
        #: (a reader takes its next item only once done with the last one).
        self.leasing = False
        #: Its own operation is done and it waits for a task of its own to end (an enqueue
        #: step for its look-ahead fetch): it holds nothing but what that task holds.
        self.follows: StageTask | None = None

    @contextlib.contextmanager
    def blocked(self, queue: object, attempt: Attempt, *, dequeue: bool) -> Iterator[None]:
        """Mark the task as blocked in ``attempt`` on ``queue`` for the block."""
        self.waiter, self.blocked_on, self.dequeuing = attempt, queue, dequeue
        try:
            yield
        finally:
            self.waiter, self.blocked_on, self.dequeuing = None, None, False

    def settled(self) -> bool:
        """Whether the task holds nothing outside the components right now."""
        if self.leasing:
            return True
        if self.follows is not None:
            return self.follows.settled()
        if self.parked:
            return self.go is None or not self.go.is_set()
        w = self.waiter
        return w is not None and not w.woken

    def waits_for(self, queue: object) -> bool:
        """Whether the task is blocked taking elements out of ``queue``."""
        w = self.waiter
        return self.dequeuing and self.blocked_on is queue and w is not None and not w.woken


class Checkpointer:
    """A Session's checkpoint bookkeeping: components by key, stage tasks, the pause.

    Args:
        restore: Checkpoint bytes to restore components from as they are built.
        deterministic: Whether the session runs in deterministic mode.
        key: The session's ``checkpoint_key``: checkpoints are signed with it, and a
            restore needs a valid signature (and is then trusted).

    Raises:
        InvalidArgumentError: ``restore`` is not a valid checkpoint, or its signature
            does not fit ``key``.
    """

    def __init__(
        self, restore: bytes | None, deterministic: bool, key: bytes | None = None
    ) -> None:
        self.deterministic = bool(deterministic)
        self._key = _check_key(key)
        self._saved: dict[str, Any] = {}
        # An unsigned restore may only read the work items this session's producers name.
        self._vetting = restore is not None and self._key is None
        self._work_items: set[bytes] = set()
        if restore is not None:
            tree = state_codec.decode(_unwrap(restore, self._key))
            if not isinstance(tree, dict) or not isinstance(tree.get("components"), dict):
                raise InvalidArgumentError("checkpoint holds no pipeline components")
            self._saved = tree["components"]
        self._counts: dict[str, int] = {}
        # key -> (weak or strong reference to the component, save function name or callable)
        self._components: dict[str, tuple[Callable[[], Any], Callable[[Any], Any]]] = {}
        self._stages: set[StageTask] = set()
        self.paused = False
        #: Awaited before records saved as references are read again (a job restore
        #: learns the work items they may name from the cluster first).
        self._work_gate: Callable[[], Awaitable[None]] | None = None
        #: The components come from a rank's part of a job checkpoint (see
        #: :meth:`load_components`).
        self.from_job = False
        #: Describes the stages, for the message of a pause that does not settle.
        self.describe: Callable[[], str] = str

    # -- components ----------------------------------------------------------------------

    def register(
        self,
        kind: str,
        obj: object,
        save: Callable[[Any], Any],
        restore: Callable[[Any, Any], None],
        *,
        key: str | None = None,
    ) -> None:
        """Give ``obj`` the next key of ``kind`` (or ``key``) and restore it if saved.

        ``save(obj)`` returns its checkpoint tree; ``restore(obj, tree)`` loads one.
        ``obj`` is held weakly where it can be: a component nobody uses is not saved.

        Raises:
            InvalidArgumentError: the key is taken, or the saved state does not fit.
        """
        if key is None:
            index = self._counts.get(kind, 0)
            self._counts[kind] = index + 1
            key = f"{kind}/{index}"
        elif key in self._components:
            raise InvalidArgumentError(f"checkpoint key {key!r} is already used")
        try:
            ref: Callable[[], Any] = weakref.ref(obj)
        except TypeError:
            ref = lambda: obj  # noqa: E731 - a strong reference in the same shape
        self._components[key] = (ref, save)
        saved = self._saved.pop(key, None)
        if saved is not None:
            try:
                if self._vetting:
                    self._vet(kind, key, obj, saved)
                restore(obj, saved)
            except InvalidArgumentError as exc:
                exc.add_note(f"while restoring {key!r} from the checkpoint")
                raise
            except _MALFORMED as exc:
                raise InvalidArgumentError(
                    f"malformed checkpoint of {key!r}: {type(exc).__name__}: {short_repr(str(exc))}"
                ) from exc

    def load_components(
        self,
        components: dict[str, Any],
        *,
        gate: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        """Restore ``components`` (from a job checkpoint already checked) as the
        components they belong to are built.

        Args:
            components: Saved states by key.
            gate: For a rank's pipeline from a job checkpoint: the work items its
                record references may name are only known once the job's work queue
                has its items again; ``gate()`` waits for them and allows them (see
                :meth:`allow_work_items`), and references are read again after it
                (and, unsigned, checked against them).
        """
        self._saved = dict(components)
        self.from_job = True
        if gate is not None:
            self._work_gate = gate
            self._vetting = self._key is None  # a signed checkpoint is trusted

    @property
    def keyed(self) -> bool:
        """Whether the session signs its checkpoints (and trusts what it restores)."""
        return self._key is not None

    async def work_items_ready(self) -> None:
        """Wait until the work items a restore may read are known (see
        :meth:`load_components`); at once, usually."""
        gate = self._work_gate
        if gate is not None:
            await gate()

    def tracked_states(self) -> dict[str, Any]:
        """Save the states added with ``Session.track_state`` / ``track_rng`` only."""
        states: dict[str, Any] = {}
        for key, (ref, save) in list(self._components.items()):
            obj = ref() if key.startswith("state/") else None
            if obj is not None:
                states[key] = save(obj)
        return states

    def save_pipeline(self, skip: Callable[[str, object], bool]) -> dict[str, Any] | None:
        """Save every component but the tracked states and those ``skip(key, obj)``
        names (a rank's pipeline, for a job checkpoint; synchronous, inside
        :meth:`pause`). ``None`` when a component holds elements saved as payloads or
        examples in a map stage: which records those are cannot be told."""
        seen: list[str] = []
        token = _payloads.set(seen)
        try:
            components: dict[str, Any] = {}
            for key, (ref, save) in list(self._components.items()):
                obj = ref()
                if obj is None or key.startswith("state/") or skip(key, obj):
                    continue
                tree = components[key] = save(obj)
                if key.startswith("map/") and tree.get("calls"):
                    seen.append(key)
        finally:
            _payloads.reset(token)
        return None if seen else components

    def seal(self, tree: Any) -> bytes:
        """Encode ``tree`` as checkpoint bytes, signed when the session has a key."""
        data = state_codec.encode(tree)
        if self._key is None:
            return data
        return b"".join([SIGNED_MAGIC, _tag(self._key, data), data])

    # -- what a restore may read ---------------------------------------------------------

    @property
    def vetting(self) -> bool:
        """Whether this is an unsigned restore, which checks the work items it reads."""
        return self._vetting

    def allow_work_items(self, items: Iterable[object]) -> None:
        """Note the strings a producer of this session was given: work items a restore
        may make readers read."""
        if self._vetting:
            for item in items:
                work = as_work_item(item)
                if work is not None:
                    self._work_items.add(work)

    def check_work_items(self, items: Iterable[bytes], where: str) -> None:
        """Refuse, in an unsigned restore, work items no producer of this session names.

        Raises:
            InvalidArgumentError: naming the first such item and ``where`` it is.
        """
        if not self._vetting:
            return
        allowed = self._work_items
        for item in items:
            if bytes(item) not in allowed:
                raise InvalidArgumentError(
                    f"the checkpoint would make {where} read {short_repr(bytes(item))}, which no "
                    "input producer built so far in this Session was given. An unsigned "
                    "checkpoint may only name the work items of the restoring program's "
                    "producers (build them before the readers and queues they feed); to "
                    "restore pipelines whose work items don't come from a producer, sign "
                    "checkpoints with Session(checkpoint_key=...)"
                )

    def _vet(self, kind: str, key: str, obj: object, saved: Any) -> None:
        """Check the work items a component's saved state would make readers read."""
        if not isinstance(obj, Checkpointable):
            return
        claim = obj._checkpoint_work_items(saved)
        if claim is None:
            return
        if not claim.when_taken:
            self.check_work_items(claim.items, f"{kind} {key!r}")
            return
        restored = set(claim.items) - self._work_items
        if restored:
            # Strings that may be records rather than work items are checked when a reader
            # takes one as its work (see check_taken_work).
            _restored_work[obj] = (self, frozenset(restored), f"a reader, from {kind} {key!r},")

    def owned(self) -> bool:
        """Whether resources built now belong to a component (see :func:`owned_resources`)."""
        return _owned.get()

    # -- stage tasks ---------------------------------------------------------------------

    @contextlib.contextmanager
    def stage(
        self, name: str, queue: Any = None, *, task: StageTask | None = None
    ) -> Iterator[StageTask]:
        """Run the block as a stage task (that fills ``queue``); ``task``: made before,
        by the stage task that waits for this one (see :attr:`StageTask.follows`)."""
        if task is None:
            task = StageTask(name, queue)
        self._stages.add(task)
        token = _stage.set(task)
        try:
            yield task
        finally:
            _stage.reset(token)
            self._stages.discard(task)

    async def park(self, task: StageTask) -> None:
        """Wait, between two operations, until the pause ends or lets ``task`` through."""
        go = task.go = anyio.Event()
        task.parked = True
        try:
            await go.wait()
        finally:
            task.parked = False
            task.go = None

    # -- the pause -----------------------------------------------------------------------

    async def checkpoint(self, timeout: float | None, describe: Callable[[], str]) -> bytes:  # noqa: ASYNC109
        """Pause the stage tasks, save every component, resume; return the bytes.

        Raises:
            FailedPreconditionError: another checkpoint is being taken.
            TimeoutError: the stage tasks did not settle within ``timeout`` seconds.
        """
        async with self.pause(timeout, describe):
            tree = self._save_all()
        return self.seal(tree)

    @contextlib.asynccontextmanager
    async def pause(
        self,
        timeout: float | None,  # noqa: ASYNC109
        describe: Callable[[], str] | None = None,
    ) -> AsyncIterator[None]:
        """Pause the stage tasks until every one is settled; they stay paused for the
        block (whatever they hold then is in the components), and go on after it.

        Raises:
            FailedPreconditionError: another checkpoint is being taken.
            TimeoutError: the stage tasks did not settle within ``timeout`` seconds.
        """
        if self.paused:
            raise FailedPreconditionError("a checkpoint is already being taken")
        self.paused = True
        try:
            deadline = math.inf if timeout is None else anyio.current_time() + timeout
            while True:
                busy = [t for t in self._stages if not t.settled()]
                if not busy:
                    break
                for t in self._stages:
                    if t.parked and t.go is not None and not t.go.is_set() and self._needed(t):
                        t.go.set()  # one more operation, for the stage waiting on it
                if anyio.current_time() >= deadline:
                    names = ", ".join(sorted(t.name for t in busy))
                    stages = (describe or self.describe)()
                    raise TimeoutError(
                        f"checkpoint: stage tasks did not settle within {timeout} s "
                        f"(busy: {names}); stages: {stages}"
                    )
                await anyio.sleep(_POLL)
            yield
        finally:
            self.paused = False
            for t in self._stages:
                if t.go is not None:
                    t.go.set()

    def _needed(self, task: StageTask) -> bool:
        """Whether another stage task is blocked waiting for ``task``'s queue."""
        queue = task.queue
        return queue is not None and any(t.waits_for(queue) for t in self._stages)

    def _save_all(self) -> dict[str, Any]:
        components: dict[str, Any] = {}
        for key, (ref, save) in list(self._components.items()):
            obj = ref()
            if obj is None:
                del self._components[key]
                continue
            components[key] = save(obj)
        return {"deterministic": self.deterministic, "components": components}
