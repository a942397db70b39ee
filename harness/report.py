"""Reports on disk, in SWE-bench's shapes.

    <report-dir>/<run-id>/<model>/<instance_id>/
        report.json        swebench's {instance_id: {...}} (+ an "envfarm" dict)
        test_output.txt    the graded log (swebench markers)
        patch.diff         the model patch as given
        applied.diff       `git diff` after the patch, tamper reverts and test_patch
        eval.sh            the script that ran the tests
        run_instance.log   every step, attempt by attempt
    <report-dir>/<model>.<run-id>.json    the run summary (swebench's keys, schema_version)
    <report-dir>/<model>.<run-id>.md      resolved rate with its 95% Wilson interval

``<model>`` is ``model_name_or_path`` with ``/`` replaced by ``__``, as swebench names it. A report.json is
written last, so its presence marks a finished instance (what a resumed run skips).
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from envfarm.errors import HarnessError

from .grading import ErrorKind, InstanceReport, Outcome, ResolutionStatus
from .instances import Instance, Prediction

log = logging.getLogger(__name__)

SCHEMA_VERSION = 2
REPORT = "report.json"
TEST_OUTPUT = "test_output.txt"


def safe_model(name: str) -> str:
    return name.replace("/", "__") or "model"


@dataclass(frozen=True)
class Artifacts:
    """Files of one instance besides report.json."""

    patch: str | None = None
    test_log: str | None = None
    eval_script: str | None = None
    applied_diff: str | None = None
    steps: Sequence[str] = ()


class RunFolder:
    """The folders and files of one run of one model."""

    def __init__(self, report_dir: Path, run_id: str, model: str) -> None:
        self.report_dir = report_dir
        self.run_id = run_id
        self.model = model
        self.root = report_dir / run_id / safe_model(model)

    def instance_dir(self, instance_id: str) -> Path:
        return self.root / instance_id

    def summary_path(self, suffix: str = ".json") -> Path:
        return self.report_dir / f"{safe_model(self.model)}.{self.run_id}{suffix}"

    def write_artifacts(self, instance_id: str, art: Artifacts) -> Path:
        """Write the logs of an instance (before its report); returns the test log's path."""
        folder = self.instance_dir(instance_id)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / REPORT).unlink(missing_ok=True)
        files = {
            "patch.diff": art.patch,
            TEST_OUTPUT: art.test_log,
            "eval.sh": art.eval_script,
            "applied.diff": art.applied_diff,
        }
        for name, text in files.items():
            if text is not None:
                (folder / name).write_text(text, encoding="utf-8")
        if art.steps:
            with (folder / "run_instance.log").open("a", encoding="utf-8") as fh:
                fh.write("\n".join(art.steps) + "\n")
        return folder / TEST_OUTPUT

    def write_report(self, report: InstanceReport) -> Path:
        folder = self.instance_dir(report.instance_id)
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / REPORT
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(report.to_swebench(), indent=2) + "\n", encoding="utf-8")
        tmp.replace(path)
        return path

    def load_finished(self) -> dict[str, InstanceReport]:
        """Reports already written by an earlier run with this id (unreadable ones are ignored)."""
        found: dict[str, InstanceReport] = {}
        if not self.root.is_dir():
            return found
        for path in sorted(self.root.glob(f"*/{REPORT}")):
            try:
                report = InstanceReport.from_swebench(json.loads(path.read_text(encoding="utf-8")))
            except (OSError, ValueError, KeyError, TypeError) as e:
                log.warning("ignoring unreadable %s (%s); the instance will run again", path, e)
                continue
            found[report.instance_id] = report
        return found


