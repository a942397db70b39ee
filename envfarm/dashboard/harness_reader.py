"""A harness run: ``<report-dir>/<run-id>/<model>/<instance>/`` folders and the run summary beside them.

Each report.json is read back with the harness's own ``InstanceReport.from_swebench`` (harness/grading.py)
and re-read only when its modification time changes; an instance folder without one is still running.
The per-instance logs are the files harness/report.py writes; they are read (their tails, when large) only
when that instance is opened.
"""

from __future__ import annotations

import json
import logging
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envfarm.harness.grading import InstanceReport
from envfarm.harness.report import REPORT, safe_model
from envfarm.harness.screen import RULES as SCREEN_RULES
from envfarm.harness.tamper import RULES as TAMPER_RULES

from .sources import Source
from .tail import Throttle, read_json

log = logging.getLogger(__name__)

RULES = {**TAMPER_RULES, **SCREEN_RULES}
"""Every rule a harness report can name: tamper rules and static screening rules."""

REFRESH_S = 1.0
LOGS = ("test_output.txt", "patch.diff", "applied.diff", "eval.sh", "run_instance.log")
MAX_LOG_BYTES = 256 << 10
"""Larger logs are shown by their last bytes."""


@dataclass(frozen=True)
class Loaded:
    """One instance folder's report as read (None while the instance runs, or when unreadable)."""

    mtime: float
    report: InstanceReport | None
    error: str | None = None


def row(iid: str, loaded: Loaded | None) -> dict[str, Any]:
    """One line of the harness table."""
    r = loaded.report if loaded else None
    if r is None:
        return {"instance_id": iid, "outcome": "unreadable" if loaded and loaded.error else "running",
                "status": None, "f2p": None, "p2p": None, "tamper": [], "suspect": [],
                "error": loaded.error if loaded else None}
    t = r.tests
    return {
        "instance_id": iid, "outcome": r.outcome.value, "status": r.status.value, "resolved": r.resolved,
        "f2p": [len(t.fail_to_pass_success), len(t.fail_to_pass_success) + len(t.fail_to_pass_failure)]
        if t else None,
        "p2p": [len(t.pass_to_pass_success), len(t.pass_to_pass_success) + len(t.pass_to_pass_failure)]
        if t else None,
        "tamper": sorted({f.rule for f in r.findings}),
        "suspect": sorted({x.rule for x in r.suspicions}),
        "error_kind": r.error_kind.value if r.error_kind else None,
        "error": (r.error or "").splitlines()[0][:200] if r.error else None,
        "infra": r.infra_error, "duration_s": round(r.duration_s, 2), "attempts": r.attempts,
    }


class HarnessRun:
    """One (report dir, run id, model) of the harness. Public methods are blocking and thread-safe."""

    def __init__(self, source: Source) -> None:
        self.source = source
        self.root = source.root
        self.loaded: dict[str, Loaded | None] = {}
        self.summary: dict[str, Any] | None = None
        self._lock = threading.Lock()
        self._throttle = Throttle(REFRESH_S)

    def refresh(self, force: bool = False) -> None:
        with self._lock:
            if not self._throttle.due(force):
                return
            seen: dict[str, Loaded | None] = {}
            for folder in sorted(p for p in _dirs(self.root)):
                seen[folder.name] = self._load(folder, self.loaded.get(folder.name))
            self.loaded = seen
            model, run_id = self.source.model, self.source.run_id
            self.summary = read_json(self.source.path / f"{safe_model(model)}.{run_id}.json")

    def _load(self, folder: Path, before: Loaded | None) -> Loaded | None:
        path = folder / REPORT
        try:
            mtime = path.stat().st_mtime
        except OSError:
            return None
        if before is not None and before.mtime == mtime:
            return before
        try:
            return Loaded(mtime, InstanceReport.from_swebench(json.loads(path.read_text(encoding="utf-8"))))
        except (OSError, ValueError, KeyError, TypeError) as e:
            return Loaded(mtime, None, f"{path.name} is unreadable: {type(e).__name__}: {e}")

    def view(self) -> dict[str, Any]:
        """The harness view's JSON: the summary file and one row per instance folder."""
        self.refresh()
        with self._lock:
            rows = [row(iid, loaded) for iid, loaded in self.loaded.items()]
            counts: dict[str, int] = {}
            for r in rows:
                counts[r["outcome"]] = counts.get(r["outcome"], 0) + 1
            return {"kind": "harness", "path": str(self.source.path), "run_id": self.source.run_id,
                    "model": self.source.model, "summary": self.summary, "rows": rows, "counts": counts,
                    "rules": RULES}

    def instance(self, iid: str) -> dict[str, Any] | None:
        """One instance: its report.json as written, the tamper findings with their rules, its logs."""
        self.refresh()
        with self._lock:
            if iid not in self.loaded:
                return None
            loaded = self.loaded[iid]
        folder = self.root / iid
        raw = read_json(folder / REPORT)
        report = loaded.report if loaded else None
        findings = [{**f.__dict__, "rule_text": RULES.get(f.rule, "")} for f in report.findings] if report \
            else []
        suspect = report.suspicions if report else ()
        suspicions = [{**x.__dict__, "rule_text": RULES.get(x.rule, "")} for x in suspect]
        return {"instance_id": iid, "row": row(iid, loaded), "report": raw, "findings": findings,
                "suspect": bool(suspicions), "suspicions": suspicions,
                "logs": {name: _tail(folder / name) for name in LOGS if (folder / name).is_file()}}


def _tail(path: Path) -> str:
    try:
        size = path.stat().st_size
        with path.open("rb") as f:
            if size > MAX_LOG_BYTES:
                f.seek(size - MAX_LOG_BYTES)
                return f"[... first {size - MAX_LOG_BYTES} bytes not shown ...]\n" + \
                    f.read().decode("utf-8", "replace")
            return f.read().decode("utf-8", "replace")
    except OSError as e:
        return f"[cannot read {path.name}: {e}]"


def _dirs(path: Path) -> list[Path]:
    try:
        return [p for p in path.iterdir() if p.is_dir()]
    except OSError:
        return []


__all__ = ["HarnessRun", "row"]
