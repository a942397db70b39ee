"""A whole harness run: plan, build images, run and grade every instance, write the reports.

    run = await evaluate(instances, predictions, HarnessConfig(run_id="r1", repo_source=Path("mirrors")))
    run.summary.resolved_ids, run.summary_path

Instances run concurrently (``asyncio.TaskGroup``; ``max_workers`` sandboxes and ``max_workers`` docker
builds at a time). Empty patches are counted and not run (with ``run_empty``: run as the unpatched base and
graded, for validation). Infra failures (an image build, the sandbox or
daemon, an environment that cannot run the tests in the budget) are retried ``retries`` times, then
reported as errors of their kind; model failures (a patch that does not apply, an unsafe patch, tests that
hang or exhaust memory with the patch while the unpatched base runs well inside the budget: ``verdicts.py``)
are recorded once and never retried. Re-running with the same
run id skips every instance whose report.json exists, except errors that are not the model's: infra errors
run again (unless ``rerun_infra`` is off), and so do setup errors (a missing spec or repository, a test_patch
that did not apply, an internal error), so writing the spec a message names and re-running finishes the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import traceback
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Literal

from envfarm.errors import (
    BackendUnavailable,
    HarnessError,
    ImageError,
    ImageMismatch,
    ImagePullError,
    RepoNotFound,
    SandboxError,
    SpecNotFound,
)
from envfarm.sandbox import Backend, get_backend

from . import _swebench, decoy_pool, tamper
from .config import HarnessConfig
from .differential import ANSI
from .grading import ErrorKind, InstanceReport, empty_report, error_report, grade
from .images import BuiltImage, ImageBuilder
from .instances import Instance, Prediction
from .report import Artifacts, RunFolder, RunSummary, summarize, write_summary
from .run import Attempt, run_attempt, sandbox_limits
from .specs import Plan, SpecCatalog
from .tamper import Policy
from .verdicts import STOPPED, Baselines

log = logging.getLogger(__name__)

Phase = Literal["skipped", "build", "run", "retry", "done"]


@dataclass(frozen=True)
class Event:
    """Progress of one instance (for the CLI's progress display)."""

    instance_id: str
    phase: Phase
    report: InstanceReport | None = None
    """Set when phase is "done" or "skipped"."""
    detail: str = ""


@dataclass(frozen=True)
class RunReport:
    """What :func:`evaluate` returns."""

    run_id: str
    model_name_or_path: str
    reports: Mapping[str, InstanceReport]
    summary: RunSummary
    summary_path: Path
    markdown_path: Path
    duration_s: float
    images: tuple[str, ...]
    """Instance images used by this run."""


ProgressFn = Callable[[Event], None]


class _Infra(Exception):
    """An infra failure of one attempt (retried)."""

    def __init__(self, kind: ErrorKind, message: str, attempt: Attempt | None = None) -> None:
        super().__init__(message)
        self.kind, self.attempt = kind, attempt


async def evaluate(
    instances: Sequence[Instance],
    predictions: Mapping[str, Prediction],
    config: HarnessConfig,
    progress: ProgressFn | None = None,
    backend: Backend | None = None,
) -> RunReport:
    """Evaluate ``predictions`` on ``instances``; see the module docstring."""
    start = time.monotonic()
    models = sorted({p.model_name_or_path for p in predictions.values()})
    if len(models) > 1:
        raise HarnessError(f"one model per run; the predictions hold {models}")
    model = models[0] if models else "none"
    folder = RunFolder(config.report_dir, config.run_id, model)
    await asyncio.to_thread(_writable, folder)
    catalog = await asyncio.to_thread(SpecCatalog, config.specs)  # reads spec files, imports swebench
    await asyncio.to_thread(_swebench.load)
    pools = await asyncio.to_thread(decoy_pool.load, config.decoy_pool) if config.decoy_pool else {}
    runner = _Runner(config, folder, catalog, progress, backend, pools)
    reports = await runner.run_all(instances, predictions)
    summary = summarize(instances, predictions, reports, config.run_id, model)
    json_path, md_path = await asyncio.to_thread(write_summary, runner.folder, summary, reports)
    return RunReport(
        config.run_id,
        model,
        reports,
        summary,
        json_path,
        md_path,
        time.monotonic() - start,
        tuple(sorted(runner.images_used)),
    )


def _first(group: BaseExceptionGroup[HarnessError]) -> HarnessError:
    """The first HarnessError of a (possibly nested) exception group."""
    error: BaseException = group
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    assert isinstance(error, HarnessError)
    return error


def _writable(folder: RunFolder) -> None:
    try:
        folder.root.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise HarnessError(
            f"cannot write reports under {folder.report_dir} ({e}); pass a writable --report-dir"
        ) from e


class _Runner:
    def __init__(
        self,
        cfg: HarnessConfig,
        folder: RunFolder,
        catalog: SpecCatalog,
        progress: ProgressFn | None,
        backend: Backend | None,
        pools: decoy_pool.Pools | None = None,
    ) -> None:
        self.cfg, self.folder, self.catalog = cfg, folder, catalog
        self.pools = pools or {}
        self.progress = progress or (lambda event: None)
        self.backend = backend
        self.builder = ImageBuilder(
            cfg.repo_source, cfg.max_workers, cfg.force_rebuild, cfg.image_source, cfg.registry
        )
        self.run_sem = asyncio.Semaphore(cfg.max_workers)
        self.images_used: set[str] = set()
        self.baselines = Baselines()

    async def run_all(
        self, instances: Sequence[Instance], preds: Mapping[str, Prediction]
    ) -> dict[str, InstanceReport]:
        finished = await asyncio.to_thread(self.folder.load_finished)
        reports: dict[str, InstanceReport] = {}
        own_backend = self.backend is None
        self.backend = self.backend or get_backend(self.cfg.backend)
        try:
            async with asyncio.TaskGroup() as tg:
                for inst in instances:
                    pred = preds.get(inst.instance_id)
                    if pred is None:
                        continue
                    old = finished.get(inst.instance_id)
                    if old is not None and not self._rerun(old):
                        reports[inst.instance_id] = old
                        self.progress(Event(inst.instance_id, "skipped", old))
                        continue
                    tg.create_task(self._one(inst, pred, reports))
        except* HarnessError as group:  # the report folder became unwritable: one error, not a group
            raise _first(group) from None
        finally:
            if own_backend:
                await self.backend.aclose()
        return reports

    def _rerun(self, old: InstanceReport) -> bool:
        """Whether a resumed run evaluates an instance with an earlier report again."""
        kind = old.error_kind
        return kind is not None and (kind.setup or (kind.infra and self.cfg.rerun_infra))

    async def _one(self, inst: Instance, pred: Prediction, reports: dict[str, InstanceReport]) -> None:
        t0 = time.monotonic()
        try:
            report = await self._evaluate(inst, pred)
        except Exception as e:  # a bug must not take the other instances down with it
            log.exception("internal error on %s", inst.instance_id)
            report = error_report(
                inst.instance_id,
                pred.model_name_or_path,
                ErrorKind.INTERNAL,
                f"{type(e).__name__}: {e}\n{traceback.format_exc(limit=3)}",
            )
            with contextlib.suppress(OSError):  # writing the report below says why, if it fails too
                await asyncio.to_thread(
                    self.folder.write_artifacts, inst.instance_id, Artifacts(patch=pred.model_patch)
                )
        report = replace(report, duration_s=round(time.monotonic() - t0, 3))
        try:
            await asyncio.to_thread(self.folder.write_report, report)
        except OSError as e:
            raise HarnessError(
                f"cannot write the report of {inst.instance_id} under {self.folder.root} ({e}); free disk "
                "space or pass another --report-dir, then re-run with the same --run-id to resume"
            ) from e
        reports[inst.instance_id] = report
        self.progress(Event(inst.instance_id, "done", report))

    async def _evaluate(self, inst: Instance, pred: Prediction) -> InstanceReport:
        model, iid = pred.model_name_or_path, inst.instance_id
        if pred.is_empty and not self.cfg.run_empty:
            await asyncio.to_thread(self.folder.write_artifacts, iid, Artifacts(patch=pred.model_patch))
            return empty_report(iid, model, pred.model_patch)
        patch = None if pred.is_empty else pred.model_patch or ""  # None: the unpatched base (run_empty)
        await asyncio.to_thread(self.folder.write_artifacts, iid, Artifacts(patch=patch or ""))
        try:
            plan = self.catalog.plan(inst)
        except SpecNotFound as e:
            return error_report(iid, model, ErrorKind.SPEC, str(e))
        if patch is not None and self.cfg.tamper is not Policy.OFF and (refused := tamper.unsafe(patch)):
            await self._save(iid, None, [f"refused: {f.describe()}" for f in refused])
            return error_report(
                iid,
                model,
                ErrorKind.UNSAFE_PATCH,
                "the patch writes outside the repository or into .git; it was not applied",
                findings=tuple(refused),
            )
        last: _Infra | None = None
        for n in range(1, self.cfg.retries + 2):
            try:
                attempt, image = await self._attempt(plan, patch)
            except RepoNotFound as e:
                return error_report(iid, model, ErrorKind.REPO, str(e), attempts=n)
            except _Infra as e:
                last = e
                await self._save(iid, e.attempt, [f"attempt {n}: {e.kind} infra failure: {e}"])
                if n <= self.cfg.retries:
                    self.progress(Event(iid, "retry", detail=f"{e.kind}: {str(e).splitlines()[0][:80]}"))
                continue
            return await self._finish(inst, plan, patch, model, attempt, image, n)
        assert last is not None
        return error_report(
            iid,
            model,
            last.kind,
            str(last),
            attempts=self.cfg.retries + 1,
            findings=last.attempt.findings if last.attempt else (),
            test_exit_code=last.attempt.test_exit_code if last.attempt else None,
        )

    async def _attempt(self, plan: Plan, patch: str | None) -> tuple[Attempt, BuiltImage]:
        iid = plan.instance.instance_id
        self.progress(Event(iid, "build"))
        t0 = time.monotonic()
        try:
            image = await self.builder.instance(plan)
        except (ImagePullError, ImageMismatch) as e:  # --image-source pull: the message says what to fix
            raise _Infra(ErrorKind.BUILD, f"image pull failed: {e}") from e
        except (ImageError, BackendUnavailable) as e:
            raise _Infra(
                ErrorKind.BUILD,
                f"image build failed (the packages/install of {plan.env.repo} {plan.env.version} are in "
                f"{plan.env.source}): {ANSI.sub('', str(e))}",
            ) from e
        except HarnessError as e:
            if isinstance(e, RepoNotFound):
                raise
            raise _Infra(ErrorKind.BUILD, f"preparing the repository failed: {e}") from e
        self.images_used.add(image.tag)
        image = replace(image, duration_s=time.monotonic() - t0)  # env + instance, waits included
        c = self.cfg
        timeout = max(c.timeout_s, plan.env.timeout_s or 0.0)
        limits = sandbox_limits(plan.env.run_cpus(c.cpus), c.memory_mb, c.disk_mb, c.pids, image.repo_bytes,
                                timeout)
        async with self.run_sem:
            self.progress(Event(iid, "run"))
            try:
                assert self.backend is not None
                attempt = await run_attempt(
                    self.backend, image.tag, limits, plan, patch, c.tamper, timeout,
                    canaries=c.canaries, output_cap=c.output_cap_mb << 20, differential=c.differential,
                    pool=self.pools.get(iid, {}), probe=c.probe_decoys,
                )
                if attempt.result in STOPPED:
                    self.progress(Event(iid, "run", detail=f"{attempt.result}: baseline run for evidence"))
                    kind, attempt = await self.baselines.judge(
                        self.backend, image.tag, limits, plan, timeout, attempt
                    )
                    if kind.infra:
                        raise _Infra(kind, attempt.message, attempt)
            except (SandboxError, BackendUnavailable) as e:
                raise _Infra(ErrorKind.SANDBOX, f"sandbox failure: {e}") from e
        return attempt, image

    async def _save(self, iid: str, attempt: Attempt | None, notes: list[str]) -> Path:
        art = Artifacts(
            test_log=attempt.test_log if attempt and attempt.test_log else None,
            eval_script=attempt.eval_script if attempt and attempt.eval_script else None,
            applied_diff=attempt.applied_diff if attempt and attempt.applied_diff else None,
            steps=[*(attempt.steps if attempt else ()), *notes],
        )
        return await asyncio.to_thread(self.folder.write_artifacts, iid, art)

    async def _finish(
        self,
        inst: Instance,
        plan: Plan,
        patch: str | None,
        model: str,
        att: Attempt,
        image: BuiltImage,
        n: int,
    ) -> InstanceReport:
        iid = inst.instance_id
        log_path = await self._save(iid, att, [f"attempt {n}: {att.result}"])
        extra = {
            "image": image.tag,
            "image_built": image.built,
            "apply_command": att.apply_command,
            "markers_neutralised": att.markers_neutralised,
            "output_cut_bytes": att.output_cut,
            "canaries": None if att.canaries is None else [asdict(x) for x in att.canaries],
            "timings": {
                "image_s": round(image.duration_s, 3),
                **{k: round(v, 3) for k, v in att.timings.items()},
            },
        }
        if att.result == "patch_failed":
            return error_report(iid, model, ErrorKind.PATCH_APPLY, att.message, attempts=n, extra=extra)
        if att.result == "refused":
            return error_report(
                iid,
                model,
                ErrorKind.UNSAFE_PATCH,
                att.message,
                attempts=n,
                findings=att.findings,
                extra=extra,
            )
        if att.result == "test_patch_failed":
            return error_report(
                iid, model, ErrorKind.TEST_PATCH, att.message, attempts=n, findings=att.findings, extra=extra
            )
        if att.result in STOPPED:  # classified as the patch's doing (_attempt)
            kind = ErrorKind.TIMEOUT if att.result == "timeout" else ErrorKind.OOM
            return error_report(
                iid, model, kind, att.message, attempts=n, findings=att.findings, extra=extra,
                test_exit_code=att.test_exit_code,
            )
        report = await asyncio.to_thread(
            grade,
            inst,
            log_path,
            model_patch=patch,
            model_name_or_path=model,
            findings=att.findings,
            log_parser=plan.log_parser,
            eval_type=plan.eval_type,
            canaries=att.canaries,
            baseline=patch is None,
            strict=self.cfg.strict,
            twins=att.twins,
        )
        return replace(report, attempts=n, extra=extra)
