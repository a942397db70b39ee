"""Fixtures of the dashboard tests: one folder holding a real farm run, a code-repair run, a trainer run and
a harness report dir (dashboard_support.py writes them with the farm's, trainer's and harness's formats)."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from dashboard_support import farm_run, write_code_repair_run, write_harness_run, write_trainer_run


@pytest.fixture(scope="session")
def runs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """root/{toolcalc (a real bwrap farm run), repair, train, reports}."""
    root = tmp_path_factory.mktemp("runs")
    asyncio.run(farm_run(root / "toolcalc", episodes=12, concurrency=4))
    write_code_repair_run(root / "repair")
    write_trainer_run(root / "train")
    write_harness_run(root / "reports")
    return root
