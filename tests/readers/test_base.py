"""ReaderBase: TensorFlow's reader protocol (SPEC §3.1-3.5, 3.8) through custom hooks."""

from __future__ import annotations

import subprocess
import sys
import threading
from pathlib import Path

import anyio
import anyio.lowlevel
import pytest
from queue_util import work_queue
from readers_util import drain, read_verb  # noqa: F401 (runs each test with both verbs)

import asyncreader as ar
from asyncreader._records.keys import bulk_keys, range_keys

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parent.parent.parent


class CountingReader(ar.ReaderBase):
    """Work item ``b"<n>"`` yields n records; ``b"bad"`` fails to start; ``b"err"`` fails
    to read. Plain hooks: they run on worker threads."""

    def __init__(self, name: str | None = None) -> None:
        super().__init__(name)
        self.left = 0
        self.item = b""
        self.threads: set[int] = set()
        self.events: list[str] = []

    def on_work_started(self, work: bytes) -> None:
        self.threads.add(threading.get_ident())
        self.events.append(f"start {work.decode()}")
        if work == b"bad":
            raise ar.NotFoundError("no such thing", work_item=work)
        self.item = work
        self.left = -1 if work == b"err" else int(work)

    def read_one(self) -> tuple[bytes, bytes] | None:
        self.threads.add(threading.get_ident())
        if self.left < 0:
            raise ar.DataLossError("broken", work_item=self.item)
        if self.left == 0:
            return None
        self.left -= 1
        return b"%s:%d" % (self.item, self.left), b"v%d" % self.left

    def on_work_finished(self) -> None:
        self.events.append("finish")

    def reset_state(self) -> None:
        self.events.append("reset")
        self.left = 0


class AsyncManyReader(ar.ReaderBase):
    """Coroutine hooks with a vectorised read_many: records are the work item's bytes."""

    def __init__(self) -> None:
        super().__init__("many")
        self.data = b""
        self.calls: list[int] = []

    async def on_work_started(self, work: bytes) -> None:
        self.data = work

    async def read_one(self) -> tuple[bytes, bytes] | None:
        raise AssertionError("read_many is used")

    async def read_many(self, n: int) -> tuple[list[bytes], list[bytes], bool]:
        self.calls.append(n)
        take, self.data = self.data[:n], self.data[n:]
        values = [bytes([b]) for b in take]
        return [b"k"] * len(values), values, not self.data


@pytest.mark.both_backends
async def test_read_takes_work_items_in_order_and_counts() -> None:
    q = await work_queue(["2", b"0", "1"])
    async with CountingReader("r") as reader:
        got = [await reader.read(q) for _ in range(3)]
        assert got == [(b"2:1", b"v1"), (b"2:0", b"v0"), (b"1:0", b"v0")]
        assert reader.num_records_produced() == 3
        # TF finishes a work item only when a read finds its end: "1" is still in progress.
        assert reader.num_work_units_completed() == 2
        with pytest.raises(ar.OutOfRangeError, match="closed"):
            await reader.read(q)
        assert reader.num_work_units_completed() == 3
        assert threading.get_ident() not in reader.threads


async def test_missing_work_item_is_abandoned_and_next_read_takes_the_next() -> None:
    q = await work_queue(["bad", "1"])
    async with CountingReader() as reader:
        with pytest.raises(ar.NotFoundError, match="no such thing"):
            await reader.read(q)
        assert reader.statistics().work_units_started == 0
        assert await reader.read(q) == (b"1:0", b"v0")
        assert reader.statistics().errors == 1


async def test_read_error_keeps_work_in_progress_until_reset() -> None:
    q = await work_queue(["err", "1"])
    async with CountingReader() as reader:
        for _ in range(2):
            with pytest.raises(ar.DataLossError, match="broken"):
                await reader.read(q)
        assert reader.statistics().current_work == b"err"
        await reader.reset()
        assert reader.statistics().current_work is None
        assert "reset" in reader.events
        assert await reader.read(q) == (b"1:0", b"v0")
        assert reader.num_work_units_completed() == 0


