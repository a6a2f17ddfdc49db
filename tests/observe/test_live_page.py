"""The live page in a real browser: headless Chromium loads it from a running pipeline.

Chromium comes from the system's packages (``apt-get install chromium``; ``.ci/run``
installs it); without it these tests skip. The screenshot is kept in the test's temporary
directory, and its path is printed (``pytest -s`` shows it); with the environment
variable ``ASYNCREADER_TEST_ARTIFACTS`` set to a folder, a copy is kept there too (pytest
removes old temporary directories).
"""

from __future__ import annotations

import functools
import os
import shutil
from html.parser import HTMLParser
from typing import TYPE_CHECKING, Any

import anyio
import pytest

import asyncreader as ar

from .conftest import build_pipeline, wait_until

if TYPE_CHECKING:
    from pathlib import Path

pytest.importorskip(
    "prometheus_client", reason="prometheus_client is not installed: asyncreader[metrics]"
)
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
pytestmark = [
    pytest.mark.anyio,
    pytest.mark.skipif(
        CHROMIUM is None, reason="Chromium is not installed (apt-get install chromium)"
    ),
]

# Headless, and nothing but the page: no background connections, which a machine without
# internet access refuses (and a sandbox as root is not available).
FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    # The page polls every 300 ms; 2 s of its time gives it several polls, hence rates.
    "--virtual-time-budget=2000",
    "--window-size=1200,600",
)


class Page(HTMLParser):
    """What the page drew: each stage box's attributes and its label/value rows."""

    def __init__(self) -> None:
        super().__init__()
        self.stages: list[dict[str, Any]] = []
        self.polls = 0
        self.verdict: dict[str, str] = {}
        self._row: list[str] | None = None
        self._in: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = {k: v or "" for k, v in attrs}
        if tag == "body":
            self.polls = int(a.get("data-polls", "0"))
        elif "data-stage" in a:
            self.stages.append(
                {
                    "name": a["data-stage"],
                    "kind": a["data-kind"],
                    "state": a["data-state"],
                    "class": a["class"],
                    "rows": {},
                }
            )
        elif a.get("id") == "verdict":
            self.verdict = {"class": a.get("class", ""), "text": ""}
            self._in = "verdict"
        elif tag == "div" and a.get("class", "").startswith("row") and self.stages:
            self._row = []
        elif tag == "span" and self._row is not None:
            self._in = "span"

    def handle_data(self, data: str) -> None:
        if self._in == "span" and self._row is not None:
            self._row.append(data)
        elif self._in == "verdict":
            self.verdict["text"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "span":
            self._in = None
        elif tag == "div":
            if self._in == "verdict":
                self._in = None
            if self._row is not None and len(self._row) == 2:
                self.stages[-1]["rows"][self._row[0]] = self._row[1]
                self._row = None


async def chromium(url: str, user_data: Path, *extra: str) -> str:
    assert CHROMIUM is not None
    result = await anyio.run_process(
        [CHROMIUM, *FLAGS, f"--user-data-dir={user_data}", *extra, url], check=False
    )
    assert result.returncode == 0, result.stderr.decode(errors="replace")[-2000:]
    return result.stdout.decode()


def load(dom: str) -> Page:
    page = Page()
    page.feed(dom)
    return page


async def test_the_page_draws_the_stages_with_moving_numbers(
    lines_file: str, tmp_path: Path
) -> None:
    shot = tmp_path / "live-page.png"
    with anyio.fail_after(50):
        async with ar.Session() as sess, anyio.create_task_group() as tg:
            # Slow decoding: the batch queue starves while the files are ahead.
            batches = build_pipeline(lines_file, decode_seconds=0.05)

            async def train() -> None:
                async for _ in batches:
                    pass

            sess.start_soon(train)
            port = await tg.start(functools.partial(ar.serve_metrics, sess))
            await wait_until(lambda: len(sess.stage_statistics()) == 5)
            url = f"http://127.0.0.1:{port}/?interval=300"
            first = load(await chromium(url, tmp_path / "profile", "--dump-dom"))
            await anyio.sleep(0.5)
            second = load(await chromium(url, tmp_path / "profile", "--dump-dom"))
            await chromium(url, tmp_path / "profile", f"--screenshot={shot}")
            tg.cancel_scope.cancel()
            sess.coord.request_stop()
    print(f"screenshot of the live page: {shot}")
    artifacts = os.environ.get("ASYNCREADER_TEST_ARTIFACTS")
    if artifacts:
        kept = shutil.copy(shot, artifacts)
        print(f"kept as {kept}")

    batch_queue = next(s.name for s in sess.stage_statistics() if s.name.startswith("FIFO"))
    for page in (first, second):
        assert page.polls >= 2  # it polled, and drew what it got
        # The chain: the file name queue, the reader, the batch queue (runners folded in).
        assert [(s["kind"], s["name"]) for s in page.stages] == [
            ("queue", "filenames"),
            ("reader", "lines"),
            ("queue", batch_queue),
        ]
        files, reader, batch = page.stages
        assert files["rows"]["fill"] == "4 / 4 (100%)"
        assert files["state"] == "full"
        assert files["rows"]["fed by"] == "1 task(s), full"
        # The starving stage stands out.
        assert batch["state"] == "starved"
        assert "starved" in batch["class"].split()
        assert page.verdict["class"] == "bad"
        assert f"queue {batch_queue}" in page.verdict["text"]
        assert reader["rows"]["records"].endswith("/s")
        assert reader["rows"]["records"] != "\u2013"  # a rate, from two polls
    # The numbers move between two loads.
    assert int(second.stages[1]["rows"]["records read"]) > int(
        first.stages[1]["rows"]["records read"]
    )
    assert int(second.stages[2]["rows"]["dequeued"]) > int(first.stages[2]["rows"]["dequeued"])
    assert shot.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    assert shot.stat().st_size > 5000
