"""Batches as torch tensors and JAX arrays: zero copies where the memory allows.

The torch and JAX tests skip with a reason when the optional package is absent (``.ci/run``
installs CPU builds where it can); the tests of the missing-package errors run always.
"""

from __future__ import annotations

import subprocess
import sys
from typing import TYPE_CHECKING, Any, NamedTuple

import anyio
import numpy as np
import pytest

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import AsyncIterator
    from pathlib import Path


@pytest.fixture
def torch() -> Any:
    return pytest.importorskip("torch", reason="PyTorch (asyncreader[torch]) is not installed")


@pytest.fixture
def jax() -> Any:
    return pytest.importorskip("jax", reason="JAX (asyncreader[jax]) is not installed")


def _address(array: np.ndarray[Any, Any]) -> int:
    return int(array.__array_interface__["data"][0])


class Pair(NamedTuple):
    image: Any
    label: Any


async def _examples(n: int) -> AsyncIterator[dict[str, Any]]:
    for i in range(n):
        await anyio.lowlevel.checkpoint()
        yield {
            "image": np.full((2, 3), i, dtype=np.float32),
            "label": np.int64(i),
            "name": b"example-%d" % i,
        }


async def _fixed_length_batch(tmp_path: Path, records: list[bytes]) -> ar.RecordBatch:
    """A RecordBatch read by a real reader (its arrays are views of the reader's buffer)."""
    path = tmp_path / "records.bin"
    path.write_bytes(b"".join(records))
    async with ar.Session():
        files = ar.string_input_producer([str(path)], num_epochs=1, shuffle=False)
        async with ar.FixedLengthRecordReader(len(records[0])) as reader:
            with anyio.fail_after(10):
                batch = await reader.read_batch(files, len(records))
    return batch


def test_importing_asyncreader_imports_neither_torch_nor_jax() -> None:
    code = "import sys, asyncreader; print(sorted({'torch', 'jax'} & set(sys.modules)))"
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


# --- torch ----------------------------------------------------------------------------------


@pytest.mark.anyio
@pytest.mark.both_backends
async def test_a_batchers_batches_become_tensors_without_copies(torch: Any) -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            batches = [b async for b in ar.batch(_examples(6), 3)]
    assert len(batches) == 2
    for i, batch in enumerate(batches):
        tensors = ar.to_torch(batch)
        assert set(tensors) == {"image", "label", "name"}
        for key in ("image", "label"):
            assert isinstance(tensors[key], torch.Tensor)
            # The tensor is the batch's memory, not a copy of it.
            assert tensors[key].data_ptr() == _address(batch[key])
        assert tensors["image"].dtype == torch.float32
        assert tensors["label"].tolist() == [3 * i, 3 * i + 1, 3 * i + 2]
        # Strings have no tensor type: the array is handed back as it is.
        assert tensors["name"] is batch["name"]


def test_structures_are_kept(torch: Any) -> None:
    image = np.arange(6, dtype=np.uint8).reshape(2, 3)
    label = np.array([1, 2], dtype=np.int32)
    got = ar.to_torch([Pair(image, label), (image, 7, None), {"nested": [label]}, np.float32(2.5)])
    assert isinstance(got, list)
    assert isinstance(got[0], Pair)
    assert got[0].image.data_ptr() == _address(image)
    assert got[1][1:] == (7, None)
    assert got[2]["nested"][0].tolist() == [1, 2]
    assert got[3].item() == 2.5
    assert got[3].shape == ()


def test_read_only_arrays_are_copied_by_default_and_shared_on_request(torch: Any) -> None:
    array = np.arange(12, dtype=np.float32).reshape(3, 4)
    array.flags.writeable = False
    # filterwarnings=error: torch's warning about non-writable arrays would fail here.
    copied = ar.to_torch({"x": array})["x"]
    assert copied.data_ptr() != _address(array)
    assert copied.tolist() == array.tolist()
    copied += 1  # the copy is the tensor's own: the array is untouched
    assert array[0, 0] == 0
    shared = ar.to_torch({"x": array}, readonly="share")["x"]
    assert shared.data_ptr() == _address(array)
    assert shared.tolist() == array.tolist()


