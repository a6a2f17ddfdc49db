"""``benchmarks/readers.py`` at a tiny scale: it runs, and every method sees every record.

The script stops with an error when a reader, the python floor or tf.data reads a record
count other than the file's, so a passing run also checks the counts behind its figures.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).parents[2] / "benchmarks" / "readers.py"


def test_readers_benchmark_runs_and_reports_every_bar(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--scale", "0.01", "--dir", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    out = done.stdout
    for case in ("tfrecord 100KiB", "tfrecord 100B none", "tfrecord 100B GZIP", "text lines"):
        assert f"| {case}" in out
    assert out.count("read_up_to(1024)") == 5
    assert out.count("read_batch(1024)") == 5
    for bar in ("(bar 0.60)", "(bar 5)", "(bar 0.50)", "us/record (bar 5)"):
        assert bar in out
    # The data files were written where --dir says.
    assert {p.name for p in tmp_path.iterdir()} >= {"big.tfrecord", "lines.txt", "fixed.bin"}


DATABASES = Path(__file__).parents[2] / "benchmarks" / "databases.py"


def test_databases_benchmark_runs_and_every_method_sees_every_row() -> None:
    # The script asserts each method's row count; SQLite only, so no bar applies.
    done = subprocess.run(
        [sys.executable, str(DATABASES), "--rows", "3000", "--no-postgres"],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    for line in ("SQLite mixed ", "SQLite numeric ", "CSV line + decode_csv"):
        assert line in done.stdout
    assert done.stdout.count("read_batch + parse_example") == 2
