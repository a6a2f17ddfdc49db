"""Helpers of the decode_csv tests: outcomes to compare, the paths taken, pyarrow hidden."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any
from unittest import mock

import asyncreader as ar
from asyncreader._decoders import csv as csv_module

if TYPE_CHECKING:
    from collections.abc import Callable, Iterator


def outcome(records: object, defaults: list[Any], **options: Any) -> object:
    """Columns as (dtype, shape, bytes) so signed zeros and NaN payloads count, or the
    error's class, message and record."""
    try:
        columns = ar.decode_csv(records, defaults, **options)
    except ar.AsyncReaderError as exc:
        return ("error", type(exc).__name__, str(exc), getattr(exc, "record", None))
    return [
        (c.dtype.str, c.shape, c.tolist() if c.dtype == object else c.tobytes()) for c in columns
    ]


@contextmanager
def exact_path_only() -> Iterator[None]:
    """decode_csv with its fast paths off: the per-record reference."""
    with mock.patch.object(csv_module, "_fast_path", return_value=None):
        yield


@contextmanager
def spy_on(name: str) -> Iterator[list[bool]]:
    """Record whether each call of ``csv_module.<name>`` produced a result."""
    taken: list[bool] = []
    real: Callable[..., Any] = getattr(csv_module, name)

    def spy(*args: Any, **kwargs: Any) -> Any:
        result = real(*args, **kwargs)
        taken.append(result is not None)
        return result

    with mock.patch.object(csv_module, name, spy):
        yield taken


@contextmanager
def without_pyarrow() -> Iterator[None]:
    """decode_csv as it runs where pyarrow is not installed."""
    csv_module._arrow_modules.cache_clear()
    csv_module._arrow_plan.cache_clear()
    hidden = dict.fromkeys(("pyarrow", "pyarrow.csv"))
    try:
        with mock.patch.dict(sys.modules, hidden):
            yield
    finally:
        csv_module._arrow_modules.cache_clear()
        csv_module._arrow_plan.cache_clear()
