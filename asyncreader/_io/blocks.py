"""Warm read blocks: file blocks reused once nothing refers to them any more.

``read_batch`` hands records over as views into the blocks the file was read into, so a
batch keeps its blocks alive and every block needs fresh memory. Fresh memory is slow:
the kernel faults in and zeroes every page on first touch, which measured 1.4-2.8 GB/s
here against 11-20 GB/s for reads into a warm buffer. :class:`BlockPool` keeps the
blocks it hands out and gives one out again once its reference count says that nothing
else holds it (no batch, segment, array or memoryview derived from it is alive), so in a
steady stream the same warm pages are read into again.

A block is lent as a *read-only* ``memoryview`` of a numpy view of the pooled array: an
array derived from it cannot be made writable, so no caller can change the bytes behind
another's batch, and the pool cannot reuse a block under a live view, because every
object derived from it refers, through the view chain, to the pooled array.

Memory: the pool keeps at most :data:`POOL_BYTES` of blocks; beyond that, blocks are
plain allocations freed as usual. Free blocks are dropped by :meth:`BlockPool.trim`
(readers call it when they close), so an idle process does not keep them.

:class:`BlockReader` reads a local file's blocks in order with the next
:data:`READ_AHEAD` blocks read ahead on a small pool of helper threads (``pread``, so the
file's position is untouched), so that copying block N+1 out of the page cache overlaps
framing and checksumming block N: reading into memory that does not fit in the CPU's
cache (a batch of 100 MB holds that much) is as slow as the checksum, and one thread doing
both runs at the sum of the two.
"""

from __future__ import annotations

import contextlib
import os
import sys
import threading
from concurrent.futures import Future, ThreadPoolExecutor
from typing import TYPE_CHECKING, Any, Final, Protocol, TypeAlias, runtime_checkable

import numpy as np

if TYPE_CHECKING:
    from .filesystem import RandomAccessFile

__all__ = [
    "CAN_READ_AHEAD",
    "POOL_BYTES",
    "READ_AHEAD",
    "READ_AHEAD_THREADS",
    "BlockPool",
    "BlockReader",
    "block_pool",
    "read_block",
]

#: The most bytes of blocks the process-wide pool keeps for reuse: two batches of a
#: thousand 100 KiB records, with room to spare.
POOL_BYTES: Final = 256 << 20

_U8 = np.dtype(np.uint8)
#: A pooled block: a writable 1-D uint8 array of its own memory.
Block: TypeAlias = "np.ndarray[tuple[int], np.dtype[np.uint8]]"
# sys.getrefcount of a pooled array that nothing else holds: the pool's list, the loop
# variable and getrefcount's own argument.
_FREE_REFS: Final = 3


