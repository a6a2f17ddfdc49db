"""The error policy of readers and decoders: raise (TensorFlow's way) or skip and keep a record.

TensorFlow's readers fail on the first corrupt record, and keep failing until ``reset()``;
``tf.data``'s ``ignore_errors()`` skips silently, and can stall on a file that keeps
failing. An :class:`ErrorPolicy` makes the choice explicit per reader::

    reader = ar.TFRecordReader(on_error=ar.ErrorPolicy(skip=True, max_errors=100))

Skipping never skips a good record that can be told apart from the bad one, and never
retries the same bad input: a record whose extent is known (a TFRecord payload whose
checksum fails under a good header) is skipped alone; damage that hides where the next
record starts (a corrupt length, a truncated record, a broken compressed stream) skips the
rest of that work item; a work item that cannot be opened (missing, unreadable) is
skipped. Every skip leaves a :class:`DeadLetter` in :attr:`ReaderBase.dead_letters
<asyncreader.ReaderBase.dead_letters>`, and the limits turn too much bad input back into
an error.
"""

from __future__ import annotations

import dataclasses
from typing import Final, Literal, TypeAlias

from ._errors import AsyncReaderError, InvalidArgumentError

__all__ = ["DeadLetter", "ErrorPolicy", "OnError", "as_policy"]

#: Dead letters a reader keeps (the most recent); the count of skips is unbounded.
MAX_DEAD_LETTERS: Final = 10_000


@dataclasses.dataclass(frozen=True, slots=True)
class ErrorPolicy:
    """What a reader does when a record or work item is bad.

    Attributes:
        skip: ``False`` (the default, TensorFlow's behaviour): raise the error; the work
            item stays in progress and fails again until ``reset()``. ``True``: skip the
            bad input, note it as a :class:`DeadLetter`, and read on.
        max_errors: With ``skip``, raise the error that makes more than this many skips.
        max_error_fraction: With ``skip``, raise the error that makes skips more than this
            fraction of records produced plus skips, once ``min_records`` of them were seen.
        min_records: Records plus skips to see before ``max_error_fraction`` applies.

    Raises:
        InvalidArgumentError: a limit is negative, a fraction is not in ``[0, 1]``, or a
            limit is given without ``skip``.
    """

    skip: bool = False
    max_errors: int | None = None
    max_error_fraction: float | None = None
    min_records: int = 100

    def __post_init__(self) -> None:
        if self.max_errors is not None and self.max_errors < 0:
            raise InvalidArgumentError(f"max_errors must be >= 0, not {self.max_errors}")
        fraction = self.max_error_fraction
        if fraction is not None and not 0.0 <= fraction <= 1.0:
            raise InvalidArgumentError(f"max_error_fraction must be in [0, 1], not {fraction}")
        if self.min_records < 0:
            raise InvalidArgumentError(f"min_records must be >= 0, not {self.min_records}")
        if not self.skip and (self.max_errors is not None or fraction is not None):
            raise InvalidArgumentError("error limits only apply with skip=True")

    def exceeded(self, skipped: int, produced: int) -> str | None:
        """Return why ``skipped`` skips (with ``produced`` good records) are too many, or
        ``None`` while they are within the limits."""
        if self.max_errors is not None and skipped > self.max_errors:
            return f"more than {self.max_errors} bad records or work items"
        fraction = self.max_error_fraction
        seen = skipped + produced
        if fraction is not None and seen >= self.min_records and skipped > fraction * seen:
            return f"bad records are {skipped / seen:.1%} of {seen}, over {fraction:.1%}"
        return None


#: What ``on_error=`` accepts: a policy, ``"raise"`` or ``"skip"``.
OnError: TypeAlias = "ErrorPolicy | Literal['raise', 'skip'] | None"

_RAISE: Final = ErrorPolicy()
_SKIP: Final = ErrorPolicy(skip=True)


def as_policy(on_error: OnError) -> ErrorPolicy:
    """Return the :class:`ErrorPolicy` that ``on_error`` names.

    Raises:
        InvalidArgumentError: ``on_error`` is neither a policy nor ``"raise"`` / ``"skip"``.
    """
    if on_error is None or on_error == "raise":
        return _RAISE
    if on_error == "skip":
        return _SKIP
    if isinstance(on_error, ErrorPolicy):
        return on_error
    raise InvalidArgumentError(
        f"on_error must be an ErrorPolicy, 'raise' or 'skip', not {on_error!r}"
    )


@dataclasses.dataclass(frozen=True, slots=True)
class DeadLetter:
    """Bad input a reader or decode stage skipped.

    Attributes:
        work_item: The work item (file path or URL) it was in (``b""`` for a decode stage
            not given the batch's keys).
        record: The key of the bad record (``b"<work>:<offset>"`` for TFRecord files), or
            ``None`` when the whole work item, or the rest of it, was skipped, or a decode
            stage was not given keys.
        error: The error that reading or decoding it raised.
        rest_of_work_item: Whether everything from there to the end of the work item was
            skipped (the damage hid where the next record starts).
        index: For a decode stage, the record's position in its batch; ``None`` for
            readers.
    """

    work_item: bytes
    record: bytes | None
    error: AsyncReaderError
    rest_of_work_item: bool
    index: int | None = None
