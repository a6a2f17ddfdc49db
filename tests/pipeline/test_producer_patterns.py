"""``string_input_producer(..., glob=True)``: patterns listed by the runner, checkpointed as
the files they matched."""

from __future__ import annotations

import glob
from typing import TYPE_CHECKING, Any

import anyio
import pytest

import asyncreader as ar
from asyncreader._pipeline.producers import producer_of
from asyncreader._runtime import state_codec

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]


def _parts(root: Path, count: int = 3, prefix: str = "part") -> list[str]:
    for i in range(count):
        (root / f"{prefix}-{i}.txt").write_bytes(b"%d-a\n%d-b\n%d-c\n" % (i, i, i))
    return sorted(str(root / f"{prefix}-{i}.txt") for i in range(count))


async def _read(reader: ar.TextLineReader, queue: Any, n: int | None = None) -> list[bytes]:
    lines: list[bytes] = []
    with anyio.fail_after(10):
        while n is None or len(lines) < n:
            try:
                _, value = await reader.read(queue)
            except ar.OutOfRangeError:
                break
            lines.append(value)
    return lines


async def test_patterns_give_the_matching_files_sorted(tmp_path: Path) -> None:
    files = _parts(tmp_path, 3)
    (tmp_path / "other.txt").write_bytes(b"no\n")
    (tmp_path / "part-dir.txt").mkdir()  # directories never match
    async with ar.Session():
        queue = ar.string_input_producer(
            [str(tmp_path / "part-*.txt"), str(tmp_path / "part-1.txt")],
            glob=True,
            num_epochs=2,
            shuffle=False,
        )
        producer = producer_of(queue)
        assert producer.files() is None  # nothing is listed at construction
        assert producer.patterns == [str(tmp_path / "part-*.txt"), str(tmp_path / "part-1.txt")]
        async with ar.TextLineReader() as reader:
            lines = await _read(reader, queue)
        assert producer.files() == files  # the union, sorted, each once
    epoch = [b"%d-%s" % (i, c) for i in range(3) for c in (b"a", b"b", b"c")]
    assert lines == epoch * 2


async def test_without_glob_a_name_with_wildcards_is_taken_literally(tmp_path: Path) -> None:
    _parts(tmp_path, 2)
    literal = tmp_path / "part-[1].txt"  # a real file whose name holds wildcards
    literal.write_bytes(b"literal\n")
    async with ar.Session():
        queue = ar.string_input_producer([str(literal)], num_epochs=1, shuffle=False)
        async with ar.TextLineReader() as reader:
            assert await _read(reader, queue) == [b"literal"]
    # With glob=True the same string is a pattern ([1] is a character class) ...
    async with ar.Session():
        queue = ar.string_input_producer([str(literal)], glob=True, num_epochs=1, shuffle=False)
        async with ar.TextLineReader() as reader:
            assert await _read(reader, queue) == [b"1-a", b"1-b", b"1-c"]
    # ... and glob.escape names the file itself.
    async with ar.Session():
        queue = ar.string_input_producer(
            [glob.escape(str(literal))], glob=True, num_epochs=1, shuffle=False
        )
        async with ar.TextLineReader() as reader:
            assert await _read(reader, queue) == [b"literal"]


async def test_a_pattern_without_glob_fails_at_the_reader_saying_how(tmp_path: Path) -> None:
    _parts(tmp_path, 2)
    pattern = str(tmp_path / "part-*.txt")
    async with ar.Session():
        queue = ar.string_input_producer([pattern], num_epochs=1)
        async with ar.TextLineReader() as reader:
            with anyio.fail_after(10), pytest.raises(ar.NotFoundError) as info:
                await reader.read(queue)
    assert pattern in str(info.value)
    assert "glob=True" in "".join(getattr(info.value, "__notes__", []))


async def _read_patterns(patterns: list[str]) -> list[bytes]:
    async with ar.Session():
        queue = ar.string_input_producer(patterns, glob=True, num_epochs=1)
        async with ar.TextLineReader() as reader:
            lines = await _read(reader, queue)
    return lines


async def test_a_pattern_matching_nothing_stops_the_pipeline_naming_it(tmp_path: Path) -> None:
    _parts(tmp_path, 1)
    missing = str(tmp_path / "nope-*.txt")
    with anyio.fail_after(10), pytest.raises(ar.NotFoundError, match="no file matches") as info:
        await _read_patterns([str(tmp_path / "part-*.txt"), missing])
    assert missing in str(info.value)


async def test_a_literal_entry_must_exist(tmp_path: Path) -> None:
    absent = str(tmp_path / "absent.txt")
    with anyio.fail_after(10), pytest.raises(ar.NotFoundError, match=r"absent\.txt"):
        await _read_patterns([absent])


async def test_bad_patterns_are_refused_at_construction() -> None:
    async with ar.Session():
        with pytest.raises(ar.InvalidArgumentError, match="glob=True"):
            ar.string_input_producer([b"bytes-*.txt"], glob=True)
        with pytest.raises(ar.InvalidArgumentError, match="non-null"):
            ar.string_input_producer([], glob=True)