@dataclass(frozen=True)
class RunSummary:
    """The run summary: swebench's ``make_run_report`` keys, plus envfarm's (after ``schema_version``)."""

    total_instances: int
    submitted_instances: int
    completed_instances: int
    resolved_instances: int
    unresolved_instances: int
    infra_failure_instances: int
    ambiguous_failure_instances: int
    empty_patch_instances: int
    error_instances: int
    completed_ids: list[str]
    incomplete_ids: list[str]
    empty_patch_ids: list[str]
    submitted_ids: list[str]
    resolved_ids: list[str]
    unresolved_ids: list[str]
    infra_failure_ids: list[str]
    ambiguous_failure_ids: list[str]
    failure_reasons: dict[str, str]
    error_ids: list[str]
    schema_version: int = SCHEMA_VERSION
    run_id: str = ""
    model_name_or_path: str = ""
    resolved_rate: float = 0.0
    """resolved / total_instances (SWE-bench's headline number)."""
    resolved_rate_ci95: tuple[float, float] = (0.0, 0.0)
    """Wilson score interval of resolved_rate."""
    partial_ids: list[str] = field(default_factory=list)
    """RESOLVED_PARTIAL: some FAIL_TO_PASS pass, every PASS_TO_PASS passes (not resolved)."""
    infra_error_ids: list[str] = field(default_factory=list)
    """Errors of an infra kind (build, sandbox, env_timeout, env_oom) after the retry; a subset of
    error_ids."""
    timeout_ids: list[str] = field(default_factory=list)
    """Errors whose tests ran past the timeout: the patch's (``timeout``) or the environment's."""
    tampered_ids: dict[str, list[str]] = field(default_factory=dict)
    """instance id -> the tamper rules that fired (reverted, flagged or refused)."""
    error_kinds: dict[str, str] = field(default_factory=dict)
    """instance id -> ErrorKind of every error instance."""
    suspect_ids: dict[str, list[str]] = field(default_factory=dict)
    """instance id -> the static screening rules that fired on its patch (``screen.py``)."""

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["resolved_rate_ci95"] = list(self.resolved_rate_ci95)
        return data


def wilson(successes: int, n: int, z: float = 1.959964) -> tuple[float, float]:
    """The Wilson score interval for ``successes`` out of ``n`` (95% by default); (0, 0) when n is 0."""
    if n <= 0:
        return (0.0, 0.0)
    p = successes / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    lo = 0.0 if successes == 0 else max(0.0, centre - half)
    hi = 1.0 if successes == n else min(1.0, centre + half)
    return (lo, hi)


def summarize(
    instances: Sequence[Instance],
    predictions: Mapping[str, Prediction],
    reports: Mapping[str, InstanceReport],
    run_id: str,
    model: str,
) -> RunSummary:
    """The run summary of ``reports`` over ``instances`` (instances without a report are incomplete)."""
    ids = [i.instance_id for i in instances]
    mine = {i: reports[i] for i in ids if i in reports}
    by: dict[Outcome, list[str]] = {o: sorted(i for i, r in mine.items() if r.outcome is o) for o in Outcome}
    errors, resolved, unresolved = by[Outcome.ERROR], by[Outcome.RESOLVED], by[Outcome.UNRESOLVED]
    failed = set(errors) | set(unresolved)
    infra = sorted(i for i in failed if mine[i].infra_failure)  # swebench: environment tier, + infra errors
    reasons = {i: r.failure_reason for i, r in mine.items() if r.failure_reason and i in failed}
    reasons.update({i: str(mine[i].error_kind) for i in infra if mine[i].infra_error})
    ambiguous = sorted(i for i in reasons if i not in infra)
    submitted = sorted(i for i in ids if i in predictions)
    return RunSummary(
        total_instances=len(ids),
        submitted_instances=len(submitted),
        completed_instances=len(resolved) + len(unresolved),
        resolved_instances=len(resolved),
        unresolved_instances=len(unresolved),
        infra_failure_instances=len(infra),
        ambiguous_failure_instances=len(ambiguous),
        empty_patch_instances=len(by[Outcome.EMPTY_PATCH]),
        error_instances=len(errors),
        completed_ids=sorted(resolved + unresolved),
        incomplete_ids=sorted(i for i in ids if i not in predictions or i not in mine),
        empty_patch_ids=by[Outcome.EMPTY_PATCH],
        submitted_ids=submitted,
        resolved_ids=resolved,
        unresolved_ids=unresolved,
        infra_failure_ids=infra,
        ambiguous_failure_ids=ambiguous,
        failure_reasons=dict(sorted(reasons.items())),
        error_ids=errors,
        run_id=run_id,
        model_name_or_path=model,
        resolved_rate=len(resolved) / len(ids) if ids else 0.0,
        resolved_rate_ci95=wilson(len(resolved), len(ids)),
        partial_ids=sorted(i for i, r in mine.items() if r.status is ResolutionStatus.PARTIAL),
        infra_error_ids=[i for i in errors if mine[i].infra_error],
        timeout_ids=[i for i in errors if mine[i].error_kind in (ErrorKind.TIMEOUT, ErrorKind.ENV_TIMEOUT)],
        tampered_ids={i: sorted({f.rule for f in r.findings}) for i, r in sorted(mine.items()) if r.findings},
        error_kinds={i: str(mine[i].error_kind) for i in errors},
        suspect_ids={i: sorted({x.rule for x in r.suspicions}) for i, r in sorted(mine.items()) if r.suspect},
    )


