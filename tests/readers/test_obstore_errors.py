"""How the obstore client reads a failed first range request, and leaves requests that
nobody waits for, without a server.

An empty object answers a range request with 416 (Range Not Satisfiable): the client
then asks for the size apart. Any other failure is raised, to be retried: a 503 whose
message happens to hold "416" in the request's duration is not an empty object.

A request whose caller is cancelled is not cancelled: obstore answers it from a thread of
its own, which must not call into an exiting interpreter, so an exiting process waits
for it (bounded).
"""

from __future__ import annotations

import asyncio
import threading
import time
import types

import anyio
import pytest

from asyncreader._io import obstore_client
from asyncreader._io.obstore_client import ObstoreClient

pytestmark = pytest.mark.anyio


class GenericError(Exception):
    """Stands for obstore's errors that have no class of their own."""


def client_failing_with(message: str) -> ObstoreClient:
    async def get_async(store: object, key: str, options: object) -> object:
        raise GenericError(message)

    class NotFound(Exception):
        pass

    errors = types.SimpleNamespace(
        NotFoundError=NotFound, PermissionDeniedError=NotFound, UnauthenticatedError=NotFound
    )
    fake = types.SimpleNamespace(get_async=get_async, exceptions=errors)
    return ObstoreClient(fake, object(), "key", "s3://bucket/key", None)


async def test_a_416_answer_is_an_empty_object() -> None:
    client = client_failing_with(
        "Generic S3 error: Error performing GET http://127.0.0.1:9000/b/key in 1.2ms - "
        "Server returned non-2xx status code: 416 Range Not Satisfiable: "
    )
    assert await client.first(0, 1024) is None


async def test_a_503_taking_1_416_ms_is_raised_to_be_asked_again() -> None:
    message = (
        "Generic S3 error: Error performing GET http://127.0.0.1:9000/b/key in 1.416734ms - "
        "Server returned non-2xx status code: 503 Service Unavailable: "
    )
    client = client_failing_with(message)
    with pytest.raises(GenericError, match="503"):
        await client.first(0, 1024)


def client_answering_with(request: asyncio.Future[bytes]) -> ObstoreClient:
    def get_range_async(store: object, key: str, start: int, end: int) -> object:
        return request

    fake = types.SimpleNamespace(get_range_async=get_range_async, exceptions=None)
    return ObstoreClient(fake, object(), "key", "s3://bucket/key", None)


async def test_a_cancelled_read_leaves_its_request_to_be_answered_before_exit() -> None:
    loop = asyncio.get_running_loop()
    request: asyncio.Future[bytes] = loop.create_future()
    client = client_answering_with(request)
    with anyio.move_on_after(0.1):
        await client.get(0, 3)
    assert not request.cancelled()
    assert request in obstore_client._in_flight
    # Answered later from another thread, as obstore's own threads answer; the exit's
    # wait (on a thread: the loop must run to take the answer) returns once it is.
    answer = threading.Timer(0.3, loop.call_soon_threadsafe, (request.set_result, b"abc"))
    answer.start()
    start = time.monotonic()
    await anyio.to_thread.run_sync(obstore_client._settle_at_exit)
    assert 0.2 < time.monotonic() - start < obstore_client._EXIT_WAIT
    assert request.result() == b"abc"
    assert request not in obstore_client._in_flight
    answer.join()


async def test_the_exit_waits_for_an_unanswered_request_for_a_bounded_time(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(obstore_client, "_EXIT_WAIT", 0.2)
    request: asyncio.Future[bytes] = asyncio.get_running_loop().create_future()
    client = client_answering_with(request)
    with anyio.move_on_after(0.05):
        await client.get(0, 3)
    start = time.monotonic()
    await anyio.to_thread.run_sync(obstore_client._settle_at_exit)
    assert time.monotonic() - start < 2
    request.cancel()  # the test's own loop ends: nothing will answer it
    await asyncio.sleep(0)
    assert request not in obstore_client._in_flight
