"""Batches as torch tensors and JAX arrays, without copies where the memory allows.

A batch from :class:`~asyncreader.Batcher` is a dict, tuple or list of numpy arrays (and
:class:`~asyncreader.SparseTensorValue` for ``VarLenFeature``). :func:`to_torch` and
:func:`to_jax` rebuild the same structure with tensors / arrays in place of the numeric
arrays; :func:`torch_batches` does that for every batch of a source and, for a CUDA device,
copies each batch to the device on a side stream while the previous one is in use.

Neither torch nor JAX is a dependency (``asyncreader[torch]``, ``asyncreader[jax]``): they
are imported on the first call, never by ``import asyncreader``.

Memory: ``torch.from_numpy`` shares a writable array's memory (no copy; the tensor keeps
the array alive). A read-only array (the library hands out read-only views of a reader's
buffers, e.g. :meth:`RecordBatch.to_numpy`) is copied by default, because a tensor is
writable and an in-place op on a shared read-only buffer would corrupt the records it
holds; ``readonly="share"`` shares it anyway for callers that never write. JAX arrays are
immutable, so sharing is always safe there; ``jax.device_put`` aliases numpy memory on the
CPU when it is 64-byte aligned and copies otherwise.
"""

from __future__ import annotations

import warnings
from collections.abc import AsyncIterable, AsyncIterator, Callable, Mapping
from typing import Any, Literal

import numpy as np

from .._decoders.features import SparseTensorValue
from .._errors import FailedPreconditionError, InvalidArgumentError
from .._records.batch import RecordBatch

__all__ = ["to_jax", "to_torch", "torch_batches"]

Readonly = Literal["copy", "share"]

# dtype kinds with a torch / JAX counterpart: bool, signed, unsigned, float, complex.
# Strings and objects (bytes features, keys) have none and stay numpy arrays.
_NUMERIC_KINDS = frozenset("biufc")


def _import_torch() -> Any:
    try:
        import torch
    except ImportError:
        raise FailedPreconditionError(
            "converting batches to torch tensors needs PyTorch: install it (a CPU build: "
            "pip install torch --index-url https://download.pytorch.org/whl/cpu) or "
            "pip install 'asyncreader[torch]'"
        ) from None
    return torch


def _import_jax() -> Any:
    try:
        import jax
    except ImportError:
        raise FailedPreconditionError(
            "converting batches to JAX arrays needs JAX: pip install 'asyncreader[jax]'"
        ) from None
    return jax


def _check_readonly(readonly: str) -> None:
    if readonly not in ("copy", "share"):
        raise InvalidArgumentError(f"readonly must be 'copy' or 'share', not {readonly!r}")


def _map(
    batch: Any, leaf: Callable[[np.ndarray[Any, Any], str], Any], sparse: Any, path: str
) -> Any:
    """Rebuild ``batch`` with ``leaf(array, path)`` for each numeric array."""
    if isinstance(batch, np.ndarray):
        return leaf(batch, path) if batch.dtype.kind in _NUMERIC_KINDS else batch
    if isinstance(batch, np.generic):
        return leaf(np.asarray(batch), path) if batch.dtype.kind in _NUMERIC_KINDS else batch
    if isinstance(batch, Mapping):
        return {k: _map(v, leaf, sparse, f"{path}[{k!r}]") for k, v in batch.items()}
    if isinstance(batch, tuple):
        items = [_map(v, leaf, sparse, f"{path}[{i}]") for i, v in enumerate(batch)]
        # A named tuple is rebuilt as its own type.
        return type(batch)(*items) if hasattr(batch, "_fields") else tuple(items)
    if isinstance(batch, list):
        return [_map(v, leaf, sparse, f"{path}[{i}]") for i, v in enumerate(batch)]
    if isinstance(batch, SparseTensorValue):
        if batch.values.dtype.kind not in _NUMERIC_KINDS:
            return batch
        return sparse(batch, path)
    if isinstance(batch, RecordBatch):
        # Records of one length as a (n, length) uint8 array; a strided read-only view of
        # the reader's buffer where the layout allows. Unequal lengths raise
        # InvalidArgumentError (RecordBatch.to_numpy).
        return leaf(batch.to_numpy(), path)
    return batch  # Python scalars, bytes, None: as they are


# --- torch --------------------------------------------------------------------------------


