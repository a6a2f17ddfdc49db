"""``asyncreader inspect`` and ``asyncreader convert`` through the real entry points.

Every run is a child process (``python -m asyncreader`` or the installed console script),
so exit codes, standard output (``--json`` parsed here) and standard error are what a user
or a script sees. Bad input (missing, corrupt, wrongly compressed, unknown format) must
give exit status 1 and a message naming the file (and the byte offset of corrupt data),
never a traceback.
"""

from __future__ import annotations

import gzip
import json
import os
import pty
import re
import shutil
import subprocess
import sys
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pytest

import asyncreader as ar
from asyncreader._cli.schema import GIVE_UP, SchemaScan
from asyncreader._decoders import wire
from asyncreader._records.tfrecord import frame_record

if TYPE_CHECKING:
    from collections.abc import Iterator

SCRIPT = Path(sys.executable).with_name("asyncreader")


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m asyncreader ARGS`` in a child process."""
    return subprocess.run(
        [sys.executable, "-m", "asyncreader", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )


def inspect_json(*args: str, env: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    done = run("inspect", "--json", *args, env=env)
    assert "Traceback" not in done.stderr, done.stderr
    return done.returncode, json.loads(done.stdout)


def example(i: int) -> bytes:
    features: dict[str, object] = {
        "label": np.array([i % 10], np.int64),
        "image": [bytes([i % 256]) * 16],
        "scores": np.arange(i % 3, dtype=np.float32),
    }
    if i % 5 == 0:
        features["note"] = [b"every fifth"]
    return ar.Example(features).SerializeToString()


EXAMPLES = [example(i) for i in range(2000)]


def tfrecord_bytes(payloads: list[bytes]) -> bytes:
    return b"".join(b"".join(frame_record(p)) for p in payloads)


@pytest.fixture(scope="module")
def files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of record files of every kind."""
    folder = tmp_path_factory.mktemp("files")
    data = tfrecord_bytes(EXAMPLES)
    (folder / "train.tfrecord").write_bytes(data)
    # Compression detected from the contents, whatever the names say.
    (folder / "train-gzip").write_bytes(gzip.compress(data))
    (folder / "train-zlib").write_bytes(zlib.compress(data))
    (folder / "lines.txt").write_bytes(b"".join(b"line %d\n" % i for i in range(1000)))
    (folder / "rows.csv").write_bytes(
        b"id,weight,name\n" + b"".join(b"%d,%d.5,name %d\n" % (i, i, i) for i in range(300))
    )
    (folder / "fixed.bin").write_bytes(b"HEAD" + b"".join(b"%08d" % i for i in range(500)))
    (folder / "noise").write_bytes(bytes(range(256)) * 4)
    return folder


def test_bare_command_and_python_m_print_the_help() -> None:
    for argv in ([sys.executable, "-m", "asyncreader"], [str(SCRIPT)]):
        done = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
        assert done.returncode == 0, done.stderr
        assert done.stdout.startswith("usage: asyncreader")
        for command in ("demo", "inspect", "convert", "make-cifar10"):
            assert re.search(rf"^\s+{command}\s", done.stdout, re.M), done.stdout


def test_version_option_and_command() -> None:
    for args in (["--version"], ["version"]):
        done = run(*args)
        assert done.returncode == 0
        assert done.stdout == f"asyncreader {ar.__version__}\n"


