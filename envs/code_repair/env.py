"""``envfarm/CodeRepair-v0``: fix a bug in a real repository; graded by the SWE-bench harness's own code.

A task is a SWE-bench row (the harness's :class:`~envfarm.harness.Instance`): the built-in set by default
(``builtin.py``; its repos are materialized under ``config.home()/code_repair/repos``), or ``tasks=PATH``
(any file ``load_instances`` reads, or a catalogue folder of ``envfarm tasks mine --packages-file``; also
spelled ``instances=PATH``) with ``repo_source=DIR`` holding the ``owner__name`` git repos (or a git URL
prefix, as ``harness --repo-source`` takes: cloned once, then the commits fetched).
``reset(seed=s)`` picks task ``s % len(tasks)`` (``options={"instance_id": ...}`` picks one by name), makes
sure its instance image exists (the harness image builder: content-hashed, built once), leases a sandbox
from it and copies the repository at the base commit to ``/workspace/testbed`` as the harness does.

Tools: ``bash``, ``view``, ``str_replace``, ``create``, ``search``, ``run_tests``, ``submit``. On ``submit``
(or at the step limit) the diff of the workspace against the base commit (new files included) is graded by a
fresh harness run of the instance (``harness.run.run_attempt`` then ``harness.grade``: apply the patch, tamper
rules, reset and apply test_patch, run the tests, swebench's grading). Reward 1.0 when resolved; with
``partial_credit`` a fix that keeps every PASS_TO_PASS test passing earns the fraction of FAIL_TO_PASS tests
it makes pass. ``info["tests"]`` has the swebench tests_status; ``info["suspect"]`` the static screening rules
that fired (``harness/screen.py``; with ``strict`` such a patch is not resolved). Every grading run plants
canary tests and requires every expected test exactly once (``harness/canary.py``), and runs FAIL_TO_PASS
tests beside perturbed twins that must fail (``harness/differential.py``; ``info["forgery_check"]`` has the
verdict); ``canaries=False`` / ``differential=False`` turn either off for comparisons. Hidden tests that hang
or exhaust memory with the patch while the unpatched base runs well inside the budget are the policy's doing:
reward 0 with ``info["reason"]`` ``timeout``/``oom``, no retry (``harness/verdicts.py``). A grading run that
fails for infrastructure reasons (twice: a sandbox that died, an environment too slow for its own tests), or a
test_patch that does not apply, raises :class:`~envfarm.errors.InfraError` from ``astep`` (the sync ``step``
reports it as ``info["infra_error"]``); it is never a silent reward of 0. Attempts forked from one reset (the
farm's groups) that submit the identical diff share its one grading (``shared_grades.py``;
``share_grades=False``: each grades its own).
"""

from __future__ import annotations

import asyncio
import json
import logging
import shlex
import time
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np

from envfarm.errors import BackendUnavailable, ConfigError, InfraError, SandboxError, SpecNotFound
from envfarm.harness import HarnessConfig, Instance, SpecCatalog, grade, load_instances, select
from envfarm.harness.grading import InstanceReport, empty_report
from envfarm.harness.images import PRISTINE, WORKDIR, BuiltImage, ImageBuilder, quote_env
from envfarm.harness.instances import instance_from_row
from envfarm.harness.repos import RepoSource, parse_source
from envfarm.harness.run import GIT, Attempt, run_attempt, sandbox_limits
from envfarm.harness.specs import Plan
from envfarm.harness.verdicts import STOPPED, Baselines
from envfarm.sandbox import Backend, Limits, Sandbox
from envfarm.sandbox.pool import SandboxPool
from envfarm.sandbox.values import IMAGE_BACKEND

from ..actions import Action
from ..core import AgentEnv, Outcome, tool
from ..meta import CodeRepairMeta
from . import builtin, tools
from .factory.sources import catalogue_tasks, rebuilt
from .predictions import write_predictions
from .shared_grades import SharedGrades
from .tools import BashArgs, CreateArgs, NoArgs, RunTestsArgs, SearchArgs, StrReplaceArgs, ViewArgs

