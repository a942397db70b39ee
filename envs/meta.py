"""What a finished episode records of its env's last step: ``Trajectory.meta``, typed per env family.

The farm keeps the final step's ``info`` as ``env.meta_type.from_info(info).to_json()``; readers (the
dashboard, CodeRepair's predictions writer, your scripts) turn it back with ``meta_type.from_json``. Every
field is optional (an episode cut short by the step limit has no verdict); ``to_json`` leaves out the ones
that are None. Keys a family does not declare are kept under their own names (``extra``), so nothing an env
reports is lost. The JSON shapes:

    EpisodeMeta      (any env)              {...whatever the last step's info held}
    AnswerMeta       ToolCalc, SQLQuery     {"correct": bool, "expected": str}
    FileOpsMeta      FileOps                {"correct": bool, "diff": {str: [str]}, "verify_error": str}
    OrderDeskMeta    OrderDesk              {"kind": str, "expected_refusal": bool, "state_ok": bool,
                                             "state_diff": [str], "violations": [{...}], "rule": str,
                                             "message": str, "calls": [{step, name, arguments, ok}]}
    CodeRepairMeta   CodeRepair             {"resolved": bool, "status": str, "patch": str,
                                             "tests": {FAIL_TO_PASS|PASS_TO_PASS|...: {"success": [id],
                                             "failure": [id]}}, "findings": [str], "grade_s": float,
                                             "reason": "timeout"|"oom", "error_kind": str,
                                             "diff_error": str, "step_limit": bool}
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any, Self

STEP_KEYS = frozenset({"tools", "step", "task_id"})
"""Keys every step's info has (``AgentEnv._info``): not part of the meta."""


@dataclass(frozen=True)
class EpisodeMeta:
    """Base of the families' records: no declared fields, everything in ``extra``."""

    extra: Mapping[str, Any] = field(default_factory=dict)
    """Keys of the last step's info the family does not declare."""

    @classmethod
    def from_info(cls, info: Mapping[str, Any]) -> Self:
        """The record of a final step's ``info`` (its per-step keys dropped)."""
        return cls.from_json({k: v for k, v in info.items() if k not in STEP_KEYS})

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Self:
        """The record of a trajectory's ``meta`` (written by ``to_json``, or by an older farm)."""
        names = {f.name for f in fields(cls)} - {"extra"}
        return cls(**{k: data[k] for k in names if k in data},
                   extra={k: v for k, v in data.items() if k not in names})

    def to_json(self) -> dict[str, Any]:
        out = dict(self.extra)
        for f in fields(self):
            value = getattr(self, f.name)
            if f.name != "extra" and value is not None:
                out[f.name] = value
        return out


@dataclass(frozen=True)
class AnswerMeta(EpisodeMeta):
    """An env graded by comparing a submitted answer with the task's (ToolCalc, SQLQuery)."""

    correct: bool | None = None
    expected: str | None = None


@dataclass(frozen=True)
class FileOpsMeta(EpisodeMeta):
    """FileOps: the workspace walked and compared with the expected tree."""

    correct: bool | None = None
    diff: Mapping[str, Any] | None = None
    """Per kind of difference (missing, unexpected, changed), the first paths."""
    verify_error: str | None = None


@dataclass(frozen=True)
class OrderDeskMeta(EpisodeMeta):
    """OrderDesk: the database state and the business rules the conversation kept or broke."""

    kind: str | None = None
    expected_refusal: bool | None = None
    state_ok: bool | None = None
    state_diff: list[str] | None = None
    violations: list[Mapping[str, Any]] | None = None
    rule: str | None = None
    message: str | None = None
    calls: list[Mapping[str, Any]] | None = None


@dataclass(frozen=True)
class CodeRepairMeta(EpisodeMeta):
    """CodeRepair: the submitted patch and the SWE-bench grading of it."""

    resolved: bool | None = None
    status: str | None = None
    """swebench's resolution status (``RESOLVED_FULL``, ``RESOLVED_PARTIAL``, ``RESOLVED_NO``)."""
    patch: str | None = None
    tests: Mapping[str, Any] | None = None
    """swebench's tests_status: per group, the ``success`` and ``failure`` test ids."""
    findings: list[str] | None = None
    """Tamper and canary findings, described."""
    grade_s: float | None = None
    reason: str | None = None
    """``timeout`` or ``oom`` when the hidden tests did not finish because of the patch."""
    error_kind: str | None = None
    """``patch_failed`` or ``refused`` when the patch could not be evaluated."""
    diff_error: str | None = None
    """Why the workspace's diff could not be collected."""
    step_limit: bool | None = None
    """Graded because the step limit came, not because the agent submitted."""


__all__ = ["STEP_KEYS", "AnswerMeta", "CodeRepairMeta", "EpisodeMeta", "FileOpsMeta", "OrderDeskMeta"]