async def test_read_up_to_stays_within_one_work_item() -> None:
    q = await work_queue(["3", "2"])
    async with CountingReader() as reader:
        keys, values = await reader.read_up_to(q, 10)
        assert keys == [b"3:2", b"3:1", b"3:0"]
        assert values == [b"v2", b"v1", b"v0"]
        assert reader.num_work_units_completed() == 1
        keys, _ = await reader.read_up_to(q, 2)
        # Reaching n returns without probing the end.
        assert keys == [b"2:1", b"2:0"]
        assert reader.num_work_units_completed() == 1
        with pytest.raises(ar.OutOfRangeError):
            await reader.read_up_to(q, 5)
        assert reader.num_work_units_completed() == 2


async def test_read_up_to_zero_and_negative() -> None:
    q = await work_queue(["1"])
    async with CountingReader() as reader:
        assert await reader.read_up_to(q, 0) == ([], [])
        assert reader.statistics().work_units_started == 0
        with pytest.raises(ar.InvalidArgumentError, match="num_records must be >= 0, not -1"):
            await reader.read_up_to(q, -1)


async def test_read_up_to_error_after_records_returns_them_then_raises() -> None:
    """TensorFlow drops records a failing read_up_to had gathered (but counts them); they
    are returned instead, and the next call raises the error."""

    class FailAfterTwo(CountingReader):
        def read_one(self) -> tuple[bytes, bytes] | None:
            if self.left == 1:
                raise ar.DataLossError("late", work_item=self.item)
            return super().read_one()

    q = await work_queue(["3"])
    async with FailAfterTwo() as reader:
        assert await reader.read_up_to(q, 10) == ([b"3:2", b"3:1"], [b"v2", b"v1"])
        assert reader.num_records_produced() == 2
        with pytest.raises(ar.DataLossError, match="late"):
            await reader.read_up_to(q, 10)
        # The work item stays in progress: the failing record fails again until reset.
        with pytest.raises(ar.DataLossError, match="late"):
            await reader.read(q)
        await reader.reset()
        assert reader.num_records_produced() == 0


@pytest.mark.both_backends
async def test_coroutine_read_many_hook_is_awaited() -> None:
    q = await work_queue([b"abcde", b"xy"])
    async with AsyncManyReader() as reader:
        assert await reader.read_up_to(q, 3) == ([b"k"] * 3, [b"a", b"b", b"c"])
        assert await reader.read_up_to(q, 3) == ([b"k"] * 2, [b"d", b"e"])
        assert reader.num_work_units_completed() == 1
        assert await reader.read_up_to(q, 3) == ([b"k"] * 2, [b"x", b"y"])
        assert reader.calls == [3, 3, 3]
        assert type(reader)._async_hooks >= {"on_work_started", "read_many"}


async def test_empty_work_items_are_skipped() -> None:
    q = await work_queue(["0", "0", "1"])
    async with CountingReader() as reader:
        assert await reader.read(q) == (b"1:0", b"v0")
        assert reader.num_work_units_completed() == 2


@pytest.mark.parametrize(
    ("result", "hook"),
    [((b"k",), "read_one"), (("k", b"v"), "read_one"), (b"kv", "read_one")],
)
async def test_read_one_contract_violation_is_a_clear_error(result: object, hook: str) -> None:
    class Broken(ar.ReaderBase):
        def read_one(self):  # type: ignore[no-untyped-def]
            return result

    q = await work_queue(["x"])
    async with Broken("b") as reader:
        with pytest.raises(ar.AsyncReaderError, match=r"read_one\(\) for Broken 'b' must return"):
            await reader.read(q)


async def test_read_many_without_progress_is_a_clear_error() -> None:
    class Stuck(ar.ReaderBase):
        def read_many(self, n: int) -> tuple[list[bytes], list[bytes], bool]:
            return [], [], False

    q = await work_queue(["x"])
    async with Stuck() as reader:
        with pytest.raises(ar.AsyncReaderError, match=r"read_many\(\) for Stuck 'Stuck'"):
            await reader.read_up_to(q, 4)


