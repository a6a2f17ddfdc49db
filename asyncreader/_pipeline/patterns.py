"""``match_filenames_once``: the files a glob pattern names, listed once.

TensorFlow 1.x's ``tf.train.match_filenames_once(pattern)`` is a variable holding the
files that match ``pattern``, evaluated once, usually handed to ``string_input_producer``.
Here it is a coroutine: the listing (a directory scan, or an object store's list calls for
URLs) runs on the I/O executor, never on the event loop, and a cancelled call returns at
once.
"""

from __future__ import annotations

import functools
import os
from typing import TYPE_CHECKING

from .._errors import InvalidArgumentError
from .._io.executor import IoCall, run_io_abandoning
from .._io.filesystem import match_work_items

if TYPE_CHECKING:
    from collections.abc import Sequence

__all__ = ["match_filenames_once"]


async def match_filenames_once(
    pattern: str | os.PathLike[str] | Sequence[str | os.PathLike[str]], name: str | None = None
) -> list[str]:
    """Return the files matching ``pattern``, sorted, each once.

    Local patterns are :func:`glob.glob` patterns (``*``, ``?``, ``[...]``, and ``**`` across
    directories; ``~`` is expanded); URL patterns (``s3://bucket/train-*.tfrecord``,
    ``memory://...``) are listed through fsspec (``asyncreader[remote]``). Directories are
    never returned. Unlike TensorFlow, a pattern that matches nothing is an error rather
    than an empty list, which would only fail later as an empty producer input.

    Args:
        pattern: A pattern, or a list of them (the union is returned).
        name: Accepted for TensorFlow compatibility; unused.

    Returns:
        The matching files as ``str`` (local paths, or URLs of the pattern's scheme).

    Raises:
        NotFoundError: a pattern matches no file; the message names it.
        InvalidArgumentError: no pattern was given, or one is not a string or path.
        FailedPreconditionError: a URL pattern and fsspec is not installed.
    """
    del name
    if isinstance(pattern, (str, os.PathLike)):
        patterns = [os.fspath(pattern)]
    else:
        patterns = [os.fspath(p) for p in pattern]
    if not patterns:
        raise InvalidArgumentError("match_filenames_once needs at least one pattern")
    if not all(isinstance(p, str) for p in patterns):
        raise InvalidArgumentError(f"patterns must be str or os.PathLike[str], not {patterns!r}")
    return await run_io_abandoning(IoCall(functools.partial(match_work_items, patterns)))