def write_summary(
    folder: RunFolder, summary: RunSummary, reports: Mapping[str, InstanceReport]
) -> tuple[Path, Path]:
    """Write the JSON summary and the markdown summary; returns both paths."""
    folder.report_dir.mkdir(parents=True, exist_ok=True)
    json_path, md_path = folder.summary_path(".json"), folder.summary_path(".md")
    try:
        json_path.write_text(json.dumps(summary.to_json(), indent=4) + "\n", encoding="utf-8")
        md_path.write_text(markdown(summary, reports), encoding="utf-8")
    except OSError as e:
        raise HarnessError(f"cannot write the run summary to {folder.report_dir}: {e}") from e
    return json_path, md_path


def markdown(s: RunSummary, reports: Mapping[str, InstanceReport]) -> str:
    lo, hi = s.resolved_rate_ci95
    lines = [
        f"# {s.model_name_or_path} — run {s.run_id}",
        "",
        f"**Resolved: {s.resolved_instances}/{s.total_instances} = {100 * s.resolved_rate:.1f}%** "
        f"(95% Wilson interval {100 * lo:.1f}-{100 * hi:.1f}%)",
        "",
        "| count | instances |",
        "| --- | ---: |",
    ]
    for label, value in [
        ("total", s.total_instances),
        ("submitted", s.submitted_instances),
        ("completed (tests ran)", s.completed_instances),
        ("resolved", s.resolved_instances),
        ("partially resolved (not counted)", len(s.partial_ids)),
        ("unresolved", s.unresolved_instances),
        ("empty patch (not run)", s.empty_patch_instances),
        ("error", s.error_instances),
        ("of which infra (build, sandbox, env timeout/OOM)", len(s.infra_error_ids)),
        ("of which timeout", len(s.timeout_ids)),
        ("tamper rule fired", len(s.tampered_ids)),
        ("suspect (static screening)", len(s.suspect_ids)),
        ("incomplete (no prediction or not run)", len(s.incomplete_ids)),
    ]:
        lines.append(f"| {label} | {value} |")
    lines += [
        "",
        "| instance | outcome | status | FAIL_TO_PASS | PASS_TO_PASS | tamper | suspect | error |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for iid in sorted(reports):
        r = reports[iid]
        t = r.tests
        f2p = (
            f"{len(t.fail_to_pass_success)}/{len(t.fail_to_pass_success) + len(t.fail_to_pass_failure)}"
            if t
            else ""
        )
        p2p = (
            f"{len(t.pass_to_pass_success)}/{len(t.pass_to_pass_success) + len(t.pass_to_pass_failure)}"
            if t
            else ""
        )
        rules = ", ".join(f"{f.rule} `{f.path}` ({f.action})" for f in r.findings)
        err = f"{r.error_kind}: {(r.error or '').splitlines()[0][:80]}" if r.error_kind else ""
        why = ", ".join(dict.fromkeys(x.rule for x in r.suspicions))
        lines.append(f"| {iid} | {r.outcome} | {r.status} | {f2p} | {p2p} | {rules} | {why} | {err} |")
    return "\n".join(lines) + "\n"
