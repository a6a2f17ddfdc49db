"""The README's quickstart and code example stay true."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

import asyncreader as ar

README = Path(__file__).resolve().parent.parent / "README.md"


def _blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README.read_text(), flags=re.DOTALL)


def _ci_commands() -> list[str]:
    lines = (README.parent / ".ci" / "run").read_text().splitlines()
    return [line for line in lines if line.strip() and not line.lstrip().startswith("#")]


def test_ci_runs_exactly_the_readme_test_command_last() -> None:
    commands = [b.strip() for b in _blocks("") if "pytest" in b and "venv" in b]
    assert len(commands) == 1
    # Last, so that the test run's exit status is the script's.
    assert _ci_commands()[-1] == commands[0]


def test_ci_runs_the_readme_development_checks_before_the_tests() -> None:
    development = re.search(r"## Development\n+```\n(.*?)```", README.read_text(), re.DOTALL)
    assert development is not None
    install, checks = development[1].splitlines()[:2]
    ci = _ci_commands()
    # One command a line: `set -e` would not stop at a failure inside an `&&` chain.
    steps = [install, *checks.split(" && ")]
    assert all(step in ci for step in steps), steps
    positions = [ci.index(step) for step in steps]
    assert positions == sorted(positions)
    assert positions[-1] < len(ci) - 1


def test_quickstart_runs_the_demo() -> None:
    assert any(b.strip().endswith("asyncreader demo") for b in _blocks(""))


def test_readme_example_reads_every_example_twice(tmp_path: Path, monkeypatch: Any) -> None:
    (source,) = _blocks("python")
    monkeypatch.chdir(tmp_path)
    files = []
    for shard in range(2):
        path = f"train-{shard}.tfrecord"
        with ar.TFRecordWriter(path) as writer:
            for i in range(500):
                example = ar.Example({"x": [float(shard * 500 + i)], "label": [i % 10]})
                writer.write(example.SerializeToString())
        files.append(path)

    seen: list[np.ndarray[Any, Any]] = []
    # Run the README's code with its loop body collecting what the pipeline yields.
    source = source.replace("            ...\n", "            seen.append(x[:, 0].copy())\n")
    source = source.replace(
        'anyio.run(main, ["train-0.tfrecord", "train-1.tfrecord"])', "anyio.run(main, files)"
    )
    exec(compile(source, str(README), "exec"), {"files": files, "seen": seen})

    values = np.concatenate(seen)
    assert sorted(values.tolist()) == sorted([float(v) for v in range(1000)] * 2)
    assert all(len(batch) == 128 for batch in seen[:-1])
