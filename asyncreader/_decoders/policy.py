"""What a decode stage does with records it cannot decode: raise, or skip and keep a note.

The decoders work on whole batches, so one bad line or Example would otherwise fail every
good record around it. Given a :class:`DecodeErrors`, ``decode_csv``, ``decode_raw`` and
``parse_example`` drop only the bad records, keep a :class:`~asyncreader.DeadLetter` for
each, and say which records of the batch they kept::

    errors = ar.DecodeErrors(ar.ErrorPolicy(skip=True, max_error_fraction=0.01))
    keys, lines = await reader.read_up_to(queue, 1024)
    label, x = ar.decode_csv(lines, [[0], [0.0]], on_error=errors, keys=keys)
    keys = [keys[i] for i in errors.kept]   # the keys of the rows that were decoded

The engine here is shared by the decoders: it decodes the batch as a whole; on an error it
notes the bad record and decodes the records before and after it as two batches, so good
records are never skipped and a batch with few bad records still takes the vectorised
path. After a few bad records in one batch it decodes the rest one record
at a time, so a batch of nothing but bad records costs linear time, not quadratic.
"""

from __future__ import annotations

import collections
import threading
from typing import TYPE_CHECKING, Final, TypeVar

import numpy as np

from .._error_policy import MAX_DEAD_LETTERS, DeadLetter, ErrorPolicy, OnError, as_policy
from .._errors import AsyncReaderError, FailedPreconditionError, InvalidArgumentError
from .strings import flatten_strings

if TYPE_CHECKING:
    from collections.abc import Callable, Sequence

__all__ = ["DecodeErrors", "decode_guarded"]

R = TypeVar("R")

# Bad records in one batch after which the rest is decoded record by record.
_BATCH_RETRIES: Final = 4


class DecodeErrors:
    """A decode stage's error policy, and the bad records it skipped.

    Pass one as ``on_error=`` to :func:`~asyncreader.decode_csv`,
    :func:`~asyncreader.decode_raw` or :func:`~asyncreader.parse_example`, with the
    batch's reader ``keys=`` so that dead letters and errors name the file and record.
    One instance is meant to live as long as the stage: the policy's limits
    (``max_errors``, ``max_error_fraction``) count across every batch it has seen. It may be
    shared by tasks and worker threads.

    Args:
        on_error: The policy: ``"skip"`` (the default), ``"raise"`` or an
            :class:`~asyncreader.ErrorPolicy`.
        name: The stage's name, used in the note added to an error that exceeds a limit.

    Raises:
        InvalidArgumentError: ``on_error`` is not a policy.
    """

    def __init__(self, on_error: OnError = "skip", *, name: str = "decode") -> None:
        self._policy = as_policy(on_error)
        self._name = name
        self._lock = threading.Lock()
        self._dead: collections.deque[DeadLetter] = collections.deque(maxlen=MAX_DEAD_LETTERS)
        self._skipped = 0
        self._decoded = 0
        self._last = threading.local()

    def __repr__(self) -> str:
        return (
            f"DecodeErrors(name={self._name!r}, decoded={self._decoded}, skipped={self._skipped})"
        )

    @property
    def policy(self) -> ErrorPolicy:
        """The :class:`~asyncreader.ErrorPolicy` this stage applies."""
        return self._policy

    @property
    def name(self) -> str:
        """The stage's name."""
        return self._name

    @property
    def records_decoded(self) -> int:
        """Records decoded so far, over every batch."""
        return self._decoded

    @property
    def errors_skipped(self) -> int:
        """Bad records skipped so far, over every batch."""
        return self._skipped

    @property
    def dead_letters(self) -> tuple[DeadLetter, ...]:
        """The skipped records, oldest first (the most recent 10,000).

        ``work_item`` and ``record`` come from the batch's ``keys`` (``b"file:n"`` splits
        into the file and the key); without keys they are ``b""`` and ``None``.
        ``index`` is the record's position in its batch.
        """
        with self._lock:
            return tuple(self._dead)

    @property
    def kept(self) -> np.ndarray:
        """Positions (int64) of the records the latest call *in this thread* decoded.

        Index the batch's other arrays with it (``weights[errors.kept]``, or
        ``[keys[i] for i in errors.kept]`` for a list) to keep them aligned with the
        decoded rows.

        Raises:
            FailedPreconditionError: no decoder has used this instance in this thread.
        """
        kept: np.ndarray | None = getattr(self._last, "kept", None)
        if kept is None:
            raise FailedPreconditionError(f"{self!r} has not decoded a batch in this thread")
        return kept

    def _finish(self, kept: np.ndarray) -> None:
        self._last.kept = kept
        with self._lock:
            self._decoded += int(kept.size)

    def _note(self, exc: AsyncReaderError, index: int, key: bytes | None) -> None:
        """Note a skipped record, or raise ``exc`` when the policy says to."""
        work = b"" if key is None else work_item_of(key)
        with self._lock:
            self._skipped += 1
            self._dead.append(DeadLetter(work, key, exc, False, index))
            reason = self._policy.exceeded(self._skipped, self._decoded)
        if reason is not None:
            exc.add_note(f"{self._name}: {reason} (see dead_letters)")
            raise exc


