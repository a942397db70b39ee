"""One evaluation attempt of one instance inside a sandbox (the instance image, no network).

    copy /opt/envfarm/testbed -> /workspace/testbed   (the image's repo is read-only; /testbed links here)
    refuse a patch that writes outside the repo or into .git
    apply the model patch: git apply --verbose | git apply --verbose --reject | patch --batch --fuzz=5 -p1
    tamper rules on every path it changed (tamper.py): revert, flag, or (off) nothing
    reset the test files test_patch names to the base commit, apply test_patch (git apply), then delete it
    plant canary tests in a test module the command runs (canary.py): random names, must pass / must fail
    twin FAIL_TO_PASS tests: an honest copy and a perturbed decoy each (differential.py)
    run the test command with a timeout; its stdout+stderr are the test log (honest twins renamed back)

A baseline attempt (``patch=None``) skips the model patch: the unpatched base with test_patch, the evidence
that tells a patch whose tests hang or exhaust memory (a model failure) from an environment that cannot run
them in the budget (``verdicts.py``).

Every git call disables hooks and fsmonitor. The test output goes to a file in the sandbox; at most
``output_cap`` bytes of it come back to the host (its head and tail, with a line saying how much was cut),
so a patch that prints gigabytes costs the host the cap. The host writes the swebench markers around it
after neutralising any marker text the tests printed. Sandbox failures propagate (SandboxError,
BackendUnavailable): the caller classifies and retries them.
"""

from __future__ import annotations

import asyncio
import logging
import re
import secrets
import shlex
import time
from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from envfarm.errors import SandboxError, SandboxFileError, tail
from envfarm.sandbox import Backend, ExecResult, Limits, Sandbox

from . import _swebench, canary, differential, patches, tamper
from .canary import Canary
from .decoy_pool import PoolSite
from .differential import Twin
from .images import PRISTINE, WORKDIR, quote_env
from .layout import ENV_SH
from .specs import Plan
from .tamper import Finding, Policy

log = logging.getLogger(__name__)

TMP = "/tmp/envfarm"
GIT = "git -c core.hooksPath=/dev/null -c core.fsmonitor=false -c core.quotePath=false -c safe.directory='*'"
APPLY_COMMANDS = (
    f"{GIT} apply --verbose",
    f"{GIT} apply --verbose --reject",
    "patch --batch --forward --fuzz=5 -p1 -i",
)
STEP_TIMEOUT_S = 300.0
OUTPUT_CAP = 32 << 20
"""Bytes of test output brought back to the host per attempt (the rest stays in the sandbox)."""
RESTORE = f"""\
while IFS= read -r -d '' p; do
  rm -rf -- "{WORKDIR}/$p"
  if [ -e "{PRISTINE}/$p" ] || [ -L "{PRISTINE}/$p" ]; then
    mkdir -p -- "$(dirname -- "{WORKDIR}/$p")" && cp -a -- "{PRISTINE}/$p" "{WORKDIR}/$p"
  fi
done < "$1"
"""
COUNTERS = (
    "cat /sys/fs/cgroup/memory/memory.oom_control /sys/fs/cgroup/memory.events 2>/dev/null "
    "| awk '$1 == \"oom_kill\" {print \"oom\", $2}'; "
    "awk '$1 == \"usage_usec\" {print \"cpu_us\", $2}' /sys/fs/cgroup/cpu.stat 2>/dev/null; "
    "awk '{print \"cpu_ns\", $1}' /sys/fs/cgroup/cpuacct/cpuacct.usage 2>/dev/null"
)
"""The sandbox cgroup's OOM kills and CPU time (cgroup v2 in microseconds, v1 in nanoseconds)."""

Result = Literal["graded", "patch_failed", "refused", "test_patch_failed", "timeout", "oom"]


@dataclass(frozen=True)
class Attempt:
    """What one attempt produced."""

    result: Result
    findings: tuple[Finding, ...] = ()
    test_log: str = ""
    """swebench-shaped test_output.txt: markers, the (neutralised) output, the exit code line."""
    eval_script: str = ""
    apply_command: str | None = None
    applied_diff: str = ""
    test_exit_code: int | None = None
    markers_neutralised: int = 0
    message: str = ""
    steps: tuple[str, ...] = ()
    """Lines for run_instance.log."""
    timings: dict[str, float] = field(default_factory=dict)
    canaries: tuple[Canary, ...] | None = None
    """Canary tests planted in this run (None: canaries were off); grading checks them."""
    output_cut: int = 0
    """Bytes of test output not brought back to the host (over the cap)."""
    twins: tuple[Twin, ...] | None = None
    """FAIL_TO_PASS tests twinned with a perturbed decoy in this run (None: the check was off)."""