async def test_coroutine_serialize_extra_is_rejected_at_class_creation() -> None:
    with pytest.raises(TypeError, match="serialize_extra must be a plain function"):

        class Bad(ar.ReaderBase):
            async def serialize_extra(self) -> bytes:  # type: ignore[override]
                return b""


async def test_queue_with_wrong_elements_is_invalid_argument() -> None:
    q = await work_queue([(b"a", b"b")])
    async with CountingReader() as reader:
        with pytest.raises(ar.InvalidArgumentError, match="one-element string"):
            await reader.read(q)
        typed = ar.FIFOQueue(4, dtypes=[object, object])
        with pytest.raises(ar.InvalidArgumentError, match="Expected single component queue"):
            await reader.read(typed)
        q = await work_queue([3])
        with pytest.raises(ar.InvalidArgumentError, match="single string component"):
            await reader.read(q)
        await typed.close()


async def test_typed_string_queue_and_path_objects_are_accepted(tmp_path: Path) -> None:
    q = ar.FIFOQueue(4, dtypes=[object])
    await q.enqueue([b"2"])
    await q.close()
    async with CountingReader() as reader:
        assert (await reader.read(q))[0] == b"2:1"
    q2 = await work_queue([tmp_path])
    async with ar.IdentityReader() as identity:
        assert await identity.read(q2) == (bytes(tmp_path), bytes(tmp_path))


@pytest.mark.both_backends
async def test_several_readers_on_one_queue_take_different_items() -> None:
    q = await work_queue([str(i) for i in range(1, 21)])
    readers = [CountingReader(f"r{i}") for i in range(4)]
    seen: list[bytes] = []

    async def drain(reader: ar.ReaderBase) -> None:
        while True:
            try:
                keys, _ = await reader.read_up_to(q, 100)
            except ar.OutOfRangeError:
                return
            seen.extend({k.split(b":")[0] for k in keys})

    async with anyio.create_task_group() as tg:
        for reader in readers:
            tg.start_soon(drain, reader)
    assert sorted(seen, key=int) == [str(i).encode() for i in range(1, 21)]
    assert sum(r.num_records_produced() for r in readers) == sum(range(1, 21))
    for reader in readers:
        await reader.aclose()


async def test_hooks_of_one_reader_never_overlap() -> None:
    active = 0
    peak = 0

    class Slow(CountingReader):
        def read_one(self) -> tuple[bytes, bytes] | None:
            nonlocal active, peak
            active += 1
            peak = max(peak, active)
            try:
                return super().read_one()
            finally:
                active -= 1

    q = await work_queue(["50"])
    async with Slow() as reader, anyio.create_task_group() as tg:
        for _ in range(10):
            tg.start_soon(reader.read_up_to, q, 5)
    assert peak == 1
    assert reader.num_records_produced() == 50


@pytest.mark.both_backends
async def test_aclose_cancels_a_read_waiting_for_work() -> None:
    q = await work_queue([], close=False)
    reader = CountingReader("waiting")
    caught: list[BaseException] = []

    async def read() -> None:
        try:
            await reader.read(q)
        except ar.FailedPreconditionError as exc:
            caught.append(exc)

    async with anyio.create_task_group() as tg:
        tg.start_soon(read)
        await anyio.wait_all_tasks_blocked()
        await reader.aclose()
    assert "closed" in str(caught[0])
    await reader.aclose()  # idempotent
    with pytest.raises(ar.FailedPreconditionError, match="CountingReader 'waiting' is closed"):
        await reader.read(q)
    with pytest.raises(ar.FailedPreconditionError):
        reader.serialize_state()
    assert reader.statistics().closed
    await q.close()


async def test_session_close_closes_its_readers(tmp_path: Path) -> None:
    path = tmp_path / "t.txt"
    path.write_bytes(b"a\nb\n")
    async with ar.Session():
        reader = ar.TextLineReader()
        q = await work_queue([str(path)])
        assert await reader.read(q) == (f"{path}:1".encode(), b"a")
        assert reader.statistics().current_work is not None
    assert reader.statistics().closed
    assert not reader._has_open_files()


