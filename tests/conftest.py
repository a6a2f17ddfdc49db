"""Shared test configuration.

Async tests run through anyio's pytest plugin on asyncio; mark a test (or module) with
``@pytest.mark.both_backends`` to run it on trio as well. ``--stress`` selects the long
stress tests (marked ``stress``), which are skipped otherwise.

The suite runs on several worker processes (pytest-xdist, ``-n auto`` in pyproject.toml;
``-n 0`` runs it in one process). Tests are handed out a module at a time, so a module's
servers start once, and the tests that start a Ray cluster run in two groups, so the
machine holds two clusters at most.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

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


#: Test modules that start Ray clusters besides the tests/distributed package.
_RAY_MODULES = ("tests/examples/test_examples.py",)
#: The Ray tests run in two groups of about the same length (two clusters at most).
_RAY_SECOND = ("test_equal_steps.py", "test_nodes.py", "test_leases.py", "test_ledger.py")


def _group(path: str) -> str:
    """The worker group of the tests of module ``path`` (see the module)."""
    if path.startswith("tests/distributed/") or path in _RAY_MODULES:
        return "ray-2" if path.rpartition("/")[2] in _RAY_SECOND else "ray-1"
    return path


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` (pyproject.toml): hand the workers a group of tests at a time
    (see the module's docstring). The groups are computed here, not marked: xdist's own
    marks rename the tests, which pytest 9 no longer lets a plugin do."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from xdist.scheduler import LoadScopeScheduling

    class _Groups(LoadScopeScheduling):  # type: ignore[misc]  # xdist is untyped
        def _split_scope(self, nodeid: str) -> str:
            return _group(nodeid.partition("::")[0])

    return _Groups(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    if config.getoption("--stress"):
        return
    skip = pytest.mark.skip(reason="stress test: run with --stress")
    for item in items:
        if item.get_closest_marker("stress"):
            item.add_marker(skip)


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto``: a worker per core, at most four (more workers than cores made tests
    that time a server's answers fail on a loaded machine)."""
    return max(1, min(len(os.sched_getaffinity(0)), 4))


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