def test_inspect_reports_examples_and_detects_compression(files: Path) -> None:
    names = ["train.tfrecord", "train-gzip", "train-zlib"]
    status, document = inspect_json(*[str(files / name) for name in names])
    assert status == 0
    assert document["ok"] is True
    reports = document["files"]
    assert [r["compression"] for r in reports] == ["NONE", "GZIP", "ZLIB"]
    lengths = [len(p) for p in EXAMPLES]
    for report in reports:
        assert report["format"] == "tfrecord"
        assert report["records"] == 2000
        assert report["record_bytes"]["min"] == min(lengths)
        assert report["record_bytes"]["max"] == max(lengths)
        assert report["record_bytes"]["total"] == sum(lengths)
        assert report["stream_bytes"] == (files / "train.tfrecord").stat().st_size
        assert report["error"] is None
        example_info = report["example"]
        assert example_info["records"] == 2000
        assert example_info["other_records"] == 0
        features = example_info["features"]
        assert sorted(features) == ["image", "label", "note", "scores"]
        assert features["label"]["kind"] == "int64"
        assert features["label"]["shape"] == [1]
        assert features["label"]["spec"] == "FixedLenFeature([1], tf.int64)"
        assert features["image"]["kind"] == "bytes"
        assert features["scores"]["kind"] == "float"
        assert features["scores"]["shape"] is None  # 0 to 2 values
        assert (features["scores"]["min_values"], features["scores"]["max_values"]) == (0, 2)
        assert features["scores"]["spec"] == "VarLenFeature(tf.float32)"
        assert features["note"]["records"] == 400
        assert features["note"]["shape"] is None  # not in every example


def test_inspect_tells_examples_from_other_records(tmp_path: Path) -> None:
    payloads = [*EXAMPLES[:10], b"\xff raw bytes", *EXAMPLES[10:20]]
    path = tmp_path / "mixed.tfrecord"
    path.write_bytes(tfrecord_bytes(payloads))
    status, document = inspect_json(str(path))
    assert status == 0
    found = document["files"][0]["example"]
    assert (found["records"], found["other_records"]) == (20, 1)
    offset = sum(len(p) + 16 for p in payloads[:10])
    assert found["first_other_offset"] == offset
    done = run("inspect", str(path))
    assert f"1 record is not tf.train.Example (the first at byte {offset:,})" in done.stdout
    assert "tf.train.Example features (20 of 21 records):" in done.stdout

    # Records that are not Examples at all: no feature table, and the scan stops early
    # (an Example after the first 100 other records is not looked for).
    path.write_bytes(tfrecord_bytes([*(b"\xff%d" % i for i in range(150)), EXAMPLES[0]]))
    status, document = inspect_json(str(path))
    assert status == 0
    assert document["files"][0]["records"] == 151
    assert document["files"][0]["example"] is None


def test_inspect_text_for_people(files: Path) -> None:
    done = run("inspect", str(files / "train-gzip"), str(files / "lines.txt"))
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "format       TFRecord, GZIP-compressed (detected)" in out
    assert "records      2,000" in out
    assert re.search(r"label\s+int64\s+\[1\]\s+FixedLenFeature\(\[1\], tf.int64\)", out), out
    assert "format       text, uncompressed" in out
    assert "records      1,000" in out


def test_inspect_counts_lines_and_fixed_length_records(files: Path) -> None:
    status, document = inspect_json(
        str(files / "lines.txt"),
        str(files / "rows.csv"),
    )
    assert status == 0
    lines, rows = document["files"]
    assert (lines["format"], lines["records"]) == ("text", 1000)
    assert (lines["record_bytes"]["min"], lines["record_bytes"]["max"]) == (6, 8)
    assert (rows["format"], rows["records"]) == ("text", 301)
    status, document = inspect_json(
        str(files / "fixed.bin"), "--record-bytes", "8", "--header-bytes", "4"
    )
    assert status == 0
    (fixed,) = document["files"]
    assert (fixed["format"], fixed["records"]) == ("fixed", 500)
    assert fixed["record_bytes"]["min"] == fixed["record_bytes"]["max"] == 8


def test_inspect_verify_names_the_first_bad_record(files: Path, tmp_path: Path) -> None:
    data = bytearray((files / "train.tfrecord").read_bytes())
    bad_index = 1234
    offset = sum(len(p) + 16 for p in EXAMPLES[:bad_index])
    data[offset + 12 + 3] ^= 0x40  # inside the payload: only its checksum notices
    path = tmp_path / "bad.tfrecord"
    path.write_bytes(bytes(data))

    status, document = inspect_json("--verify", str(path))
    assert status == 1
    assert document["ok"] is False
    (report,) = document["files"]
    assert report["records"] == bad_index
    assert report["error"]["type"] == "DataLossError"
    assert report["error"]["offset"] == offset
    assert report["error"]["record_index"] == bad_index
    assert str(path) in report["error"]["message"]

    done = run("inspect", "--verify", str(path))
    assert done.returncode == 1
    assert f"first bad record: #{bad_index} at byte {offset:,}" in done.stdout
    assert f"asyncreader inspect: error: corrupted record at {offset + 12}" in done.stderr
    assert "Traceback" not in done.stderr

    # Without --verify the payload checksums are not read: the file counts whole.
    status, document = inspect_json(str(path))
    assert status == 0
    assert document["files"][0]["records"] == 2000
    assert document["files"][0]["verified"] is False