def _torch_leaf(torch: Any, readonly: Readonly) -> Callable[[np.ndarray[Any, Any], str], Any]:
    def leaf(array: np.ndarray[Any, Any], path: str) -> Any:
        if not array.dtype.isnative:  # torch has no big-endian tensors: one copy
            array = array.astype(array.dtype.newbyteorder("="))
        if any(s < 0 for s in array.strides):  # nor negative strides
            array = np.ascontiguousarray(array)
        if not array.flags.writeable:
            if readonly == "copy":
                # numpy's copy, then shared: torch.tensor() copies a read-only array
                # several times slower.
                array = array.copy()
            else:
                # The caller promises not to write: share the memory. torch warns about any
                # non-writable array; this one is read-only on purpose.
                with warnings.catch_warnings():
                    warnings.filterwarnings(
                        "ignore",
                        message="The given NumPy array is not writable",
                        category=UserWarning,
                    )
                    return _from_numpy(torch, array, path)
        return _from_numpy(torch, array, path)

    return leaf


def _from_numpy(torch: Any, array: np.ndarray[Any, Any], path: str) -> Any:
    try:
        return torch.from_numpy(array)
    except (TypeError, ValueError, RuntimeError) as exc:
        raise _unconvertible(array, path, exc) from exc


def _unconvertible(array: np.ndarray[Any, Any], path: str, exc: Exception) -> InvalidArgumentError:
    return InvalidArgumentError(
        f"cannot make a torch.Tensor of batch{path} ({array.dtype}, shape {array.shape}): {exc}"
    )


def _torch_sparse(torch: Any, leaf: Callable[[np.ndarray[Any, Any], str], Any]) -> Any:
    def sparse(value: SparseTensorValue, path: str) -> Any:
        indices = leaf(value.indices, f"{path}.indices")
        values = leaf(value.values, f"{path}.values")
        shape = tuple(int(n) for n in value.dense_shape)
        try:
            # Checked: a SparseTensorValue built by hand may hold indices out of range,
            # which unchecked sparse tensors turn into memory errors.
            return torch.sparse_coo_tensor(
                indices.T, values, shape, is_coalesced=True, check_invariants=True
            )
        except (TypeError, ValueError, RuntimeError) as exc:
            raise InvalidArgumentError(
                f"cannot make a sparse tensor of batch{path}: {exc}"
            ) from exc

    return sparse


def _pin(torch: Any, tensors: Any) -> Any:
    """Pin every tensor in the structure (one copy each into page-locked memory)."""
    if isinstance(tensors, torch.Tensor):
        return tensors.pin_memory()
    if isinstance(tensors, dict):
        return {k: _pin(torch, v) for k, v in tensors.items()}
    if isinstance(tensors, tuple):
        items = [_pin(torch, v) for v in tensors]
        return type(tensors)(*items) if hasattr(tensors, "_fields") else tuple(items)
    if isinstance(tensors, list):
        return [_pin(torch, v) for v in tensors]
    return tensors


def _to_device(torch: Any, tensors: Any, device: Any, non_blocking: bool) -> Any:
    if isinstance(tensors, torch.Tensor):
        return tensors.to(device, non_blocking=non_blocking)
    if isinstance(tensors, dict):
        return {k: _to_device(torch, v, device, non_blocking) for k, v in tensors.items()}
    if isinstance(tensors, tuple):
        items = [_to_device(torch, v, device, non_blocking) for v in tensors]
        return type(tensors)(*items) if hasattr(tensors, "_fields") else tuple(items)
    if isinstance(tensors, list):
        return [_to_device(torch, v, device, non_blocking) for v in tensors]
    return tensors


def _each_tensor(torch: Any, tensors: Any) -> list[Any]:
    if isinstance(tensors, torch.Tensor):
        return [tensors]
    if isinstance(tensors, dict):
        tensors = list(tensors.values())
    if isinstance(tensors, (tuple, list)):
        return [t for v in tensors for t in _each_tensor(torch, v)]
    return []


def _cuda_device(torch: Any, device: Any) -> Any:
    """``device`` as a ``torch.device`` if it is a CUDA device, else ``None``."""
    if device is None:
        return None
    dev = torch.device(device)
    return dev if dev.type == "cuda" else None


