"""Validate SWE-bench rows in this environment: does gold resolve, does the unfixed code not, and why not.

    result = await validate(instances, HarnessConfig(run_id="v1", repo_source=Path("mirrors")), repeat=3)
    result.json_path, result.markdown_path          # <report-dir>/<run-id>/validate.json, validate.md

A row *validates* when every gold run resolves it and the run of the unpatched base (test_patch applied, no
model patch: what SWE-bench's validation calls the empty patch) does not. Gold runs ``repeat`` times
(``<run-id>-gold1``, ``-gold2``, ...); the base runs once (``<run-id>-empty``); then gold once more with
candidate decoys (``<run-id>-probe``, no verdict rests on it), whose failed ones go to decoys.json
(``decoy_pool.py``; ``probe=False`` skips it). Each is an ordinary
:func:`evaluate` run, so a rerun with the same run id resumes every part. Every row that does not validate
gets one reason from :data:`REASONS`, picked from the reports' evidence (error kinds, test logs):

=======================  ==================================================================================
``python-unavailable``   the spec needs a Python no base image has
``needs-network``        the tests fail on network access (name resolution, unreachable hosts, TLS to a host
                         that only the internet serves: a handshake or certificate error)
``build-failed``         the env or instance image did not build
``no-repository``        the repository or its base commit is not in --repo-source
``upstream-broken``      gold does not resolve on every run alike, or the unfixed code already passes, or
                         test_patch does not apply: the row itself is broken here
``flaky``                gold resolves on some runs and not on others
``timeout``              the tests run past the timeout
``unknown``              anything else (the detail says what happened)
=======================  ==================================================================================
"""

from __future__ import annotations

import asyncio
import json
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

from envfarm.sandbox import Backend

from . import decoy_pool
from .config import HarnessConfig
from .evaluate import Event, ProgressFn, RunReport, evaluate
from .grading import ErrorKind, InstanceReport
from .instances import Instance, Prediction, load_predictions
from .report import RunFolder

REASONS = (
    "python-unavailable",
    "needs-network",
    "build-failed",
    "no-repository",
    "upstream-broken",
    "flaky",
    "timeout",
    "unknown",
)
NETWORK = re.compile(
    r"Temporary failure in name resolution|Name or service not known|Network is unreachable|"
    r"Max retries exceeded with url|Failed to establish a new connection|nodename nor servname|"
    r"SSLError|CERTIFICATE_VERIFY_FAILED|WRONG_VERSION_NUMBER"
)
"""Evidence in a failing gold run's log that the tests reached for the internet. TLS errors count: a sandbox
serves plain HTTP on loopback at most, so an https:// request to a real host fails its handshake or its
certificate check (psf/requests' mixed-case scheme test), and only a network can make it pass."""


@dataclass(frozen=True)
class RowResult:
    """The validation of one row."""

    instance_id: str
    repo: str
    version: str
    gold: tuple[str, ...]
    """Outcome of each gold run (resolved, unresolved, error)."""
    empty: str
    """Outcome of the unpatched base."""
    seconds: float
    """Wall time of all its runs, each from its start to its report (waits for a worker or an image build
    included)."""
    image: str | None
    reason: str | None
    """One of :data:`REASONS` when the row does not validate."""
    detail: str = ""

    @property
    def validated(self) -> bool:
        return self.reason is None

    @property
    def flake_rate(self) -> float:
        """Share of gold runs whose outcome differs from the most common one."""
        if not self.gold:
            return 0.0
        common = Counter(self.gold).most_common(1)[0][1]
        return round(1 - common / len(self.gold), 3)


@dataclass(frozen=True)
class Validation:
    run_id: str
    rows: tuple[RowResult, ...]
    json_path: Path
    markdown_path: Path
    decoys_path: Path | None = None
    """decoys.json: per row, the decoys gold failed in the probe run (``decoy_pool.py``; None: no probe
    run)."""

    @property
    def validated(self) -> list[str]:
        return [r.instance_id for r in self.rows if r.validated]


