"""RayCluster: where the shared queues of a job live, and how a process joins it."""

from __future__ import annotations

import importlib
import socket
import threading
import time
from typing import TYPE_CHECKING, Any

import anyio
import anyio.to_thread

from .._errors import FailedPreconditionError, InvalidArgumentError, NotFoundError

if TYPE_CHECKING:
    from types import ModuleType

    from .remote_queue import RayBackend

__all__ = ["RayCluster", "import_ray", "kill_actors"]

_INSTALL_HINT = 'pip install "asyncreader[ray]"'

#: Named actors of the job are prefixed with this inside the job's namespace.
ACTOR_PREFIX = "asyncreader:"
JOB_ACTOR = ACTOR_PREFIX + "job"

_init_lock = threading.Lock()

#: Seconds to wait for the name of an actor being destroyed to go (see :func:`kill_actors`).
DYING_GRACE = 10.0


def import_ray() -> ModuleType:
    """Return the ``ray`` module.

    Raises:
        FailedPreconditionError: Ray is not installed; the message says how to install it.
    """
    try:
        return importlib.import_module("ray")
    except ImportError as exc:
        raise FailedPreconditionError(
            f"asyncreader's cluster support needs Ray: {_INSTALL_HINT} ({exc})"
        ) from None


class RayCluster:
    """A Ray cluster and a namespace in it: where a job's shared queues live.

    Give it to :class:`~asyncreader.Session` as ``cluster=``: inside such a session, a
    queue built with ``shared_name=`` is one queue for every process of the job that
    names it (TensorFlow's queues on a parameter server, found through ``shared_name``).
    Constructing a ``RayCluster`` only checks its arguments and that Ray is installed;
    the first session that uses it connects.

    Args:
        address: ``None`` joins the Ray already initialised in this process, or starts a
            local one; ``"auto"`` joins the cluster started on this machine with
            ``ray start``; ``"host:port"`` joins the cluster whose head (GCS) listens
            there, after a plain TCP connection check so that a wrong address fails
            within ``connect_timeout`` instead of Ray's own retry loop.
        namespace: The Ray namespace of the job: the shared queues' actors are named in
            it, so two jobs with different namespaces never share a queue.
        connect_timeout: Seconds the address check may take; also the bound on joining
            the job and on looking up or creating a shared queue (creating one starts a
            Ray worker process for its actor: seconds on a busy machine).
        health_interval: Seconds a call to a shared queue waits before it checks that the
            queue's actor still answers (a check that takes as long again fails the call);
            a blocked ``dequeue`` waits as long as it must, checking at this interval.
        lease_timeout: Seconds a rank that leases work items from a shared queue may be
            silent (its process stopped or cut off) before it is declared dead: its
            leases then go to other ranks and its later calls are refused. A rank whose
            process ends is noticed within milliseconds, whatever this is.

    Raises:
        FailedPreconditionError: Ray is not installed (the message names
            ``pip install "asyncreader[ray]"``).
        InvalidArgumentError: ``namespace`` is empty or not a string, or a timeout is not
            positive.
    """

    __module__ = "asyncreader"

    def __init__(
        self,
        address: str | None = None,
        namespace: str = "asyncreader",
        *,
        connect_timeout: float = 30.0,
        health_interval: float = 5.0,
        lease_timeout: float = 60.0,
    ) -> None:
        if not isinstance(namespace, str) or not namespace:
            raise InvalidArgumentError(f"namespace must be a non-empty str, got {namespace!r}")
        if address is not None and (not isinstance(address, str) or not address):
            raise InvalidArgumentError(f"address must be a non-empty str or None, got {address!r}")
        for what, value in (
            ("connect_timeout", connect_timeout),
            ("health_interval", health_interval),
            ("lease_timeout", lease_timeout),
        ):
            if not isinstance(value, int | float) or not value > 0:
                raise InvalidArgumentError(f"{what} must be a positive number, got {value!r}")
        self._ray = import_ray()
        self.address = address
        self.namespace = namespace
        self.connect_timeout = float(connect_timeout)
        self.health_interval = float(health_interval)
        self.lease_timeout = float(lease_timeout)

    def __repr__(self) -> str:
        return f"<RayCluster address={self.address!r} namespace={self.namespace!r}>"

    # -- connecting ------------------------------------------------------------------------

    async def connect(self) -> None:
        """Join the cluster, unless this process already runs Ray; idempotent.

        Ray must be initialised on the thread that will shut it down, so ``ray.init``
        runs on the event loop's thread and blocks it while it connects (about a second
        to join a cluster, a few seconds to start a local one). The address check before
        it runs in a worker thread.

        Raises:
            NotFoundError: nothing accepts connections at ``address`` within
                ``connect_timeout``.
        """
        ray = self._ray
        if ray.is_initialized():
            return
        if self.address is not None and self.address != "auto":
            await anyio.to_thread.run_sync(self._check_address)
        with _init_lock:
            if not ray.is_initialized():
                ray.init(
                    address=self.address,
                    namespace=self.namespace,
                    log_to_driver=False,
                    configure_logging=False,
                    include_dashboard=False if self.address is None else None,
                )

    def _check_address(self) -> None:
        assert self.address is not None
        host, sep, port = self.address.rpartition(":")
        if not sep or not port.isdigit():
            raise InvalidArgumentError(
                f"a Ray address is None, 'auto' or 'host:port', got {self.address!r}"
            )
        try:
            with socket.create_connection((host, int(port)), timeout=self.connect_timeout):
                pass
        except OSError as exc:
            raise NotFoundError(
                f"no Ray cluster answers at {self.address} (within "
                f"{self.connect_timeout:g} s): {exc}"
            ) from None

    def _session_backend(
        self, rank: int, world_size: int, *, deterministic: bool = False
    ) -> RayBackend:
        from .remote_queue import RayBackend

        return RayBackend(self, rank, world_size, deterministic=deterministic)

    # -- the job ---------------------------------------------------------------------------

    async def delete_job(self) -> list[str]:
        """Kill every actor of the job in this namespace: its shared queues and its registry.

        Sessions do this by themselves when the last of the job's ranks ends, and the
        job does when the last rank inside dies (of the ranks that read from a shared
        queue, whose deaths it sees); call it to clean up after other ranks that died,
        or to end a job at once. Pending calls of other processes on those queues
        fail with :class:`~asyncreader.FailedPreconditionError`.

        Returns:
            The names of the actors killed.
        """
        await self.connect()
        return await anyio.to_thread.run_sync(self._delete_job)

    def _delete_job(self) -> list[str]:
        names = [
            entry["name"]
            for entry in self._ray.util.list_named_actors(all_namespaces=True)
            if entry["namespace"] == self.namespace and entry["name"].startswith(ACTOR_PREFIX)
        ]
        return kill_actors(self._ray, self.namespace, sorted(names, key=lambda n: n == JOB_ACTOR))


def kill_actors(ray: Any, namespace: str, names: list[str]) -> list[str]:
    """Kill the named actors ``names`` of ``namespace``, in order; returns those killed.

    An actor already gone is skipped. So is one being destroyed meanwhile (by the job's
    last rank out, or another process cleaning up): Ray still finds it by name for a
    moment after its class was dropped with its job's exported functions, and then fails
    to make a handle of it (an ``AssertionError`` inside Ray). Its name is waited for to
    go, up to :data:`DYING_GRACE` seconds.

    Raises:
        FailedPreconditionError: an actor can neither be reached nor is it gone.
    """
    killed: list[str] = []
    for name in names:
        deadline = time.monotonic() + DYING_GRACE
        while True:
            try:
                handle = ray.get_actor(name, namespace=namespace)
            except ValueError:  # already gone
                break
            except AssertionError as exc:  # being destroyed: its class is gone already
                if time.monotonic() > deadline:
                    raise FailedPreconditionError(
                        f"the actor {name!r} of the namespace {namespace!r} can neither be "
                        f"reached nor is it gone after {DYING_GRACE:g} s: {exc}"
                    ) from None
                time.sleep(0.05)
                continue
            ray.kill(handle, no_restart=True)
            killed.append(name)
            break
    return killed