async def test_shared_name_returns_the_same_reader_and_checks_arguments() -> None:
    async with ar.Session():
        a = ar.TextLineReader(skip_header_lines=1, shared_name="lines")
        b = ar.TextLineReader(skip_header_lines=1, shared_name="lines")
        assert a is b
        with pytest.raises(ar.InvalidArgumentError, match="skip_header_lines"):
            ar.TextLineReader(skip_header_lines=2, shared_name="lines")


async def test_statistics_and_repr_show_progress() -> None:
    q = await work_queue(["3"])
    async with CountingReader("stats") as reader:
        await reader.read(q)
        stats = reader.statistics()
        assert stats.records_produced == 1
        assert stats.current_work == b"3"
        assert stats.work_units_started == 1
        text = repr(reader)
        assert "CountingReader 'stats'" in text
        assert "records=1" in text
        assert "work=b'3'" in text
        with pytest.raises(AttributeError):
            stats.records_produced = 5  # type: ignore[misc]


def test_bulk_keys_match_per_record_formatting() -> None:
    ints = list(range(0, 5000)) + list(range(99_990, 100_020)) + [10**12, 10**12 + 7]
    ints += list(range(10**15, 10**15 + 300))
    assert bulk_keys(b"f:", ints) == [b"f:%d" % k for k in ints]
    assert bulk_keys(b"", [1, 2]) == [b"1", b"2"]


@pytest.mark.parametrize("prefix", [b"f:", b"", b"100%:", b"a%d%s:"])
def test_range_keys_match_per_record_formatting(prefix: bytes) -> None:
    spans = [(0, 0), (0, 1), (0, 5000), (1, 1000), (999, 1001), (1000, 2000), (1000, 1000)]
    spans += [(5, 7), (12_345, 17_890), (999_999, 1_001_001), (10**15 - 3, 10**15 + 2100)]
    for start, stop in spans:
        assert range_keys(prefix, start, stop) == [prefix + b"%d" % k for k in range(start, stop)]


def test_custom_reader_example_runs() -> None:
    out = subprocess.run(
        [sys.executable, str(ROOT / "examples" / "custom_reader.py")],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    )
    assert out.stdout.splitlines() == [
        "records.lp:0 b'a'",
        "records.lp:5 b''",
        "records.lp:9 b'xyz'",
    ]


async def _first_call(reader: ar.ReaderBase, q: ar.FIFOQueue, verb: str, got: list[bytes]) -> None:
    if verb == "read":
        got.append((await reader.read(q))[1])
    elif verb == "read_up_to":
        got.extend((await reader.read_up_to(q, 3))[1])
    else:
        got.extend((await reader.read_batch(q, 3)).tolist())


@pytest.mark.both_backends
@pytest.mark.parametrize("verb", ["read", "read_up_to", "read_batch"])
async def test_a_call_cancelled_while_taking_a_work_item_does_not_lose_it(
    tmp_path: Path, verb: str
) -> None:
    # Cancelled at every point from the dequeue to the open's thread hop: the item taken
    # from the queue is started by the next call (or saved by the state), never dropped.
    paths = [tmp_path / "a.txt", tmp_path / "b.txt"]
    for i, p in enumerate(paths):
        p.write_bytes(b"".join(b"%d-%d\n" % (i, j) for j in range(5)))
    expected = [b"%d-%d" % (i, j) for i in range(2) for j in range(5)]
    for ticks in range(12):
        q = await work_queue([str(p) for p in paths])
        got: list[bytes] = []
        with anyio.fail_after(10):
            async with ar.TextLineReader() as reader:
                async with anyio.create_task_group() as tg:
                    tg.start_soon(_first_call, reader, q, verb, got)
                    for _ in range(ticks):
                        await anyio.lowlevel.checkpoint()
                    tg.cancel_scope.cancel()
                state = reader.serialize_state()
                left = [str(p) for p in paths[len(paths) - q.size() :]]
                rest = await drain(reader, q)
            assert got + [v for _, v in rest] == expected, ticks
            # State saved right after the cancelled call resumes with nothing lost either.
            async with ar.TextLineReader() as fresh:
                fresh.restore_state(state)
                again = await drain(fresh, await work_queue(left))
            assert got + [v for _, v in again] == expected, ticks
