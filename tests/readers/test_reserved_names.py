"""A reader subclass that takes a name the base class keeps its state in is refused at once.

``self._work = work`` in ``on_work_started`` is natural to write and would silently replace
ReaderBase's own ``_work``; the class statement now fails with a message naming the method
and the attribute instead of the reader failing later, far from the cause.
"""

from __future__ import annotations

import pytest

import asyncreader as ar


def test_assigning_a_base_attribute_in_a_hook_is_refused() -> None:
    with pytest.raises(TypeError, match=r"Mine.on_work_started assigns self._work, which Re"):

        class Mine(ar.ReaderBase):
            def on_work_started(self, work: bytes) -> None:
                self._work = work


@pytest.mark.parametrize("name", ["_buffer", "_lock", "_name", "_closed", "_started"])
def test_every_kind_of_base_state_is_protected(name: str) -> None:
    source = f"class Mine(ar.ReaderBase):\n    def __init__(self):\n        self.{name} = 1\n"
    with pytest.raises(TypeError, match=f"assigns self.{name}"):
        exec(source, {"ar": ar})


def test_a_class_attribute_or_method_of_a_base_name_is_refused() -> None:
    with pytest.raises(TypeError, match=r"Mine._lock: ReaderBase uses the name '_lock'"):

        class Mine(ar.ReaderBase):
            _lock = None  # type: ignore[assignment]

    with pytest.raises(TypeError, match=r"Other._take_work: ReaderBase uses"):

        class Other(ar.ReaderBase):
            async def _take_work(self) -> None:  # type: ignore[override]
                pass


def test_built_in_readers_protect_their_own_state_too() -> None:
    with pytest.raises(TypeError, match=r"assigns self._file, which TFRecordReader uses"):

        class Mine(ar.TFRecordReader):
            def reset_state(self) -> None:
                self._file = None


def test_nested_functions_and_subclasses_of_user_readers_are_checked() -> None:
    class Base(ar.ReaderBase):
        def on_work_started(self, work: bytes) -> None:
            self._path = work  # a name of its own: fine

    with pytest.raises(TypeError, match=r"Child.read_one assigns self._produced"):

        class Child(Base):
            def read_one(self) -> tuple[bytes, bytes] | None:
                def bump(this: Child) -> None:
                    this._produced = 0

                bump(self)
                return None


def test_names_of_your_own_are_fine() -> None:
    class Mine(ar.ReaderBase):
        _state_of_mine = 0

        def on_work_started(self, work: bytes) -> None:
            self._path, self.rows = work, 0

        def read_one(self) -> tuple[bytes, bytes] | None:
            return None

    assert Mine.__name__ == "Mine"