def sandbox_limits(
    cpus: float, memory_mb: int, disk_mb: int, pids: int, repo_bytes: int, timeout_s: float
) -> Limits:
    """Limits for a test run: the tmpfs holds the repo copy twice over, memory covers the tmpfs."""
    repo_mb = repo_bytes // (1 << 20) + 1
    disk = max(disk_mb, 3 * repo_mb + 256)
    memory = max(memory_mb, disk + 1024)
    return Limits(
        cpus=cpus, memory_mb=memory, pids=pids, disk_mb=disk, output_bytes=4 << 20, timeout_s=timeout_s
    )


class _Steps:
    """The attempt's step log, with timings."""

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.timings: dict[str, float] = {}
        self._t0 = time.monotonic()

    def note(self, text: str) -> None:
        self.lines.append(f"[{time.monotonic() - self._t0:7.2f}s] {text}")


async def run_attempt(
    backend: Backend,
    image: str,
    limits: Limits,
    plan: Plan,
    patch: str | None,
    policy: Policy,
    timeout_s: float,
    *,
    canaries: bool = True,
    output_cap: int = OUTPUT_CAP,
    differential: bool = True,
    pool: Mapping[str, Sequence[PoolSite]] | None = None,
    probe: bool = False,
) -> Attempt:
    """Evaluate ``patch`` on ``plan``'s instance in a fresh sandbox of ``image`` (None: the baseline).
    ``pool``: the instance's decoys gold failed, by module; ``probe``: plant candidates for it
    (``decoy_pool.py``)."""
    steps = _Steps()
    refused = tamper.unsafe(patch) if patch is not None and policy is not Policy.OFF else []
    if refused:
        steps.note(f"refused: {', '.join(f.path for f in refused)}")
        return Attempt(
            "refused",
            tuple(refused),
            message="the patch writes outside the repository or into .git",
            steps=tuple(steps.lines),
        )
    labels = {"envfarm.harness.instance": plan.instance.instance_id}
    opts = _Options(policy, timeout_s, canaries, output_cap, differential, pool or {}, probe)
    async with backend.open(image=image, limits=limits, labels=labels) as sb:
        steps.note(f"sandbox {sb.id} from {image}")
        return await _attempt(sb, plan, patch, opts, steps)


@dataclass(frozen=True)
class _Options:
    policy: Policy
    timeout_s: float
    canaries: bool
    output_cap: int
    differential: bool = True
    pool: Mapping[str, Sequence[PoolSite]] = field(default_factory=dict)
    probe: bool = False


async def _attempt(sb: Sandbox, plan: Plan, patch: str | None, opts: _Options, steps: _Steps) -> Attempt:
    t = time.monotonic()
    await _sh(sb, f"mkdir -p {TMP} && cp -a {PRISTINE} {WORKDIR}", "copy the repository", cwd="/workspace")
    findings: list[Finding] = []
    applied: str | None = "baseline (no model patch)"
    steps.timings["setup_s"] = time.monotonic() - t
    if patch is not None:
        before = await _status(sb)
        await sb.write_file(f"{TMP}/model.patch", patch)
        applied = await _apply(sb, steps)
        if applied is None:
            return Attempt(
                "patch_failed",
                message="the patch did not apply",
                steps=tuple(steps.lines),
                timings=steps.timings,
            )
        changed = sorted(set(await _status(sb)) - set(before))
        findings = await _tamper(sb, plan, patch, [p for _, p in changed], opts.policy, steps)
    if not await _apply_test_patch(sb, plan, steps):
        return Attempt(
            "test_patch_failed",
            tuple(findings),
            apply_command=applied,
            message="test_patch did not apply",
            steps=tuple(steps.lines),
            timings=steps.timings,
        )
    diff = (await sb.exec(f"{GIT} diff", cwd=WORKDIR, timeout_s=STEP_TIMEOUT_S)).stdout
    texts = await _python_tests(sb, plan) if opts.differential else {}
    olds = await _python_tests(sb, plan, PRISTINE) if opts.differential else {}  # as a reader has them
    planted = await _plant(sb, plan, steps, texts, olds) if opts.canaries else None
    # after the canaries: no twin is copied
    twins = await _twin(sb, plan, steps, texts, olds, opts) if opts.differential else None
    script = eval_script(plan)
    res, raw, oom_killed, cut = await _run_tests(sb, script, opts, steps)
    test_log, neutralised = compose_log(differential.rename_back(raw, twins or ()), res, opts.timeout_s)
    result: Result = "timeout" if res.timed_out else "oom" if oom_killed else "graded"
    return Attempt(
        result,
        tuple(findings),
        test_log,
        script,
        applied,
        diff,
        res.exit_code,
        neutralised,
        steps=tuple(steps.lines),
        timings=steps.timings,
        canaries=planted,
        output_cut=cut,
        twins=twins,
    )


