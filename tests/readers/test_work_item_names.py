"""File names that are not UTF-8: work items are the OS's bytes for the name.

``os.listdir`` and ``glob`` return such names as ``str`` with surrogate escapes; a reader
encodes a ``str`` work item the way the OS does (``os.fsencode``), so keys, dead letters,
saved state and checkpoints hold exactly the bytes of the name on disk.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

import anyio
import pytest
from queue_util import work_queue
from readers_util import (
    drain,
    read_verb,  # noqa: F401 (runs each test with both verbs)
    tfrecord_bytes,
)

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Callable
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]

LINES = [b"one", b"two", b"three"]
PAYLOADS = [b"p0", b"p11", b"p222"]


def _write(directory: Path, name: bytes, data: bytes) -> bytes:
    path = os.path.join(os.fsencode(directory), name)
    try:
        with open(path, "wb") as f:
            f.write(data)
    except (OSError, UnicodeError):  # pragma: no cover - a file system without byte names
        pytest.skip("this file system does not take non-UTF-8 file names")
    return path


@pytest.fixture
def files(tmp_path: Path) -> dict[str, bytes]:
    """Paths (bytes) of files whose names hold bytes that are not UTF-8."""
    return {
        "text": _write(tmp_path, b"caf\xe9.txt", b"\n".join(LINES) + b"\n"),
        "tfrecord": _write(tmp_path, b"\xff\xfe-data.tfrecord", tfrecord_bytes(PAYLOADS)),
        "plain": _write(tmp_path, b"plain.txt", b"alpha\n"),
    }


def _as_listed(path: bytes) -> str:
    """The name as os.listdir / glob give it for a str directory (surrogate escapes)."""
    return os.fsdecode(path)


READERS: dict[str, tuple[str, Callable[[], ar.ReaderBase], list[tuple[bytes, bytes]]]] = {
    "whole": ("text", ar.WholeFileReader, [(b"", b"one\ntwo\nthree\n")]),
    "text": ("text", ar.TextLineReader, [(b":%d" % (i + 1), v) for i, v in enumerate(LINES)]),
    "tfrecord": (
        "tfrecord",
        ar.TFRecordReader,
        [(b":0", PAYLOADS[0]), (b":18", PAYLOADS[1]), (b":37", PAYLOADS[2])],
    ),
}


@pytest.mark.parametrize("kind", list(READERS))
@pytest.mark.parametrize("spelling", ["str", "bytes"])
async def test_keys_hold_the_exact_bytes_of_the_name(
    files: dict[str, bytes], kind: str, spelling: str
) -> None:
    which, make, suffixes = READERS[kind]
    path = files[which]
    assert os.listdir(os.path.dirname(_as_listed(path)))  # the name is listable as str
    item: Any = _as_listed(path) if spelling == "str" else path
    with anyio.fail_after(10):
        async with make() as reader:
            got = await drain(reader, await work_queue([item]))
    assert got == [(path + suffix, value) for suffix, value in suffixes]
    assert all(key.startswith(path) for key, _ in got)


async def test_producer_takes_a_list_mixing_bytes_and_str(files: dict[str, bytes]) -> None:
    names: list[str | bytes] = [
        files["text"],
        _as_listed(files["plain"]),
        _as_listed(files["text"]),
        files["plain"],
    ]
    with anyio.fail_after(10):
        async with ar.Session():
            queue = ar.string_input_producer(names, num_epochs=1, shuffle=False)
            got = await drain(ar.WholeFileReader(), queue)
    text, plain = files["text"], files["plain"]
    assert [key for key, _ in got] == [text, plain, text, plain]


async def test_a_missing_non_utf8_name_is_skipped_by_the_error_policy(
    files: dict[str, bytes],
) -> None:
    missing = os.path.join(os.path.dirname(files["text"]), b"gone-\xe9.txt")
    items = [_as_listed(missing), _as_listed(files["plain"])]
    with anyio.fail_after(10):
        async with ar.TextLineReader(on_error="skip") as reader:
            got = await drain(reader, await work_queue(items))
        (letter,) = reader.dead_letters
    assert got == [(files["plain"] + b":1", b"alpha")]
    assert isinstance(letter.error, ar.NotFoundError)
    assert letter.work_item == missing
    with anyio.fail_after(10):
        async with ar.TextLineReader() as reader:
            with pytest.raises(ar.NotFoundError, match="gone-"):
                await reader.read(await work_queue(items))


async def test_saved_state_keeps_the_name(files: dict[str, bytes]) -> None:
    path = files["text"]
    with anyio.fail_after(10):
        async with ar.TextLineReader() as reader:
            assert await reader.read(await work_queue([_as_listed(path)])) == (
                path + b":1",
                b"one",
            )
            state = reader.serialize_state()
        async with ar.TextLineReader() as again:
            again.restore_state(state)
            rest = await drain(again, await work_queue([]))
        assert rest == [(path + b":2", b"two"), (path + b":3", b"three")]
        async with ar.WholeFileReader() as whole:
            await whole.read(await work_queue([_as_listed(path)]))
            state = whole.serialize_state()
        async with ar.WholeFileReader() as again:
            again.restore_state(state)
            assert again.num_work_units_completed() == 1


async def test_checkpoint_of_a_filename_queue_holding_such_names(files: dict[str, bytes]) -> None:
    names: list[str | bytes] = [
        _as_listed(files["text"]),
        files["plain"],
        _as_listed(files["tfrecord"]),
    ]

    def pipeline() -> tuple[ar.FIFOQueue, ar.WholeFileReader]:
        return ar.string_input_producer(names, num_epochs=2, shuffle=False), ar.WholeFileReader()

    with anyio.fail_after(10):
        async with ar.Session() as sess:
            queue, reader = pipeline()
            first = [await reader.read(queue) for _ in range(2)]
            state = await sess.checkpoint()
        async with ar.Session(restore=state):
            queue, reader = pipeline()
            rest = await drain(reader, queue)
    keys = [key for key, _ in first + rest]
    order = [files["text"], files["plain"], files["tfrecord"]]
    assert keys == order * 2
