"""``asyncreader watch URL``: a running pipeline's stages in the terminal."""

from __future__ import annotations

import functools
import socket
from typing import TYPE_CHECKING

import anyio
import anyio.to_thread
import pytest

import asyncreader as ar
from asyncreader._cli.main import main
from asyncreader._cli.watch import stages_url

if TYPE_CHECKING:
    from pathlib import Path

pytest.importorskip("rich", reason="rich is not installed: asyncreader[cli]")
pytest.importorskip("prometheus_client", reason="prometheus_client is not installed")

pytestmark = pytest.mark.anyio


@pytest.fixture
def lines_file(tmp_path: Path) -> str:
    path = tmp_path / "lines.txt"
    path.write_text("".join(f"line {i}\n" for i in range(100)))
    return str(path)


@pytest.mark.both_backends
async def test_watch_shows_the_stages_and_the_starving_one(
    lines_file: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("COLUMNS", "160")
    with anyio.fail_after(30):
        async with ar.Session() as sess, anyio.create_task_group() as tg:
            files = ar.string_input_producer([lines_file], num_epochs=None, name="filenames")
            reader = ar.TextLineReader(name="lines")

            async def example() -> tuple[bytes]:
                _, line = await reader.read(files)
                # Slow decoding: the batch queue starves. The loop takes each batch in an
                # instant and waits 0.2 s for the next, so a sample (an instant on the same
                # event loop) finds it waiting even when a wake-up is late on a busy machine.
                # Only a sample landing between the batch's last example and the loop taking
                # it finds nobody blocked: one example in eight.
                await anyio.sleep(0.025)
                return (line,)

            batches = ar.batch(example, batch_size=8, capacity=16)

            async def train() -> None:
                async for _ in batches:
                    pass

            sess.start_soon(train)
            port = await tg.start(functools.partial(ar.serve_metrics, sess))
            # The batch queue is made when the first example arrives.
            while len(sess.stage_statistics()) < 5:  # noqa: ASYNC110
                await anyio.sleep(0.01)
            status = await anyio.to_thread.run_sync(
                main, ["watch", f"http://127.0.0.1:{port}", "--count", "2", "--interval", "0.5"]
            )
            batch_queue = next(
                s.name for s in sess.stage_statistics() if s.name.startswith("FIFOQueue")
            )
            tg.cancel_scope.cancel()
            sess.coord.request_stop()
    out = capsys.readouterr().out
    assert status == 0
    assert f"asyncreader pipeline at http://127.0.0.1:{port}" in out
    lines = {
        (line.split("│")[1].strip(), line.split("│")[2].strip()): line
        for line in out.splitlines()
        if line.count("│") > 3
    }
    assert set(lines) >= {("queue", "filenames"), ("reader", "lines"), ("queue", batch_queue)}
    assert "full" in lines["queue", "filenames"]
    assert "██████████ 32/32" in lines["queue", "filenames"]
    assert "starved" in lines["queue", batch_queue]
    assert f"waiting for input: queue {batch_queue}" in out
    # Only the last of the two samples is printed, with rates from the pair: records move
    # through the batch queue.
    assert out.count("asyncreader pipeline at") == 1
    out_rate = lines["queue", batch_queue].split("│")[5].strip()
    assert out_rate != "-", out
    assert float(out_rate.rstrip("k")) > 0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
    return port


def test_watch_reports_an_endpoint_it_cannot_reach(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["watch", f"http://127.0.0.1:{free_port()}/", "--count", "1"]) == 1
    assert "asyncreader watch: error: cannot reach http://127.0.0.1:" in capsys.readouterr().err


def test_watch_refuses_what_is_not_an_http_address(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["watch", "file:///etc/passwd"]) == 1
    assert "not an http:// or https:// address" in capsys.readouterr().err
    assert main(["watch", "http://127.0.0.1:1/", "--interval", "0"]) == 1
    assert "--interval must be positive" in capsys.readouterr().err


async def test_watch_reports_a_wrong_path(capsys: pytest.CaptureFixture[str]) -> None:
    with anyio.fail_after(20):
        async with ar.Session() as sess, anyio.create_task_group() as tg:
            port = await tg.start(functools.partial(ar.serve_metrics, sess))
            status = await anyio.to_thread.run_sync(
                main, ["watch", f"http://127.0.0.1:{port}/elsewhere/", "--count", "1"]
            )
            tg.cancel_scope.cancel()
    assert status == 1
    assert f"http://127.0.0.1:{port}/elsewhere/stages answered 404" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("given", "read"),
    [
        ("http://127.0.0.1:9464", "http://127.0.0.1:9464/stages"),
        ("http://127.0.0.1:9464/", "http://127.0.0.1:9464/stages"),
        ("http://host/pipeline/", "http://host/pipeline/stages"),
        ("https://host/pipeline/stages", "https://host/pipeline/stages"),
    ],
)
def test_the_stages_address_follows_the_mount(given: str, read: str) -> None:
    assert stages_url(given) == read