# ----------------------------------------------------------------------------------------------- steps


async def _run_tests(
    sb: Sandbox, script: str, opts: _Options, steps: _Steps
) -> tuple[ExecResult, str, bool, int]:
    """Run the eval script; returns its result, its output (capped), whether the memory limit killed it
    and how many bytes of output were cut. Timings: ``tests_s`` (wall) and, where the cgroup says,
    ``tests_cpu_s`` (CPU seconds of the sandbox while the tests ran)."""
    await sb.write_file(f"{TMP}/eval.sh", script)
    oom_before, cpu_before = await _counters(sb)
    t = time.monotonic()
    command = f"bash {TMP}/eval.sh > {TMP}/test_output.raw 2>&1"
    env_sh = f"if [ -f {ENV_SH} ]; then . {ENV_SH}; fi; "  # pulled SWE-bench images: their conda PATH
    res = await sb.exec(["bash", "-c", env_sh + command], timeout_s=opts.timeout_s)
    steps.timings["tests_s"] = time.monotonic() - t
    raw, cut = await _read_capped(sb, f"{TMP}/test_output.raw", opts.output_cap)
    oom, cpu = await _counters(sb)
    if cpu is not None and cpu_before is not None:
        steps.timings["tests_cpu_s"] = cpu - cpu_before
    if oom is not None and oom_before is not None:
        oom_killed = oom > oom_before
    else:  # no cgroup counter: a SIGKILL that was not our timeout
        oom_killed = res.exit_code == -9 and not res.timed_out
    flags = (" (TIMED OUT)" if res.timed_out else "") + (" (OOM-killed)" if oom_killed else "")
    flags += f" ({cut} bytes of output cut)" if cut else ""
    steps.note(f"tests exited {res.exit_code} in {res.duration:.1f}s{flags}")
    return res, raw, oom_killed, cut


async def _read_capped(sb: Sandbox, path: str, cap: int) -> tuple[str, int]:
    """The text of ``path``; past ``cap`` bytes, its first quarter and last three quarters of the cap with
    a line between them saying how much was cut (the parsers need the summary at the end)."""
    size_res = await sb.exec(["stat", "-c", "%s", path], timeout_s=30)
    try:
        size = int(size_res.stdout.strip())
    except ValueError:
        size = 0
    if size <= cap:
        return (await sb.read_file(path)).decode("utf-8", errors="replace"), 0
    head, tail_n = cap // 4, cap - cap // 4
    cut = size - head - tail_n
    note = f"\n[envfarm: {cut} bytes of test output cut here; the host keeps at most {cap} bytes]\n"
    await _sh(
        sb,
        f"{{ head -c {head} {path}; printf %s {shlex.quote(note)}; tail -c {tail_n} {path}; }} > {path}.cut "
        f"&& rm -f {path}",
        "cap the test output",
        cwd="/workspace",
    )
    return (await sb.read_file(f"{path}.cut")).decode("utf-8", errors="replace"), cut


async def _plant(sb: Sandbox, plan: Plan, steps: _Steps, texts: dict[str, str | None],
                 olds: dict[str, str | None]) -> tuple[Canary, ...]:
    """Plant canary tests in one test module the run executes; () when there is none to plant in, or when
    the canaries could only copy tests the repository has while the differential check twins a
    FAIL_TO_PASS test: a reader of the repository tells such copies apart, and the check's decoys catch
    what they would (a flipped failure, a result missing) without that tell. ``texts``: the Python test
    files the check reads (empty when it is off), kept current here."""
    rng = secrets.SystemRandom()
    inst = plan.instance
    known = canary.known_for(inst.fail_to_pass, inst.pass_to_pass, inst.test_patch)
    for module in canary.pick_module(plan.test_files, plan.test_command, rng, known):
        text = await _read(sb, f"{WORKDIR}/{module}")
        if text is None:
            continue
        # parsing and rewriting a long module takes seconds: off the event loop's thread
        planting = await asyncio.to_thread(canary.plant, module, text, canary.style_for(plan.log_parser),
                                           rng, known=known)
        if not planting.hidden and await asyncio.to_thread(_twinnable, plan, texts, olds):
            steps.note(f"no canaries in {module}: they would copy tests the repository has; the differential "
                       "check's decoys stand in")
            return ()
        await sb.write_file(f"{WORKDIR}/{module}", planting.text)
        if module in texts:
            texts[module] = planting.text
        steps.note(f"canaries planted in {module}: {len(planting.canaries)}")
        return planting.canaries
    steps.note("no test module to plant canaries in: results are checked for completeness only")
    return ()


