"""``asyncreader watch URL``: a running pipeline's stages in the terminal, refreshing.

Reads the ``stages`` JSON of a metrics endpoint (``asyncreader.serve_metrics``, or
``asyncreader.metrics_app`` mounted in a service) every ``--interval`` seconds and draws
the same view as the live page: each stage's state, fill level, rates and waiting tasks,
a starved stage in red. Rates are the difference of two samples over the server's time
between them. Needs ``rich`` (``asyncreader[cli]``).
"""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.parse
import urllib.request
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import argparse
    from collections.abc import Iterator

    from rich.table import Table

__all__ = ["add_parser", "render", "run", "stages_url"]

_STYLE = {
    "starved": "bold white on red",
    "deadlocked": "bold white on red",
    "waiting_for_work": "bold white on red",
    "full": "black on yellow",
}
_STARVING = ("starved", "deadlocked", "waiting_for_work")


def add_parser(commands: Any) -> None:
    """Add the ``watch`` subcommand to ``commands`` (an argparse subparsers object)."""
    watch = commands.add_parser(
        "watch",
        help="show a running pipeline's stages in the terminal, refreshing",
        description=(
            "Poll the metrics endpoint of a running pipeline (asyncreader.serve_metrics, or "
            "metrics_app mounted in a service) and draw its stages: state, fill level, "
            "rates and waiting tasks; a starved stage is shown in red. Ctrl-C stops."
        ),
    )
    watch.add_argument(
        "url", help="the endpoint, e.g. http://127.0.0.1:9464/ (its stages JSON is read)"
    )
    watch.add_argument(
        "--interval", type=float, default=1.0, help="seconds between samples (%(default)s)"
    )
    watch.add_argument(
        "--count",
        type=int,
        default=0,
        help="stop after this many samples (default: run until Ctrl-C); the first view "
        "with rates needs two",
    )


def stages_url(url: str) -> str:
    """Return the address of the ``stages`` JSON of the endpoint at ``url``.

    Raises:
        ValueError: ``url`` is not an ``http://`` or ``https://`` address.
    """
    parts = urllib.parse.urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"not an http:// or https:// address: {url!r}")
    path = parts.path
    if not path.endswith("/stages"):
        path = path.rstrip("/") + "/stages"
    return urllib.parse.urlunsplit((parts.scheme, parts.netloc, path, "", ""))


def fetch(url: str, timeout: float) -> dict[str, Any]:
    """Return one sample from the endpoint's ``stages`` address.

    Raises:
        OSError: the endpoint cannot be reached or did not answer with a sample.
    """
    try:
        with urllib.request.urlopen(url, timeout=timeout) as answer:
            data = json.loads(answer.read())
    except urllib.error.HTTPError as exc:
        raise OSError(f"{url} answered {exc.code} {exc.reason}") from None
    except urllib.error.URLError as exc:
        raise OSError(f"cannot reach {url}: {exc.reason}") from None
    except ValueError as exc:
        raise OSError(f"{url} did not answer with JSON: {exc}") from None
    if not isinstance(data, dict) or not isinstance(data.get("stages"), list):
        raise OSError(f"{url} did not answer with a pipeline's stages")
    return data


def _human(value: float | None, unit: str) -> str:
    if value is None:
        return "-"
    for prefix in ("", "k", "M", "G"):
        if abs(value) < 1000 or prefix == "G":
            break
        value /= 1000
    return f"{value:.1f}{prefix}{unit}" if value % 1 else f"{value:.0f}{prefix}{unit}"


def render(data: dict[str, Any], previous: dict[str, Any] | None, url: str) -> Table:
    """Return the table of the sample ``data``, with rates against ``previous``."""
    from rich.table import Table
    from rich.text import Text

    rows: list[dict[str, Any]] = data["stages"]
    before: dict[tuple[str, str], dict[str, Any]] = {}
    seconds = 0.0
    if previous is not None and data.get("time") and previous.get("time"):
        seconds = data["time"] - previous["time"]
        before = {(r["kind"], r["name"]): r for r in previous["stages"]}

    def rate(row: dict[str, Any], field: str) -> float | None:
        old = before.get((row["kind"], row["name"]))
        if old is None or seconds <= 0 or field not in row:
            return None
        change: float = row[field] - old[field]
        return max(0.0, change) / seconds

    starving = [f"{r['kind']} {r['name']}" for r in rows if r["state"] in _STARVING]
    caption = (
        Text("waiting for input: " + ", ".join(starving) + " (look upstream of it)", "bold red")
        if starving
        else Text("no stage is starved" if rows else "no stages yet")
    )
    table = Table(title=f"asyncreader pipeline at {url}", caption=caption, caption_justify="left")
    for column in ("kind", "stage", "state", "fill", "out/s", "read/s", "waiting in/out"):
        table.add_column(column, justify="right" if "/" in column else "left")
    for row in rows:
        fill = out = read = ""
        if row["kind"] == "queue":
            capacity = row["capacity"]
            level = round(10 * min(1.0, row["fill_fraction"]))
            bar = "█" * level + "░" * (10 - level)
            fill = f"{bar} {row['size']}/{capacity if capacity is not None else '∞'}"
            out = _human(rate(row, "dequeued_total"), "")
        elif row["kind"] == "reader":
            out = _human(rate(row, "records_total"), "")
            read = _human(rate(row, "bytes_total"), "B")
        elif row["kind"] == "runner":
            fill = f"{row['tasks_running']} task(s)"
        table.add_row(
            row["kind"],
            row["name"],
            Text(row["state"], _STYLE.get(row["state"], "")),
            fill,
            out,
            read,
            f"{row['tasks_waiting_enqueue']} / {row['tasks_waiting_dequeue']}",
        )
    return table


def run(args: argparse.Namespace) -> int:
    """Run ``asyncreader watch``; return the exit status (1 when the endpoint fails)."""
    import sys

    try:
        from rich.console import Console
        from rich.live import Live
    except ImportError:
        print(
            "asyncreader watch: error: needs rich: pip install 'asyncreader[cli]'", file=sys.stderr
        )
        return 1
    try:
        url = stages_url(args.url)
    except ValueError as exc:
        print(f"asyncreader watch: error: {exc}", file=sys.stderr)
        return 1
    if args.interval <= 0 or args.count < 0:
        print(
            "asyncreader watch: error: --interval must be positive and --count 0 or more",
            file=sys.stderr,
        )
        return 1
    console = Console()
    timeout = max(5.0, args.interval)

    def samples() -> Iterator[Table]:
        previous: dict[str, Any] | None = None
        taken = 0
        while True:
            data = fetch(url, timeout)
            taken += 1
            yield render(data, previous, args.url)
            previous = data
            if args.count and taken >= args.count:
                return
            time.sleep(args.interval)

    try:
        if console.is_terminal:  # redrawn in place
            with Live(console=console, auto_refresh=False) as live:
                for table in samples():
                    live.update(table, refresh=True)
        else:  # a pipe or a log: every sample, or only the last of --count
            last = None
            for table in samples():
                if not args.count:
                    console.print(table)
                last = table
            if args.count and last is not None:
                console.print(last)
    except OSError as exc:
        print(f"asyncreader watch: error: {exc}", file=sys.stderr)
        return 1
    return 0
