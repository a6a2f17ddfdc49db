"""RayCluster and the Session's cluster arguments, mostly without a running cluster.

Importing asyncreader never imports Ray; without Ray, RayCluster says how to install it;
rank and world_size come from the arguments or the RANK / WORLD_SIZE environment; a
Session with a cluster routes ``shared_name`` queues (and only those) to the cluster's
backend, through the ResourceMgr's backend protocol.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from typing import Any

import pytest

import asyncreader as ar

pytestmark = pytest.mark.anyio


def test_importing_asyncreader_does_not_import_ray() -> None:
    code = "import sys, asyncreader; print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "False"


def test_without_ray_the_error_says_how_to_install_it(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # makes "import ray" fail
    with pytest.raises(ar.FailedPreconditionError, match=r'pip install "asyncreader\[ray\]"'):
        ar.RayCluster(namespace="job")


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"namespace": ""}, "namespace"),
        ({"address": ""}, "address"),
        ({"connect_timeout": 0}, "connect_timeout"),
        ({"health_interval": -1.0}, "health_interval"),
    ],
)
def test_bad_cluster_arguments(kwargs: dict[str, Any], match: str) -> None:
    pytest.importorskip("ray")
    with pytest.raises(ar.InvalidArgumentError, match=match):
        ar.RayCluster(**kwargs)


def test_an_address_where_nothing_listens_fails_fast() -> None:
    pytest.importorskip("ray")
    code = textwrap.dedent(
        """
        import time, anyio, asyncreader as ar
        async def main():
            cluster = ar.RayCluster("127.0.0.1:1", "job", connect_timeout=2)
            t0 = time.monotonic()
            try:
                async with ar.Session(cluster=cluster):
                    pass
            except ar.NotFoundError as exc:
                print(type(exc).__name__, round(time.monotonic() - t0), exc)
        anyio.run(main)
        """
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert out.stdout.startswith("NotFoundError 0 no Ray cluster answers at 127.0.0.1:1"), out


class FakeBackend:
    """A SharedBackend that hands out a marker object for every shared queue."""

    def __init__(self) -> None:
        self.made: list[tuple[str, str, str, str]] = []
        self.events: list[str] = []

    def shares(self, cls: type) -> bool:
        return issubclass(cls, ar.FIFOQueue)

    def lookup_or_create(
        self,
        cls: type,
        container: str,
        name: str,
        kind: str,
        args: tuple[Any, ...],
        kwargs: dict[str, Any],
    ) -> object:
        self.made.append((cls.__name__, container, name, kind))
        return ("remote", name, args)

    async def open(self) -> None:
        self.events.append("open")

    async def aclose(self) -> None:
        self.events.append("close")

    async def ack(self, keys: list[bytes]) -> None:
        self.events.append(f"ack {keys}")

    async def shared_stage_statistics(self) -> list[Any]:
        return []

    def load_job(self, tree: Any) -> None:
        self.events.append("load_job")

    async def job_checkpoint(self, part: dict[str, Any], timeout: float | None) -> Any:  # noqa: ASYNC109
        self.events.append("job_checkpoint")
        return {"format": "fake", "part": part}

    def part_source(self, source: Any) -> None:
        pass


class FakeCluster:
    def __init__(self) -> None:
        self.backends: list[tuple[int, int, FakeBackend]] = []

    def _session_backend(
        self, rank: int, world_size: int, *, deterministic: bool = False
    ) -> FakeBackend:
        backend = FakeBackend()
        self.backends.append((rank, world_size, backend))
        return backend


async def test_a_clustered_session_routes_shared_queues_to_its_backend() -> None:
    cluster = FakeCluster()
    async with ar.Session(cluster=cluster, rank=1, world_size=2) as sess:
        assert (sess.rank, sess.world_size, sess.cluster) == (1, 2, cluster)
        [(_, _, backend)] = cluster.backends
        assert backend.events == ["open"]
        shared: Any = ar.FIFOQueue(4, shared_name="work", container="job")
        assert shared == ("remote", "work", (4,))
        local = ar.FIFOQueue(4)  # no shared_name: a queue of this process
        assert isinstance(local, ar.FIFOQueue)
        shuffle = ar.RandomShuffleQueue(4, 0, shared_name="ex")  # not shared by this backend
        assert isinstance(shuffle, ar.RandomShuffleQueue)
        assert backend.made == [("FIFOQueue", "job", "work", "queue")]
    assert backend.events == ["open", "close"]


async def test_rank_and_world_size_from_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RANK", "2")
    monkeypatch.setenv("WORLD_SIZE", "4")
    sess = ar.Session(cluster=FakeCluster())
    assert (sess.rank, sess.world_size) == (2, 4)
    assert (ar.Session(cluster=FakeCluster(), rank=0).rank, sess.world_size) == (0, 4)
    plain = ar.Session()  # without a cluster the environment is not read
    assert (plain.rank, plain.world_size, plain.cluster) == (0, 1, None)
    monkeypatch.delenv("RANK")
    monkeypatch.delenv("WORLD_SIZE")
    assert (
        ar.Session(cluster=FakeCluster()).rank,
        ar.Session(cluster=FakeCluster()).world_size,
    ) == (0, 1)


@pytest.mark.parametrize(
    ("env", "kwargs", "match"),
    [
        ({"RANK": "one"}, {}, "RANK environment variable must be an integer"),
        ({"WORLD_SIZE": "2.5"}, {}, "WORLD_SIZE environment variable"),
        ({}, {"rank": 3, "world_size": 3}, r"rank must be an int in \[0, 3\)"),
        ({}, {"rank": -1, "world_size": 3}, "rank must be"),
        ({}, {"world_size": 0}, "world_size must be a positive int"),
        ({"WORLD_SIZE": "2"}, {"rank": 2}, r"\[0, 2\)"),
    ],
)
def test_bad_ranks(
    monkeypatch: pytest.MonkeyPatch, env: dict[str, str], kwargs: dict[str, Any], match: str
) -> None:
    for name in ("RANK", "WORLD_SIZE"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    with pytest.raises(ar.InvalidArgumentError, match=match):
        ar.Session(cluster=FakeCluster(), **kwargs)


def test_rank_without_a_cluster_is_an_error() -> None:
    with pytest.raises(ar.InvalidArgumentError, match="need a cluster"):
        ar.Session(rank=0)
    with pytest.raises(ar.InvalidArgumentError, match="need a cluster"):
        ar.Session(world_size=2)


async def test_a_producer_with_shared_name_in_a_clustered_session_is_refused() -> None:
    # Every rank would run its own producer into the one shared queue: each item N times.
    async with ar.Session(cluster=FakeCluster(), rank=0, world_size=2):
        with pytest.raises(ar.FailedPreconditionError, match=r"shared_name='files'.*cluster"):
            ar.string_input_producer(["a", "b"], shared_name="files")
        with pytest.raises(ar.FailedPreconditionError, match="range_input_producer"):
            ar.range_input_producer(4, shared_name="ids")
        files = ar.string_input_producer(["a", "b"], num_epochs=1, shuffle=False)
        assert [await files.dequeue(), await files.dequeue()] == ["a", "b"]


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_a_wakeup_after_the_run_ended_is_ignored(backend: str) -> None:
    # Ray completes a ref's future from its own thread, possibly after the waiting run
    # ended (the wait was cancelled and the program went on): the callback must not raise.
    import anyio

    from asyncreader._distributed.awaiting import _waker

    wakers = []

    async def main() -> None:
        wakers.append(_waker(anyio.Event()))

    anyio.run(main, backend=backend)
    wakers[0](None)  # the loop is closed / the trio run has finished


class _DyingActors:
    """A stand-in for the ``ray`` module: actors found by name, some of them being destroyed
    (Ray fails to make their handles for a while, then no longer finds them)."""

    def __init__(self, alive: list[str], dying: dict[str, int]) -> None:
        self.alive = alive
        self.dying = dying  # name: lookups that fail as Ray does before the name goes
        self.killed: list[str] = []

    def get_actor(self, name: str, namespace: str) -> str:
        assert namespace == "job"
        if self.dying.get(name, 0) > 0:
            self.dying[name] -= 1
            raise AssertionError("Expected str or bytes, got <class 'NoneType'>")
        if name not in self.alive:
            raise ValueError(f"Failed to look up actor with name {name!r}")
        return name

    def kill(self, handle: str, no_restart: bool) -> None:
        assert no_restart
        self.alive.remove(handle)
        self.killed.append(handle)


def test_actors_being_destroyed_meanwhile_are_skipped_when_a_job_is_deleted() -> None:
    from asyncreader._distributed.cluster import kill_actors

    ray = _DyingActors(alive=["a", "c"], dying={"b": 3})
    assert kill_actors(ray, "job", ["a", "b", "c", "gone"]) == ["a", "c"]
    assert ray.killed == ["a", "c"]
    assert ray.dying == {"b": 0}


def test_an_actor_that_never_becomes_reachable_or_gone_is_a_declared_error(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from asyncreader._distributed import cluster

    monkeypatch.setattr(cluster, "DYING_GRACE", 0.2)
    ray = _DyingActors(alive=["a"], dying={"a": 10**9})
    with pytest.raises(ar.FailedPreconditionError, match="'a' of the namespace 'job'"):
        cluster.kill_actors(ray, "job", ["a"])
    assert ray.killed == []
