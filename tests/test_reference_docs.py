"""The API reference is generated from the docstrings, so it cannot drift from the code.

``docs/reference/*.md`` hold ``::: asyncreader.X`` entries that mkdocstrings renders from
the code (``mkdocs build --strict`` with the ``docs`` extra). These tests need no docs
tooling: every public name must have an entry, every entry must name a real object, the
types that public methods return must be documented too, and no reference page may
describe a public name by a hand-written signature again.
"""

from __future__ import annotations

import importlib
import inspect
import re
from pathlib import Path

import pytest

import asyncreader as ar

REFERENCE = Path(__file__).resolve().parent.parent / "docs" / "reference"
_ENTRY = re.compile(r"^::: (\S+)\s*$", re.M)
_FENCE = re.compile(r"^```[a-z]*\n(.*?)^```", re.S | re.M)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _entries() -> dict[str, str]:
    """Each ``:::`` entry's path, with the page it is on."""
    found: dict[str, str] = {}
    for page in sorted(REFERENCE.glob("*.md")):
        for path in _ENTRY.findall(page.read_text(encoding="utf-8")):
            assert path not in found, f"{path} has entries on {found[path]} and {page.name}"
            found[path] = page.name
    return found


ENTRIES = _entries()


def _resolve(path: str) -> object:
    """The object an entry names: the longest importable module, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            obj: object = importlib.import_module(".".join(parts[:cut]))
        except ModuleNotFoundError:
            continue
        for attr in parts[cut:]:
            obj = getattr(obj, attr)
        return obj
    raise AssertionError(f"no module in {path}")


def _documented_objects() -> dict[int, str]:
    return {id(_resolve(path)): path for path in ENTRIES}


def test_the_reference_has_entries() -> None:
    assert len(ENTRIES) >= len(ar.__all__)


@pytest.mark.parametrize("path", sorted(ENTRIES))
def test_each_entry_names_a_real_object(path: str) -> None:
    obj = _resolve(path)
    assert inspect.getdoc(obj), f"{path} has no docstring to render"
    name = path.rsplit(".", 1)[-1]
    if path == f"asyncreader.{name}":
        assert name in ar.__all__, f"{path} is not public"


@pytest.mark.parametrize("name", sorted(ar.__all__))
def test_each_public_name_has_an_entry(name: str) -> None:
    # By the object, so an entry by a module path also counts for a name exported later.
    assert id(getattr(ar, name)) in _documented_objects(), f"no '::: asyncreader.{name}'"


def _returned_classes() -> dict[str, type]:
    """Classes of asyncreader named in the return annotations of documented callables."""
    found: dict[str, type] = {}
    for path in ENTRIES:
        obj = _resolve(path)
        members = [obj] if inspect.isfunction(obj) else []
        if inspect.isclass(obj):
            members += [
                getattr(obj, attr)
                for attr in dir(obj)
                if not attr.startswith("_") and inspect.isfunction(getattr(obj, attr))
            ]
        for member in members:
            annotation = inspect.signature(member).return_annotation
            if not isinstance(annotation, str):
                continue
            namespace = member.__globals__  # the defining module's, whatever __module__ says
            for word in _IDENTIFIER.findall(annotation):
                value = namespace.get(word, getattr(ar, word, None))
                if (
                    inspect.isclass(value)
                    and value.__module__.startswith("asyncreader")
                    and not word.startswith("_")  # described by the method that returns it
                ):
                    where = path if member is obj else f"{path}.{member.__name__}"
                    found[f"{where} -> {word}"] = value
    return found


def test_classes_that_public_callables_return_have_entries() -> None:
    returned = _returned_classes()
    # The check sees the statistics records (a regression of it would pass vacuously).
    assert any(key.endswith("-> QueueStatistics") for key in returned)
    assert any(key.endswith("-> SliceProducer") for key in returned)
    documented = _documented_objects()
    missing = sorted(key for key, cls in returned.items() if id(cls) not in documented)
    assert missing == []


def test_reference_pages_hold_no_hand_written_signatures() -> None:
    names = "|".join(map(re.escape, ar.__all__))
    # A call shape; the errors page's class tree (``AsyncReaderError(Exception)``) is not one.
    signature = re.compile(rf"^\s*(?:async\s+)?({names})\((?!Exception\))", re.M)
    written = [
        f"{page.name}: {match.group(1)}"
        for page in sorted(REFERENCE.glob("*.md"))
        for block in _FENCE.findall(page.read_text(encoding="utf-8"))
        for match in signature.finditer(block)
    ]
    assert written == []
