from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest

import asyncreader as ar
from asyncreader._pipeline.structure import (
    Structure,
    component_spec,
    format_shape,
    normalize_shapes,
    order_shapes,
)


class Point(NamedTuple):
    x: int
    y: int


def test_dict_components_are_ordered_by_str_of_key() -> None:
    s = Structure({"b": 1, "a": 2, 10: 3})
    assert s.keys == (10, "a", "b")
    assert s.flatten({"a": 2, "b": 1, 10: 3}) == (3, 2, 1)
    assert s.pack([7, 8, 9]) == {10: 7, "a": 8, "b": 9}
    assert "dict with keys" in repr(s)


def test_layouts_round_trip() -> None:
    assert Structure((1, 2)).pack([3, 4]) == (3, 4)
    assert Structure([1, 2]).pack([3, 4]) == [3, 4]
    assert Structure(Point(1, 2)).pack([3, 4]) == Point(3, 4)
    bare = Structure(np.zeros(3))
    assert bare.size == 1
    assert bare.flatten(5) == (5,)
    assert bare.pack([6]) == 6


def test_mismatched_examples_are_rejected() -> None:
    with pytest.raises(ar.InvalidArgumentError, match="same keys: expected \\['a'\\], got"):
        Structure({"a": 1}).flatten({"b": 1})
    with pytest.raises(ar.InvalidArgumentError, match="same keys"):
        Structure({"a": 1, "b": 2}).flatten({"a": 1, "c": 2})
    with pytest.raises(ar.InvalidArgumentError, match="Expected types to be consistent"):
        Structure((1, 2)).flatten((1,))
    with pytest.raises(ar.InvalidArgumentError, match="got a dict with keys"):
        Structure((1, 2)).flatten({"a": 1})
    with pytest.raises(ar.InvalidArgumentError, match="got a list of 2 components"):
        Structure(1).flatten([1, 2])
    with pytest.raises(ar.InvalidArgumentError, match="got a single value"):
        Structure([1]).flatten(1)
    with pytest.raises(ar.InvalidArgumentError, match=r"at least one tensor in batch_join\(\)"):
        Structure({}, "batch_join")


def test_component_specs_map_text_to_object_and_drop_the_batch_dimension() -> None:
    assert component_spec("abc", enqueue_many=False, index=0) == (np.dtype(object), ())
    assert component_spec([b"a", b"b"], enqueue_many=True, index=0) == (np.dtype(object), ())
    assert component_spec(np.zeros((4, 2), np.float32), enqueue_many=True, index=0) == (
        np.dtype(np.float32),
        (2,),
    )
    with pytest.raises(ar.InvalidArgumentError, match="rank 0 for component 3"):
        component_spec(1.5, enqueue_many=True, index=3)


def test_shapes_are_normalised() -> None:
    assert normalize_shapes([[2, None], [], 3, (-1,)]) == [(2, None), (), (3,), (None,)]
    assert normalize_shapes({"a": [1]}) == {"a": (1,)}
    with pytest.raises(ar.InvalidArgumentError, match="a shape must be a list"):
        normalize_shapes(["x"])
    with pytest.raises(ar.InvalidArgumentError, match="invalid dimension True"):
        normalize_shapes([[True]])
    assert format_shape((None, 3)) == "[?,3]"
    assert format_shape(()) == "[]"


def test_shapes_are_put_in_component_order() -> None:
    s = Structure({"b": 1, "a": 2})
    assert order_shapes({"a": (1,), "b": (2,)}, s) == [(1,), (2,)]
    with pytest.raises(ar.InvalidArgumentError, match="shapes has keys \\['c'\\]"):
        order_shapes({"c": (1,)}, s)
    with pytest.raises(ar.InvalidArgumentError, match="shapes has 1 entries"):
        order_shapes([(1,)], s)
