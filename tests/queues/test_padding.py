"""PaddingFIFOQueue: partial shapes and padded batches (SPEC §2.6)."""

from __future__ import annotations

import re

import numpy as np
import pytest

import asyncreader as ar

pytestmark = pytest.mark.anyio


def test_attributes_and_name() -> None:
    q = ar.PaddingFIFOQueue(5, ["int32", "string"], [[None, 3], []])
    assert q.shapes == [(None, 3), ()]
    assert re.fullmatch(r"PaddingFIFOQueue_\d+", q.name)


@pytest.mark.parametrize(
    ("dtypes", "shapes", "message"),
    [
        (["int32"], None, "When providing partial shapes, a list of shapes must be provided."),
        (
            ["int32", "int32"],
            [[None]],
            "Shapes must be provided for all components, but received 2 dtypes and 1 shapes.",
        ),
        (None, [[None]], "PaddingFIFOQueue needs dtypes"),
    ],
)
def test_invalid_construction(dtypes: object, shapes: object, message: str) -> None:
    with pytest.raises(ar.InvalidArgumentError, match=re.escape(message)):
        ar.PaddingFIFOQueue(5, dtypes, shapes)


async def test_enqueue_checks_known_dimensions() -> None:
    q = ar.PaddingFIFOQueue(5, ["int32", "int32"], [[], [None, 3]])
    with pytest.raises(
        ar.InvalidArgumentError,
        match=re.escape("Shape mismatch in tuple component 1. Expected [?,3], got [3,4]"),
    ):
        await q.enqueue((1, np.zeros((3, 4), np.int32)))
    with pytest.raises(
        ar.InvalidArgumentError,
        match=re.escape("Shape mismatch in tuple component 1. Expected [?,3], got [3]"),
    ):
        await q.enqueue((1, np.zeros(3, np.int32)))
    with pytest.raises(
        ar.InvalidArgumentError,
        match=re.escape("Shape mismatch in tuple component 1. Expected [2,?,3], got [2,3,4]"),
    ):
        await q.enqueue_many(([1, 2], np.zeros((2, 3, 4), np.int32)))
    assert q.size() == 0


async def test_dequeue_returns_element_unpadded() -> None:
    q = ar.PaddingFIFOQueue(5, ["int32"], [[None]])
    await q.enqueue([1, 2, 3])
    got = await q.dequeue()
    np.testing.assert_array_equal(got, [1, 2, 3])


async def test_dequeue_many_pads_to_batch_maximum() -> None:
    q = ar.PaddingFIFOQueue(
        10, ["int32", "string", "bool", "float32"], [[None, 2], [None], [None], [2]]
    )
    await q.enqueue(([[1, 1]], [b"a"], [True], [1, 2]))
    await q.enqueue(([[2, 2], [3, 3], [4, 4]], [b"b", b"c"], [], [3, 4]))
    ints, texts, flags, fixed = await q.dequeue_many(2)
    np.testing.assert_array_equal(ints, [[[1, 1], [0, 0], [0, 0]], [[2, 2], [3, 3], [4, 4]]])
    assert ints.dtype == np.int32
    assert texts.tolist() == [[b"a", b""], [b"b", b"c"]]
    assert flags.tolist() == [[True], [False]]
    np.testing.assert_array_equal(fixed, [[1, 2], [3, 4]])


async def test_padding_is_per_batch() -> None:
    q = ar.PaddingFIFOQueue(10, ["int64"], [[None]])
    await q.enqueue_many(np.arange(6).reshape(3, 2))
    await q.enqueue([7, 8, 9, 10])
    first = await q.dequeue_many(2)
    assert first.shape == (2, 2)
    await q.close()
    second = await q.dequeue_up_to(5)
    np.testing.assert_array_equal(second, [[4, 5, 0, 0], [7, 8, 9, 10]])


async def test_high_rank_padding() -> None:
    q = ar.PaddingFIFOQueue(10, ["uint8"], [[None, 1, None, 1, None]])
    await q.enqueue(np.ones((1, 1, 2, 1, 1), np.uint8))
    await q.enqueue(np.ones((2, 1, 1, 1, 3), np.uint8))
    batch = await q.dequeue_many(2)
    assert batch.shape == (2, 2, 1, 2, 1, 3)
    assert int(batch.sum()) == 2 + 6


async def test_dequeue_many_zero_uses_zero_for_unknown_dims() -> None:
    q = ar.PaddingFIFOQueue(10, ["int32", "string"], [[None, 3], []])
    a, b = await q.dequeue_many(0)
    assert a.shape == (0, 0, 3)
    assert b.shape == (0,)


async def test_message_type_names_follow_tensorflow() -> None:
    q = ar.PaddingFIFOQueue(10, ["int32"], [[None]], name="p")
    await q.close()
    with pytest.raises(ar.QueueClosedError, match=re.escape("FIFOQueue 'p' is closed.")):
        await q.enqueue([1])
    with pytest.raises(ar.OutOfRangeError, match=re.escape("FIFOQueue 'p' is closed and has")):
        await q.dequeue()
    with pytest.raises(
        ar.OutOfRangeError,
        match=re.escape(
            "PaddingFIFOQueue 'p' is closed and has insufficient elements "
            "(requested 2, current size 0)"
        ),
    ):
        await q.dequeue_many(2)


async def test_names_with_padding() -> None:
    q = ar.PaddingFIFOQueue(10, ["int32", "string"], [[None], []], names=["ids", "key"])
    await q.enqueue({"ids": [1, 2], "key": b"k1"})
    await q.enqueue({"ids": [3], "key": b"k2"})
    batch = await q.dequeue_many(2)
    np.testing.assert_array_equal(batch["ids"], [[1, 2], [3, 0]])
    assert batch["key"].tolist() == [b"k1", b"k2"]


@pytest.mark.both_backends
async def test_a_shaped_dequeue_gives_each_element_its_own_shape() -> None:
    # What a ranked session's pool needs to pad examples again in other batches: the
    # batch as dequeue_up_to pads it, and the shape each element was enqueued with (an
    # enqueue_many's elements have that batch's shape).
    q = ar.PaddingFIFOQueue(None, ["int32", "string"], [[None, None], []])
    await q.enqueue(([[1, 2, 3]], b"a"))
    await q.enqueue_many(([[[4], [5]], [[6], [7]]], [b"b", b"c"]))
    await q.enqueue(([[8, 9], [1, 2], [3, 4]], b"d"))
    await q.close()
    (values, keys), shapes = await q._dequeue_shaped(3, up_to=True)
    assert values.shape == (3, 2, 3)
    assert list(keys) == [b"a", b"b", b"c"]
    assert shapes[0].tolist() == [[1, 3], [2, 1], [2, 1]]
    assert shapes[1].shape == (3, 0)
    (values, _), shapes = await q._dequeue_shaped(3, up_to=True)
    assert values.tolist() == [[[8, 9], [1, 2], [3, 4]]]
    assert shapes[0].tolist() == [[3, 2]]
    with pytest.raises(ar.OutOfRangeError):
        await q._dequeue_shaped(3, up_to=True)
