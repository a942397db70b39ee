"""Export CodeRepair tasks as Harbor task directories (``envfarm tasks export --format harbor``).

    exported = asyncio.run(export_harbor(CodeRepairEnv(), Path("out")))    # the 42 built-in tasks

One folder per task, in the layout of Harbor's SWE-bench adapter (the repository at ``/testbed``)::

    <task>/task.toml              [task] name, [metadata], [verifier]/[agent] timeouts, [environment] with
                                  docker_image = the local tag of environment/Dockerfile, built here (a
                                  runner given docker_image runs it instead of building)
    <task>/instruction.md         the prompt CodeRepair shows
    <task>/environment/Dockerfile FROM envfarm's image of the task (built here when missing); copies the
                                  pristine repository to /testbed
    <task>/tests/test.sh          the harness's steps: reset the test files, apply test_patch, plant the
                                  canaries, run the harness's eval script, grade (grade.py)
    <task>/tests/...              test.patch, eval.sh, canaries/<module>, config.json, grade.py
    <task>/solution/solve.sh      applies the gold patch

Canaries are planted here, once per export, with a generator seeded by the instance id: Harbor copies
``tests/`` into the container only when the verifier runs, so the agent never sees them.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import random
import shlex
import subprocess
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from envfarm import config
from envfarm.errors import HarnessError, ImageBuildError
from envfarm.harness import _swebench, canary, repos
from envfarm.harness.images import PRISTINE, WORKDIR, ImageBuilder
from envfarm.harness.layout import ENV_SH
from envfarm.harness.run import GIT, RESTORE, eval_script
from envfarm.harness.specs import Plan
from envfarm.sandbox import dockerutil, imagebuild, images
from envfarm.sandbox.recipes import BUILDER_VERSION

from .env import CodeRepairEnv, RepairTask

GRADER = Path(__file__).with_name("harbor_grade.py")
VERIFIER = "/logs/verifier"
EXPORT_REPO = "envfarm/harbor-export"
AGENT_TIMEOUT_S = 1800.0
BUILD_TIMEOUT_S = 600.0


class ExportError(HarnessError):
    """A task cannot be exported as a Harbor directory; the message names the task and the fix."""


@dataclass(frozen=True)
class Exported:
    """One exported task folder."""

    instance_id: str
    folder: Path
    image: str
    """task.toml's docker_image: environment/Dockerfile built here."""
    canaries: int
    seconds: float
    from_image: str = ""
    """envfarm's image of the task, the Dockerfile's FROM."""


async def export_harbor(env: CodeRepairEnv, out: Path, *, build_workers: int = 2,
                        progress: Callable[[Exported], None] | None = None) -> list[Exported]:
    """Write one Harbor task folder per task of ``env`` under ``out``; builds missing images first."""
    await asyncio.to_thread(out.mkdir, parents=True, exist_ok=True)
    builder = ImageBuilder(env.repo_source, max_workers=build_workers)
    done: list[Exported] = []

    async def one(index: int, plan: Plan) -> None:
        t = time.monotonic()
        image = (await builder.instance(plan)).tag
        task = RepairTask(plan.instance.instance_id, index, plan)
        folder = out / safe_name(plan.instance.instance_id)
        planted = await asyncio.to_thread(write_task, env, task, image, folder)
        tag = await asyncio.to_thread(build_environment, folder, plan.instance.instance_id)
        item = Exported(plan.instance.instance_id, folder, tag, planted, time.monotonic() - t, image)
        done.append(item)
        if progress is not None:
            progress(item)

    async with asyncio.TaskGroup() as group:
        for i, plan in enumerate(env.plans):
            group.create_task(one(i, plan))
    return sorted(done, key=lambda e: e.instance_id)


def safe_name(instance_id: str) -> str:
    """A folder name for ``instance_id`` (Harbor task names: lowercase, no slashes)."""
    return instance_id.lower().replace("/", "__")