def to_torch(
    batch: Any,
    *,
    device: Any = None,
    pin_memory: bool = False,
    non_blocking: bool = False,
    readonly: Readonly = "copy",
) -> Any:
    """Return ``batch`` with a ``torch.Tensor`` for each numeric numpy array.

    The structure is kept: a dict gives a dict, a tuple (or named tuple) a tuple, a list a
    list. A numeric array becomes ``torch.from_numpy(array)``, which shares its memory (no
    copy). Arrays of strings or objects (``bytes`` features, keys) have no tensor type and
    stay numpy arrays; other values are returned as they are. A
    :class:`~asyncreader.SparseTensorValue` becomes a sparse COO tensor; a
    :class:`~asyncreader.RecordBatch` of equal-length records the ``(n, length)`` ``uint8``
    tensor of :meth:`RecordBatch.to_numpy`.

    Args:
        batch: A batch (or one example): arrays in dicts, tuples and lists.
        device: Copy the tensors to this device (``"cuda"``, ``torch.device(...)``);
            ``None`` leaves them on the CPU, sharing the arrays' memory.
        pin_memory: Copy the tensors into page-locked memory first, so that a copy to a
            CUDA device can run asynchronously. Needs CUDA.
        non_blocking: Passed to ``Tensor.to`` for the copy to ``device`` (asynchronous
            from pinned memory).
        readonly: What to do with a read-only array (the library hands out read-only views
            of a reader's buffers): ``"copy"`` (the default) copies it, since tensors are
            writable; ``"share"`` shares its memory anyway, for callers that never write
            to the tensor in place.

    Returns:
        The batch, tensors in place of numeric arrays.

    Raises:
        FailedPreconditionError: PyTorch is not installed, or ``pin_memory=True`` without
            CUDA.
        InvalidArgumentError: an array torch cannot hold (the message names its place in
            the batch), a :class:`~asyncreader.RecordBatch` of unequal record lengths, or a
            bad ``readonly``.
    """
    _check_readonly(readonly)
    torch = _import_torch()
    if pin_memory and not torch.cuda.is_available():
        raise FailedPreconditionError(
            "pin_memory=True needs CUDA, and torch.cuda.is_available() is False: pass "
            "pin_memory=torch.cuda.is_available()"
        )
    leaf = _torch_leaf(torch, readonly)
    tensors = _map(batch, leaf, _torch_sparse(torch, leaf), "")
    if pin_memory:
        tensors = _pin(torch, tensors)
    if device is not None:
        tensors = _to_device(torch, tensors, device, non_blocking)
    return tensors


class _TorchBatches:
    """The async iterator :func:`torch_batches` returns."""

    __slots__ = (
        "_device",
        "_done",
        "_error",
        "_pending",
        "_pin",
        "_readonly",
        "_source",
        "_stream",
        "_torch",
    )

    def __init__(
        self, source: AsyncIterable[Any], device: Any, pin: bool, readonly: Readonly
    ) -> None:
        self._torch = torch = _import_torch()
        if pin and not torch.cuda.is_available():
            raise FailedPreconditionError(
                "pin_memory=True needs CUDA, and torch.cuda.is_available() is False"
            )
        self._source = source.__aiter__()
        self._device = device
        self._readonly = readonly
        cuda = _cuda_device(torch, device)
        self._pin = pin
        # The side stream the copies run on, so they overlap the default stream's work.
        self._stream = torch.cuda.Stream(device=cuda) if cuda is not None else None
        self._pending: tuple[Any, Any] | None = None  # the next batch, its copy's event
        self._error: Exception | None = None  # the source's error, after the batch before it
        self._done = False

    def __aiter__(self) -> _TorchBatches:
        return self

    def _start(self, batch: Any) -> tuple[Any, Any]:
        """Convert ``batch`` and queue its copy on the side stream; return the device
        tensors and an event recorded after the copy."""
        torch = self._torch
        host = to_torch(batch, pin_memory=self._pin, readonly=self._readonly)
        with torch.cuda.stream(self._stream):
            tensors = _to_device(torch, host, self._device, non_blocking=True)
            event = torch.cuda.Event()
            event.record(self._stream)
        return tensors, event

    def _ready(self, tensors: Any, event: Any) -> Any:
        """Make the consumer's stream wait for the copy of ``tensors`` (only that copy: the
        next batch's, queued after it, goes on while the consumer computes)."""
        assert self._stream is not None
        current = self._torch.cuda.current_stream(self._stream.device)
        current.wait_event(event)
        for tensor in _each_tensor(self._torch, tensors):
            # Allocated on the copy stream: keep its memory until the consumer's stream
            # is done with it.
            tensor.record_stream(current)
        return tensors

    async def _next_source(self) -> Any:
        if self._error is not None:
            error, self._error = self._error, None
            raise error
        if self._done:
            raise StopAsyncIteration
        try:
            return await self._source.__anext__()
        except StopAsyncIteration:
            self._done = True
            raise

    async def __anext__(self) -> Any:
        if self._stream is None:
            return to_torch(
                await self._next_source(),
                device=self._device,
                pin_memory=self._pin,
                readonly=self._readonly,
            )
        if self._pending is None:
            self._pending = self._start(await self._next_source())
        ready, self._pending = self._pending, None
        # The next batch's copy is queued before this one is handed over, so it runs while
        # the consumer computes on this one. An error of the source's is raised on the next
        # call, after this batch is handed over (no batch is lost).
        try:
            self._pending = self._start(await self._next_source())
        except StopAsyncIteration:
            pass
        except Exception as exc:
            self._error = exc
        return self._ready(*ready)


