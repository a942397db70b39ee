"""mypy over the installed package layout (scripts/typecheck.py; settings in pyproject's [tool.mypy]):
strict on the sandboxes, envs, harness and the farm; typed elsewhere."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.slow
def test_mypy_finds_no_errors() -> None:
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "typecheck.py")], capture_output=True,
                         text=True, timeout=900)
    assert res.returncode == 0, f"mypy:\n{res.stdout[-6000:]}{res.stderr[-2000:]}"
    assert "Success" in res.stdout, res.stdout
