"""Values shown in error messages."""

from __future__ import annotations

__all__ = ["short_repr"]


def short_repr(value: object, limit: int = 160) -> str:
    """``repr(value)``, at most ``limit`` characters: longer ones keep both ends.

    Values in messages may come from untrusted input (a checkpoint, a file), so their
    length is bounded; the end is kept because a path's file name is there.
    """
    text = repr(value)
    if len(text) <= limit:
        return text
    half = (limit - 3) // 2
    return f"{text[:half]}...{text[-half:]}"
