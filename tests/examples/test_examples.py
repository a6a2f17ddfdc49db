"""Every script in ``examples/`` runs as shipped, on small inputs."""

from __future__ import annotations

import json
import runpy
import signal
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from asyncreader.cifar10 import write_synthetic_dataset

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"


def load_example(name: str) -> dict[str, Any]:
    """Run ``examples/<name>.py`` as a module (not as ``__main__``); return its globals."""
    return runpy.run_path(str(EXAMPLES / f"{name}.py"))


@pytest.fixture
def small_cifar10(tmp_path: Path) -> Path:
    """A CIFAR-10 binary folder with 200 records per file."""
    write_synthetic_dataset(tmp_path, records_per_file=200)
    return tmp_path


def test_every_example_is_tested() -> None:
    tested = {
        "aiofiles_reader",
        "cifar10_train",
        "custom_reader",
        "ray_train",
        "tfrecord_example_roundtrip",
        "torch_train",
        "web_service",
    }
    assert {path.stem for path in EXAMPLES.glob("*.py")} == tested


@pytest.mark.parametrize("name", ["aiofiles_reader", "custom_reader", "tfrecord_example_roundtrip"])
def test_example_runs_as_a_script(name: str) -> None:
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / f"{name}.py")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout
    assert "Traceback" not in done.stderr


def test_torch_example_trains_a_model_from_tfrecord_files(
    capsys: pytest.CaptureFixture[str],
) -> None:
    pytest.importorskip("torch", reason="PyTorch (asyncreader[torch]) is not installed")
    accuracy = load_example("torch_train")["main"](["--epochs", "2"])
    assert accuracy > 0.9
    assert "accuracy on 1000 new examples" in capsys.readouterr().out


@pytest.mark.timeout(240)
def test_ray_example_survives_a_killed_rank_and_restores_with_fewer_ranks(tmp_path: Path) -> None:
    pytest.importorskip("ray", reason='Ray is not installed: pip install "asyncreader[ray]"')
    # Its own process: it starts (and shuts down) a local Ray cluster of its own.
    done = subprocess.run(
        [sys.executable, str(EXAMPLES / "ray_train.py"), "--files", "5", "--per-file", "300"],
        capture_output=True,
        text=True,
        timeout=200,
        check=False,
        cwd=tmp_path,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    out = done.stdout
    assert "job 1: 3 ranks, rank(s) killed mid-epoch: [1]" in out
    # The other ranks finished the epoch: every record trained on once.
    assert "job 1: records trained on: 1500 of 1500; missing 0, twice 0" in out
    # The job checkpoint (taken before the kill) restored with 2 ranks: what was
    # acknowledged before it plus what the new job trained on is every record once.
    assert "job 2: restored with 2 ranks" in out
    assert "checkpoint + job 2: records trained on: 1500 of 1500; missing 0, twice 0" in out
    before = int(out.split(" bytes, ", 1)[1].split()[0])
    assert 0 < before < 1500  # the checkpoint is mid-epoch
    accuracy = float(out.rsplit("new examples: ", 1)[1].split()[0])
    assert accuracy > 0.9


def test_custom_reader_reads_every_record(capsys: pytest.CaptureFixture[str]) -> None:
    records = load_example("custom_reader")["main"]()
    assert [value for _, value in records] == [b"a", b"", b"xyz"]
    # Keys are "<work item>:<byte offset of the record>".
    assert [key.rsplit(b":", 1)[1] for key, _ in records] == [b"0", b"5", b"9"]
    assert "records.lp:9 b'xyz'" in capsys.readouterr().out


def test_aiofiles_reader_goes_on_exactly_from_its_saved_state(
    capsys: pytest.CaptureFixture[str],
) -> None:
    first, rest = load_example("aiofiles_reader")["main"]()
    assert first == [b"alpha", b"", b"beta"]
    assert rest == [b"gamma" * 5, b"delta", b"epsilon"]
    assert "then stopped at b'records.lp:13'" in capsys.readouterr().out


@pytest.mark.anyio
@pytest.mark.parametrize("anyio_backend", ["asyncio"])
async def test_aiofiles_reader_reads_big_files_and_names_a_cut(tmp_path: Path) -> None:
    import asyncreader as ar

    example = load_example("aiofiles_reader")
    head = example["_HEAD"]
    records = [bytes([i % 251]) * (i % 700) for i in range(3000)]
    data = b"".join(head.pack(len(r)) + r for r in records)
    (tmp_path / "a.lp").write_bytes(data)
    (tmp_path / "b.lp").write_bytes(data[:-5])  # the last record cut short
    queue = ar.FIFOQueue(None)
    await queue.enqueue_many([str(tmp_path / "a.lp"), str(tmp_path / "b.lp")])
    await queue.close()
    got: list[bytes] = []
    async with example["AsyncLengthPrefixedReader"](chunk=4096) as reader:
        while len(got) < 2 * len(records) - 1:
            got += (await reader.read_batch(queue, 500)).tolist()
        with pytest.raises(ar.DataLossError, match="truncated record") as info:
            await reader.read_up_to(queue, 500)
    assert got == records + records[:-1]
    assert info.value.offset == len(data) - len(head.pack(0)) - len(records[-1])
    assert str(tmp_path / "b.lp") in str(info.value)


@pytest.mark.parametrize("compression", [None, "ZLIB", "GZIP"])
def test_tfrecord_example_roundtrip(
    compression: str | None, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["--examples", "45"] + (["--compression", compression] if compression else [])
    parsed = load_example("tfrecord_example_roundtrip")["main"](argv)
    assert parsed["image"].shape == (45, 4, 4)
    assert parsed["image"].dtype == np.float32
    assert parsed["label"].dtype == np.int64
    assert len(parsed["tags"]) == 45
    assert "wrote and read back 45 examples" in capsys.readouterr().out


def test_tfrecord_example_roundtrip_on_trio() -> None:
    example = load_example("tfrecord_example_roundtrip")
    parsed = example["main"](["--examples", "3", "--backend", "trio"])
    assert len(parsed["label"]) == 3


def test_cifar10_train_learns(small_cifar10: Path, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["--data-dir", str(small_cifar10), "--steps", "60", "--batch-size", "32"]
    accuracy = load_example("cifar10_train")["main"](argv)
    out = capsys.readouterr().out
    assert "step 60: loss = " in out
    assert "precision @ 1 = " in out
    assert accuracy > 0.3  # chance is 0.1


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_web_service_script_serves_until_ctrl_c(backend: str) -> None:
    # Run the script with Python's own Ctrl-C handler, even if this process ignores SIGINT.
    launcher = (
        "import runpy, signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
        "sys.argv = sys.argv[1:]; runpy.run_path(sys.argv[0], run_name='__main__')"
    )
    script = str(EXAMPLES / "web_service.py")
    with subprocess.Popen(
        [sys.executable, "-c", launcher, script, "--port", "0", "--backend", backend],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stdout is not None
        url = proc.stdout.readline().split()[-1]
        assert url.startswith("http://127.0.0.1:")
        with urllib.request.urlopen(url, timeout=10) as response:
            assert json.loads(response.read())["value"] == "record 1"
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=20)
    assert proc.returncode == 0, err
    assert "stopped" in out
    assert "Traceback" not in err