def write_task(env: CodeRepairEnv, task: RepairTask, image: str, folder: Path) -> int:
    """Write ``folder`` for ``task`` on ``image``; returns how many canaries its tests plant."""
    plan = task.plan
    for sub in ("environment", "tests/canaries", "solution"):
        (folder / sub).mkdir(parents=True, exist_ok=True)
    text = dockerfile(image)
    (folder / "task.toml").write_text(task_toml(env, plan, export_tag(plan.instance.instance_id, text)))
    (folder / "instruction.md").write_text(env.prompt(task).strip() + "\n")
    (folder / "environment" / "Dockerfile").write_text(text)
    (folder / "solution" / "solve.sh").write_text(solve_sh(plan.instance.patch))
    planted = plant_canaries(env, plan)
    tests = folder / "tests"
    for module, text in planted.texts.items():
        dest = tests / "canaries" / module
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    (tests / "test.patch").write_text(plan.instance.test_patch)
    (tests / "eval.sh").write_text(eval_script(plan))
    (tests / "restore.sh").write_text(RESTORE)
    (tests / "grade.py").write_text(GRADER.read_text())
    (tests / "config.json").write_text(json.dumps(grade_config(plan, planted.canaries), indent=2) + "\n")
    (tests / "test.sh").write_text(test_sh(plan, sorted(planted.texts)))
    for script in (folder / "solution" / "solve.sh", tests / "test.sh"):
        script.chmod(0o755)
    return len(planted.canaries)


def task_toml(env: CodeRepairEnv, plan: Plan, image: str) -> str:
    inst, limits = plan.instance, env.default_limits
    timeout = float(plan.env.timeout_s or env.harness.timeout_s)
    tags = ["code-repair", "swe-bench", inst.repo.split("/")[0]]
    return "\n".join([
        'schema_version = "1.1"', "",
        "[task]", f"name = {_q('envfarm/' + safe_name(inst.instance_id))}",
        f"description = {_q('Fix an issue in ' + inst.repo + ' (envfarm CodeRepair)')}", "",
        "[metadata]", 'author_name = "envfarm"', 'category = "code-repair"', 'difficulty = "medium"',
        f"tags = {json.dumps(tags)}", f"instance_id = {_q(inst.instance_id)}", f"repo = {_q(inst.repo)}",
        f"base_commit = {_q(inst.base_commit)}", f"version = {_q(inst.version)}", "",
        "[verifier]", f"timeout_sec = {timeout + 120.0}", "",
        "[agent]", f"timeout_sec = {AGENT_TIMEOUT_S}", "",
        "[environment]", f"build_timeout_sec = {BUILD_TIMEOUT_S}", f"cpus = {max(1, int(limits.cpus or 1))}",
        f"memory_mb = {limits.memory_mb or 2048}", f"storage_mb = {max(limits.disk_mb or 0, 10240)}",
        "allow_internet = false", f"docker_image = {_q(image)}", "",
    ])


def _q(text: str) -> str:
    return json.dumps(text)  # a TOML basic string is a JSON string for this text


def dockerfile(image: str) -> str:
    return (f"# generated by envfarm tasks export: envfarm's image of this task\nFROM {image}\n"
            f"RUN rm -rf {WORKDIR} && mkdir -p /tmp/envfarm && cp -a {PRISTINE} {WORKDIR} \\\n"
            f"    && ln -sfn {WORKDIR} /testbed\nWORKDIR /testbed\n")


def export_tag(instance_id: str, dockerfile_text: str) -> str:
    """The local tag environment/Dockerfile is built into (content-hashed: FROM names a hashed image)."""
    key = hashlib.sha256(f"{BUILDER_VERSION}\0{dockerfile_text}".encode()).hexdigest()[:12]
    return f"{EXPORT_REPO}.{safe_name(instance_id)}:{key}"


def build_environment(folder: Path, instance_id: str) -> str:
    """Build ``folder/environment`` as Harbor would (no network) unless docker has its tag; the tag."""
    text = (folder / "environment" / "Dockerfile").read_text()
    tag = export_tag(instance_id, text)
    if dockerutil.get_image(tag) is None:
        labels = {config.LABEL: "1", images.NAME_LABEL: "harbor-export",
                  images.HASH_LABEL: tag.split(":")[-1], images.HARBOR_LABEL: "export"}
        spec = imagebuild.LayerSpec(folder / "environment", tag, "", labels, "harbor-export", "", "")
        try:
            imagebuild.build_layer(spec)
        except ImageBuildError as e:
            raise ExportError(f"{instance_id}: environment/Dockerfile did not build ({e}); run "
                              "`envfarm images build` and export again") from e
    return tag


def solve_sh(patch: str) -> str:
    mark = "ENVFARM_GOLD_PATCH"
    while mark in patch:
        mark += "_"
    end = "" if patch.endswith("\n") else "\n"
    return (f"#!/bin/bash\n# the gold patch of this task\nset -euo pipefail\ncd /testbed\n"
            f"{GIT} apply --verbose - <<'{mark}'\n{patch}{end}{mark}\n")


