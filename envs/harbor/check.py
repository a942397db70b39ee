"""Check Harbor task folders statically: what ``envfarm harbor validate`` can tell before it builds
anything, in seconds over thousands of tasks.

    check = check_tasks(Path("tasks"))                  # nothing is built or run
    check.offline, check.reasons, check.with_oracle
    write_report(check, Path("check.json"))

Per task: the folder is loaded (:func:`.task.load_task`; a malformed one gets the reason validate gives it,
:func:`.validate.load_failure`), its ``environment/Dockerfile`` translated
(:func:`envfarm.sandbox.harbor_image.translate_task`). A task is ``offline`` when it loads and its translation
needs nothing but Debian and PyPI packages; otherwise it gets the reason and detail validate's build step
gives it before building: ``needs-network``, ``unsupported-base``, or ``build-failed`` for a missing
Dockerfile (:func:`static_reason`). An offline task may still fail validate (apt or pip cannot resolve, a
RUN fails, the oracle fails). A ``docker_image`` named in task.toml that docker has is used as is by
validate; check reads the Dockerfile all the same. The JSON report writes the tasks folder ``TASKS`` in the
details, as validate's does.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

from envfarm.errors import HarborImageError, HarborTaskError

from .validate import REASONS, error_detail, load_failure, placeholders


@dataclass(frozen=True)
class CheckRow:
    """One task, checked statically (a row of the JSON report)."""

    task: str
    offline: bool
    """It loads and its Dockerfile builds here with Debian and PyPI packages only."""
    reason: str | None
    """One of validate's :data:`~.validate.REASONS` when not offline."""
    detail: str
    has_oracle: bool
    """``solution/solve.sh`` exists."""
    internet_requested: bool
    """task.toml's ``[environment] allow_internet``: never granted here."""


@dataclass(frozen=True)
class Check:
    """Every row of a folder of tasks."""

    tasks: Path
    rows: tuple[CheckRow, ...]

    @property
    def offline(self) -> int:
        return sum(r.offline for r in self.rows)

    @property
    def with_oracle(self) -> int:
        return sum(r.has_oracle for r in self.rows)

    @property
    def reasons(self) -> Counter[str]:
        """Tasks per reason, in :data:`~.validate.REASONS` order."""
        found = Counter(r.reason for r in self.rows if r.reason)
        return Counter({k: found[k] for k in REASONS if found[k]})

    def to_json(self) -> dict[str, Any]:
        """``{"tasks", "offline", "reasons", "rows": [...]}``."""
        return {"tasks": len(self.rows), "offline": self.offline, "reasons": dict(self.reasons),
                "rows": [asdict(r) for r in self.rows]}


def static_reason(task_dir: Path) -> tuple[str, str] | None:
    """Why validate cannot build the task in ``task_dir``, found without building (None: it can try): the
    reason and detail its row gets from the checks the build makes first
    (:func:`envfarm.sandbox.harbor_image.translate_task`)."""
    from envfarm.sandbox.harbor_image import translate_task

    try:
        translate_task(task_dir)
    except HarborImageError as e:
        return e.reason, error_detail(str(e))
    except (OSError, ValueError) as e:
        dockerfile = task_dir / "environment" / "Dockerfile"
        return "unknown", f"{dockerfile} does not translate: {type(e).__name__}: {e}"
    return None


def check_task(folder: Path) -> CheckRow:
    """The static row of the task in ``folder`` (details as found; :func:`check_tasks` writes
    placeholders)."""
    from .task import load_task

    try:
        task = load_task(folder)
    except HarborTaskError as e:
        reason, detail = load_failure(e)
        return CheckRow(folder.name, False, reason, detail, (folder / "solution" / "solve.sh").is_file(),
                        False)
    found = static_reason(task.path)
    if found is None:
        return CheckRow(task.name, True, None, "", task.has_solution, task.allow_internet)
    return CheckRow(task.name, False, *found, task.has_solution, task.allow_internet)


def check_tasks(tasks: Path, task_ids: Sequence[str] = (),
                progress: Callable[[CheckRow], None] | None = None) -> Check:
    """Every task folder of ``tasks`` (a folder of them, or one; ``task_ids`` picks some), checked in name
    order; ``progress`` gets each row. Raises :class:`~envfarm.errors.HarborTaskError` for a ``tasks`` that
    is no such folder and :class:`~envfarm.errors.HarborTaskNotFound` for an unknown id."""
    from .task import select_dirs

    rows = []
    for folder in select_dirs(tasks, list(task_ids) or None):
        row = check_task(folder)
        row = replace(row, detail=placeholders(row.detail, tasks))
        rows.append(row)
        if progress:
            progress(row)
    return Check(tasks, tuple(rows))


def write_report(check: Check, path: Path) -> Path:
    """``check``'s :meth:`Check.to_json` in the file ``path`` (its folder made)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(check.to_json(), indent=1), encoding="utf-8")
    return path


__all__ = ["Check", "CheckRow", "check_task", "check_tasks", "static_reason", "write_report"]
