"""Where record files are opened: the one place to swap in another filesystem layer.

Paths are local (``str``, ``bytes`` or ``os.PathLike``). Both functions block and translate
``OSError`` into asyncreader's errors; async callers run them through ``run_io``.
"""

from __future__ import annotations

import os
from typing import BinaryIO, TypeAlias

from .._errors import map_io_errors

__all__ = ["PathArg", "display_path", "open_for_reading", "open_for_writing"]

#: A record file's location.
PathArg: TypeAlias = "str | bytes | os.PathLike[str] | os.PathLike[bytes]"

#: Read size of the record iterators: large enough that per-call overhead vanishes.
READ_SIZE = 1 << 20


def display_path(path: PathArg) -> str | bytes:
    """Return ``path`` as the ``str``/``bytes`` named in errors."""
    return os.fspath(path)


def open_for_reading(path: PathArg) -> BinaryIO:
    """Open ``path`` for binary reading, unbuffered (the callers read large blocks).

    Raises:
        NotFoundError: if the file does not exist or is a directory.
        FailedPreconditionError: if it may not be read.
    """
    with map_io_errors(display_path(path)):
        return open(path, "rb", buffering=0)


def open_for_writing(path: PathArg) -> BinaryIO:
    """Create or truncate ``path`` for binary writing, unbuffered (the callers batch).

    Raises:
        NotFoundError: if the directory does not exist.
        FailedPreconditionError: if it may not be written.
    """
    with map_io_errors(display_path(path)):
        return open(path, "wb", buffering=0)
