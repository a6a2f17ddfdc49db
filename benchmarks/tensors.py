"""Batch-to-tensor conversion: ``ar.to_torch`` / ``ar.to_jax`` against the bare calls.

Run with ``python benchmarks/tensors.py`` (needs torch; the JAX rows need jax). One batch
of 1024 CIFAR-10-sized examples, as a Batcher hands it over: a ``(1024, 32, 32, 3)``
float32 image array, an int64 label array and an object array of keys. Each row is the best
of several runs of converting the whole batch, with its ratio to ``torch.from_numpy`` on
the two numeric arrays, and says whether every tensor shares the batch's memory (pointer
identity): ``to_torch`` must copy nothing for writable numpy arrays. For scale, the last
torch row copies the arrays (``torch.tensor``), and the read-only row shows the cost of
the copy ``to_torch`` makes of a read-only array by default.
"""

from __future__ import annotations

import sys
import time
from typing import TYPE_CHECKING, Any

import numpy as np

import asyncreader as ar

if TYPE_CHECKING:
    from collections.abc import Callable


def best_of(fn: Callable[[], Any], repeat: int = 50) -> float:
    fn()
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - start)
    return best


def make_batch(n: int = 1024) -> dict[str, np.ndarray[Any, Any]]:
    rng = np.random.default_rng(0)
    return {
        "image": rng.random((n, 32, 32, 3), dtype=np.float32),
        "label": rng.integers(0, 10, n).astype(np.int64),
        "key": np.array([b"data_batch_1.bin:%d" % i for i in range(n)], dtype=object),
    }


def address(array: np.ndarray[Any, Any]) -> int:
    return int(array.__array_interface__["data"][0])


def main() -> int:
    try:
        import torch
    except ImportError:
        print("torch is not installed: pip install 'asyncreader[torch]'")
        return 1
    batch = make_batch()
    readonly = {k: v.copy() for k, v in batch.items()}
    for array in readonly.values():
        array.flags.writeable = False

    def bare() -> Any:
        return {
            "image": torch.from_numpy(batch["image"]),
            "label": torch.from_numpy(batch["label"]),
        }

    def shares(tensors: dict[str, Any], source: dict[str, np.ndarray[Any, Any]]) -> str:
        same = all(tensors[k].data_ptr() == address(source[k]) for k in ("image", "label"))
        return "yes" if same else "no (copied)"

    rows: list[tuple[str, Callable[[], Any], dict[str, np.ndarray[Any, Any]]]] = [
        ("torch.from_numpy (2 arrays)", bare, batch),
        ("ar.to_torch (dict of 3)", lambda: ar.to_torch(batch), batch),
        ("ar.to_torch, read-only, copy", lambda: ar.to_torch(readonly), readonly),
        (
            "ar.to_torch, read-only, share",
            lambda: ar.to_torch(readonly, readonly="share"),
            readonly,
        ),
        (
            "torch.tensor (copies)",
            lambda: {"image": torch.tensor(batch["image"]), "label": torch.tensor(batch["label"])},
            batch,
        ),
    ]
    mib = (batch["image"].nbytes + batch["label"].nbytes) / 2**20
    print(f"one batch: 1024 examples, {mib:.1f} MiB of numeric arrays; torch {torch.__version__}")
    print(f"  {'variant':<32} {'us':>10} {'vs from_numpy':>14} {'shares memory':>14}")
    reference = None
    for name, fn, source in rows:
        seconds = best_of(fn)
        reference = reference or seconds
        print(
            f"  {name:<32} {seconds * 1e6:10.1f} {seconds / reference:13.2f}x "
            f"{shares(fn(), source):>14}"
        )
    try:
        import jax
    except ImportError:
        print("jax is not installed: the JAX rows are left out")
        return 0
    aligned = {k: v for k, v in batch.items() if k != "key"}
    jax_rows: list[tuple[str, Callable[[], Any]]] = [
        ("jax.device_put (2 arrays)", lambda: {k: jax.device_put(v) for k, v in aligned.items()}),
        ("ar.to_jax (dict of 3)", lambda: ar.to_jax(batch)),
    ]
    print(f"\njax {jax.__version__} (aliases 64-byte-aligned arrays on the CPU, copies others)")
    reference = None
    for name, fn in jax_rows:
        seconds = best_of(fn, repeat=10)
        reference = reference or seconds
        print(f"  {name:<32} {seconds * 1e6:10.1f} {seconds / reference:13.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
