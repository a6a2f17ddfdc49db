"""The front door: ``__all__`` matches what the package really exports, and the contract's
names are all there, documented, and shown as ``asyncreader.X``."""

from __future__ import annotations
import __future__

import inspect
import pickle
import types

import pytest

import asyncreader as ar
import asyncreader.errors

# Every name the public contract promises at the top level.
CONTRACT = {
    "errors",
    "AsyncReaderError",
    "OutOfRangeError",
    "DataLossError",
    "InvalidArgumentError",
    "NotFoundError",
    "AlreadyExistsError",
    "FailedPreconditionError",
    "ResourceExhaustedError",
    "QueueClosedError",
    "Coordinator",
    "QueueRunner",
    "ResourceMgr",
    "Session",
    "FIFOQueue",
    "RandomShuffleQueue",
    "PaddingFIFOQueue",
    "PriorityQueue",
    "ReaderBase",
    "TextLineReader",
    "FixedLengthRecordReader",
    "TFRecordReader",
    "WholeFileReader",
    "IdentityReader",
    "set_io_threads",
    "set_remote_timeouts",
    "string_input_producer",
    "range_input_producer",
    "slice_input_producer",
    "input_producer",
    "batch",
    "shuffle_batch",
    "batch_join",
    "shuffle_batch_join",
    "maybe_batch",
    "maybe_shuffle_batch",
    "Batcher",
    "decode_raw",
    "decode_csv",
    "TFRecordWriter",
    "tf_record_iterator",
    "Example",
    "parse_single_example",
    "parse_example",
    "FixedLenFeature",
    "VarLenFeature",
}


def _public_attributes() -> set[str]:
    return {
        name
        for name, value in vars(ar).items()
        if not name.startswith("_")
        and not isinstance(value, (types.ModuleType, __future__._Feature))
    } | {"errors"}


def test_all_lists_exactly_the_public_attributes() -> None:
    assert len(ar.__all__) == len(set(ar.__all__)), "duplicates in __all__"
    assert set(ar.__all__) == _public_attributes()


def test_contract_names_are_exported() -> None:
    assert CONTRACT - set(ar.__all__) == set()


def test_errors_module_matches_top_level() -> None:
    for name in asyncreader.errors.__all__:
        assert getattr(ar, name) is getattr(asyncreader.errors, name)
        assert issubclass(getattr(ar, name), ar.AsyncReaderError)


@pytest.mark.parametrize("name", sorted(set(ar.__all__) - {"errors"}))
def test_public_names_are_documented_and_shown_as_public(name: str) -> None:
    obj = getattr(ar, name)
    assert inspect.getdoc(obj), f"{name} has no docstring"
    assert obj.__module__ in {"asyncreader", "asyncreader.errors"}, obj.__module__


def test_public_classes_document_their_public_methods() -> None:
    undocumented = [
        f"{cls_name}.{attr}"
        for cls_name in ar.__all__
        if inspect.isclass(cls := getattr(ar, cls_name))
        for attr, member in vars(cls).items()
        if not attr.startswith("_") and callable(member) and not inspect.getdoc(member)
    ]
    assert undocumented == []


def test_errors_pickle_by_their_public_name() -> None:
    err = ar.DataLossError("corrupted record at 12", work_item="a.tfrecord", record=3)
    again = pickle.loads(pickle.dumps(err))
    assert type(again) is ar.DataLossError
    assert str(again) == str(err)


def test_version_is_the_installed_distribution_version() -> None:
    from importlib.metadata import version

    assert ar.__version__ == version("asyncreader")