def torch_batches(
    source: AsyncIterable[Any],
    *,
    device: Any = None,
    pin_memory: bool | None = None,
    readonly: Readonly = "copy",
) -> AsyncIterator[Any]:
    """Iterate over ``source``'s batches as torch tensors, copied to ``device``.

    Each batch goes through :func:`to_torch`. For a CUDA ``device`` the batches are pinned
    (unless ``pin_memory=False``) and copied on a side stream, and the copy of the next
    batch is started before the current one is handed over, so it overlaps the model's
    work on the current one; the consumer's stream waits for a batch's copy before using
    it. For the CPU (``device=None`` or ``"cpu"``) the tensors share the arrays' memory.

    Args:
        source: An async iterable of batches (a :class:`~asyncreader.Batcher`, the result
            of a parallel ``map``, any async generator).
        device: Where the tensors go (``None``: the CPU).
        pin_memory: Pin the host tensors before the copy; default ``True`` for a CUDA
            device, ``False`` otherwise.
        readonly: As for :func:`to_torch`.

    Returns:
        An async iterator of converted batches, ending when ``source`` ends.

    Raises:
        FailedPreconditionError: PyTorch is not installed, or ``pin_memory=True`` without
            CUDA.
        InvalidArgumentError: a bad ``readonly``; while iterating, as :func:`to_torch`.
    """
    _check_readonly(readonly)
    torch = _import_torch()
    pin = _cuda_device(torch, device) is not None if pin_memory is None else bool(pin_memory)
    return _TorchBatches(source, device, pin, readonly)


# --- JAX ----------------------------------------------------------------------------------


def to_jax(batch: Any, *, device: Any = None) -> Any:
    """Return ``batch`` with a JAX array for each numeric numpy array.

    The structure is kept as by :func:`to_torch`; string and object arrays stay numpy
    arrays. Each array goes through ``jax.device_put``, which on the CPU aliases the
    array's memory when it is 64-byte aligned and copies it otherwise (JAX arrays are
    immutable, so read-only arrays are fine either way). A
    :class:`~asyncreader.SparseTensorValue` becomes a ``jax.experimental.sparse.BCOO``.
    64-bit arrays follow JAX's ``jax_enable_x64`` setting: without it JAX stores
    ``int64`` / ``float64`` as 32-bit.

    Args:
        batch: A batch (or one example): arrays in dicts, tuples and lists.
        device: A ``jax.Device`` (or sharding) to put the arrays on; ``None``: JAX's
            default device.

    Returns:
        The batch, JAX arrays in place of numeric arrays.

    Raises:
        FailedPreconditionError: JAX is not installed.
        InvalidArgumentError: an array JAX cannot hold (the message names its place in the
            batch), or a :class:`~asyncreader.RecordBatch` of unequal record lengths.
    """
    jax = _import_jax()

    def leaf(array: np.ndarray[Any, Any], path: str) -> Any:
        try:
            return jax.device_put(array, device)
        except (TypeError, ValueError) as exc:
            raise InvalidArgumentError(
                f"cannot make a JAX array of batch{path} ({array.dtype}, shape "
                f"{array.shape}): {exc}"
            ) from exc

    def sparse(value: SparseTensorValue, path: str) -> Any:
        from jax.experimental import sparse as jsparse

        shape = tuple(int(n) for n in value.dense_shape)
        data = (leaf(value.values, f"{path}.values"), leaf(value.indices, f"{path}.indices"))
        return jsparse.BCOO(data, shape=shape, indices_sorted=True, unique_indices=True)

    return _map(batch, leaf, sparse, "")
