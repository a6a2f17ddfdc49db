"""decode_csv on a RecordBatch: the same columns and errors as on a list of its lines,
with the lines taken straight from the block and errors naming work item and key."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import asyncreader as ar
from asyncreader._records.batch import KeyRun, RecordBatch, Segment, assemble


def lines_block(
    lines: list[bytes], *, ending: bytes = b"\n", work: bytes = b"t.csv"
) -> RecordBatch:
    """A batch laid out as a TextLineReader frames a block: lines between their endings."""
    buffer = bytearray(b"header,line" + ending)
    starts = []
    for line in lines:
        starts.append(len(buffer))
        buffer += line + ending
    segment = Segment(
        np.frombuffer(bytes(buffer), np.uint8),
        np.array(starts, np.int64),
        np.array([len(x) for x in lines], np.int64),
    )
    return assemble([segment], [KeyRun(work, len(lines), range(2, 2 + len(lines)))])


def outcome(records: object, defaults: list[object], **kwargs: object) -> object:
    try:
        columns = ar.decode_csv(records, defaults, **kwargs)  # type: ignore[arg-type]
    except ar.InvalidArgumentError as exc:
        return ("error", exc.message)
    return [(c.dtype.str, c.tolist()) for c in columns]


FIELD = st.one_of(
    st.integers(-(2**31), 2**31 - 1).map(lambda v: str(v).encode()),
    st.floats(allow_nan=False, width=32).map(lambda v: repr(v).encode()),
    st.sampled_from([b"", b"x", b'"q,uoted"', b'"bad"x', b"1e3", b" 7 ", b"\r", b'a"b']),
)


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.lists(FIELD, min_size=1, max_size=4), max_size=8),
    ending=st.sampled_from([b"\n", b"\r\n"]),
    kind=st.sampled_from(["int", "float", "str"]),
)
def test_same_result_as_the_list_of_lines(
    rows: list[list[bytes]], ending: bytes, kind: str
) -> None:
    lines = [b",".join(fields) for fields in rows]
    default = {"int": [0], "float": [0.0], "str": [b""]}[kind]
    defaults: list[object] = [default] * 3
    assert outcome(lines_block(lines, ending=ending), defaults) == outcome(lines, defaults)


def test_errors_name_the_work_item_and_key() -> None:
    batch = lines_block([b"1,2", b"3,x", b"5,6"], work=b"data/part-3.csv")
    with pytest.raises(ar.InvalidArgumentError) as info:
        ar.decode_csv(batch, [[0], [0]])
    assert info.value.work_item == b"data/part-3.csv"
    assert info.value.record == b"data/part-3.csv:3"
    assert "Field 1 in record 1 is not a valid int32: x" in str(info.value)


def test_skipping_drops_bad_lines_and_keeps_the_rest() -> None:
    batch = lines_block([b"1,2", b"3", b"5,6", b"x,8", b"9,10"], work=b"f")
    errors = ar.DecodeErrors("skip")
    a, b = ar.decode_csv(batch, [[0], [0]], on_error=errors)
    assert a.tolist() == [1, 5, 9]
    assert b.tolist() == [2, 6, 10]
    assert errors.kept.tolist() == [0, 2, 4]
    assert [d.record for d in errors.dead_letters] == [b"f:3", b"f:5"]


def test_empty_batch_and_select_cols() -> None:
    empty = ar.decode_csv(lines_block([]), [[0], [b""]])
    assert [c.shape for c in empty] == [(0,), (0,)]
    (picked,) = ar.decode_csv(lines_block([b"1,a,2.5", b"3,b,4.5"]), [[0.0]], select_cols=[2])
    assert picked.tolist() == [2.5, 4.5]
