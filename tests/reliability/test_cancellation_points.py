"""Cancel a full pipeline at seeded random points: nothing duplicated, lost or leaked.

See ``pipeline_harness`` for the pipeline and the ways a run is ended. The default run
covers 48 seeded points (a dozen per mode); ``--stress`` runs 1,200 more.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import pytest
from pipeline_harness import MODES, Dataset, check_outcome, run_pipeline, write_dataset

if TYPE_CHECKING:
    from pathlib import Path

pytestmark = pytest.mark.anyio

FILES = 6
RECORDS_PER_FILE = 40


@pytest.fixture(scope="module")
def dataset(tmp_path_factory: pytest.TempPathFactory) -> Dataset:
    return write_dataset(tmp_path_factory.mktemp("records"), FILES, RECORDS_PER_FILE)


@pytest.mark.parametrize("seed", range(48))
async def test_cancel_pipeline_at_seeded_point(dataset: Dataset, seed: int) -> None:
    check_outcome(dataset, await run_pipeline(dataset, seed), seed)


@pytest.mark.both_backends
@pytest.mark.parametrize("seed", [1000 + i for i in range(2 * len(MODES))])
async def test_cancel_pipeline_both_backends(dataset: Dataset, seed: int) -> None:
    check_outcome(dataset, await run_pipeline(dataset, seed), seed)


@pytest.mark.parametrize("mode", MODES)
async def test_every_mode_delivers_something_and_ends(dataset: Dataset, mode: str) -> None:
    """A late cancellation point still ends the run; a stop before the end stops early."""
    # Seed 7 draws a late enough point in every mode for some records to get through.
    out = await run_pipeline(dataset, 7, mode)
    check_outcome(dataset, out, 7)


@pytest.mark.stress
@pytest.mark.both_backends
async def test_cancel_pipeline_stress(tmp_path: Path, anyio_backend: str) -> None:
    data = write_dataset(tmp_path, FILES, RECORDS_PER_FILE, seed=1)
    for seed in range(10_000, 11_200):
        check_outcome(data, await run_pipeline(data, seed), seed)
