"""Every complete program in the documentation runs as printed.

A ``python`` code block that calls ``anyio.run(`` / ``trio.run(`` (or is marked with a
first line ``# runnable``) is a complete program: it is run in a fresh interpreter and
must exit 0. Shorter fragments are illustrations and are not run. The programs find the
files the docs say they read (``lines.txt``, CIFAR-10-format ``data_batch_*.bin``,
``train-*.tfrecord`` shards of ``tf.train.Example``) in their working directory.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import asyncreader as ar

DOCS = Path(__file__).resolve().parent.parent / "docs"
_BLOCK = re.compile(r"^```python\n(.*?)^```", re.S | re.M)


def _programs() -> list[tuple[str, str]]:
    found = []
    for page in sorted(DOCS.rglob("*.md")):
        blocks = _BLOCK.findall(page.read_text(encoding="utf-8"))
        for i, code in enumerate(blocks):
            if "anyio.run(" in code or "trio.run(" in code or code.startswith("# runnable"):
                found.append((f"{page.relative_to(DOCS)}#{i}", code))
    return found


PROGRAMS = _programs()


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The files the documentation's programs read."""
    directory = tmp_path_factory.mktemp("docs")
    (directory / "lines.txt").write_text("id,value\n1,0.5\n2,1.5\n3,\n")
    rng = np.random.default_rng(0)
    for name in [f"data_batch_{i}.bin" for i in range(1, 6)] + ["test_batch.bin"]:
        records = rng.integers(0, 256, size=(200, 3073), dtype=np.uint8)
        records[:, 0] %= 10
        (directory / name).write_bytes(records.tobytes())
    for shard in range(2):
        with ar.TFRecordWriter(str(directory / f"train-{shard}.tfrecord")) as writer:
            for i in range(500):
                example = ar.Example({"x": [float(shard * 500 + i)], "label": [i % 10]})
                writer.write(example.SerializeToString())
    return directory


def test_the_docs_have_programs() -> None:
    assert any(name.startswith("guides/checkpoints.md") for name, _ in PROGRAMS)


@pytest.mark.parametrize(("name", "code"), PROGRAMS, ids=[name for name, _ in PROGRAMS])
def test_docs_program_runs(name: str, code: str, workdir: Path) -> None:
    for optional in ("torch", "jax"):
        if re.search(rf"^import {optional}\b", code, re.M):
            pytest.importorskip(optional, reason=f"{optional} (an optional extra) is not installed")
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=workdir,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"{name} failed:\n{done.stdout}\n{done.stderr}"
