"""``match_filenames_once``: glob patterns for local files and fsspec URLs, sorted, each once."""

from __future__ import annotations

from typing import TYPE_CHECKING

import anyio
import pytest

import asyncreader as ar

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = [pytest.mark.anyio, pytest.mark.both_backends]


def _files(root: Path, *names: str) -> None:
    for name in names:
        path = root / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(b"x")


async def test_local_patterns_give_sorted_files(tmp_path: Path) -> None:
    _files(tmp_path, "train-2.tfrecord", "train-10.tfrecord", "train-1.tfrecord", "test-1.tfrecord")
    (tmp_path / "train-dir.tfrecord").mkdir()  # a directory is never a match
    got = await ar.match_filenames_once(str(tmp_path / "train-*.tfrecord"))
    assert got == sorted(
        str(tmp_path / f"{n}.tfrecord") for n in ("train-1", "train-10", "train-2")
    )
    assert all(g.endswith(".tfrecord") for g in got)


async def test_several_patterns_give_their_union_once(tmp_path: Path) -> None:
    _files(tmp_path, "a/x.txt", "a/y.txt", "b/deep/z.txt")
    got = await ar.match_filenames_once(
        [tmp_path / "a" / "*.txt", str(tmp_path / "a" / "x.txt"), str(tmp_path / "**" / "z.txt")]
    )
    assert got == [str(tmp_path / p) for p in ("a/x.txt", "a/y.txt", "b/deep/z.txt")]


async def test_a_pattern_that_matches_nothing_is_named(tmp_path: Path) -> None:
    _files(tmp_path, "a.txt")
    missing = str(tmp_path / "nope-*.txt")
    with pytest.raises(ar.NotFoundError, match="no file matches") as info:
        await ar.match_filenames_once([str(tmp_path / "*.txt"), missing])
    assert missing in str(info.value)
    with pytest.raises(ar.NotFoundError):
        await ar.match_filenames_once(str(tmp_path / "absent.txt"))


async def test_bad_arguments_are_refused() -> None:
    with pytest.raises(ar.InvalidArgumentError, match="at least one pattern"):
        await ar.match_filenames_once([])
    with pytest.raises((ar.InvalidArgumentError, TypeError)):
        await ar.match_filenames_once([b"bytes-*.txt"])  # type: ignore[list-item]


async def test_matched_files_feed_a_producer_and_a_reader(tmp_path: Path) -> None:
    for i in range(3):
        (tmp_path / f"part-{i}.txt").write_bytes(b"%d-a\n%d-b\n" % (i, i))
    lines = []
    async with ar.Session():
        files = ar.string_input_producer(
            await ar.match_filenames_once(str(tmp_path / "part-*.txt")), num_epochs=1, shuffle=False
        )
        async with ar.TextLineReader() as reader:
            with anyio.fail_after(10):
                while True:
                    try:
                        _, value = await reader.read(files)
                    except ar.OutOfRangeError:
                        break
                    lines.append(value)
    assert lines == [b"0-a", b"0-b", b"1-a", b"1-b", b"2-a", b"2-b"]


async def test_url_patterns_are_listed_through_fsspec() -> None:
    fsspec = pytest.importorskip("fsspec", reason="fsspec (asyncreader[remote]) is missing")
    mem = fsspec.filesystem("memory")
    for name in ("b-2.txt", "b-1.txt", "c.txt"):
        mem.pipe(f"/ar-match/{name}", b"line\n")
    try:
        got = await ar.match_filenames_once("memory://ar-match/b-*.txt")
        assert got == ["memory://ar-match/b-1.txt", "memory://ar-match/b-2.txt"]
        async with ar.TextLineReader() as reader:
            q = ar.FIFOQueue(None)
            await q.enqueue_many(got)
            await q.close()
            key, value = await reader.read(q)
        assert (key, value) == (b"memory://ar-match/b-1.txt:1", b"line")
        with pytest.raises(ar.NotFoundError, match="memory://ar-match/z-"):
            await ar.match_filenames_once("memory://ar-match/z-*.txt")
    finally:
        mem.rm("/ar-match", recursive=True)