def test_inspect_a_truncated_compressed_file(files: Path, tmp_path: Path) -> None:
    path = tmp_path / "cut.tfrecord.gz"
    path.write_bytes((files / "train-gzip").read_bytes()[:-100])
    status, document = inspect_json(str(path))
    assert status == 1
    error = document["files"][0]["error"]
    assert error["type"] == "DataLossError"
    assert "truncated" in error["message"]
    assert str(path) in error["message"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["missing.tfrecord"], "No such file or directory: {dir}/missing.tfrecord"),
        (
            ["--compression", "gzip", "train.tfrecord"],
            "{dir}/train.tfrecord: --compression gzip was given, but the file is "
            "uncompressed (detected from its first bytes)",
        ),
        (
            ["--compression", "none", "train-gzip"],
            "{dir}/train-gzip: --compression none was given, but the file is "
            "GZIP-compressed (detected from its first bytes); pass --compression gzip",
        ),
        (["noise"], "{dir}/noise: unknown format: not a TFRecord file"),
        (["fixed.bin"], "{dir}/fixed.bin: looks like a fixed-length record file (.bin): pass"),
        (["--format", "fixed", "noise"], "{dir}/noise: a fixed-length file needs --record-bytes"),
        (
            ["--verify", "--format", "tfrecord", "lines.txt"],
            "corrupted record at 0 (work item '{dir}/lines.txt', record 0)",
        ),
    ],
)
def test_bad_input_is_a_message_and_exit_status_1(
    files: Path, args: list[str], message: str
) -> None:
    argv = [
        arg
        if arg.startswith("-") or arg in ("gzip", "none", "fixed", "tfrecord")
        else str(files / arg)
        for arg in args
    ]
    done = run("inspect", *argv)
    assert done.returncode == 1
    assert "Traceback" not in done.stderr
    expected = message.format(dir=files)
    assert f"asyncreader inspect: error: {expected}" in done.stderr, done.stderr
    if any(arg.startswith("-") for arg in args):
        return
    # One bad file does not stop the others.
    done = run("inspect", "--json", *argv, str(files / "lines.txt"))
    assert done.returncode == 1
    document = json.loads(done.stdout)
    assert document["files"][0]["error"] is not None
    assert document["files"][1]["records"] == 1000


def test_usage_errors_exit_2() -> None:
    for args, message in [
        (["inspect"], "the following arguments are required: PATH"),
        (["inspect", "--record-bytes", "0", "x"], "argument --record-bytes: must be positive"),
        (["convert", "x"], "the following arguments are required: -o/--output"),
        (["convert", "x", "-o", "y", "--shards", "0"], "argument --shards: must be positive"),
    ]:
        done = run(*args)
        assert done.returncode == 2
        assert message in done.stderr


def read_all(path: Path, compression: str | None = None) -> list[bytes]:
    return list(ar.tf_record_iterator(str(path), compression))


