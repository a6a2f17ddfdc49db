"""The exception tree of asyncreader.

Every error the library raises on purpose derives from :class:`AsyncReaderError`. The
subclasses mirror TensorFlow's status codes, so code ported from ``tf.compat.v1`` can catch
the same conditions under the same names::

    AsyncReaderError
    ├── OutOfRangeError           end of input: closed and empty queue, epochs exhausted
    ├── DataLossError             corrupt or truncated record data
    ├── InvalidArgumentError      bad argument, shape or dtype; malformed record content
    ├── NotFoundError             missing file, resource or container
    ├── AlreadyExistsError        a named resource is taken
    ├── FailedPreconditionError   using a closed writer or resource
    ├── ResourceExhaustedError    a resource limit was hit
    └── QueueClosedError          enqueue into a closed queue / pending enqueue cancelled

:class:`QueueClosedError` is what TensorFlow reports as ``CANCELLED``; it is named apart so it
is never confused with the event loop's own cancellation, which asyncreader never swallows.

Messages are built from arguments, so they always have the same shape: the TensorFlow-style
text, then the work item (file or URL) and record it concerns when there is one, for example
``corrupted record at 1036 (work item 'train-0.tfrecord', record 7)``. The parts are also
available as attributes for programs that handle errors.
"""

from __future__ import annotations

import contextlib
import re
import zlib
from typing import TYPE_CHECKING, ClassVar

if TYPE_CHECKING:
    from collections.abc import Iterator

__all__ = [
    "AlreadyExistsError",
    "AsyncReaderError",
    "DataLossError",
    "FailedPreconditionError",
    "InvalidArgumentError",
    "NotFoundError",
    "OutOfRangeError",
    "QueueClosedError",
    "ResourceExhaustedError",
    "map_io_errors",
]


def _text(item: str | bytes) -> str:
    if isinstance(item, bytes):
        return item.decode("utf-8", "backslashreplace")
    return item


def _display(item: str | bytes) -> str:
    return repr(_text(item))


def _os_error_target(exc: OSError, work_item: str | bytes | None) -> str:
    """The file an OSError concerns: its own filename, else the work item."""
    target = exc.filename if exc.filename is not None else work_item
    return "" if target is None else _text(target)


class AsyncReaderError(Exception):
    """Base class of every error asyncreader raises on purpose.

    Attributes:
        message: The bare description, without the work item and record.
        work_item: The file path or URL concerned, when there is one.
        record: The record concerned (an index or a key), when there is one.
        offset: The byte offset concerned, when there is one.
    """

    #: TensorFlow's numeric status code for this kind of error.
    code: ClassVar[int] = 2

    def __init__(
        self,
        message: str,
        *,
        work_item: str | bytes | None = None,
        record: int | bytes | str | None = None,
        offset: int | None = None,
    ) -> None:
        self.message = message
        self.work_item = work_item
        self.record = record
        self.offset = offset
        super().__init__(self._format())

    def _format(self) -> str:
        context: list[str] = []
        if self.work_item is not None:
            context.append(f"work item {_display(self.work_item)}")
        if self.record is not None and not self._names_record():
            record = self.record
            shown = _display(record) if isinstance(record, (bytes, str)) else str(record)
            context.append(f"record {shown}")
        if self.offset is not None and f"at {self.offset}" not in self.message:
            context.append(f"offset {self.offset}")
        if not context:
            return self.message
        return f"{self.message} ({', '.join(context)})"

    def _names_record(self) -> bool:
        """Whether TensorFlow's text already gives the record's index."""
        record = self.record
        return isinstance(record, int) and (
            re.search(rf"\b(?:record|element|Index:) {record}\b", self.message) is not None
        )

    def __reduce__(self) -> tuple[object, ...]:
        # Keyword-only fields do not survive the default Exception pickling.
        return (
            _rebuild,
            (type(self), self.message, self.work_item, self.record, self.offset),
        )


def _rebuild(
    cls: type[AsyncReaderError],
    message: str,
    work_item: str | bytes | None,
    record: int | bytes | str | None,
    offset: int | None,
) -> AsyncReaderError:
    return cls(message, work_item=work_item, record=record, offset=offset)


class OutOfRangeError(AsyncReaderError):
    """End of input: a queue is closed and has too few elements, or epochs are exhausted.

    This is the *clean* way a pipeline ends: readers raise it when their work queue is
    closed and empty, producers' queues close after ``num_epochs``, and a
    :class:`~asyncreader.Coordinator` treats it as a normal stop, not a failure.
    """

    code = 11


class DataLossError(AsyncReaderError):
    """Record data is corrupt or truncated (bad CRC, short record, broken compressed stream).

    The message names the file and the byte offset of the damaged record. The reader keeps
    the work item in progress, as TensorFlow does, so call ``reset()`` to move on.
    """

    code = 15


class InvalidArgumentError(AsyncReaderError, ValueError):
    """An argument, shape or dtype is wrong, or record content is malformed.

    Also a :class:`ValueError`, so code that validates arguments the Python way catches it.
    """

    code = 3


class NotFoundError(AsyncReaderError, FileNotFoundError):
    """A file, resource or container does not exist.

    Also a :class:`FileNotFoundError` when it is about a file.
    """

    code = 5


class AlreadyExistsError(AsyncReaderError):
    """A resource with this container and name already exists."""

    code = 6


class FailedPreconditionError(AsyncReaderError):
    """The object is not in a state that allows the operation (for example a closed writer)."""

    code = 9


class ResourceExhaustedError(AsyncReaderError):
    """A resource limit was reached."""

    code = 8


class QueueClosedError(AsyncReaderError):
    """Enqueue into a closed queue, or a pending enqueue cancelled by ``close()``.

    TensorFlow reports this as ``CANCELLED``. A :class:`~asyncreader.QueueRunner` treats it
    as the clean end of its loop. It is never raised for the event loop's own cancellation.
    """

    code = 1


@contextlib.contextmanager
def map_io_errors(
    work_item: str | bytes | None = None,
    *,
    record: int | bytes | str | None = None,
    offset: int | None = None,
) -> Iterator[None]:
    """Translate third-party errors raised in the block into asyncreader's errors.

    ``FileNotFoundError`` / ``IsADirectoryError`` become :class:`NotFoundError`,
    ``zlib.error`` and ``EOFError`` from decompressors become :class:`DataLossError`, and
    ``PermissionError`` becomes :class:`FailedPreconditionError`. The original is kept as
    ``__cause__``. asyncreader's own errors pass through untouched.
    """
    try:
        yield
    except AsyncReaderError:
        raise
    except (FileNotFoundError, IsADirectoryError, NotADirectoryError) as exc:
        raise NotFoundError(
            f"{exc.strerror or type(exc).__name__}: {_os_error_target(exc, work_item)}",
            work_item=work_item,
            record=record,
            offset=offset,
        ) from exc
    except PermissionError as exc:
        raise FailedPreconditionError(
            f"permission denied: {_os_error_target(exc, work_item)}",
            work_item=work_item,
            record=record,
            offset=offset,
        ) from exc
    except (zlib.error, EOFError) as exc:
        raise DataLossError(
            f"compressed stream is corrupt: {exc}",
            work_item=work_item,
            record=record,
            offset=offset,
        ) from exc