class BlockPool:
    """Blocks of one size, lent out and taken back when nothing refers to them.

    Thread-safe: readers fill blocks on the I/O executor's worker threads.

    Args:
        block_size: Bytes per block.
        max_bytes: The most bytes of blocks kept for reuse.
    """

    __slots__ = ("_blocks", "_lock", "_max_blocks", "block_size")

    def __init__(self, block_size: int, max_bytes: int) -> None:
        self.block_size = block_size
        self._max_blocks = max(0, max_bytes // block_size)
        self._blocks: list[Block] = []
        self._lock = threading.Lock()

    def acquire(self) -> Block:
        """Return a writable block that nothing else refers to (warm when possible)."""
        with self._lock:
            for block in self._blocks:
                if sys.getrefcount(block) == _FREE_REFS:
                    return block
            block = np.empty(self.block_size, _U8)
            if len(self._blocks) < self._max_blocks:
                self._blocks.append(block)
            return block

    def trim(self) -> int:
        """Drop the blocks nothing refers to; return how many were dropped."""
        with self._lock:
            kept = [b for b in self._blocks if sys.getrefcount(b) > _FREE_REFS]
            dropped = len(self._blocks) - len(kept)
            self._blocks = kept
            return dropped

    @property
    def pooled(self) -> int:
        """How many blocks the pool holds (free or lent)."""
        return len(self._blocks)


def _writable(block: Block) -> memoryview:
    return memoryview(block)  # type: ignore[arg-type]  # numpy arrays are buffers


def _readonly(view: np.ndarray[Any, np.dtype[np.uint8]]) -> memoryview:
    """``view`` as a read-only memoryview (what the framers take in segment mode)."""
    view.flags.writeable = False
    return memoryview(view)  # type: ignore[arg-type]


_pool = BlockPool(4 << 20, POOL_BYTES)


def block_pool() -> BlockPool:
    """Return the process-wide pool of read blocks."""
    return _pool


def read_block(f: RandomAccessFile, n: int) -> memoryview:
    """Read up to ``n`` bytes of ``f`` into a pooled block; return them read-only.

    The result (and anything derived from it) keeps the block from being reused. Fewer
    than ``n`` bytes mean the end of the file. Blocks: call it on a worker thread.
    """
    pool = _pool
    block = pool.acquire() if n <= pool.block_size else np.empty(n, _U8)
    got = f.readinto(_writable(block)[:n])
    return _readonly(block[:got])


#: Whether this platform reads at an offset into a buffer (``os.preadv``: Linux, the BSDs,
#: macOS 11 and later); elsewhere blocks are read in order by the reader itself.
CAN_READ_AHEAD: Final = hasattr(os, "preadv")
#: Blocks each :class:`BlockReader` reads ahead of the one being framed.
READ_AHEAD: Final = 2
#: Helper threads of all read-ahead, shared by the process's readers: one per two cores
#: (measured on 2 cores: a second thread competing with the framing thread and the event
#: loop made reads slower, not faster), at most four.
READ_AHEAD_THREADS: Final = max(1, min(4, (os.cpu_count() or 2) // 2))

_ahead_lock = threading.Lock()
_ahead_executor: ThreadPoolExecutor | None = None


def _forget_executor() -> None:
    # A forked child has none of the parent's threads: start afresh.
    global _ahead_executor
    _ahead_executor = None


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_forget_executor)


def _executor() -> ThreadPoolExecutor:
    global _ahead_executor
    with _ahead_lock:
        if _ahead_executor is None:
            _ahead_executor = ThreadPoolExecutor(
                READ_AHEAD_THREADS, thread_name_prefix="asyncreader-read-ahead"
            )
        return _ahead_executor


@runtime_checkable
class PositionalFile(Protocol):
    """A file that can be read at an offset without moving its position (a local file)."""

    @property
    def position(self) -> int: ...

    def pread_into(self, buf: memoryview, offset: int) -> int: ...

    def check_extent(self, end: int) -> None: ...

    def seek(self, offset: int) -> None: ...


class BlockReader:
    """A file's blocks in order from its current position, read ahead on helper threads.

    :meth:`next` returns the next block as :func:`read_block` does and leaves the file's
    position after it, so that plain reads can go on from there once the block reader is
    closed. Not thread-safe: one caller at a time (a reader's worker-thread hops).

    Args:
        f: The file, at the position to read from.
        block_size: Bytes per block.
        ahead: How many blocks to keep in flight beyond the one returned.
    """

    __slots__ = ("_ahead", "_block_size", "_depth", "_f", "_pos")

    def __init__(self, f: PositionalFile, block_size: int, ahead: int = READ_AHEAD) -> None:
        self._f = f
        self._pos = f.position
        self._block_size = block_size
        self._depth = ahead
        # (offset, block, its read) for each block in flight, in file order.
        self._ahead: list[tuple[int, Block, Future[int]]] = []

    def next(self) -> memoryview:
        """Return the next block read-only (shorter than a block at the end of the file).

        Raises:
            The file's read errors (:class:`~asyncreader.DataLossError` if it shrank, ...),
            for the block in which they happened.
        """
        pos, size = self._pos, self._block_size
        ahead = self._ahead
        if ahead and ahead[0][0] == pos:
            _, block, read = ahead.pop(0)
            # A read still queued behind other readers' is done here instead: reading
            # ahead never makes a reader wait longer than reading itself would.
            if read.cancel():
                got = self._f.pread_into(_writable(block)[:size], pos)
            else:
                got = read.result()
                # Read a while ago: a file cut since then has lost these bytes, as a
                # read now would find (the same error, at the same block).
                self._f.check_extent(pos + got)
        else:
            self.close()
            block = _pool.acquire() if size <= _pool.block_size else np.empty(size, _U8)
            got = self._f.pread_into(_writable(block)[:size], pos)
        self._pos = pos = pos + got
        self._f.seek(pos)
        if got == size:
            self._read_ahead()
        return _readonly(block[:got])

    def _read_ahead(self) -> None:
        ahead, size = self._ahead, self._block_size
        at = ahead[-1][0] + size if ahead else self._pos
        limit = getattr(self._f, "size", None)
        while len(ahead) < self._depth and (limit is None or at < limit):
            block = _pool.acquire() if size <= _pool.block_size else np.empty(size, _U8)
            read = _executor().submit(self._f.pread_into, _writable(block)[:size], at)
            ahead.append((at, block, read))
            at += size

    def close(self) -> None:
        """Drop the blocks read ahead, after their reads are over (none writes later)."""
        ahead, self._ahead = self._ahead, []
        for _, _, read in ahead:
            if read.cancel():
                continue
            with contextlib.suppress(Exception):  # the block is dropped unread
                read.result()
