from __future__ import annotations

from typing import ClassVar

import pytest

import asyncreader as ar
from asyncreader._runtime.resources import (
    DEFAULT_CONTAINER,
    SharedResource,
    current_resources,
)


class _Queue:
    _resource_kind = "queue"


class _Reader:
    _resource_kind = "reader"


def test_create_and_lookup() -> None:
    rm = ar.ResourceMgr()
    res = object()
    rm.create("c", "r", res)
    assert rm.lookup("c", "r") is res
    assert rm.containers() == ["c"]
    assert rm.names("c") == [("resource", "r")]


def test_create_twice_raises_already_exists() -> None:
    rm = ar.ResourceMgr()
    rm.create("c", "r", object())
    with pytest.raises(ar.AlreadyExistsError, match=r"^Resource c/r/resource$"):
        rm.create("c", "r", object())


def test_lookup_messages() -> None:
    rm = ar.ResourceMgr()
    with pytest.raises(
        ar.NotFoundError,
        match=r"^Container c does not exist\. \(Could not find resource: c/r\)$",
    ):
        rm.lookup("c", "r")
    rm.create("c", "other", object())
    with pytest.raises(ar.NotFoundError, match=r"^Resource c/r/resource does not exist\.$"):
        rm.lookup("c", "r")


def test_kinds_are_separate() -> None:
    rm = ar.ResourceMgr()
    q, r = _Queue(), _Reader()
    rm.create(None, "x", q)
    rm.create(None, "x", r)  # same name, other kind: allowed
    assert rm.lookup(None, "x", kind="queue") is q
    assert rm.lookup(None, "x", kind="reader") is r
    assert rm.names() == [("queue", "x"), ("reader", "x")]
    with pytest.raises(ar.AlreadyExistsError, match="Resource localhost/x/queue"):
        rm.create(None, "x", _Queue())
    with pytest.raises(ar.NotFoundError, match="Resource localhost/x/other does not exist"):
        rm.lookup(None, "x", kind="other")


def test_default_container() -> None:
    rm = ar.ResourceMgr()
    assert rm.default_container == DEFAULT_CONTAINER == "localhost"
    rm.create("", "r", 1)
    assert rm.lookup(None, "r") == 1
    assert rm.lookup("localhost", "r") == 1
    custom = ar.ResourceMgr(default_container="mine")
    custom.create(None, "r", 2)
    assert custom.containers() == ["mine"]


def test_lookup_or_create_is_atomic_and_creates_once() -> None:
    rm = ar.ResourceMgr()
    calls: list[int] = []

    def factory() -> list[int]:
        calls.append(1)
        return calls

    first = rm.lookup_or_create("c", "r", factory)
    second = rm.lookup_or_create("c", "r", factory)
    assert first is second is calls
    assert calls == [1]


def test_lookup_or_create_factory_errors_add_nothing() -> None:
    rm = ar.ResourceMgr()

    def broken() -> object:
        raise KeyError("factory failed")

    with pytest.raises(KeyError, match="factory failed"):
        rm.lookup_or_create("c", "r", broken)
    with pytest.raises(ar.NotFoundError):
        rm.lookup("c", "r")


def test_lookup_or_create_factory_must_not_reenter() -> None:
    rm = ar.ResourceMgr()

    def reentrant() -> object:
        return rm.lookup_or_create("c", "inner", object)

    with pytest.raises(ar.InvalidArgumentError, match="must not call back into its ResourceMgr"):
        rm.lookup_or_create("c", "outer", reentrant)
    assert rm.names("c") == []


def test_delete() -> None:
    rm = ar.ResourceMgr()
    with pytest.raises(ar.NotFoundError, match=r"^Container c does not exist\.$"):
        rm.delete("c", "r")
    held = object()
    rm.create("c", "r", held)
    rm.delete("c", "r")
    with pytest.raises(ar.NotFoundError, match=r"^Resource c/r/resource does not exist\.$"):
        rm.delete("c", "r")
    assert rm.containers() == ["c"]  # the container stays, empty


