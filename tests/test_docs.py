"""The docs site: ``mkdocs build --strict`` passes (every page in the nav, every link and anchor resolves,
the API reference loads), and the generated results pages are what ``scripts/docs_results.py`` writes."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _docs_results() -> ModuleType:
    spec = importlib.util.spec_from_file_location("docs_results", ROOT / "scripts" / "docs_results.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_mkdocs_build_strict(tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "NO_MKDOCS_2_WARNING": "1"},
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-4000:]
    assert (tmp_path / "site" / "reference" / "envs" / "index.html").is_file()


def test_generated_results_pages_are_current() -> None:
    docs_results = _docs_results()
    stale = [
        str(path.relative_to(ROOT))
        for path, text in docs_results.render_all(ROOT).items()
        if not path.is_file() or path.read_text(encoding="utf-8") != text
    ]
    assert not stale, f"{stale}: run `python scripts/docs_results.py`"