@pytest.mark.anyio
@pytest.mark.both_backends
async def test_a_record_batch_becomes_a_uint8_tensor(torch: Any, tmp_path: Path) -> None:
    records = [bytes(range(i, i + 8)) for i in range(5)]
    batch = await _fixed_length_batch(tmp_path, records)
    view = batch.to_numpy()
    assert not view.flags.writeable  # a view of the reader's buffer
    copied = ar.to_torch(batch)
    assert copied.dtype == torch.uint8
    assert [bytes(row.tolist()) for row in copied] == records
    shared = ar.to_torch(batch, readonly="share")
    assert shared.data_ptr() == _address(view)
    assert [bytes(row.tolist()) for row in shared] == records


@pytest.mark.anyio
async def test_a_record_batch_of_unequal_lengths_is_refused(torch: Any, tmp_path: Path) -> None:
    path = tmp_path / "lines.txt"
    path.write_bytes(b"a\nbb\n")
    async with ar.Session():
        files = ar.string_input_producer([str(path)], num_epochs=1, shuffle=False)
        async with ar.TextLineReader() as reader:
            with anyio.fail_after(10):
                batch = await reader.read_batch(files, 2)
    with pytest.raises(ar.InvalidArgumentError):
        ar.to_torch(batch)


def test_big_endian_and_reversed_arrays_convert_by_value(torch: Any) -> None:
    big = np.arange(4, dtype=">i4")
    reversed_ = np.arange(5, dtype=np.float64)[::-1]
    got = ar.to_torch({"big": big, "rev": reversed_})
    assert got["big"].tolist() == [0, 1, 2, 3]
    assert got["rev"].tolist() == [4.0, 3.0, 2.0, 1.0, 0.0]


def test_sparse_values_become_sparse_tensors(torch: Any) -> None:
    sparse = ar.SparseTensorValue(
        np.array([[0, 0], [1, 2]], dtype=np.int64),
        np.array([1.5, 2.5], dtype=np.float32),
        np.array([2, 3], dtype=np.int64),
    )
    got = ar.to_torch({"v": sparse})["v"]
    assert got.is_sparse
    assert got.to_dense().tolist() == [[1.5, 0.0, 0.0], [0.0, 0.0, 2.5]]
    bad = ar.SparseTensorValue(
        np.array([[0, 9]], dtype=np.int64),
        np.array([1.0], dtype=np.float32),
        np.array([2, 3], dtype=np.int64),
    )
    with pytest.raises(ar.InvalidArgumentError, match=r"batch\['v'\]"):
        ar.to_torch({"v": bad})


def test_bad_arguments_are_refused(torch: Any) -> None:
    with pytest.raises(ar.InvalidArgumentError, match="readonly"):
        ar.to_torch(np.zeros(2), readonly="write")  # type: ignore[arg-type]
    if not torch.cuda.is_available():
        with pytest.raises(ar.FailedPreconditionError, match="pin_memory"):
            ar.to_torch(np.zeros(2), pin_memory=True)


def test_an_explicit_cpu_device_keeps_the_memory(torch: Any) -> None:
    array = np.ones(3, dtype=np.float32)
    assert ar.to_torch(array, device="cpu").data_ptr() == _address(array)


@pytest.mark.anyio
@pytest.mark.both_backends
async def test_torch_batches_iterates_a_batcher(torch: Any) -> None:
    with anyio.fail_after(10):
        async with ar.Coordinator():
            got = [b async for b in ar.torch_batches(ar.batch(_examples(9), 3))]
    assert [b["label"].tolist() for b in got] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
    assert all(isinstance(b["image"], torch.Tensor) for b in got)


