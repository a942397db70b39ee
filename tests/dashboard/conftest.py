"""Fixtures of the dashboard tests: one folder holding a real farm run, a code-repair run, a trainer run and
a harness report dir (envfarm.testing.dashboard_runs writes them with the farm's, trainer's and
harness's formats)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from envfarm.testing.dashboard_runs import (
    farm_run,
    write_code_repair_run,
    write_harness_run,
    write_trainer_run,
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Tests that read the real farm run need bwrap: mark them so (`-m "not bwrap"` skips them)."""
    here = Path(__file__).parent
    for item in items:
        if item.path.is_relative_to(here) and "runs" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.bwrap)


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """root/{toolcalc (a real bwrap farm run), repair, train, reports}."""
    root = tmp_path_factory.mktemp("runs")
    asyncio.run(farm_run(root / "toolcalc", episodes=12, concurrency=4))
    write_code_repair_run(root / "repair")
    write_trainer_run(root / "train")
    write_harness_run(root / "reports")
    return root
