"""A producer's checkpoint identifies its inputs: a restore over other inputs is refused.

Without that, a checkpoint restored over the same files in another order (or other files,
or other arrays) continues from a position in a different sequence: records are
delivered twice and others never, silently.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import anyio
import numpy as np
import pytest
from pipeline_harness import Dataset, write_dataset
from resumable_pipeline import Config, run

import asyncreader as ar
from asyncreader._runtime import state_codec

pytestmark = pytest.mark.anyio

Build = Callable[[], Any]


async def _checkpoint_after(build: Build, take: int) -> bytes:
    async with ar.Session() as sess:
        source = build()
        with anyio.fail_after(10):
            for _ in range(take):
                await (source() if callable(source) else source.dequeue())
            state = await sess.checkpoint()
    return state


async def _restore(state: bytes, build: Build) -> list[Any]:
    out: list[Any] = []
    async with ar.Session(restore=state):
        source = build()
        with anyio.fail_after(10):
            while True:
                try:
                    out.append(await (source() if callable(source) else source.dequeue()))
                except ar.OutOfRangeError:
                    break
    return out


def strings(names: list[str], **kw: Any) -> Build:
    return lambda: ar.string_input_producer(names, num_epochs=1, capacity=2, **kw)


NAMES = [f"part-{i}.tfrecord" for i in range(4)]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return write_dataset(tmp_path_factory.mktemp("inputs"), files=4, records=30, seed=3)


@pytest.mark.both_backends
async def test_a_pipeline_restored_over_reordered_files_is_refused(dataset: Dataset) -> None:
    cfg = Config(dataset.paths, shuffle=False, deterministic=False)
    first = await run(cfg, take=3)
    assert first.checkpoint is not None
    reordered = Config(dataset.paths[::-1], shuffle=False, deterministic=False)
    with pytest.raises(ar.InvalidArgumentError) as info:
        await run(reordered, restore=first.checkpoint)
    message = str(info.value)
    assert "string_input_producer" in message
    assert "row 0 differs" in message
    assert repr(dataset.paths[0]) in message
    assert repr(dataset.paths[-1]) in message
    assert "producer/0" in "".join(getattr(info.value, "__notes__", []))
    # The same files in the same order restore, and every record comes once per epoch.
    rest = await run(cfg, restore=first.checkpoint)
    got = sorted(i for batch in first.ids + rest.ids for i in batch)
    assert got == sorted(dataset.ids * cfg.epochs)


@pytest.mark.both_backends
@pytest.mark.parametrize(
    ("restored", "expected"),
    [
        (NAMES[::-1], "row 0 differs: the checkpoint has 'part-0.tfrecord', this one 'part-3"),
        ([*NAMES[:2], "other.tfrecord", NAMES[3]], "row 2 differs"),
        ([*NAMES, "part-4.tfrecord"], "input has 4 rows, this one 5"),
        ([n.encode() for n in NAMES], "row 0 differs: the checkpoint has 'part-0.tfrecord', "),
    ],
    ids=["reversed", "one-replaced", "one-more", "bytes-for-str"],
)
async def test_string_producer_refuses_other_inputs(restored: list[Any], expected: str) -> None:
    state = await _checkpoint_after(strings(NAMES, shuffle=False), 1)
    with pytest.raises(ar.InvalidArgumentError, match="the checkpoint was taken over other") as e:
        await _restore(state, strings(restored, shuffle=False))
    assert expected in str(e.value)


async def test_long_values_are_shortened_in_the_message() -> None:
    long_names = ["x" * 500 + str(i) for i in range(3)]
    state = await _checkpoint_after(strings(long_names, shuffle=False), 1)
    with pytest.raises(ar.InvalidArgumentError, match=r"row 0 differs") as e:
        await _restore(state, strings(["y" * 500, *long_names[1:]], shuffle=False))
    message = str(e.value)
    assert "..." in message
    assert len(message) < 600
    assert "x0'" in message  # both ends are kept: a path's file name is at its end


async def test_shuffle_must_match_but_seed_and_num_epochs_may_change() -> None:
    state = await _checkpoint_after(strings(NAMES, seed=4), 2)
    with pytest.raises(ar.InvalidArgumentError, match="shuffle=True does not fit"):
        await _restore(state, strings(NAMES, shuffle=False))
    # The generator's state is in the checkpoint: another seed changes nothing.
    full = await _restore(await _checkpoint_after(strings(NAMES, seed=4), 0), strings(NAMES))
    rest = await _restore(state, strings(NAMES, seed=99))
    assert rest == full[2:]

    def two_epochs() -> Any:
        return ar.string_input_producer(NAMES, num_epochs=2, seed=4, capacity=2)

    more = await _restore(state, two_epochs)
    assert more[:2] == full[2:]
    assert sorted(more[2:]) == sorted(NAMES)


@pytest.mark.both_backends
async def test_range_and_input_producers_refuse_other_inputs() -> None:
    def ranges(n: int) -> Build:
        return lambda: ar.range_input_producer(n, num_epochs=1, seed=1, capacity=2)

    state = await _checkpoint_after(ranges(6), 2)
    with pytest.raises(ar.InvalidArgumentError, match="input has 6 rows, this one 7"):
        await _restore(state, ranges(7))
    assert len(await _restore(state, ranges(6))) == 4

    def rows(array: np.ndarray[Any, Any]) -> Build:
        return lambda: ar.input_producer(array, num_epochs=1, shuffle=False, capacity=2)

    data = np.arange(12, dtype=np.int64).reshape(6, 2)
    state = await _checkpoint_after(rows(data), 2)
    changed = data.copy()
    changed[4, 1] = -1
    with pytest.raises(ar.InvalidArgumentError, match=r"other contents .*SHA-256"):
        await _restore(state, rows(changed))
    with pytest.raises(ar.InvalidArgumentError, match="rows of dtype '<i8', this one '<i4'"):
        await _restore(state, rows(data.astype(np.int32)))
    with pytest.raises(ar.InvalidArgumentError, match=r"rows of shape \[2\], this one \[1\]"):
        await _restore(state, rows(np.arange(6, dtype=np.int64).reshape(6, 1)))
    rest = await _restore(state, rows(data.copy()))
    assert [r.tolist() for r in rest] == data[2:].tolist()


@pytest.mark.both_backends
async def test_slice_producer_refuses_other_arrays() -> None:
    labels = np.arange(5)
    images = np.arange(10.0).reshape(5, 2)

    def slices(*arrays: Any) -> Build:
        return lambda: ar.slice_input_producer(list(arrays), num_epochs=1, seed=2, capacity=2)

    state = await _checkpoint_after(slices(labels, images), 2)
    with pytest.raises(ar.InvalidArgumentError, match="input array 1 has other contents"):
        await _restore(state, slices(labels, images[::-1].copy()))
    with pytest.raises(ar.InvalidArgumentError, match="over 2 input arrays does not fit"):
        await _restore(state, slices(labels))
    names = np.array(["a", "b", "c", "d", "e"])
    with pytest.raises(ar.InvalidArgumentError, match="input array 1 has rows of dtype"):
        await _restore(state, slices(labels, names))
    rest = await _restore(state, slices(labels, images))
    assert len(rest) == 3
    for label, image in rest:
        assert image.tolist() == images[label].tolist()


async def test_a_checkpoint_without_an_input_fingerprint_is_refused() -> None:
    state = await _checkpoint_after(strings(NAMES, shuffle=False), 1)
    tree = state_codec.decode(state)
    for key in ("inputs", "shuffle"):  # as checkpoints of earlier versions were
        del tree["components"]["producer/0"][key]
    with pytest.raises(ar.InvalidArgumentError, match="does not identify the producer's input"):
        await _restore(state_codec.encode(tree), strings(NAMES, shuffle=False))