async def _python_tests(sb: Sandbox, plan: Plan, root: str = WORKDIR) -> dict[str, str | None]:
    """The text of each Python file of test_patch under ``root`` (None where it cannot be read)."""
    return {m: await _read(sb, f"{root}/{m}") for m in plan.test_files if m.endswith(".py")}


def _twinnable(plan: Plan, texts: dict[str, str | None], olds: dict[str, str | None]) -> bool:
    """Whether the differential check will twin a FAIL_TO_PASS test of this run."""
    inst = plan.instance
    return any(text and differential.twinnable(module, text, inst.fail_to_pass, inst.test_patch,
                                               olds.get(module))
               for module, text in texts.items())


async def _twin(sb: Sandbox, plan: Plan, steps: _Steps, texts: dict[str, str | None],
                olds: dict[str, str | None], opts: _Options) -> tuple[Twin, ...]:
    """Twin up to ``differential.MAX_TWINS`` FAIL_TO_PASS tests of test_patch's Python files in place, then
    the PASS_TO_PASS tests it adds."""
    rng = secrets.SystemRandom()
    modules = list(texts)
    rng.shuffle(modules)
    reserved = {w for text in texts.values() if text for w in re.findall(r"\w+", text)}  # names in the log
    twins: list[Twin] = []
    inst, current = plan.instance, dict(texts)
    for first in (True, False):  # every module's FAIL_TO_PASS tests before the PASS_TO_PASS ones
        for module in modules:
            wanted, then = differential.targets(module, inst.fail_to_pass, inst.pass_to_pass, inst.test_patch)
            left = differential.MAX_TWINS - len({(t.module, t.test) for t in twins})
            text = current[module]
            if not (wanted if first else then) or left <= 0 or text is None:
                continue
            added = differential.added_lines(inst.test_patch, module)
            planting = await asyncio.to_thread(
                differential.plant, module, text, wanted if first else (), added, rng, limit=left,
                reserved=reserved, then=() if first else then, before=olds.get(module),
                pool=opts.pool.get(module, ()), probe=opts.probe)
            if planting.twins:
                await sb.write_file(f"{WORKDIR}/{module}", planting.text)
                current[module] = planting.text
                twins += planting.twins
                reserved |= {n for t in planting.twins for n in (t.honest, t.decoy)}
    tests = Counter((t.test, t.how) for t in twins)
    steps.note(f"differential: {len(tests)} test(s) twinned: "
               f"{', '.join(f'{name} ({n} {how})' for (name, how), n in tests.items()) or 'none could be'}")
    return tuple(twins)


async def _sh(sb: Sandbox, script: str, what: str, cwd: str = WORKDIR, check: bool = True) -> ExecResult:
    res = await sb.exec(["bash", "-c", script], cwd=cwd, timeout_s=STEP_TIMEOUT_S)
    if check and not res.ok:
        raise SandboxError(f"{what} failed in {sb} (exit {res.exit_code}):\n{tail(res.stderr or res.stdout)}")
    return res


async def _status(sb: Sandbox) -> list[tuple[str, str]]:
    """(status, path) of every changed, untracked or ignored path, renames counted on both names."""
    res = await _sh(sb, f"{GIT} status --porcelain=v1 -z -uall --ignored=matching", "git status")
    entries, tokens = [], iter(res.stdout.split("\0"))
    for tok in tokens:
        if len(tok) < 4:
            continue
        code, path = tok[:2], tok[3:]
        entries.append((code, path))
        if code[0] in "RC":
            entries.append((code, next(tokens, "")))
    return entries


async def _counters(sb: Sandbox) -> tuple[int | None, float | None]:
    """(OOM kills, CPU seconds) of the sandbox's cgroup; None where it does not say."""
    res = await sb.exec(["bash", "-c", COUNTERS], timeout_s=30)
    found: dict[str, int] = {}
    for line in res.stdout.splitlines():
        key, _, value = line.partition(" ")
        if value.strip().isdigit():
            found.setdefault(key, int(value))
    cpu = found["cpu_us"] / 1e6 if "cpu_us" in found else found["cpu_ns"] / 1e9 if "cpu_ns" in found else None
    return found.get("oom"), cpu


