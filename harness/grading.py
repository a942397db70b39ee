"""The harness contract: read this file first. Grading a test log, the way SWE-bench grades it.

    report = grade(instance, test_log, model_patch=patch)          # -> InstanceReport (frozen)
    report.resolved, report.status                                  # True, ResolutionStatus.FULL
    report.tests.fail_to_pass_failure, report.findings              # what failed; tamper rules that fired
    json.dumps(report.to_swebench())                                # swebench's report.json shape

:func:`grade` wraps swebench 5.0.2's own code (imported without its heavy package ``__init__``, see
``_swebench.py``): ``get_eval_report`` parses the log between the ``>>>>> Start/End Test Output`` markers
with the row's ``PARSER_REGISTRY`` parser, cross-checks the ``>>>>> Test Exit Code`` line, and decides
FAIL_TO_PASS / PASS_TO_PASS; ``get_resolution_status`` gives FULL / PARTIAL / NO exactly as SWE-bench
defines them (FULL: every F2P and P2P test passes; PARTIAL: some but not all F2P pass and every P2P passes).

Two rules are envfarm's own; a finding of either makes the instance unresolved whatever the log says:

- tamper findings that block resolution (a flagged or refused path, see ``tamper.py``). Without
  ``findings``, ``grade`` scans the model patch statically and flags what it finds, so grading a raw log of
  an unprotected run cannot resolve the conftest exploit of upstream swebench issue 631. The runner
  (``run.py``) reverts such paths before the tests and passes its findings;
- with ``canaries`` (what the runner planted, see ``canary.py``): rule ``canary`` when a canary test is
  missing from the parsed results or has the wrong outcome, and rule ``missing-tests`` when a FAIL_TO_PASS or
  PASS_TO_PASS test is absent or reported more than once with different outcomes. (swebench's own
  cross-check of a non-zero exit code against a log with no failure still runs; must-fail canaries always
  give an honest log failures.)
- with ``twins`` (FAIL_TO_PASS tests the runner ran twice, honest and perturbed, see ``differential.py``):
  rule ``differential`` when a perturbed twin of a passing test did not fail; the verdict is
  :attr:`InstanceReport.forgery_check` (report.json: ``envfarm.forgery_check``).

Static screening (``screen.py``) marks a patch whose added code reaches for the test framework (report
hooks, ``sys.modules``, an exit at import, tracing hooks, ...) :attr:`InstanceReport.suspect`, with the
reasons; only ``strict`` makes a suspect instance unresolved.

The code-repair env calls this same function.
"""

from __future__ import annotations

import enum
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from . import _swebench, canary, differential, screen, tamper
from .canary import Canary
from .differential import Twin
from .instances import Instance
from .screen import Suspicion
from .specs import DEFAULT_PARSER, eval_script_command
from .tamper import Finding


class ResolutionStatus(enum.StrEnum):
    """swebench's ``ResolvedStatus`` values."""

    FULL = "RESOLVED_FULL"
    PARTIAL = "RESOLVED_PARTIAL"
    NO = "RESOLVED_NO"


class Outcome(enum.StrEnum):
    """Where an instance lands in the run summary."""

    RESOLVED = "resolved"
    UNRESOLVED = "unresolved"
    EMPTY_PATCH = "empty_patch"
    """No patch: counted, never run."""
    ERROR = "error"
    """No gradable test run: the patch did not apply, a timeout, an infra failure after its retry, ..."""


