"""WholeFileReader: one record per file, the whole file (SPEC §3.7)."""

from __future__ import annotations

from typing import TYPE_CHECKING, ClassVar

from .._io.filesystem import READ_BLOCK, open_work_item, read_whole
from .base import ReaderBase
from .keys import WorkItemKeys

if TYPE_CHECKING:
    from .._io.filesystem import RandomAccessFile

__all__ = ["WholeFileReader"]


class WholeFileReader(WorkItemKeys, ReaderBase):
    """A reader that outputs the entire contents of each file as one record.

    Key: the work item itself (no suffix); value: the file's bytes (``b""`` for an empty
    file). As in TensorFlow, the file is opened by the read itself, not when the work item
    is taken: a missing file fails the read with :class:`~asyncreader.NotFoundError` and
    the work item stays in progress, so every later read fails the same way until
    :meth:`reset` (SPEC §3.3). ``on_error="skip"`` skips such a file instead (into
    :attr:`dead_letters`). State is TensorFlow's ``ReaderBaseState``, interchangeable with
    ``tf.compat.v1.WholeFileReader``; like TensorFlow's, it cannot be restored with a work
    item in progress, but a :class:`~asyncreader.Session` checkpoint saves such an item
    and the restored reader retries it.

    Args:
        name: The reader's name in messages.
        on_error: What to do with bad input: ``\"raise\"`` (the default, as
            TensorFlow), ``\"skip\"`` or an :class:`~asyncreader.ErrorPolicy`.
        shared_name: Share the reader under this name in the current Session's
            resources (see ``ResourceMgr``).
        container: The resource container it is shared in (the default one if ``None``).
    """

    _tf_state: ClassVar[bool] = True
    _rereadable: ClassVar[bool] = True
    # The file the current read opened; the constructor is ReaderBase's.
    _file: RandomAccessFile | None = None

    def on_work_started(self, work: bytes) -> None:
        self._close_files()  # the read opens the file (TensorFlow's ReadLocked)

    def read_one(self) -> tuple[bytes, bytes, bool]:
        self._close_files()
        f = self._file = open_work_item(self._work)
        parts: list[bytes] = []
        try:
            while True:
                block = f.read(max(f.size or 0, READ_BLOCK))
                self._bytes_read += len(block)
                if not block:
                    break
                parts.append(block)
        finally:
            # A failed read starts over from the file's beginning next time.
            self._close_files()
        return self._work, b"".join(parts), True

    def _reread(self, work: bytes, wanted: list[int]) -> list[bytes]:
        return [read_whole(work)]

    def on_work_finished(self) -> None:
        self._close_files()

    def reset_state(self) -> None:
        self._close_files()

    def _close_files(self) -> None:
        f, self._file = self._file, None
        if f is not None:
            f.close()

    def _has_open_files(self) -> bool:
        return self._file is not None