def test_convert_recompresses_and_reshards(files: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.tfrecord.gz"
    done = run(
        "convert",
        str(files / "train-zlib"),
        "-o",
        str(out),
        "--compression",
        "gzip",
        "--shards",
        "3",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout == f"wrote 2,000 records to 3 shards {out}-00000-of-00003 ...\n"
    shards = [Path(f"{out}-{i:05d}-of-00003") for i in range(3)]
    assert sorted(tmp_path.iterdir()) == shards  # no temporary files left
    for i, shard in enumerate(shards):
        assert shard.read_bytes()[:2] == b"\x1f\x8b"
        assert read_all(shard, "GZIP") == EXAMPLES[i::3]

    # Several inputs into one uncompressed file, in order.
    one = tmp_path / "all.tfrecord"
    done = run("convert", str(files / "train.tfrecord"), str(files / "train-gzip"), "-o", str(one))
    assert done.returncode == 0, done.stderr
    assert read_all(one) == EXAMPLES + EXAMPLES


def test_convert_csv_rows_to_examples(files: Path, tmp_path: Path) -> None:
    out = tmp_path / "rows.tfrecord"
    done = run("convert", str(files / "rows.csv"), "-o", str(out))
    assert done.returncode == 0, done.stderr
    records = read_all(out)
    assert len(records) == 300
    parsed = ar.parse_example(
        records,
        {
            "id": ar.FixedLenFeature([], np.int64),
            "weight": ar.FixedLenFeature([], np.float32),
            "name": ar.FixedLenFeature([], object),
        },
    )
    assert parsed["id"].tolist() == list(range(300))
    assert parsed["weight"].tolist() == [i + 0.5 for i in range(300)]
    assert parsed["name"].tolist() == [b"name %d" % i for i in range(300)]


def test_convert_csv_gives_tensorflows_bytes_for_every_row(tmp_path: Path) -> None:
    # The database readers' encoder: names as the header has them (any bytes), the
    # shortest varints, float32s, blobs; the bytes protobuf's deterministic serialization
    # gives.
    ints = [0, -1, 127, 128, 2**63 - 1, -(2**63), 300]
    floats = ["0.5", "-2.25", "inf", "1e-3", "3", "-0", "7.75"]
    texts = [b"e", b"a", b"x" * 200, b"\xc3\xa9", b"b", b"cc", b"d" * 130]
    lines = [b"%d,%s,%s" % (i, f.encode(), t) for i, f, t in zip(ints, floats, texts, strict=True)]
    path = tmp_path / "rows.csv"
    path.write_bytes(b"n,\xffw,zz\n" + b"\n".join(lines * 5) + b"\n")
    out = tmp_path / "rows.tfrecord"
    done = run("convert", str(path), "-o", str(out))
    assert done.returncode == 0, done.stderr
    expected = [
        wire.encode_example(
            {
                b"n": wire.encode_feature(wire.INT64, np.array([i], np.int64)),
                b"\xffw": wire.encode_feature(wire.FLOAT, np.array([float(f)], np.float32)),
                b"zz": wire.encode_feature(wire.BYTES, [t]),
            }
        )
        for i, f, t in zip(ints, floats, texts, strict=True)
    ]
    assert read_all(out) == expected * 5


def test_convert_csv_with_a_value_of_another_type_names_the_line(tmp_path: Path) -> None:
    path = tmp_path / "rows.csv"
    # Types are inferred from the first 1,000 rows: the bad value comes after them.
    path.write_bytes(b"a,b\n" + b"1,2\n" * 1000 + b"5,x\n")
    done = run("convert", str(path), "-o", str(tmp_path / "out.tfrecord"))
    assert done.returncode == 1
    assert f"asyncreader convert: error: {path}: line 1002: " in done.stderr
    assert "inferred from the first 1,000 rows: a=int64, b=int64" in done.stderr
    assert not (tmp_path / "out.tfrecord").exists()
    assert "Traceback" not in done.stderr


def test_convert_text_lines_to_examples(files: Path, tmp_path: Path) -> None:
    out = tmp_path / "lines.tfrecord"
    done = run("convert", str(files / "lines.txt"), "-o", str(out), "--text-feature", "line")
    assert done.returncode == 0, done.stderr
    parsed = ar.parse_example(read_all(out), {"line": ar.FixedLenFeature([], object)})
    assert parsed["line"].tolist() == [b"line %d" % i for i in range(1000)]


def test_convert_fixed_length_records(files: Path, tmp_path: Path) -> None:
    out = tmp_path / "fixed.tfrecord"
    done = run(
        "convert",
        str(files / "fixed.bin"),
        "-o",
        str(out),
        "--record-bytes",
        "8",
        "--header-bytes",
        "4",
    )
    assert done.returncode == 0, done.stderr
    assert read_all(out) == [b"%08d" % i for i in range(500)]


def test_convert_of_a_corrupt_file_leaves_no_output(files: Path, tmp_path: Path) -> None:
    data = bytearray((files / "train.tfrecord").read_bytes())
    data[len(data) // 2] ^= 0x01
    bad = tmp_path / "bad.tfrecord"
    bad.write_bytes(bytes(data))
    out = tmp_path / "out.tfrecord"
    done = run("convert", str(bad), "-o", str(out), "--shards", "2")
    assert done.returncode == 1
    assert re.search(rf"error: corrupted record at \d+ \(work item '{bad}'", done.stderr)
    assert sorted(tmp_path.iterdir()) == [bad]
    # Nor may it overwrite its input, or write to a URL.
    done = run("convert", str(bad), "-o", str(bad))
    assert done.returncode == 1
    assert "the output would overwrite an input file" in done.stderr
    done = run("convert", str(bad), "-o", "s3://bucket/out.tfrecord")
    assert done.returncode == 1
    assert done.stderr == (
        "asyncreader convert: error: s3://bucket/out.tfrecord: convert writes local files; "
        "give OUTPUT as a local path\n"
    )


def test_progress_is_plain_lines_when_not_a_terminal(files: Path) -> None:
    done = run("inspect", str(files / "train.tfrecord"))
    assert done.returncode == 0
    (line,) = done.stderr.splitlines()
    assert "\x1b" not in done.stderr
    assert re.fullmatch(
        rf"inspect {files}/train.tfrecord: 2,000 records, [\d.]+ MB of [\d.]+ MB 100% \| "
        r"[\d,]+ records/s \| [\d.,]+ MB/s \| ETA 0:00:00",
        line,
    ), line


def test_progress_is_a_rich_bar_on_a_terminal(files: Path, tmp_path: Path) -> None:
    pytest.importorskip("rich")
    leader, follower = pty.openpty()
    try:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "asyncreader",
                "convert",
                str(files / "train.tfrecord"),
                "-o",
                str(tmp_path / "out.tfrecord"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=follower,
            env={**os.environ, "COLUMNS": "200", "TERM": "xterm"},
        )
        os.close(follower)
        follower = -1
        shown = b""
        while True:
            try:
                data = os.read(leader, 65536)
            except OSError:  # the terminal closes with the process
                break
            if not data:
                break
            shown += data
        assert proc.wait(timeout=60) == 0
    finally:
        os.close(leader)
        if follower >= 0:
            os.close(follower)
    text = shown.decode("utf-8", "replace")
    assert "\x1b[" in text  # drawn with terminal control codes
    assert "convert" in text
    assert "2,000 records" in text
    assert "records/s" in text
    assert "ETA" in text


def test_schema_scan_of_examples_laid_out_alike_and_not() -> None:
    # Same byte length and layout, different int64 value counts: [1, 1, 1] and [300, 1]
    # are both 3 bytes of varints.
    alike = [
        ar.Example({"n": np.array(v, np.int64)}).SerializeToString()
        for v in ([1, 1, 1], [300, 1], [2, 2, 2], [5, 5, 5], [400, 2])
    ]
    assert len({len(r) for r in alike}) == 1
    others = [b"\xff\xff not an example", b""]
    scan = SchemaScan()
    scan.add([*alike, *others], np.arange(7, dtype=np.int64) * 100)
    assert (scan.examples, scan.others, scan.first_other) == (5, 2, 500)
    seen = scan.features["n"]
    assert (seen.min_values, seen.max_values, seen.records) == (2, 3, 5)
    assert seen.shape(scan.examples) is None

    scan = SchemaScan()
    scan.add([b"\xff"] * (GIVE_UP - 1), np.arange(GIVE_UP - 1, dtype=np.int64))
    before = scan.stopped
    assert not before
    scan.add([b"\xff", *alike], np.arange(6, dtype=np.int64))
    assert scan.stopped
    assert (scan.examples, scan.others) == (0, GIVE_UP)


@pytest.fixture(scope="module")
def s3_endpoint(files: Path) -> Iterator[str]:
    pytest.importorskip("moto.server", reason="moto[server] (the test extra) is not installed")
    s3fs = pytest.importorskip("s3fs", reason="s3fs (asyncreader[s3]) is not installed")
    from servers_util import s3_server

    with s3_server() as endpoint:
        fs = s3fs.S3FileSystem(
            endpoint_url=endpoint, key="test", secret="test", skip_instance_cache=True
        )
        fs.mkdir("cli")
        for name in ("train.tfrecord", "train-gzip", "lines.txt", "fixed.bin"):
            fs.pipe(f"cli/{name}", (files / name).read_bytes())
        yield endpoint


@pytest.mark.network
def test_inspect_and_convert_s3_objects(s3_endpoint: str, tmp_path: Path) -> None:
    # Pointed at the server the way a user points s3:// at MinIO: fsspec's configuration.
    env = {
        **os.environ,
        "FSSPEC_S3": json.dumps({"endpoint_url": s3_endpoint, "key": "test", "secret": "test"}),
    }
    status, document = inspect_json(
        "--verify",
        "s3://cli/train.tfrecord",
        "s3://cli/train-gzip",
        "s3://cli/lines.txt",
        "s3://cli/missing.tfrecord",
        env=env,
    )
    assert status == 1
    tfrecord, gzipped, lines, missing = document["files"]
    for report in (tfrecord, gzipped):
        assert report["records"] == 2000
        assert report["verified"] is True
        assert report["example"]["features"]["label"]["spec"] == "FixedLenFeature([1], tf.int64)"
    assert (tfrecord["compression"], gzipped["compression"]) == ("NONE", "GZIP")
    assert (lines["format"], lines["records"]) == ("text", 1000)
    assert missing["error"]["type"] == "NotFoundError"
    assert "s3://cli/missing.tfrecord" in missing["error"]["message"]
    status, document = inspect_json(
        "--record-bytes", "8", "--header-bytes", "4", "s3://cli/fixed.bin", env=env
    )
    assert status == 0
    assert (document["files"][0]["format"], document["files"][0]["records"]) == ("fixed", 500)

    out = tmp_path / "from-s3.tfrecord"
    done = run("convert", "s3://cli/train-gzip", "-o", str(out), env=env)
    assert done.returncode == 0, done.stderr
    assert read_all(out) == EXAMPLES


@pytest.mark.network
def test_inspect_an_http_url(files: Path, tmp_path_factory: pytest.TempPathFactory) -> None:
    pytest.importorskip("aiohttp", reason="aiohttp (asyncreader[remote]) is not installed")
    from servers_util import nginx_server

    root = tmp_path_factory.mktemp("nginx")
    (root / "www").mkdir()
    shutil.copy(files / "train-gzip", root / "www" / "train.tfrecord.gz")
    with nginx_server(root) as (base, _):
        status, document = inspect_json(f"{base}/train.tfrecord.gz", f"{base}/nothing")
    assert status == 1
    found, missing = document["files"]
    assert (found["compression"], found["records"]) == ("GZIP", 2000)
    assert missing["error"]["type"] == "NotFoundError"


def test_inspect_into_a_pipe_closed_early_ends_quietly(files: Path) -> None:
    # `asyncreader inspect FILES | head -1`: the reader of standard output goes away while
    # the tool still has files to describe. It ends at once with the status of a tool killed
    # by SIGPIPE, and says nothing on standard error (no "Broken pipe", no traceback).
    paths = [str(files / "lines.txt")] * 400  # far more output than a pipe buffers
    with subprocess.Popen(
        [sys.executable, "-m", "asyncreader", "inspect", "--progress", "none", *paths],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    ) as proc:
        assert proc.stdout is not None
        assert proc.stderr is not None
        first = proc.stdout.readline()
        proc.stdout.close()
        err = proc.stderr.read()
        returncode = proc.wait(timeout=60)
    assert first.decode().strip().endswith("lines.txt")
    assert err == b""
    assert returncode == 128 + 13  # SIGPIPE