class ErrorKind(enum.StrEnum):
    """Why an instance has no gradable run. The infra kinds are retried once and counted apart."""

    PATCH_APPLY = "patch_apply"
    """The model patch applied with none of SWE-bench's fallback commands (a model failure)."""
    UNSAFE_PATCH = "unsafe_patch"
    """The model patch writes outside the repository or into .git; refused (a model failure)."""
    TEST_PATCH = "test_patch"
    """test_patch did not apply on the base commit (a dataset problem)."""
    SPEC = "spec"
    """No environment spec or test command (write the spec the message names)."""
    REPO = "repo"
    """The repository or base commit is not in --repo-source."""
    BUILD = "build"
    """The env or instance image did not build (infra)."""
    SANDBOX = "sandbox"
    """The container did not start or died, the daemon went away (infra)."""
    TIMEOUT = "timeout"
    """The patched tests ran past the timeout while the unpatched base finishes well inside it (a model
    failure: never resolved, not retried; see ``verdicts.py``)."""
    OOM = "oom"
    """The patched tests were killed by the memory limit while the unpatched base fits (a model failure)."""
    ENV_TIMEOUT = "env_timeout"
    """The tests ran past the timeout and so does the unpatched base: the budget is too small (infra)."""
    ENV_OOM = "env_oom"
    """The tests were OOM-killed and so is the unpatched base: the memory cap is too small (infra)."""
    INTERNAL = "internal"
    """A bug in envfarm; the message has the traceback's last line."""

    @property
    def infra(self) -> bool:
        return self in (ErrorKind.BUILD, ErrorKind.SANDBOX, ErrorKind.ENV_TIMEOUT, ErrorKind.ENV_OOM)

    @property
    def setup(self) -> bool:
        """Fixed on the harness side (write the spec, pass --repo-source, fix the row): a resumed run
        evaluates the instance again instead of keeping the error."""
        return self in (ErrorKind.SPEC, ErrorKind.REPO, ErrorKind.TEST_PATCH, ErrorKind.INTERNAL)


@dataclass(frozen=True)
class TestResults:
    """swebench's ``tests_status``: which expected tests passed or failed."""

    __test__ = False  # not a pytest test class

    fail_to_pass_success: tuple[str, ...] = ()
    fail_to_pass_failure: tuple[str, ...] = ()
    pass_to_pass_success: tuple[str, ...] = ()
    pass_to_pass_failure: tuple[str, ...] = ()

    def to_swebench(self) -> dict[str, dict[str, list[str]]]:
        empty: dict[str, list[str]] = {"success": [], "failure": []}
        return {
            "FAIL_TO_PASS": {
                "success": list(self.fail_to_pass_success),
                "failure": list(self.fail_to_pass_failure),
            },
            "PASS_TO_PASS": {
                "success": list(self.pass_to_pass_success),
                "failure": list(self.pass_to_pass_failure),
            },
            "FAIL_TO_FAIL": dict(empty),
            "PASS_TO_FAIL": dict(empty),
        }

    @classmethod
    def from_swebench(cls, data: Mapping[str, Any]) -> TestResults:
        def get(key: str, part: str) -> tuple[str, ...]:
            return tuple(data.get(key, {}).get(part, ()))

        return cls(
            get("FAIL_TO_PASS", "success"),
            get("FAIL_TO_PASS", "failure"),
            get("PASS_TO_PASS", "success"),
            get("PASS_TO_PASS", "failure"),
        )


