"""The front door: ``__all__`` matches what the package really exports, and the contract's
names are all there, documented, and shown as ``asyncreader.X``."""

from __future__ import annotations

import inspect
import pickle
import re
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
    "RecordBatch",
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


def _is_own_submodule(name: str, value: object) -> bool:
    # Importing asyncreader.cifar10 (say) binds it on the package: that is Python, not a leak.
    return isinstance(value, types.ModuleType) and value.__name__ == f"asyncreader.{name}"


def _public_attributes() -> set[str]:
    return {
        name
        for name, value in vars(ar).items()
        if not name.startswith("_") and (name == "errors" or not _is_own_submodule(name, value))
    }


def test_all_lists_exactly_the_public_attributes() -> None:
    assert len(ar.__all__) == len(set(ar.__all__)), "duplicates in __all__"
    assert set(ar.__all__) == _public_attributes()


def test_dir_shows_only_the_public_names() -> None:
    # No stray module or __future__ feature (``contextlib``, ``annotations``) in dir().
    shown = {
        name
        for name in dir(ar)
        if not name.startswith("_")
        and (name == "errors" or not _is_own_submodule(name, getattr(ar, name)))
    }
    assert shown == set(ar.__all__)


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


def _returned_names(func: object) -> set[str]:
    annotation = inspect.signature(func).return_annotation  # type: ignore[arg-type]
    return set(re.findall(r"[A-Za-z_]\w*", annotation)) if isinstance(annotation, str) else set()


def _public_methods(cls: type) -> list[object]:
    return [
        member.fget if isinstance(member, property) else member
        for klass in cls.__mro__
        if klass.__module__.startswith("asyncreader")
        for attr, member in vars(klass).items()
        if not attr.startswith("_") and (callable(member) or isinstance(member, property))
    ]


def test_statistics_types_that_public_methods_return_are_exported() -> None:
    # The public classes, and the classes that public functions and methods hand out
    # (slice_input_producer's SliceProducer, say): what their methods return is exported.
    seen: set[type] = set()
    todo = [getattr(ar, name) for name in ar.__all__]
    returned: set[str] = set()
    while todo:
        obj = todo.pop()
        funcs = _public_methods(obj) if inspect.isclass(obj) else [obj]
        if inspect.isclass(obj):
            if obj in seen:
                continue
            seen.add(obj)
        for func in funcs:
            if not inspect.isfunction(func):
                continue
            for name in _returned_names(func):
                returned.add(name)
                found = func.__globals__.get(name)
                if inspect.isclass(found) and found.__module__.startswith("asyncreader"):
                    todo.append(found)
    statistics = {name for name in returned if name.endswith("Statistics")}
    assert len(statistics) >= 9, sorted(statistics)
    assert statistics - set(ar.__all__) == set()
