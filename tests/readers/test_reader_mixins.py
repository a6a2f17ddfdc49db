"""ReaderBase's machinery mixins stay in step with the base that inherits them.

Each mixin (the hook path, work items, saved state, abandoned hook calls, the runtime's
protocols) declares the reader state it uses as class-level annotations and, under
``TYPE_CHECKING``, stubs of the methods it calls that live elsewhere. Type checking trusts
those declarations; these tests check them against the real class, so a renamed method or
attribute fails here instead of at run time in a rarely taken path.
"""

from __future__ import annotations

import ast
import inspect
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from readers_util import read_verb  # noqa: F401 (runs each test with both verbs)

import asyncreader as ar
from asyncreader._readers import abandoned, hook_path, runtime_protocols, saved_state, work_items
from asyncreader._readers.base import ReaderBase
from asyncreader._readers.buffered import BufferedReader

if TYPE_CHECKING:
    from types import ModuleType

MIXINS: list[tuple[ModuleType, type]] = [
    (hook_path, hook_path.HookPath),
    (work_items, work_items.WorkItems),
    (saved_state, saved_state.SavedState),
    (abandoned, abandoned.AbandonedCalls),
    (runtime_protocols, runtime_protocols.RuntimeProtocols),
]

#: The steps in which the buffered path differs from the hook path (see buffered.py).
BUFFERED_OVERRIDES = {
    "_apply_pending",
    "_drop_delivered",
    "_mark",
    "_must_close_files",
    "_position_state",
    "_read_on",
    "_read_on_many",
    "_restore_position",
    "_rewind",
    "_start_state",
}


def declarations(module: ModuleType, cls: type) -> tuple[set[str], set[str]]:
    """Return the attributes ``cls`` annotates and the methods it stubs under
    ``TYPE_CHECKING``, read from its source."""
    tree = ast.parse(Path(inspect.getfile(module)).read_text())
    (node,) = [n for n in tree.body if isinstance(n, ast.ClassDef) and n.name == cls.__name__]
    annotated: set[str] = set()
    stubs: set[str] = set()
    for stmt in node.body:
        if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
            annotated.add(stmt.target.id)
        elif isinstance(stmt, ast.If) and ast.unparse(stmt.test) == "TYPE_CHECKING":
            stubs |= {
                s.name for s in stmt.body if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef))
            }
    return annotated, stubs


@pytest.mark.parametrize(("module", "cls"), MIXINS, ids=[c.__name__ for _, c in MIXINS])
def test_mixin_declarations_match_the_reader(module: ModuleType, cls: type) -> None:
    assert issubclass(ReaderBase, cls)
    annotated, stubs = declarations(module, cls)
    assert annotated  # the source was read
    assert stubs
    reader = ar.IdentityReader()
    missing_state = sorted(name for name in annotated if not hasattr(reader, name))
    assert missing_state == [], f"{cls.__name__} declares state the reader does not have"
    for name in sorted(stubs):
        assert name not in vars(cls), f"{cls.__name__}.{name} is stubbed but defined here"
        owner = next((k for k in ReaderBase.__mro__ if name in vars(k)), None)
        assert owner is not None, f"{cls.__name__} stubs {name}, which the reader lacks"
        assert owner is not cls


def test_no_method_is_defined_twice_across_reader_base_and_its_mixins() -> None:
    # Two definitions would make the order of the bases decide which one runs.
    classes = [ReaderBase] + [cls for _, cls in MIXINS]
    seen: dict[str, str] = {}
    for cls in classes:
        for name, value in vars(cls).items():
            if callable(value) or isinstance(value, property):
                if name.startswith("__") and name.endswith("__"):
                    continue
                assert name not in seen, f"{name} is defined in {seen[name]} and {cls.__name__}"
                seen[name] = cls.__name__


def test_buffered_reader_overrides_steps_of_the_base() -> None:
    # Each of the buffered path's overrides replaces a step ReaderBase runs; a step renamed
    # in the base would leave the override dead.
    for name in sorted(BUFFERED_OVERRIDES):
        assert name in vars(BufferedReader), name
        assert callable(getattr(ReaderBase, name, None)), f"ReaderBase has no step {name}"
    for reader in (ar.TFRecordReader, ar.TextLineReader, ar.FixedLengthRecordReader):
        for name in BUFFERED_OVERRIDES:
            assert getattr(reader, name) is not getattr(ReaderBase, name), (reader, name)