async def validate(
    instances: Sequence[Instance],
    config: HarnessConfig,
    repeat: int = 1,
    progress: ProgressFn | None = None,
    chunk: int | None = None,
    backend: Backend | None = None,
    probe: bool = True,
) -> Validation:
    """Run gold ``repeat`` times and the unpatched base once per row; write validate.json and validate.md;
    with ``probe`` (and the differential check on), gold once more with probes, and decoys.json.

    ``chunk``: rows are taken ``chunk`` at a time (all at once by default), and validate.json is rewritten
    after each chunk with every row so far, so a long run records its finished rows as it goes (an
    interrupted one resumes from its reports either way). ``backend``: the caller's sandbox backend (as
    :func:`evaluate` takes it; default: the config's)."""
    if repeat < 1:
        raise ValueError(f"repeat must be at least 1, got {repeat}")
    size = max(1, chunk or len(instances))
    seen: set[str] = set()
    for end in range(size, len(instances) + size, size) or (0,):
        part = instances[:end]  # cumulative: rows of earlier chunks resume from their reports
        new = {i.instance_id for i in part} - seen
        result = await _validate_part(part, config, repeat, _only(progress, new), backend, probe)
        seen |= new
    return result


def _only(progress: ProgressFn | None, ids: set[str]) -> ProgressFn | None:
    """``progress`` for the events of ``ids`` alone (rows of earlier chunks resume silently)."""
    if progress is None:
        return None
    report = progress

    def forward(event: Event) -> None:
        if event.instance_id in ids:
            report(event)

    return forward


async def _validate_part(
    instances: Sequence[Instance], config: HarnessConfig, repeat: int, progress: ProgressFn | None,
    backend: Backend | None = None, probe: bool = True,
) -> Validation:
    gold_runs = []
    gold_preds = load_predictions("gold", instances)
    for k in range(1, repeat + 1):
        cfg = config.model_copy(update={"run_id": f"{config.run_id}-gold{k}"})
        gold_runs.append(await evaluate(instances, gold_preds, cfg, progress, backend))
    empty_cfg = config.model_copy(update={"run_id": f"{config.run_id}-empty", "run_empty": True})
    empty = {i.instance_id: Prediction(i.instance_id, "empty", "") for i in instances}
    base_run = await evaluate(instances, empty, empty_cfg, progress, backend)
    probes = None
    if probe and config.differential:  # apart from the gold runs: a probe that upsets them costs no verdict
        probe_cfg = config.model_copy(update={"run_id": f"{config.run_id}-probe", "probe_decoys": True})
        probes = await evaluate(instances, gold_preds, probe_cfg, progress, backend)
    first = RunFolder(config.report_dir, gold_runs[0].run_id, gold_runs[0].model_name_or_path)
    rows = []
    for inst in instances:
        log = await asyncio.to_thread(_read, first.instance_dir(inst.instance_id) / "test_output.txt")
        gold = [run.reports[inst.instance_id] for run in gold_runs]
        rows.append(judge(inst, gold, base_run.reports[inst.instance_id], log))
    folder = config.report_dir / config.run_id
    paths = await asyncio.to_thread(_write, folder, config.run_id, rows)
    decoys = None
    if probes is not None:
        decoys = folder / decoy_pool.FILE
        await asyncio.to_thread(decoy_pool.write, decoys, _pools(instances, [probes]))
    return Validation(config.run_id, tuple(rows), *paths, decoys)


def _pools(instances: Sequence[Instance], gold_runs: Sequence[RunReport]) -> decoy_pool.Pools:
    """Each row's pool: the probes its resolved gold runs (with probes) saw fail."""
    out: decoy_pool.Pools = {}
    for inst in instances:
        reports = [run.reports[inst.instance_id] for run in gold_runs]
        out[inst.instance_id] = decoy_pool.gather(r.forgery_check.probed for r in reports
                                                  if r.resolved and r.forgery_check is not None)
    return out


def judge(inst: Instance, gold: Sequence[InstanceReport], base: InstanceReport, log: str = "") -> RowResult:
    """The row's result and, when it does not validate, the reason the evidence points to (``log``: the
    first gold run's test output)."""
    outcomes = tuple(r.outcome.value for r in gold)
    reason, detail = _reason(gold, base, log)
    image = next((str(r.extra["image"]) for r in gold if r.extra.get("image")), None)
    seconds = round(sum(r.duration_s for r in gold) + base.duration_s, 3)
    return RowResult(inst.instance_id, inst.repo, inst.version, outcomes, base.outcome.value, seconds, image,
                     reason, detail)