log = logging.getLogger(__name__)

GOLD_PATH = "/tmp/envfarm/gold.patch"
DIFF = (f"{GIT} add -A -- . ':(exclude,glob)**/__pycache__/**' ':(exclude,glob)**/*.pyc' && "
        f"{GIT} diff --cached --binary --no-color --no-ext-diff --src-prefix=a/ --dst-prefix=b/ ")


@dataclass(frozen=True)
class RepairTask:
    task_id: str
    index: int
    plan: Plan

    @property
    def instance(self) -> Instance:
        return self.plan.instance


@cache
def builtin_instances() -> tuple[tuple[Instance, ...], Path]:
    """The built-in rows as instances, and the folder of their materialized repos (cached per process)."""
    projects = builtin.load_projects()
    table = builtin.rows(projects)
    return tuple(instance_from_row(r, r["instance_id"]) for r in table), builtin.cached_repos(projects)


class CodeRepairEnv(AgentEnv[RepairTask]):
    """Repair a repository so that its hidden FAIL_TO_PASS tests pass (see the module docstring)."""

    default_max_steps = 50
    default_limits = Limits(cpus=1.0, memory_mb=2048, pids=512, disk_mb=512, timeout_s=120)
    sandboxes = "per_task"  # one image per instance: pools made on demand, none kept warm
    meta_type = CodeRepairMeta
    eval_artifacts = (write_predictions,)  # RUN/predictions.jsonl for `envfarm harness run` and SWE-bench
    forkable = True
    fork_shared = frozenset({"plans", "harness", "repo_source", "_backend", "_builder", "_baselines", "task",
                             "_shared_grades"})
    """A fork shares the task set, the image builder, the baselines cache, the (frozen) task itself and the
    group's verdicts (``shared_grades.py``)."""

    def __init__(
        self,
        tasks: str | Path | None = None,
        instance_ids: Sequence[str] | None = None,
        repo_source: str | Path | None = None,
        specs: Sequence[str | Path] = (),
        partial_credit: bool = False,
        bash_timeout_s: float = 60.0,
        test_timeout_s: float = 300.0,
        grade_timeout_s: float = 600.0,
        strict: bool = False,
        canaries: bool = True,
        differential: bool = True,
        share_grades: bool = True,
        **kwargs: Any,
    ) -> None:
        if "instances" in kwargs:  # instances=: the same as tasks= (a file, or a mined catalogue folder)
            if tasks is not None:
                raise ConfigError("CodeRepair takes tasks= or instances= (the same thing), not both")
            tasks = kwargs.pop("instances")
        for name, value in (("bash_timeout_s", bash_timeout_s), ("test_timeout_s", test_timeout_s),
                            ("grade_timeout_s", grade_timeout_s)):
            if value <= 0:
                raise ConfigError(f"CodeRepair {name} must be positive, got {value!r}")
        kwargs.setdefault("backend", IMAGE_BACKEND)  # its images are the harness's docker builds
        super().__init__(**kwargs)
        if tasks is None:
            instances, source = builtin_instances()
            self.repo_source: RepoSource = parse_source(repo_source) if repo_source else source
        else:
            mined = catalogue_tasks(tasks)
            instances = tuple(load_instances(tasks) if mined is None else mined)
            self.repo_source = parse_source(repo_source) if repo_source else None
            if self.repo_source is None and (found := rebuilt(instances)) is not None:
                self.repo_source, specs = found[0], (*specs, found[1])  # rows from `envfarm tasks mine`
        if instance_ids:
            instances = tuple(select(instances, instance_ids, str(tasks or "the built-in tasks")))
        if not instances:
            raise ConfigError(f"CodeRepair has no tasks ({tasks or 'built-in set'}, ids {instance_ids})")
        self.plans = _plans(instances, specs)
        self.partial_credit = partial_credit
        self.bash_timeout_s, self.test_timeout_s = float(bash_timeout_s), float(test_timeout_s)
        self.harness = HarnessConfig(run_id="coderepair", timeout_s=grade_timeout_s, strict=strict,
                                     canaries=canaries, differential=differential)
        self._backend: Backend | None = None
        self._builder = ImageBuilder(self.repo_source, max_workers=1)
        self._pending: int | None = None
        self._built: BuiltImage | None = None
        self._base = "HEAD"
        self._grade_limits = self._limits
        self._baselines = Baselines()
        self.share_grades = share_grades
        self._shared_grades = SharedGrades()

    # ---------------------------------------------------------------------------------------- episodes

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        opts = dict(options or {})
        if "instance_id" in opts:
            ids = [p.instance.instance_id for p in self.plans]
            select([p.instance for p in self.plans], [opts["instance_id"]], "this env's tasks")
            self._pending = ids.index(opts["instance_id"])
        else:
            self._pending = None if seed is None else seed % len(self.plans)
        self._shared_grades = SharedGrades()  # a new group: its forks share this one (shared_grades.py)
        return await super().areset(seed=seed, options=options)

    def generate(self, rng: np.random.Generator) -> RepairTask:
        index = self._pending if self._pending is not None else int(rng.integers(len(self.plans)))
        plan = self.plans[index]
        return RepairTask(plan.instance.instance_id, index, plan)

    def prompt(self, task: RepairTask) -> str:
        return (
            f"You are working in the repository {task.instance.repo} at {WORKDIR} (every tool runs there; "
            "relative paths are relative to it). A user reported this issue:\n\n"
            f"<issue>\n{task.instance.problem_statement.strip()}\n</issue>\n\n"
            "Change the source code so that the issue is fixed. Explore with view and search, reproduce the "
            "problem with bash or run_tests, edit with str_replace or create, then call submit. Hidden "
            "tests judge the final state of the repository; changes to test files are ignored."
        )

    async def setup(self, sb: Sandbox, task: RepairTask) -> None:
        res = await sb.exec(["bash", "-c", f"mkdir -p /tmp/envfarm && cp -a {PRISTINE} {WORKDIR} && cd "
                             f"{WORKDIR} && {GIT} rev-parse HEAD"], cwd="/workspace", timeout_s=300)
        if not res.ok:
            raise SandboxError(f"copying the repository into {sb} failed: {res.stderr[-500:]}")
        self._base = res.stdout.strip()

    async def _get_pool(self) -> SandboxPool:
        assert self.task is not None
        self._backend = self._pools.backend(self._backend_name)
        image = await self._builder.instance(self.task.plan)
        mine, c = self._limits, self.harness
        env = self.task.plan.env
        limits = sandbox_limits(env.run_cpus(mine.cpus), mine.memory_mb, mine.disk_mb, mine.pids,
                                image.repo_bytes, mine.timeout_s)
        self._built = image
        self._grade_limits = sandbox_limits(env.run_cpus(c.cpus), c.memory_mb, c.disk_mb, c.pids,
                                            image.repo_bytes, self._grade_timeout())
        return self._pools.get(self._backend, image.tag, limits)

    async def _dispatch(self, action: Action) -> Outcome:
        outcome = await super()._dispatch(action)
        if outcome.done or self.steps < self.max_episode_steps:
            return outcome
        graded = await self._submit()
        return Outcome(f"{outcome.observation}\n\n[step limit reached: your changes were graded] "
                       f"{graded.observation}", graded.reward, False,
                       {**outcome.info, **graded.info, "step_limit": True})

    # -------------------------------------------------------------------------------------------- tools

    @tool("Run a bash command in the repository; returns its output and exit code.")
    async def bash(self, args: BashArgs) -> str:
        timeout = min(args.timeout_s or self.bash_timeout_s, tools.MAX_TIMEOUT_S)
        return tools.show(await self._sb.exec(["bash", "-c", args.command], cwd=WORKDIR, timeout_s=timeout),
                          timeout, "pipe it through head, tail, sed -n or grep")

    @tool("Show a file with line numbers (optionally lines start_line..end_line), or list a directory.")
    async def view(self, args: ViewArgs) -> str:
        return await tools.view(self._sb, tools.resolve(args.path), args.start_line, args.end_line)

    @tool("Replace the one exact occurrence of old_str in a file with new_str.")
    async def str_replace(self, args: StrReplaceArgs) -> str:
        return await tools.str_replace(self._sb, tools.resolve(args.path), args.old_str, args.new_str)

    @tool("Create or overwrite a file with the given content.")
    async def create(self, args: CreateArgs) -> str:
        path = tools.resolve(args.path)
        await self._sb.write_file(path, args.content)
        return f"Wrote {len(args.content.encode())} bytes to {path}."

    @tool("Search the repository for a pattern (grep -E, or a fixed string); returns file:line:text.")
    async def search(self, args: SearchArgs) -> str:
        return await tools.search(self._sb, args)

    @tool("Run the repository's tests (optionally only the given test files or pytest node ids).")
    async def run_tests(self, args: RunTestsArgs) -> str:
        assert self.task is not None
        plan = self.task.plan
        command = _visible_test_command(plan, args.paths)
        script = f"{quote_env(plan.env_vars)}{chr(10).join(plan.env.pre_test)}\n{command}\n"
        res = await self._sb.exec(["bash", "-c", script], cwd=WORKDIR, timeout_s=self.test_timeout_s)
        return f"$ {command}\n" + tools.show(res, self.test_timeout_s, "pass paths to run fewer tests",
                                             keep_tail=True)

    @tool("Finish: your changes are graded by the hidden tests. Ends the episode.")
    async def submit(self, args: NoArgs) -> Outcome:
        return await self._submit()

    # ------------------------------------------------------------------------------------------ grading

    async def _submit(self) -> Outcome:
        res = await self._sb.exec(["bash", "-c", DIFF + shlex.quote(self._base)], cwd=WORKDIR, timeout_s=120)
        if not res.ok or res.truncated:
            why = "too large" if res.truncated else res.stderr.strip()[-300:]
            return Outcome(f"Your changes could not be collected ({why}); nothing was graded.", done=True,
                           info={"resolved": False, "diff_error": why})
        if not self.share_grades:
            return await self._grade(res.stdout)
        return await self._shared_grades.grade(res.stdout, self._grade)

    async def _grade(self, patch: str) -> Outcome:
        assert self.task is not None
        inst, plan = self.task.instance, self.task.plan
        t0 = time.monotonic()
        if not patch.strip():
            report = empty_report(inst.instance_id, "coderepair", patch)
        else:
            attempt = await self._attempt(patch)
            if attempt.result == "test_patch_failed":
                raise InfraError(f"{inst.instance_id}: the evaluation tests (test_patch) did not apply: "
                                 f"{attempt.message}")
            if attempt.result in ("patch_failed", "refused"):
                return Outcome(f"Your changes could not be evaluated: {attempt.message}.", done=True,
                               info={"resolved": False, "patch": patch, "error_kind": attempt.result})
            if attempt.result in STOPPED:
                return Outcome(f"The hidden tests did not finish: {attempt.message}.", 0.0, True,
                               {"resolved": False, "patch": patch, "reason": attempt.result,
                                "grade_s": time.monotonic() - t0})
            report = await asyncio.to_thread(
                grade, inst, attempt.test_log, model_patch=patch, model_name_or_path="coderepair",
                findings=attempt.findings, log_parser=plan.log_parser, eval_type=plan.eval_type,
                canaries=attempt.canaries, strict=self.harness.strict, twins=attempt.twins)
        reward = self._reward(report)
        info = {"resolved": report.resolved, "status": report.status.value, "patch": patch,
                "tests": report.tests.to_swebench() if report.tests else None,
                "findings": [f.describe() for f in report.findings], "grade_s": time.monotonic() - t0,
                "suspect": [x.describe() for x in report.suspicions],
                "forgery_check": report.forgery_check.to_json() if report.forgery_check else None}
        return Outcome(tools.verdict(report), reward, True, info)

    async def _attempt(self, patch: str) -> Attempt:
        """A fresh harness run of the instance. A timeout or OOM kill the baseline clears is returned (the
        policy's failure); an infra failure is retried once, then raised."""
        assert self.task is not None and self._built is not None and self._backend is not None
        last, timeout, limits = "", self._grade_timeout(), self._grade_limits
        for _ in range(self.harness.retries + 1):
            try:
                attempt = await run_attempt(self._backend, self._built.tag, limits, self.task.plan, patch,
                                            self.harness.tamper, timeout, canaries=self.harness.canaries,
                                            differential=self.harness.differential)
                if attempt.result not in STOPPED:
                    return attempt
                kind, attempt = await self._baselines.judge(self._backend, self._built.tag, limits,
                                                            self.task.plan, timeout, attempt)
            except (SandboxError, BackendUnavailable) as e:
                last = f"grading sandbox failed: {e}"
                continue
            if not kind.infra:
                return attempt
            last = attempt.message
        raise InfraError(f"{last} (after {self.harness.retries + 1} tries)")

    def _reward(self, report: InstanceReport) -> float:
        if report.resolved:
            return 1.0
        tests = report.tests
        if not self.partial_credit or tests is None or tests.pass_to_pass_failure or any(
                f.blocks_resolution for f in report.findings) or (self.harness.strict and report.suspect):
            return 0.0
        total = len(tests.fail_to_pass_success) + len(tests.fail_to_pass_failure)
        return len(tests.fail_to_pass_success) / total if total else 0.0

    def _grade_timeout(self) -> float:
        assert self.task is not None
        return max(self.harness.timeout_s, self.task.plan.env.timeout_s or 0.0)

    @property
    def _sb(self) -> Sandbox:
        assert self.sandbox is not None
        return self.sandbox

    def oracle(self) -> list[str]:
        assert self.task is not None
        apply = (f"git apply --verbose {GOLD_PATH} || patch --batch --forward --fuzz=5 -p1 -i {GOLD_PATH}")
        calls = [{"name": "create", "arguments": {"path": GOLD_PATH, "content": self.task.instance.patch}},
                 {"name": "bash", "arguments": {"command": apply}},
                 {"name": "submit", "arguments": {}}]
        return [json.dumps(c) for c in calls]

    def task_id(self, task: RepairTask) -> str:
        return task.task_id


def _plans(instances: Sequence[Instance], specs: Sequence[str | Path]) -> list[Plan]:
    catalog = SpecCatalog(specs)
    plans, errors = [], []
    for inst in instances:
        try:
            plans.append(catalog.plan(inst))
        except SpecNotFound as e:
            errors.append(e)
    if errors:
        raise SpecNotFound(f"{len(errors)} of {len(instances)} CodeRepair tasks have no environment spec; "
                           f"first: {errors[0]}")
    return plans


def _visible_test_command(plan: Plan, paths: Sequence[str]) -> str:
    """The spec's test command (else ``python -m pytest -rA``) on ``paths``; without paths, on the files
    test_patch would change that exist at the base commit (none: the spec's own directives)."""
    prefix = plan.env.test_cmd or "python -m pytest -rA"
    if paths:
        return " ".join([prefix, *map(shlex.quote, paths)])
    if plan.env.directives == "none" or (not plan.env.test_cmd and not plan.test_files):
        return prefix
    existing = " ".join(f"$( [ -e {shlex.quote(p)} ] && echo {shlex.quote(p)} )" for p in plan.test_files)
    return f"{prefix} {existing}".strip()