def test_cleanup_and_clear() -> None:
    rm = ar.ResourceMgr()
    rm.create("a", "r", 1)
    rm.create("b", "r", 2)
    rm.cleanup("a")
    rm.cleanup("a")  # a missing container is not an error
    assert rm.containers() == ["b"]
    rm.clear()
    assert rm.containers() == []
    assert repr(rm) == "<ResourceMgr containers={}>"


@pytest.mark.parametrize("bad", ["_private", "has space", "-dash-first", "under_score"])
def test_container_validation(bad: str) -> None:
    rm = ar.ResourceMgr()
    with pytest.raises(
        ar.InvalidArgumentError, match=f"^container contains invalid characters: {bad}$"
    ):
        rm.create(bad, "r", 1)
    with pytest.raises(ar.InvalidArgumentError, match="container contains invalid characters"):
        rm.lookup_or_create(bad, "r", lambda: 1)
    assert rm.containers() == []


@pytest.mark.parametrize("name", ["no_such_container", "has space", "-dash-first", "ok"])
def test_lookup_and_delete_never_validate_the_container(name: str) -> None:
    """TensorFlow checks a container's name only where a resource is created in it:
    a lookup or a delete in a container that does not exist is NOT_FOUND, whatever its
    name (``ResourceMgr::Lookup`` / ``Delete``)."""
    rm = ar.ResourceMgr()
    rm.create("ok-other", "r", 1)
    with pytest.raises(
        ar.NotFoundError,
        match=rf"^Container {name} does not exist\. \(Could not find resource: {name}/r\)$",
    ):
        rm.lookup(name, "r")
    with pytest.raises(ar.NotFoundError, match=f"^Container {name} does not exist\\.$"):
        rm.delete(name, "r")
    rm.cleanup(name)  # a missing container is not an error, whatever its name
    assert rm.names(name) == []
    assert rm.containers() == ["ok-other"]


@pytest.mark.parametrize("good", ["a", "A.b-c/d", "0", ".hidden"])
def test_valid_containers(good: str) -> None:
    rm = ar.ResourceMgr()
    rm.create(good, "r", 1)
    assert rm.lookup(good, "r") == 1


class _Shared(SharedResource):
    _resource_kind: ClassVar[str] = "test-shared"

    def __init__(self, size: int) -> None:
        self.size = size
        self.discarded = False

    def _shared_config(self) -> dict[str, object]:
        return {"size": self.size}

    def _discard(self) -> None:
        self.discarded = True


class _OtherShared(_Shared):
    pass


def test_shared_name_rules() -> None:
    with pytest.raises(ar.InvalidArgumentError, match=r"^shared_name cannot start with '_':_x$"):
        _Shared(1, shared_name="_x")  # type: ignore[call-arg]
    with pytest.raises(ar.InvalidArgumentError, match="container contains invalid characters"):
        _Shared(1, shared_name="x", container="bad name")  # type: ignore[call-arg]
    private = _Shared(1)
    assert private.shared_name is None
    assert private.container == DEFAULT_CONTAINER


def test_shared_outside_a_session_uses_the_process_manager() -> None:
    name = "process-wide-test-resource"
    try:
        a = _Shared(3, shared_name=name, container="tests")  # type: ignore[call-arg]
        b = _Shared(3, shared_name=name, container="tests")  # type: ignore[call-arg]
        assert a is b
        assert a.shared_name == name
        assert a.container == "tests"
        assert current_resources().lookup("tests", name) is a
        with pytest.raises(ar.InvalidArgumentError, match="has size 3 but requested size was 4"):
            _Shared(4, shared_name=name, container="tests")  # type: ignore[call-arg]
        with pytest.raises(ar.InvalidArgumentError, match="expected _OtherShared, found _Shared"):
            _OtherShared(3, shared_name=name, container="tests")  # type: ignore[call-arg]
    finally:
        current_resources().cleanup("tests")


@pytest.mark.anyio
async def test_session_resources_are_the_current_manager() -> None:
    outside = current_resources()
    async with ar.Session() as sess:
        assert current_resources() is sess.resources
        made = _Shared(1, shared_name="s")  # type: ignore[call-arg]
        assert sess.resources.lookup(None, "s", kind="test-shared") is made
    assert current_resources() is outside
    with pytest.raises(ar.NotFoundError):
        outside.lookup(None, "s", kind="test-shared")
