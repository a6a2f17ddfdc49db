"""How the obstore client reads a failed first range request, without a server.

An empty object answers a range request with 416 (Range Not Satisfiable): the client
then asks for the size apart. Any other failure is raised, to be retried: a 503 whose
message happens to hold "416" in the request's duration is not an empty object.
"""

from __future__ import annotations

import types

import pytest

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