async def _apply(sb: Sandbox, steps: _Steps) -> str | None:
    """SWE-bench's fallback chain on a pristine tree each time; the command that worked, or None."""
    res: ExecResult | None = None
    for n, cmd in enumerate(APPLY_COMMANDS):
        if n:
            await _sh(
                sb,
                f"rm -rf {WORKDIR} && cp -a {PRISTINE} {WORKDIR}",
                "reset the repository",
                cwd="/workspace",
            )
        res = await sb.exec(["bash", "-c", f"{cmd} {TMP}/model.patch"], cwd=WORKDIR, timeout_s=STEP_TIMEOUT_S)
        steps.note(f"{cmd.replace(GIT, 'git')}: exit {res.exit_code}\n{tail(res.stdout + res.stderr, 30)}")
        if res.exit_code == 0:
            return cmd.replace(GIT, "git")
    check = await sb.exec(["bash", "-c", f"{GIT} apply --check --reverse {TMP}/model.patch"], cwd=WORKDIR)
    if check.exit_code == 0:
        steps.note("the patch is already applied (git apply --check --reverse)")
        return "already applied"
    return None


async def _tamper(
    sb: Sandbox, plan: Plan, patch: str, changed: Sequence[str], policy: Policy, steps: _Steps
) -> list[Finding]:
    if policy is Policy.OFF:
        return []
    changes = patches.parse(patch)
    ctx = tamper.Context(plan.test_files, plan.test_command, plan.env.protected)
    every = {*changed, *(p for c in changes for p in c.paths)}
    contents = {
        p: (await _read(sb, f"{PRISTINE}/{p}"), await _read(sb, f"{WORKDIR}/{p}"))
        for p in every
        if p.rsplit("/", 1)[-1] in tamper.CONFIG_FILES
    }
    action = "reverted" if policy is Policy.REVERT else "flagged"
    findings = tamper.scan(changes, changed, ctx, contents, action)
    for f in findings:
        steps.note(f"tamper rule {f.describe()}")
    if policy is Policy.REVERT and findings:
        await _restore(sb, [f.path for f in findings])
    return findings


async def _read(sb: Sandbox, path: str) -> str | None:
    try:
        return (await sb.read_file(path)).decode("utf-8", errors="replace")
    except SandboxFileError:
        return None


async def _restore(sb: Sandbox, paths: Sequence[str]) -> None:
    """Put ``paths`` back as they are at the base commit (removed when the base has no such path)."""
    await sb.write_file(f"{TMP}/restore.lst", "".join(f"{p}\0" for p in dict.fromkeys(paths)))
    await sb.write_file(f"{TMP}/restore.sh", RESTORE)
    await _sh(sb, f"bash {TMP}/restore.sh {TMP}/restore.lst", "restore paths to the base commit")


async def _apply_test_patch(sb: Sandbox, plan: Plan, steps: _Steps) -> bool:
    await _restore(sb, plan.test_files)
    await sb.write_file(f"{TMP}/test.patch", plan.instance.test_patch)
    res = await sb.exec(  # the patch file goes once applied: it would show the tests as written
        ["bash", "-c", f"{GIT} apply --verbose {TMP}/test.patch; s=$?; rm -f {TMP}/test.patch; exit $s"],
        cwd=WORKDIR, timeout_s=STEP_TIMEOUT_S,
    )
    steps.note(
        f"test_patch ({len(plan.test_files)} files reset): exit {res.exit_code}\n"
        f"{tail(res.stdout + res.stderr, 20)}"
    )
    return res.exit_code == 0


def eval_script(plan: Plan) -> str:
    """The script run in the sandbox; its stdout+stderr are the test output."""
    pre = "\n".join(plan.env.pre_test)
    return (
        f"#!/bin/bash\n# envfarm eval script: {plan.instance.instance_id}\nset -uo pipefail\ncd /testbed\n"
        f"{quote_env(plan.env_vars)}{pre}\n{plan.test_command}\n"
    )


def compose_log(raw: str, res: ExecResult, timeout_s: float) -> tuple[str, int]:
    """test_output.txt in swebench's shape; marker text printed by the tests is neutralised first."""
    c = _swebench.load().constants
    count = raw.count(">>>>>")
    clean = raw.replace(">>>>>", ">>>>\u2009>")
    if clean and not clean.endswith("\n"):
        clean += "\n"
    out = [
        f"{c.START_TEST_OUTPUT}\n",
        clean,
        f"{c.END_TEST_OUTPUT}\n",
        f"{c.TEST_EXIT_CODE}: {res.exit_code}\n",
    ]
    if res.timed_out:
        out.append(f"{c.TESTS_TIMEOUT} after {timeout_s:.0f}s\n")
    return "".join(out), count