def test_sh(plan: Plan, modules: list[str]) -> str:
    """The harness's grading steps as one script (harness/run.py: _apply_test_patch, _plant, _run_tests)."""
    files = "".join(f"{p}\\0" for p in plan.test_files)
    copies = "".join(f"cp /tests/canaries/{shlex.quote(m)} {shlex.quote(m)}\n" for m in modules)
    return f"""#!/bin/bash
# generated by envfarm tasks export: the envfarm harness's grading of {plan.instance.instance_id}
set -uo pipefail
mkdir -p {VERIFIER}
cd /testbed
fail() {{ echo "$1" > {VERIFIER}/error.txt; echo 0 > {VERIFIER}/reward.txt; exit 0; }}
printf '{files}' > /tmp/envfarm-test-files
bash /tests/restore.sh /tmp/envfarm-test-files || fail "resetting the test files failed"
{GIT} apply --verbose /tests/test.patch || fail "test_patch did not apply"
{copies}if [ -f {ENV_SH} ]; then . {ENV_SH}; fi
bash /tests/eval.sh > {VERIFIER}/test_output.raw 2>&1
code=$?
python3 /tests/grade.py /tests/config.json {VERIFIER}/test_output.raw "$code" {VERIFIER} \\
  || fail "grading failed"
"""


@dataclass(frozen=True)
class _Planted:
    canaries: tuple[canary.Canary, ...]
    texts: dict[str, str]


def plant_canaries(env: CodeRepairEnv, plan: Plan) -> _Planted:
    """Canaries in one test module the run executes, planted into its text after test_patch."""
    rng = random.Random(f"envfarm-harbor:{plan.instance.instance_id}")
    texts = patched_test_files(env, plan)
    inst = plan.instance
    known = canary.known_for(inst.fail_to_pass, inst.pass_to_pass, inst.test_patch)
    for module in canary.pick_module(plan.test_files, plan.test_command, rng, known):
        if module in texts:
            style = canary.style_for(plan.log_parser)
            planting = canary.plant(module, texts[module], style, rng, known=known)
            return _Planted(planting.canaries, {module: planting.text})
    return _Planted((), {})


def patched_test_files(env: CodeRepairEnv, plan: Plan) -> dict[str, str]:
    """The test files of ``plan`` at its base commit with test_patch applied (path -> text)."""
    inst = plan.instance
    src = repos.locate(env.repo_source, inst.repo, inst.base_commit)
    with tempfile.TemporaryDirectory(prefix="envfarm-harbor-") as tmp:
        root = Path(tmp)
        for path in plan.test_files:
            shown = subprocess.run(["git", "-C", str(src), "show", f"{inst.base_commit}:{path}"],
                                   capture_output=True, check=False)
            if shown.returncode == 0:
                (root / path).parent.mkdir(parents=True, exist_ok=True)
                (root / path).write_bytes(shown.stdout)
        (root / "test.patch").write_text(inst.test_patch)
        res = subprocess.run(["git", "apply", "test.patch"], cwd=root, capture_output=True, text=True,
                             check=False)
        if res.returncode != 0:
            raise ExportError(f"{inst.instance_id}: test_patch does not apply to its base commit "
                              f"({res.stderr.strip()[-300:]}); check the row and --repo-source")
        return {p: (root / p).read_text(errors="replace") for p in plan.test_files if (root / p).is_file()}


def grade_config(plan: Plan, canaries: tuple[canary.Canary, ...]) -> dict[str, object]:
    """What grade.py needs: the row's test lists and the planted canaries."""
    inst = plan.instance
    registry = _swebench.load().log_parsers.PARSER_REGISTRY
    if registry[plan.log_parser] is not registry["parse_log_pytest"]:
        raise ExportError(f"{inst.instance_id}: its log parser is {plan.log_parser}; the exported verifier "
                          "reads pytest -rA output only (swebench's parse_log_pytest and its aliases)")
    return {"instance_id": inst.instance_id, "FAIL_TO_PASS": list(inst.fail_to_pass),
            "PASS_TO_PASS": list(inst.pass_to_pass), "eval_type": plan.eval_type,
            "canaries": [{"name": c.name, "must_pass": c.must_pass, "module": c.module} for c in canaries]}