def _reason(gold: Sequence[InstanceReport], base: InstanceReport, log: str) -> tuple[str | None, str]:
    for report in [*gold, base]:
        if report.error_kind is not None and report.error_kind is not ErrorKind.PATCH_APPLY:
            return _error_reason(report)
    resolved = [r.resolved for r in gold]
    if any(resolved) and not all(resolved):
        return "flaky", f"gold resolved {sum(resolved)} of {len(resolved)} runs"
    if not all(resolved):
        failing = _failing(gold[0])
        if NETWORK.search(log):
            return "needs-network", f"the tests reach for the network; failing: {failing}"
        return "upstream-broken", f"gold does not resolve; failing: {failing}"
    if base.resolved:
        return "upstream-broken", "the unfixed code already passes every FAIL_TO_PASS test"
    return None, ""


def python_unavailable(message: str) -> bool:
    """Whether a plan or build error says no base image has the Python the spec needs (layout.base_of,
    specs.py's exact_python): the ``python-unavailable`` reason."""
    return "needs Python" in message


def _error_reason(report: InstanceReport) -> tuple[str, str]:
    kind = report.error_kind
    message = (report.error or "").splitlines()[0][:300] if report.error else ""
    if kind in (ErrorKind.SPEC, ErrorKind.BUILD) and python_unavailable(report.error or ""):
        return "python-unavailable", message
    table = {
        ErrorKind.BUILD: "build-failed",
        ErrorKind.REPO: "no-repository",
        ErrorKind.TEST_PATCH: "upstream-broken",
        ErrorKind.TIMEOUT: "timeout",
        ErrorKind.ENV_TIMEOUT: "timeout",
    }
    return table.get(kind, "unknown"), f"{kind}: {message}"  # type: ignore[arg-type]


def _failing(report: InstanceReport) -> str:
    if report.tests is None:
        return "no parsed results"
    names = [*report.tests.fail_to_pass_failure, *report.tests.pass_to_pass_failure]
    rules = sorted({f.rule for f in report.findings})
    shown = ", ".join(names[:3]) + (f" (+{len(names) - 3})" if len(names) > 3 else "")
    return shown + (f"; rules {', '.join(rules)}" if rules else "")


def _write(folder: Path, run_id: str, rows: Sequence[RowResult]) -> tuple[Path, Path]:
    folder.mkdir(parents=True, exist_ok=True)
    data = {
        "run_id": run_id,
        "rows": [{**asdict(r), "validated": r.validated, "flake_rate": r.flake_rate} for r in rows],
        "per_repo": {repo: {**asdict(t), "reasons": dict(t.reasons)} for repo, t in _per_repo(rows).items()},
    }
    json_path, md_path = folder / "validate.json", folder / "validate.md"
    json_path.write_text(json.dumps(data, indent=2) + "\n", encoding="utf-8")
    md_path.write_text(markdown(rows, run_id), encoding="utf-8")
    return json_path, md_path


@dataclass
class _Tally:
    rows: int = 0
    gold_resolved: int = 0
    empty_resolved: int = 0
    reasons: Counter[str] = field(default_factory=Counter)


def _per_repo(rows: Sequence[RowResult]) -> dict[str, _Tally]:
    out: dict[str, _Tally] = {}
    for r in rows:
        t = out.setdefault(r.repo, _Tally())
        t.rows += 1
        t.gold_resolved += all(g == "resolved" for g in r.gold)
        t.empty_resolved += r.empty == "resolved"
        if r.reason:
            t.reasons[r.reason] += 1
    return dict(sorted(out.items()))


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


def markdown(rows: Sequence[RowResult], run_id: str) -> str:
    """validate.md: per repository, then per row."""
    lines = [f"# Validation {run_id}", "", "| repository | rows | gold resolved | empty resolved | reasons |",
             "| --- | --- | --- | --- | --- |"]
    for repo, t in _per_repo(rows).items():
        reasons = ", ".join(f"{k} {v}" for k, v in sorted(t.reasons.items())) or "-"
        lines.append(f"| {repo} | {t.rows} | {t.gold_resolved} | {t.empty_resolved} | {reasons} |")
    lines += ["", "| instance | gold | empty | seconds | flake rate | reason | detail |",
              "| --- | --- | --- | --- | --- | --- | --- |"]
    for r in rows:
        detail = r.detail.replace("|", "\\|")
        cells = [r.instance_id, "/".join(r.gold), r.empty, f"{r.seconds:.1f}", str(r.flake_rate),
                 r.reason or "validated", detail]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