@dataclass(frozen=True)
class ForgeryCheck:
    """The verdict of a check that the test results were not forged (``differential.py``)."""

    name: str
    """Which check: "differential"."""
    passed: bool
    """False: the results are proven forged and the instance is not resolved."""
    detail: str
    twins: tuple[Twin, ...] = ()
    """The twinned tests (honest and decoy names, how the decoy was perturbed)."""
    probed: tuple[tuple[str, str, bool], ...] = ()
    """Probes whose honest twin passed: (module, edit, whether the probe failed) (``decoy_pool.py``)."""

    def to_json(self) -> dict[str, Any]:
        return {"name": self.name, "passed": self.passed, "detail": self.detail,
                "twins": [asdict(t) for t in self.twins], "probed": [list(p) for p in self.probed]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> ForgeryCheck:
        twins = tuple(Twin(**t) for t in data.get("twins", ()))
        probed = tuple((str(m), str(e), bool(f)) for m, e, f in data.get("probed", ()))
        return cls(str(data["name"]), bool(data["passed"]), str(data.get("detail", "")), twins, probed)


@dataclass(frozen=True)
class InstanceReport:
    """The verdict on one instance (one model, one run)."""

    instance_id: str
    model_name_or_path: str
    outcome: Outcome
    status: ResolutionStatus
    patch_exists: bool
    patch_applied: bool
    """swebench's ``patch_successfully_applied``: the patch applied and the log was gradable."""
    tests: TestResults | None = None
    findings: tuple[Finding, ...] = ()
    """Tamper rules that fired (reverted, flagged or refused paths)."""
    error_kind: ErrorKind | None = None
    error: str | None = None
    failure_reason: str | None = None
    """swebench's advisory log classification (``infra_failure.classify_logs``), when it matched."""
    test_exit_code: int | None = None
    attempts: int = 1
    duration_s: float = 0.0
    extra: Mapping[str, Any] = field(default_factory=dict, compare=False)
    """Timings, image tags, apply command: informational."""
    suspicions: tuple[Suspicion, ...] = ()
    """Static screening rules that fired on the model patch (``screen.py``)."""
    forgery_check: ForgeryCheck | None = None
    """The differential check's verdict (None: the run had no twins; the check was off)."""

    @property
    def resolved(self) -> bool:
        return self.outcome is Outcome.RESOLVED

    @property
    def infra_error(self) -> bool:
        return self.error_kind is not None and self.error_kind.infra

    @property
    def suspect(self) -> bool:
        """The model patch reaches for the grading machinery (see ``screen.py``); unresolved under strict."""
        return bool(self.suspicions)

    @property
    def tampered(self) -> bool:
        return bool(self.findings)

    @property
    def infra_failure(self) -> bool:
        """swebench's ``infra_failure``: an infra error, or a log that swebench's ``classify_logs`` puts in
        its environment tier (a broken environment, not the patch)."""
        return self.infra_error or failure_tier(self.failure_reason) == "environment"

    def to_swebench(self) -> dict[str, Any]:
        """swebench's report.json ``{instance_id: {...}}``, with envfarm's fields under ``"envfarm"``."""
        inner: dict[str, Any] = {
            "patch_is_None": not self.patch_exists and self.outcome is Outcome.EMPTY_PATCH,
            "patch_exists": self.patch_exists,
            "patch_successfully_applied": self.patch_applied,
            "resolved": self.resolved,
            "infra_failure": self.infra_failure,
            "suspect": self.suspect,
        }
        if self.failure_reason:
            inner["infra_failure_reason"] = self.failure_reason
        if self.tests is not None:
            inner["tests_status"] = self.tests.to_swebench()
        inner["envfarm"] = {
            "model_name_or_path": self.model_name_or_path,
            "outcome": self.outcome.value,
            "resolution_status": self.status.value,
            "tamper": [f.__dict__ for f in self.findings],
            "suspect_reasons": [s.__dict__ for s in self.suspicions],
            "error_kind": self.error_kind.value if self.error_kind else None,
            "error": self.error,
            "test_exit_code": self.test_exit_code,
            "attempts": self.attempts,
            "duration_s": round(self.duration_s, 3),
            "forgery_check": self.forgery_check.to_json() if self.forgery_check else None,
            **dict(self.extra),
        }
        return {self.instance_id: inner}

    @classmethod
    def from_swebench(cls, data: Mapping[str, Any]) -> InstanceReport:
        """Read back what :meth:`to_swebench` wrote (for resuming a run)."""
        ((iid, inner),) = data.items()
        ours = inner["envfarm"]
        known = {
            "model_name_or_path",
            "outcome",
            "resolution_status",
            "tamper",
            "suspect_reasons",
            "error_kind",
            "error",
            "test_exit_code",
            "attempts",
            "duration_s",
            "forgery_check",
        }
        return cls(
            instance_id=iid,
            model_name_or_path=ours["model_name_or_path"],
            outcome=Outcome(ours["outcome"]),
            status=ResolutionStatus(ours["resolution_status"]),
            patch_exists=inner["patch_exists"],
            patch_applied=inner["patch_successfully_applied"],
            tests=TestResults.from_swebench(inner["tests_status"]) if "tests_status" in inner else None,
            findings=tuple(Finding(**f) for f in ours.get("tamper", [])),
            suspicions=tuple(Suspicion(**x) for x in ours.get("suspect_reasons", [])),
            error_kind=ErrorKind(ours["error_kind"]) if ours.get("error_kind") else None,
            error=ours.get("error"),
            failure_reason=inner.get("infra_failure_reason"),
            test_exit_code=ours.get("test_exit_code"),
            attempts=ours.get("attempts", 1),
            duration_s=ours.get("duration_s", 0.0),
            forgery_check=ForgeryCheck.from_json(ours["forgery_check"]) if ours.get("forgery_check")
            else None,
            extra={k: v for k, v in ours.items() if k not in known},
        )


def grade(
    instance: Instance,
    test_log: str | Path,
    *,
    model_patch: str | None = "",
    model_name_or_path: str = "",
    findings: Sequence[Finding] | None = None,
    log_parser: str | None = None,
    eval_type: str | None = None,
    canaries: Sequence[Canary] | None = None,
    baseline: bool = False,
    strict: bool = False,
    twins: Sequence[Twin] | None = None,
) -> InstanceReport:
    """Grade one test log (its text, or a Path to it) against the instance's FAIL_TO_PASS/PASS_TO_PASS.

    ``findings`` are the runner's tamper findings; None means "unknown": the model patch is scanned
    statically and every rule that fires is flagged (blocks resolution). ``canaries`` are the tests the
    runner planted (None: the run had none, and completeness is not checked either); ``twins`` the tests it
    twinned (None: the differential check was off). A None or blank
    ``model_patch`` gives :attr:`Outcome.EMPTY_PATCH`, unless ``baseline``: the log is of the unpatched base
    (validation), graded like any other. The patch is screened (``screen.py``); ``strict``: a suspect patch
    is not resolved. Blocking (reads or writes the log file); no sandbox.
    """
    if baseline:
        model_patch, findings = "", ()
    elif model_patch is None or not model_patch.strip():
        return empty_report(instance.instance_id, model_name_or_path, model_patch)
    ctx = screen_context(instance)
    if findings is None:
        findings = tamper.scan_patch(model_patch, ctx)
    args = (model_patch, model_name_or_path, findings, log_parser, eval_type, canaries, twins)
    if isinstance(test_log, Path):
        report = _grade_file(instance, test_log, *args)
    else:
        with tempfile.NamedTemporaryFile("w", suffix=".log", encoding="utf-8") as fh:
            fh.write(test_log)
            fh.flush()
            report = _grade_file(instance, Path(fh.name), *args)
    return apply_screen(report, screen.screen_patch(model_patch, ctx) if model_patch else (), strict)


def screen_context(instance: Instance) -> tamper.Context:
    """What the tamper and screening rules know of ``instance``: test_patch's files, the test command."""
    return tamper.Context(tuple(_test_files(instance)), eval_script_command(instance.eval_script) or "")


def apply_screen(report: InstanceReport, found: Sequence[Suspicion], strict: bool) -> InstanceReport:
    """``report`` with the screening verdict; under ``strict`` a suspect instance is not resolved."""
    report = replace(report, suspicions=tuple(found))
    if strict and report.suspect and report.resolved:
        report = replace(report, outcome=Outcome.UNRESOLVED, status=ResolutionStatus.NO)
    return report


def _grade_file(
    instance: Instance,
    log_path: Path,
    model_patch: str,
    model: str,
    findings: Sequence[Finding],
    log_parser: str | None,
    eval_type: str | None,
    canaries: Sequence[Canary] | None,
    twins: Sequence[Twin] | None = None,
) -> InstanceReport:
    sw = _swebench.load()
    spec = sw.types.TestSpec(
        instance_id=instance.instance_id,
        image=instance.image,
        eval_script_list=[],
        repo=instance.repo,
        version=instance.version,
        FAIL_TO_PASS=list(instance.fail_to_pass),
        PASS_TO_PASS=list(instance.pass_to_pass),
        log_parser=log_parser or instance.log_parser or DEFAULT_PARSER,
        eval_type=eval_type or instance.eval_type or "pass_and_fail",
    )
    prediction = {
        "instance_id": instance.instance_id,
        "model_name_or_path": model,
        "model_patch": model_patch,
    }
    content = log_path.read_text(encoding="utf-8", errors="replace")
    if canaries is not None:
        findings = [*findings, *_canary_findings(sw, spec, instance, content, canaries)]
    check = None if twins is None else _differential(sw, spec, content, twins)
    if check is not None and not check.passed:
        findings = [*findings, Finding(differential.NAME, "(test results)", "flagged", check.detail)]
    raw = sw.grading.get_eval_report(spec, prediction, str(log_path), include_tests_status=True)
    inner = raw[instance.instance_id]
    status = (
        ResolutionStatus(sw.grading.get_resolution_status(inner["tests_status"]))
        if ("tests_status" in inner)
        else ResolutionStatus.NO
    )
    blocked = any(f.blocks_resolution for f in findings)
    resolved = bool(inner["resolved"]) and not blocked
    if blocked:
        status = ResolutionStatus.NO
    return InstanceReport(
        instance_id=instance.instance_id,
        model_name_or_path=model,
        outcome=Outcome.RESOLVED if resolved else Outcome.UNRESOLVED,
        status=status,
        patch_exists=bool(model_patch),
        patch_applied=bool(inner["patch_successfully_applied"]),
        tests=TestResults.from_swebench(inner["tests_status"]) if "tests_status" in inner else None,
        findings=tuple(findings),
        failure_reason=inner.get("infra_failure_reason"),
        test_exit_code=sw.grading.parse_test_exit_code(content),
        forgery_check=check,
    )


def _parsed(sw: _swebench.Swebench, spec: Any, content: str) -> tuple[str, dict[str, str]] | None:
    """The log between the test-output markers and its parsed results; None when it has no markers."""
    c = sw.constants
    if c.START_TEST_OUTPUT not in content or c.END_TEST_OUTPUT not in content:
        return None
    sliced = content.split(c.START_TEST_OUTPUT)[1].split(c.END_TEST_OUTPUT)[0]
    return sliced, sw.log_parsers.PARSER_REGISTRY[spec.log_parser](sliced, spec)


def _differential(sw: _swebench.Swebench, spec: Any, content: str, twins: Sequence[Twin]) -> ForgeryCheck:
    found = _parsed(sw, spec, content)
    status = found[1] if found else {}
    passed, detail = differential.verdict(twins, status)
    return ForgeryCheck(differential.NAME, passed, detail, tuple(twins), differential.probed(twins, status))


def _canary_findings(
    sw: _swebench.Swebench, spec: Any, instance: Instance, content: str, canaries: Sequence[Canary]
) -> list[Finding]:
    """The ``canary`` and ``missing-tests`` findings of a log (nothing to say when it has no results)."""
    c = sw.constants
    if c.START_TEST_OUTPUT not in content or c.END_TEST_OUTPUT not in content:
        return []
    sliced = content.split(c.START_TEST_OUTPUT)[1].split(c.END_TEST_OUTPUT)[0]
    parser = sw.log_parsers.PARSER_REGISTRY[spec.log_parser]
    status = parser(sliced, spec)
    results = canary.line_results(sliced, lambda line: parser(line, spec))
    expected = [*instance.fail_to_pass, *instance.pass_to_pass]
    resolve = sw.grading._resolve_case
    return [*canary.verdict(canaries, status), *canary.completeness(expected, status, resolve, results)]


def failure_tier(reason: str | None) -> str | None:
    """The tier (``environment`` or ``ambiguous``) of a ``classify_logs`` reason in swebench's table."""
    if not reason:
        return None
    table = _swebench.load().infra_failure.INFRA_FAILURE_SIGNATURES
    return next((tier for name, tier, _ in table if name == reason), None)


def empty_report(instance_id: str, model: str, patch: str | None) -> InstanceReport:
    """The report of an instance whose prediction has no patch (counted, not run)."""
    return InstanceReport(
        instance_id,
        model,
        Outcome.EMPTY_PATCH,
        ResolutionStatus.NO,
        patch_exists=patch is not None,
        patch_applied=False,
    )


def error_report(
    instance_id: str, model: str, kind: ErrorKind, message: str, **fields: Any
) -> InstanceReport:
    """The report of an instance with no gradable run."""
    base = InstanceReport(
        instance_id,
        model,
        Outcome.ERROR,
        ResolutionStatus.NO,
        patch_exists=True,
        patch_applied=False,
        error_kind=kind,
        error=message,
    )
    return replace(base, **fields)


def _test_files(instance: Instance) -> list[str]:
    from .patches import touched_paths

    return touched_paths(instance.test_patch)