async def test_url_patterns_are_listed_through_fsspec() -> None:
    fsspec = pytest.importorskip("fsspec", reason="fsspec (asyncreader[remote]) is missing")
    fs = fsspec.filesystem("memory")
    for i in (2, 0, 1):
        fs.pipe(f"/glob-producer/shard-{i}.txt", b"%d\n" % i)
    fs.pipe("/glob-producer/other.txt", b"x\n")
    try:
        async with ar.Session():
            queue = ar.string_input_producer(
                ["memory://glob-producer/shard-*.txt"], glob=True, num_epochs=1, shuffle=False
            )
            async with ar.TextLineReader() as reader:
                assert await _read(reader, queue) == [b"0", b"1", b"2"]
            assert producer_of(queue).files() == [
                f"memory://glob-producer/shard-{i}.txt" for i in range(3)
            ]
    finally:
        fs.rm("/glob-producer", recursive=True)


# --- checkpoints ------------------------------------------------------------------------------


async def _checkpoint_mid_file(pattern: str, lines: int) -> tuple[bytes, list[bytes]]:
    async with ar.Session() as sess:
        queue = ar.string_input_producer([pattern], glob=True, num_epochs=1, seed=3)
        async with ar.TextLineReader() as reader:
            seen = await _read(reader, queue, lines)
            with anyio.fail_after(10):
                checkpoint = await sess.checkpoint()
    return checkpoint, seen


async def _resume(pattern: str, checkpoint: bytes) -> list[bytes]:
    async with ar.Session(restore=checkpoint):
        queue = ar.string_input_producer([pattern], glob=True, num_epochs=1, seed=3)
        async with ar.TextLineReader() as reader:
            lines = await _read(reader, queue)
    return lines


async def test_an_unsigned_restore_continues_exactly_over_the_listed_files(
    tmp_path: Path,
) -> None:
    _parts(tmp_path, 4)
    pattern = str(tmp_path / "part-*.txt")
    checkpoint, before = await _checkpoint_mid_file(pattern, 5)  # mid-way through a file
    saved = state_codec.decode(checkpoint)["components"]["producer/0"]
    # The input the checkpoint identifies is the list of files, not the pattern.
    assert saved["inputs"][0]["values"] == sorted(glob.glob(pattern))
    after = await _resume(pattern, checkpoint)
    everything = sorted(b"%d-%s" % (i, c) for i in range(4) for c in (b"a", b"b", b"c"))
    assert len(before) == 5
    assert sorted(before + after) == everything  # nothing lost, nothing twice


async def test_a_restore_over_other_files_is_refused(tmp_path: Path) -> None:
    _parts(tmp_path, 3)
    pattern = str(tmp_path / "part-*.txt")
    checkpoint, _ = await _checkpoint_mid_file(pattern, 2)
    (tmp_path / "part-9.txt").write_bytes(b"new\n")  # the pattern now matches a 4th file
    with anyio.fail_after(10), pytest.raises(ar.InvalidArgumentError, match="other inputs"):
        await _resume(pattern, checkpoint)


async def test_an_unsigned_restore_refuses_a_file_the_patterns_cannot_name(
    tmp_path: Path,
) -> None:
    (tmp_path / "data").mkdir()
    _parts(tmp_path / "data", 2)
    (tmp_path / "secret.txt").write_bytes(b"s1\ns2\n")
    pattern = str(tmp_path / "data" / "**" / "*.txt")
    sneaky = str(tmp_path / "data" / ".." / "secret.txt")  # '..' is no match for '**'
    checkpoint, _ = await _checkpoint_mid_file(pattern, 1)
    async with ar.Session() as sess:  # a reader part-way through the file outside
        queue = ar.string_input_producer([sneaky], num_epochs=1)
        async with ar.TextLineReader() as reader:
            await _read(reader, queue, 1)
            with anyio.fail_after(10):
                foreign = state_codec.decode(await sess.checkpoint())
    # An edited checkpoint: the file outside is in the producer's list of files and is
    # the reader's work in progress.
    tree = state_codec.decode(checkpoint)
    tree["components"]["producer/0"]["inputs"][0]["values"].append(sneaky)
    tree["components"]["reader/0"] = foreign["components"]["reader/0"]
    with anyio.fail_after(10), pytest.raises(ar.InvalidArgumentError, match="no input") as info:
        await _resume(pattern, state_codec.encode(tree))
    assert "reader/0" in str(info.value)


async def test_a_checkpoint_before_the_listing_restores(tmp_path: Path) -> None:
    _parts(tmp_path, 2)
    pattern = str(tmp_path / "part-*.txt")
    async with ar.Session() as sess:
        ar.string_input_producer([pattern], glob=True, num_epochs=1, seed=3)
        # Taken before the runner task has run: the patterns are not listed yet.
        with anyio.fail_after(10):
            checkpoint = await sess.checkpoint()
    lines = await _resume(pattern, checkpoint)
    assert sorted(lines) == sorted(b"%d-%s" % (i, c) for i in range(2) for c in (b"a", b"b", b"c"))
    with anyio.fail_after(10), pytest.raises(ar.InvalidArgumentError, match="patterns"):
        await _resume(str(tmp_path / "part-1*.txt"), checkpoint)
