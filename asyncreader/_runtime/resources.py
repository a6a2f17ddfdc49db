"""Named shared resources: :class:`ResourceMgr` and the ``shared_name`` machinery.

A resource manager maps a *container* name to a container, and a container maps a
*(kind, name)* pair to a resource, as TensorFlow's ``ResourceMgr`` does. Queues and readers
are resources: constructed with ``shared_name=``, they are looked up in (or added to) the
current :class:`~asyncreader.Session`'s manager, so two parts of a program that build
``FIFOQueue(32, shared_name="work")`` get the *same* queue. A second construction must ask for
the same configuration; a mismatch raises :class:`~asyncreader.InvalidArgumentError`.

Every queue and reader constructed while a Session is current is also tracked by that
Session, which closes it when the Session ends.
"""

from __future__ import annotations

import re
import threading
from abc import ABCMeta
from typing import TYPE_CHECKING, Any, ClassVar, Protocol, TypeVar

from .._errors import (
    AlreadyExistsError,
    InvalidArgumentError,
    NotFoundError,
)
from . import context

if TYPE_CHECKING:
    from collections.abc import Callable, Mapping

    from .checkpoint import Checkpointer
    from .stages import StageStatistics

__all__ = [
    "DEFAULT_CONTAINER",
    "ResourceMgr",
    "SharedBackend",
    "SharedCluster",
    "SharedResource",
    "SharedResourceMeta",
    "check_shared_config",
]

T = TypeVar("T")

#: The container used when none is named (TensorFlow's default for a local session).
DEFAULT_CONTAINER = "localhost"

_CONTAINER_RE = re.compile(r"^[A-Za-z0-9.][A-Za-z0-9.\-/]*$")

#: The kind a plain object registered through :meth:`ResourceMgr.create` is filed under.
_ANY_KIND = "resource"


def _validate_container(container: str | None) -> str:
    if not container:
        return DEFAULT_CONTAINER
    if not _CONTAINER_RE.match(container):
        raise InvalidArgumentError(f"container contains invalid characters: {container}")
    return container


def _validate_shared_name(name: str) -> str:
    if name.startswith("_"):
        raise InvalidArgumentError(f"shared_name cannot start with '_':{name}")
    return name


def _kind_of(resource: object) -> str:
    kind = getattr(resource, "_resource_kind", None)
    return kind if isinstance(kind, str) else _ANY_KIND