@pytest.mark.anyio
async def test_torch_batches_passes_the_sources_error_on(torch: Any) -> None:
    async def failing() -> AsyncIterator[np.ndarray[Any, Any]]:
        yield np.zeros(2)
        raise ar.DataLossError("bad record")

    batches = ar.torch_batches(failing())
    with anyio.fail_after(10):
        assert (await batches.__anext__()).tolist() == [0.0, 0.0]
        with pytest.raises(ar.DataLossError, match="bad record"):
            await batches.__anext__()


@pytest.mark.anyio
async def test_torch_batches_copies_to_cuda_overlapped(torch: Any) -> None:
    if not torch.cuda.is_available():
        pytest.skip("no CUDA device on this machine: the copy to a GPU is not tested")

    async def batches() -> AsyncIterator[dict[str, np.ndarray[Any, Any]]]:
        for i in range(4):
            yield {"x": np.full((64, 64), i, dtype=np.float32)}

    got = []
    with anyio.fail_after(30):
        async for b in ar.torch_batches(batches(), device="cuda"):
            assert b["x"].device.type == "cuda"
            got.append(float(b["x"].mean().item()))
    assert got == [0.0, 1.0, 2.0, 3.0]

    async def failing() -> AsyncIterator[np.ndarray[Any, Any]]:
        yield np.ones(4, dtype=np.float32)
        raise ar.DataLossError("bad record")

    on_gpu = ar.torch_batches(failing(), device="cuda")
    with anyio.fail_after(30):
        # The batch before the error is handed over first, then the error.
        assert (await on_gpu.__anext__()).sum().item() == 4.0
        with pytest.raises(ar.DataLossError, match="bad record"):
            await on_gpu.__anext__()


def test_missing_torch_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "torch", None)  # import torch now fails
    with pytest.raises(ar.FailedPreconditionError, match=r"asyncreader\[torch\]"):
        ar.to_torch({"x": np.zeros(2)})
    with pytest.raises(ar.FailedPreconditionError, match=r"asyncreader\[torch\]"):
        ar.torch_batches(_examples(1))


# --- JAX ------------------------------------------------------------------------------------


def _aligned(n: int, alignment: int = 64) -> np.ndarray[Any, Any]:
    raw = np.empty(n * 4 + alignment, dtype=np.uint8)
    offset = -_address(raw) % alignment
    return raw[offset : offset + n * 4].view(np.float32)


def test_to_jax_aliases_aligned_arrays_and_keeps_the_structure(jax: Any) -> None:
    image = _aligned(16)
    image[:] = np.arange(16)
    got = ar.to_jax({"image": image, "name": np.array([b"a"], dtype=object), "n": 3})
    assert isinstance(got["image"], jax.Array)
    assert got["image"].unsafe_buffer_pointer() == _address(image)  # no copy
    assert got["image"].tolist() == list(range(16))
    assert got["name"].tolist() == [b"a"]
    assert got["n"] == 3


def test_to_jax_takes_read_only_and_unaligned_arrays(jax: Any) -> None:
    array = np.arange(10, dtype=np.float32)[1:]
    array.flags.writeable = False
    got = ar.to_jax((array,))
    assert isinstance(got, tuple)
    assert got[0].tolist() == array.tolist()


def test_to_jax_sparse_values_become_bcoo(jax: Any) -> None:
    sparse = ar.SparseTensorValue(
        np.array([[0, 1], [1, 0]], dtype=np.int64),
        np.array([3.0, 4.0], dtype=np.float32),
        np.array([2, 2], dtype=np.int64),
    )
    got = ar.to_jax([sparse])[0]
    assert got.todense().tolist() == [[0.0, 3.0], [4.0, 0.0]]


def test_missing_jax_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "jax", None)
    with pytest.raises(ar.FailedPreconditionError, match=r"asyncreader\[jax\]"):
        ar.to_jax({"x": np.zeros(2)})
