"""The ``asyncreader`` command: help, version, demo, argument errors and Ctrl-C."""

from __future__ import annotations

import io
import re
import signal
import subprocess
import sys
from typing import TYPE_CHECKING

import pytest

import asyncreader
from asyncreader._cli.main import main
from asyncreader._cli.progress import make_progress
from asyncreader.cifar10 import write_synthetic_dataset

if TYPE_CHECKING:
    from pathlib import Path

    from asyncreader._demo.training import Progress

# Runs the command line tool in a child process with Python's own Ctrl-C handler installed,
# even when this process was started with SIGINT ignored (as background jobs are).
LAUNCHER = (
    "import signal, sys; signal.signal(signal.SIGINT, signal.default_int_handler); "
    "from asyncreader._cli.main import main; sys.exit(main())"
)
# Small and quick: the shuffle queue holds a few batches instead of 40% of an epoch.
QUICK = ["--batch-size", "32", "--shuffle-buffer", "256", "--progress", "none"]


@pytest.fixture(scope="module")
def small_cifar10(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A CIFAR-10 binary folder with 500 records per file."""
    folder = tmp_path_factory.mktemp("cifar10")
    write_synthetic_dataset(folder, records_per_file=500)
    return folder


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", LAUNCHER, *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def accuracy(output: str) -> float:
    found = re.search(r"held-out accuracy: ([\d.]+)% on ([\d,]+) test images", output)
    assert found, output
    return float(found[1]) / 100


def test_help_lists_the_subcommands(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for command in ("demo", "make-cifar10", "version"):
        assert command in out


def test_demo_help_describes_its_options(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(["demo", "--help"])
    assert exit_info.value.code == 0
    out = capsys.readouterr().out
    for option in ("--data-dir", "--steps", "--backend", "--readers", "--shuffle-buffer"):
        assert option in out


def test_console_script_help() -> None:
    done = run_cli("--help")
    assert done.returncode == 0
    assert done.stdout.startswith("usage: asyncreader")


def test_version_prints_the_package_version(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["version"]) == 0
    assert capsys.readouterr().out == f"asyncreader {asyncreader.__version__}\n"


def test_demo_trains_well_above_chance(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # No --data-dir: the synthetic set is written to the cache folder, then reused.
    cache = tmp_path / "cache"
    assert main(["demo", "--cache-dir", str(cache), "--steps", "40", *QUICK]) == 0
    out = capsys.readouterr().out
    assert f"wrote synthetic CIFAR-10 to {cache}" in out
    assert re.search(r"throughput: [\d,]+ images/s \(1,280 images in", out), out
    assert accuracy(out) > 0.5  # chance is 0.1
    assert "10,000 test images" in out

    assert main(["demo", "--cache-dir", str(cache), "--steps", "1", *QUICK]) == 0
    assert f"using synthetic CIFAR-10 in {cache}" in capsys.readouterr().out


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_demo_on_a_data_dir(
    backend: str, small_cifar10: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["demo", "--data-dir", str(small_cifar10), "--steps", "40", "--backend", backend]
    assert main([*argv, *QUICK]) == 0
    out = capsys.readouterr().out
    assert f"(2 readers, {backend})" in out
    assert "throughput: " in out
    assert "synthetic" not in out  # the given folder is used as it is
    assert accuracy(out) > 0.5
    assert "on 500 test images" in out


def test_demo_with_one_reader_and_plain_progress(
    small_cifar10: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["demo", "--data-dir", str(small_cifar10), "--steps", "5", "--readers", "1"]
    assert main([*argv, "--batch-size", "16", "--shuffle-buffer", "64", "--progress", "plain"]) == 0
    captured = capsys.readouterr()
    assert "(1 reader, asyncio)" in captured.out
    assert "train 5/5 100% | " in captured.err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["train"], "invalid choice: 'train'"),
        (["demo", "--steps", "0"], "argument --steps: must be positive, not 0"),
        (["demo", "--steps", "ten"], "argument --steps: not an integer: 'ten'"),
        (["demo", "--backend", "curio"], "argument --backend: invalid choice: 'curio'"),
        (["demo", "--shuffle-buffer", "-1"], "argument --shuffle-buffer: must be 0 or more"),
        (["demo", "--no-such-option"], "unrecognized arguments: --no-such-option"),
    ],
)
def test_bad_arguments_are_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        main(argv)
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("usage: asyncreader")
    assert message in err


def test_data_dir_without_cifar10_files_is_a_clear_error(tmp_path: Path) -> None:
    (tmp_path / "data_batch_1.bin").write_bytes(b"\0" * 100)  # not whole 3,073-byte records
    done = run_cli("demo", "--data-dir", str(tmp_path), "--steps", "1")
    assert done.returncode == 1
    assert done.stderr.startswith(f"asyncreader demo: error: {tmp_path} does not hold")
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize("backend", ["asyncio", "trio"])
def test_ctrl_c_during_training_exits_promptly_without_traceback(
    backend: str, small_cifar10: Path
) -> None:
    argv = ["demo", "--data-dir", str(small_cifar10), "--steps", "1000000", "--backend", backend]
    with subprocess.Popen(
        [sys.executable, "-c", LAUNCHER, *argv, *QUICK[:-1], "plain"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    ) as proc:
        assert proc.stderr is not None
        # Plain progress prints its first line after the first training step.
        first = proc.stderr.readline()
        assert first.startswith("train "), first
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=30)
    assert proc.returncode == 130
    assert "Traceback" not in err
    assert "interrupted while training: " in out
    assert re.search(r"interrupted while training: \d+ steps, [\d,]+ images", out), out


def test_the_demo_and_cifar10_do_not_import_the_command_line_tool() -> None:
    # The command line tool sits above the demo and asyncreader.cifar10: importing them
    # (as a user of asyncreader.cifar10 does) must not pull in the tool.
    code = (
        "import sys, asyncreader.cifar10, asyncreader._demo.training; "
        "print(sorted(name for name in sys.modules if name.startswith('asyncreader._cli')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=True
    )
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("kind", ["none", "plain", "auto"])
def test_every_progress_display_is_what_the_training_loop_reports_to(kind: str) -> None:
    # The training loop knows the displays only through the Progress protocol; each display
    # make_progress returns must count the steps it is shown (checked statically as well).
    stream = io.StringIO()
    display: Progress = make_progress(kind, 3, "train", stream)
    with display as entered:
        assert entered is display
        for step in (1, 2, 3):
            display.update(step, f"step {step}")
    shown = stream.getvalue()
    if kind == "none":
        assert shown == ""
    else:  # "auto" on a stream that is not a terminal is plain lines
        assert shown.splitlines()[-1] == "train 3/3 100% | step 3"