def work_item_of(key: bytes) -> bytes:
    """The work item of a reader key (``b"<work>:<record>"``), or ``b""`` if it has none."""
    work, colon, _ = key.rpartition(b":")
    return work if colon else b""


def check_on_error(on_error: OnError | DecodeErrors) -> DecodeErrors | None:
    """Return the :class:`DecodeErrors` to use, or ``None`` to raise (TensorFlow's way).

    Raises:
        InvalidArgumentError: skipping was asked for without a :class:`DecodeErrors`, which
            is where the skipped records and the kept positions are kept.
    """
    if isinstance(on_error, DecodeErrors):
        return on_error
    if as_policy(on_error).skip:
        raise InvalidArgumentError(
            "a decoder skips bad records only into a DecodeErrors, which keeps the dead "
            "letters and the kept positions: on_error=asyncreader.DecodeErrors('skip')"
        )
    return None


def check_skip_shape(errors: DecodeErrors | None, shape: tuple[int, ...]) -> bool:
    """Whether bad records will be skipped; they can only be from a 1-D batch.

    Raises:
        InvalidArgumentError: skipping was asked for on a single record or a nested batch.
    """
    if errors is None or not errors.policy.skip:
        return False
    if len(shape) != 1:
        raise InvalidArgumentError(
            f"skipping bad records needs a 1-D batch of records, not shape {list(shape)}"
        )
    return True


def check_keys(keys: object, count: int) -> list[bytes] | None:
    """The batch's keys as a list of bytes, one per flat record.

    Raises:
        InvalidArgumentError: ``keys`` does not have one key per record.
    """
    if keys is None:
        return None
    items, _ = flatten_strings(keys)
    if len(items) != count:
        raise InvalidArgumentError(f"keys has {len(items)} entries for {count} records")
    return list(items)


def with_key(exc: InvalidArgumentError, keys: Sequence[bytes] | None) -> InvalidArgumentError:
    """``exc`` naming the work item and key of the record it concerns, when keys are known."""
    index = exc.record
    if keys is None or not isinstance(index, int) or not 0 <= index < len(keys):
        return exc
    key = keys[index]
    named = type(exc)(exc.message, work_item=work_item_of(key) or None, record=key)
    named.__notes__ = list(getattr(exc, "__notes__", []))
    return named


def decode_guarded(
    count: int,
    decode: Callable[[range], R],
    merge: Callable[[list[R]], R],
    errors: DecodeErrors | None,
    keys: Sequence[bytes] | None,
) -> R:
    """Decode records ``0 .. count-1`` under a policy.

    ``decode(positions)`` decodes the records in that range as one batch, raising
    :class:`InvalidArgumentError` whose ``record`` is the position (in the whole batch) of
    the first bad record; ``merge`` concatenates the results of consecutive ranges.
    """
    everything = range(count)
    if errors is None or not errors.policy.skip:
        try:
            result = decode(everything)
        except InvalidArgumentError as exc:
            raise with_key(exc, keys) from None
        if errors is not None:
            errors._finish(np.arange(count, dtype=np.int64))
        return result
    pieces: list[R] = []
    kept: list[range] = []
    todo = collections.deque([everything])  # ranges still to decode, in batch order
    bad = 0
    while todo:
        span = todo.popleft()
        if not span:
            continue
        if bad >= _BATCH_RETRIES and len(span) > 1:
            # After a few bad records, one record at a time: linear however many are bad.
            todo.extendleft(reversed([span[i : i + 1] for i in range(len(span))]))
            continue
        try:
            pieces.append(decode(span))
        except InvalidArgumentError as exc:
            position = exc.record
            if not isinstance(position, int) or position not in span:
                raise  # not about one record: an argument error
            key = None if keys is None else keys[position]
            errors._note(with_key(exc, keys), position, key)
            bad += 1
            todo.extendleft((range(position + 1, span.stop), range(span.start, position)))
        else:
            kept.append(span)
    if not pieces:
        pieces.append(decode(range(0)))
    positions = np.concatenate(
        [np.arange(span.start, span.stop, dtype=np.int64) for span in kept]
        or [np.empty(0, dtype=np.int64)]
    )
    errors._finish(positions)
    return pieces[0] if len(pieces) == 1 else merge(pieces)
