"""A pipeline to checkpoint part-way and resume: shared by the tests and a child process.

``string_input_producer`` (shuffled, 2 epochs) -> TFRecordReader(s) with ``read_up_to`` ->
ids decoded from each record's first 8 bytes, plus augmentation noise from a tracked
generator -> ``shuffle_batch`` (or ``batch``) -> consumer. With ``records=True`` the
batcher holds the records themselves, saved as references (``record_refs``), and ids and
noise are made from each batch (TensorFlow 1.x's "batch the records, parse the batch").
Run as a script it restores from a checkpoint file and prints the remaining batches as
JSON, so a test can resume in a new process.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass, field
from typing import Any

import anyio
import anyio.lowlevel
import numpy as np

import asyncreader as ar

#: Turns a hang into a failure; generous so that a slow machine never trips it.
HANG_GUARD = 30.0


@dataclass
class Config:
    paths: list[str]
    compression: str = ""
    deterministic: bool = True
    threads: int = 1
    shuffle: bool = True
    epochs: int = 2
    batch_size: int = 16
    chunk: int = 5
    records: bool = False


@dataclass
class Outcome:
    ids: list[list[int]] = field(default_factory=list)
    noise: list[list[float]] = field(default_factory=list)
    checkpoint: bytes | None = None


async def run(
    cfg: Config,
    *,
    restore: bytes | None = None,
    take: int | None = None,
    backend_yield: bool = False,
    checkpoint_every: int | None = None,
    saved: list[tuple[int, bytes]] | None = None,
    out: Outcome | None = None,
) -> Outcome:
    """Run the pipeline; after ``take`` batches, checkpoint and stop.

    With ``checkpoint_every``, append ``(batches so far, checkpoint)`` to ``saved`` every
    that many batches. Batches go to ``out`` (a new Outcome by default) as they arrive,
    so a caller that cancels the run still sees them. ``cfg.threads`` readers each feed
    one source of a ``*_join`` batcher (TensorFlow's idiom for several readers); one
    reader uses plain batching.
    """
    out = Outcome() if out is None else out
    with anyio.fail_after(HANG_GUARD):
        async with ar.Session(restore=restore, deterministic=cfg.deterministic) as sess:
            files = ar.string_input_producer(
                cfg.paths, num_epochs=cfg.epochs, shuffle=True, seed=7, capacity=3
            )
            readers = [
                ar.TFRecordReader(compression_type=cfg.compression) for _ in range(cfg.threads)
            ]
            rng = sess.track_rng("augment", np.random.default_rng(5))

            def ids_of(values: Any) -> np.ndarray[Any, Any]:
                return np.frombuffer(b"".join(v[:8] for v in values), dtype="<i8")

            def source(reader: ar.TFRecordReader) -> Any:
                async def records() -> tuple[list[bytes], list[bytes]]:
                    return await reader.read_up_to(files, cfg.chunk)

                async def example() -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
                    _, values = await reader.read_up_to(files, cfg.chunk)
                    ids = np.frombuffer(b"".join(v[:8] for v in values), dtype="<i8")
                    return ids, rng.random(len(ids))

                return records if cfg.records else example

            sources = [source(r) for r in readers]
            common: dict[str, Any] = {"enqueue_many": True, "allow_smaller_final_batch": True}
            if cfg.records:
                common["record_refs"] = readers[0]
            batches: Any
            if cfg.shuffle:
                common.update(capacity=48, min_after_dequeue=20, seed=3)
                if len(sources) == 1:
                    batches = ar.shuffle_batch(sources[0], cfg.batch_size, **common)
                else:
                    batches = ar.shuffle_batch_join(sources, cfg.batch_size, **common)
            elif len(sources) == 1:
                batches = ar.batch(sources[0], cfg.batch_size, capacity=40, **common)
            else:
                batches = ar.batch_join(sources, cfg.batch_size, capacity=40, **common)
            async for ids, noise in batches:
                if cfg.records:  # (keys, values): parse and augment the batch
                    ids = ids_of(noise)
                    noise = rng.random(len(ids))
                out.ids.append(ids.tolist())
                out.noise.append(noise.tolist())
                if backend_yield:
                    await anyio.lowlevel.checkpoint()
                if checkpoint_every and saved is not None and len(out.ids) % checkpoint_every == 0:
                    saved.append((len(out.ids), await sess.checkpoint()))
                if take is not None and len(out.ids) == take:
                    out.checkpoint = await sess.checkpoint()
                    break
    return out


def main() -> None:
    """``python resumable_pipeline.py CONFIG_JSON CHECKPOINT_FILE``: print the rest."""
    cfg = Config(**json.loads(sys.argv[1]))
    with open(sys.argv[2], "rb") as f:
        state = f.read()
    out = anyio.run(lambda: run(cfg, restore=state))
    print(json.dumps({"ids": out.ids, "noise": out.noise}))


if __name__ == "__main__":
    main()
