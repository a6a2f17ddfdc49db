"""Shared test configuration.

Async tests run through anyio's pytest plugin on asyncio; mark a test (or module) with
``@pytest.mark.both_backends`` to run it on trio as well. ``--stress`` selects the long
stress tests (marked ``stress``), which are skipped otherwise.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest

if TYPE_CHECKING:
    from collections.abc import Iterator


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--stress",
        action="store_true",
        default=False,
        help="run the long stress tests (cancellation points, fuzzing, soak)",
    )


def pytest_configure(config: pytest.Config) -> None:
    if config.getoption("--stress"):
        # Stress runs are long by design; lift the per-test timeout.
        config.option.timeout = 0


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if (
        metafunc.definition.get_closest_marker("both_backends")
        and "anyio_backend" in metafunc.fixturenames
    ):
        metafunc.parametrize("anyio_backend", ["asyncio", "trio"])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--stress"):
        return
    skip = pytest.mark.skip(reason="stress test: run with --stress")
    for item in items:
        if item.get_closest_marker("stress"):
            item.add_marker(skip)


@pytest.fixture
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(autouse=True)
def _no_blocking_calls_on_the_loop(request: pytest.FixtureRequest) -> Iterator[None]:
    """Fail any async test that makes a blocking call on the event loop thread."""
    if "anyio_backend" not in request.fixturenames:
        yield
        return
    from blockbuster import blockbuster_ctx

    with blockbuster_ctx("asyncreader") as bb:
        # Importing modules lazily reads files; that is not the library blocking the loop.
        for name in ("os.stat", "io.BufferedReader.read", "os.path.exists"):
            if name in bb.functions:
                bb.functions[name].can_block_in("importlib/_bootstrap_external.py", "get_data")
        # asyncpg looks for ~/.pgpass and ~/.postgresql certificates when it connects (the
        # driver's own, once per connection of a PostgresReader).
        for function in bb.functions.values():
            function.can_block_in("asyncpg/connect_utils.py", "_parse_connect_arguments")
        # Importing prometheus_client (on the first metrics_app) registers its process
        # collector, which reads /proc/self once: procfs, not blocking I/O.
        for function in bb.functions.values():
            function.can_block_in("prometheus_client/process_collector.py", "collect")
        yield