class SharedBackend(Protocol):
    """Where a :class:`ResourceMgr` files the shared resources that live outside the process.

    A Session with a cluster gives its manager one (the higher ``_distributed`` layer
    implements it): resources of the kinds it :meth:`shares` are then looked up in, or
    created in, the cluster instead of the manager's own containers.
    """

    def shares(self, cls: type) -> bool:
        """Whether resources of class ``cls`` built with a ``shared_name`` live in the backend."""
        ...

    def lookup_or_create(
        self,
        cls: type,
        container: str,
        name: str,
        kind: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> object:
        """Return the resource ``cls(*args, **kwargs)`` shared as ``container/kind/name``.

        Created once for every process that names it; a second construction asking for
        another type or configuration raises :class:`~asyncreader.InvalidArgumentError`.
        """
        ...

    async def open(self) -> None:
        """Connect (the Session's block starts)."""
        ...

    async def aclose(self) -> None:
        """Let go of every resource this backend handed out (the Session ends)."""
        ...

    async def ack(self, keys: list[bytes]) -> None:
        """Acknowledge the records ``keys`` as consumed (``Session.ack``)."""
        ...

    async def shared_stage_statistics(self) -> list[StageStatistics]:
        """The shared queues' stage statistics (``Session.shared_stage_statistics``)."""
        ...

    def load_job(self, tree: Any) -> None:
        """Keep the shared queues' parts of a decoded job checkpoint, to restore them as
        they are looked up; when the job had as many ranks, give this rank's part to the
        part source (see :meth:`part_source`) to restore as its components are built.

        Raises:
            InvalidArgumentError: ``tree`` is not a job checkpoint, or is malformed.
        """
        ...

    async def job_checkpoint(self, part: dict[str, Any], timeout: float | None) -> Any:  # noqa: ASYNC109
        """Take the job's checkpoint with every other rank; return its tree (collective)."""
        ...

    def part_source(self, source: Checkpointer) -> None:
        """``source`` is the session's checkpoint bookkeeping: this rank's part of a job
        checkpoint (its tracked states and, in a deterministic job, its pipeline) is
        saved from it, and restored into it (also for a checkpoint the rank takes part
        in while its reader waits for work)."""
        ...


class SharedCluster(Protocol):
    """What a Session needs of its ``cluster=``: a backend for one rank's session."""

    def _session_backend(
        self, rank: int, world_size: int, *, deterministic: bool = False
    ) -> SharedBackend:
        """Return a new backend for the session of ``rank`` in a job of ``world_size`` ranks
        (``deterministic``: the session's mode, which every rank of the job shares)."""
        ...


class ResourceMgr:
    """Containers of named, shared resources.

    Resources are filed under ``(container, kind, name)``: queues and readers are different
    kinds, so a queue and a reader may share a name, while a FIFOQueue and a
    RandomShuffleQueue may not. Plain objects are filed under one generic kind. All methods
    are thread-safe and never block.

    Args:
        default_container: The container used when a method is given ``None`` or ``""``.
        backend: Where resources built with ``shared_name=`` of the kinds it shares live
            (a cluster: see ``asyncreader.RayCluster``); ``None`` keeps them in this
            manager.
    """

    def __init__(
        self, default_container: str = DEFAULT_CONTAINER, *, backend: SharedBackend | None = None
    ) -> None:
        self.default_container = _validate_container(default_container)
        self.backend = backend
        self._containers: dict[str, dict[tuple[str, str], object]] = {}
        self._lock = threading.RLock()
        self._creating = False

    def _container_name(self, container: str | None, *, creating: bool = False) -> str:
        # As in TensorFlow, only creating a container checks its name: looking up or
        # deleting in a container that cannot exist is simply "not found".
        if not container:
            return self.default_container
        return _validate_container(container) if creating else container

    def create(
        self, container: str | None, name: str, resource: object, *, kind: str | None = None
    ) -> None:
        """Add ``resource`` as ``name`` in ``container``, creating the container on demand.

        Raises:
            InvalidArgumentError: if ``container`` is not a valid container name (a letter,
                digit or ``.``, then letters, digits, ``-``, ``.`` or ``/``).
            AlreadyExistsError: if the container already holds a resource of that kind
                under that name.
        """
        cname = self._container_name(container, creating=True)
        key = (kind or _kind_of(resource), name)
        with self._lock:
            entries = self._containers.setdefault(cname, {})
            if key in entries:
                raise AlreadyExistsError(f"Resource {cname}/{name}/{key[0]}")
            entries[key] = resource

    def lookup(self, container: str | None, name: str, *, kind: str | None = None) -> Any:
        """Return the resource called ``name`` in ``container``.

        Args:
            kind: Restrict the lookup to one kind (``"queue"``, ``"reader"``); by default any
                kind matches, the generic kind first.

        Raises:
            NotFoundError: if the container or the resource does not exist (whatever the
                container's name: only creation checks it).
        """
        cname = self._container_name(container)
        with self._lock:
            entries = self._containers.get(cname)
            if entries is None:
                raise NotFoundError(
                    f"Container {cname} does not exist. (Could not find resource: {cname}/{name})"
                )
            found = self._find(entries, name, kind)
            if found is None:
                raise NotFoundError(f"Resource {cname}/{name}/{kind or _ANY_KIND} does not exist.")
            return found[1]

    @staticmethod
    def _find(
        entries: Mapping[tuple[str, str], object], name: str, kind: str | None
    ) -> tuple[tuple[str, str], object] | None:
        if kind is not None:
            key = (kind, name)
            return (key, entries[key]) if key in entries else None
        if (_ANY_KIND, name) in entries:
            return (_ANY_KIND, name), entries[(_ANY_KIND, name)]
        for key, value in entries.items():
            if key[1] == name:
                return key, value
        return None

    def lookup_or_create(
        self,
        container: str | None,
        name: str,
        factory: Callable[[], T],
        *,
        kind: str | None = None,
    ) -> T:
        """Return the resource called ``name``, creating it with ``factory()`` if absent.

        Atomic: ``factory`` runs under the manager's lock, so concurrent callers get one
        resource. ``factory`` must not call back into this manager.

        Raises:
            InvalidArgumentError: if ``factory`` calls back into this manager, or
                ``container`` is not a valid container name.
            Exception: whatever ``factory`` raises; nothing is added then.
        """
        cname = self._container_name(container, creating=True)
        with self._lock:
            if self._creating:
                raise InvalidArgumentError(
                    "a lookup_or_create factory must not call back into its ResourceMgr"
                )
            entries = self._containers.setdefault(cname, {})
            found = self._find(entries, name, kind)
            if found is not None:
                return found[1]  # type: ignore[return-value]
            self._creating = True
            try:
                resource = factory()
            finally:
                self._creating = False
            entries[(kind or _kind_of(resource), name)] = resource
            return resource

    def delete(self, container: str | None, name: str, *, kind: str | None = None) -> None:
        """Remove ``name`` from ``container``; holders of the object keep a live object.

        Raises:
            NotFoundError: if the container or the resource does not exist (whatever the
                container's name: only creation checks it).
        """
        cname = self._container_name(container)
        with self._lock:
            entries = self._containers.get(cname)
            if entries is None:
                raise NotFoundError(f"Container {cname} does not exist.")
            found = self._find(entries, name, kind)
            if found is None:
                raise NotFoundError(f"Resource {cname}/{name}/{kind or _ANY_KIND} does not exist.")
            del entries[found[0]]

    def cleanup(self, container: str | None) -> None:
        """Drop a whole container. A missing container is not an error."""
        cname = self._container_name(container)
        with self._lock:
            self._containers.pop(cname, None)

    def clear(self) -> None:
        """Drop every container."""
        with self._lock:
            self._containers.clear()

    def containers(self) -> list[str]:
        """Return the names of the existing containers, sorted."""
        with self._lock:
            return sorted(self._containers)

    def names(self, container: str | None = None) -> list[tuple[str, str]]:
        """Return the ``(kind, name)`` pairs in ``container``, sorted."""
        cname = self._container_name(container)
        with self._lock:
            return sorted(self._containers.get(cname, {}))

    def __repr__(self) -> str:
        with self._lock:
            sizes = {c: len(e) for c, e in self._containers.items()}
        return f"<ResourceMgr containers={sizes}>"


#: Resources whose ``shared_name`` is used outside any Session share this manager.
_process_resources = ResourceMgr()


def current_resources() -> ResourceMgr:
    """Return the current Session's ResourceMgr, or the process-wide one outside Sessions."""
    session = context.current_session()
    return session.resources if session is not None else _process_resources


class SharedResourceMeta(ABCMeta):
    """Metaclass that gives constructors ``shared_name=`` and ``container=`` keywords.

    With a ``shared_name``, construction returns the existing resource of that name in the
    current Session's manager (after checking the requested configuration matches) or
    creates and registers a new one. Every construction inside a Session is tracked by it.
    """

    def __call__(
        cls, *args: Any, shared_name: str | None = None, container: str | None = None, **kwargs: Any
    ) -> Any:
        cname = _validate_container(container)
        if not shared_name:
            obj = super().__call__(*args, **kwargs)
            context.track(obj)
            return obj
        _validate_shared_name(shared_name)
        kind: str = cls._resource_kind  # type: ignore[attr-defined]
        backend = current_resources().backend
        if backend is not None and backend.shares(cls):
            shared = backend.lookup_or_create(cls, cname, shared_name, kind, args, kwargs)
            context.track(shared)
            return shared
        created = False

        def factory() -> object:
            nonlocal created
            created = True
            made = ABCMeta.__call__(cls, *args, **kwargs)
            made._shared_name = shared_name
            made._container = cname
            context.track(made)
            return made

        existing = current_resources().lookup_or_create(cname, shared_name, factory, kind=kind)
        if created:
            return existing
        candidate = ABCMeta.__call__(cls, *args, **kwargs)
        try:
            _check_compatible(kind, shared_name, existing, candidate)
        finally:
            candidate._discard()
        return existing


def _check_compatible(kind: str, name: str, existing: Any, candidate: Any) -> None:
    check_shared_config(
        kind,
        name,
        (type(existing).__name__, existing._shared_config()),
        (type(candidate).__name__, candidate._shared_config()),
    )


def check_shared_config(
    kind: str,
    name: str,
    have: tuple[str, Mapping[str, object]],
    want: tuple[str, Mapping[str, object]],
) -> None:
    """Raise unless a shared resource's ``(type name, configuration)`` is the one asked for.

    Raises:
        InvalidArgumentError: naming the resource and the first difference.
    """
    if have[0] != want[0]:
        raise InvalidArgumentError(f"Shared {kind} '{name}': expected {want[0]}, found {have[0]}")
    config, asked = have[1], want[1]
    for key in sorted(set(config) | set(asked)):
        if not _same(config.get(key), asked.get(key)):
            raise InvalidArgumentError(
                f"Shared {kind} '{name}' has {key} {config.get(key)!r} "
                f"but requested {key} was {asked.get(key)!r}"
            )


def _same(a: object, b: object) -> bool:
    try:
        return bool(a == b)
    except (ValueError, TypeError):  # numpy arrays compare elementwise
        return repr(a) == repr(b)


class SharedResource(metaclass=SharedResourceMeta):
    """Base of queues and readers: things a Session owns and ``shared_name`` can share.

    Subclasses set :attr:`_resource_kind`, describe their configuration in
    :meth:`_shared_config` and release what they hold in :meth:`_session_close`.
    """

    #: The kind this resource is filed under in a ResourceMgr.
    _resource_kind: ClassVar[str] = _ANY_KIND
    _shared_name: str | None = None
    _container: str = DEFAULT_CONTAINER

    @property
    def shared_name(self) -> str | None:
        """The name this resource is shared under, or ``None`` when it is private."""
        return self._shared_name

    @property
    def container(self) -> str:
        """The container this resource is (or would be) shared in."""
        return self._container

    def _shared_config(self) -> dict[str, object]:
        """Return what a second constructor call must match to share this resource."""
        return {}

    def _discard(self) -> None:
        """Forget a never-used instance built only to compare configurations."""

    async def _session_close(self) -> None:
        """Release this resource when the owning Session ends."""
