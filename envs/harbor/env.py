"""``envfarm/Harbor-v0``: a Harbor task folder as an env (``task.py`` reads them, ``verifier.py`` grades).

    env = gymnasium.make("envfarm/Harbor-v0", tasks="path/to/tasks", task_ids=None, backend="docker")

``reset(seed=s)`` picks task ``s % len(tasks)`` of the tasks sorted by name (``options={"task_id": ...}``
picks one by name); the first observation is ``instruction.md``. Tools: ``bash`` (runs in the task's sandbox,
cwd the image's WORKDIR) and ``submit``. On submit or at the step limit the verifier runs as Harbor runs it
(``verifier.py``): reward from reward.txt / reward.json, 0 with ``info["reason"]`` when there is none.
``afork()`` mid-episode gives an env at the same state on a copy-on-write fork of the sandbox, so a farm's
``--attempts`` start from one seeded task.

The image comes from ``image_for(task)`` (blocking, run in a thread; default
:func:`envfarm.sandbox.harbor_image.ensure_task_image` of the task folder), an object with ``tag`` (None:
the envfarm base image), ``workdir`` and ``env``. ``[environment]`` cpus, memory_mb and storage_mb become
the sandbox's :class:`~envfarm.sandbox.Limits` (cpus, memory_mb, disk_mb). Sandboxes never have a network:
``info["internet_requested"]`` says when a task asked for it. Every command runs as the sandbox's agent
user; ``info["verifier_user"]`` records a ``[verifier] user`` the task named.

The oracle (Harbor's oracle agent): ``bash`` actions that unpack ``solution/`` at ``/tmp/envfarm-solution``
(``/solution`` in its files rewritten to it) and run ``solve.sh`` with ``[solution] env``, then submit. A
task without ``solution/solve.sh`` has no oracle: ``oracle()`` returns only the submit.
"""

from __future__ import annotations

import asyncio
import base64
import io
import json
import shlex
import tarfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from envfarm.errors import ConfigError, HarborTaskNotFound
from envfarm.sandbox import Limits, Sandbox
from envfarm.sandbox.pool import SandboxPool

from ..actions import Action
from ..core import AgentEnv, Outcome, command_output, tool
from .task import HarborTask, load_tasks
from .verifier import SOLUTION_DIR, rewrite_paths, staged_copy, verify

MAX_BASH_TIMEOUT_S = 3600.0
SEED_TIMEOUT_S = 300.0
CHUNK_CHARS = 40_000


class TaskImageLike(Protocol):
    """What the env reads of a task's image (``envfarm.sandbox.harbor_image.TaskImage`` has it)."""

    @property
    def tag(self) -> str | None: ...
    @property
    def workdir(self) -> str: ...
    @property
    def env(self) -> tuple[tuple[str, str], ...]: ...


ImageFor = Callable[[HarborTask], TaskImageLike]


@dataclass(frozen=True)
class BaseImage:
    """The envfarm base image, for tasks that need nothing else (tests, ``image_for=base_image``)."""

    tag: str | None = None
    workdir: str = "/workspace"
    env: tuple[tuple[str, str], ...] = ()


def base_image(task: HarborTask) -> BaseImage:
    return BaseImage()


def task_image(task: HarborTask) -> TaskImageLike:
    """The default ``image_for``: the image built from the task's ``environment/Dockerfile``."""
    from envfarm.sandbox.harbor_image import ensure_task_image

    image: TaskImageLike = ensure_task_image(task.path)
    return image


class BashArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: str = Field(min_length=1, max_length=60_000, description="A bash command line.")
    timeout_s: float = Field(0, ge=0, le=MAX_BASH_TIMEOUT_S,
                             description="Seconds before the command is killed (0: the env's default).")


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class HarborEnv(AgentEnv[HarborTask]):
    """A Harbor task: follow instruction.md with bash, then submit (see the module docstring)."""

    default_max_steps = 50
    default_limits = Limits(cpus=1.0, memory_mb=2048, pids=512, disk_mb=1024, timeout_s=120)
    sandboxes = "per_task"
    forkable = True
    fork_shared = frozenset({"tasks", "image_for", "task", "_task_image"})
    """A fork shares the task set, the image lookup, the (frozen) task and its image; its sandbox is a
    copy-on-write fork, so a group's attempts start from one built and seeded task."""

    def __init__(self, tasks: str | Path | None = None, task_ids: Sequence[str] | None = None,
                 image_for: ImageFor | None = None, bash_timeout_s: float = 120.0, **kwargs: Any) -> None:
        if tasks is None:
            raise ConfigError("envfarm/Harbor-v0 needs tasks=FOLDER (a Harbor task folder or a folder of "
                              "them)")
        if bash_timeout_s <= 0:
            raise ConfigError(f"Harbor bash_timeout_s must be positive, got {bash_timeout_s!r}")
        super().__init__(**kwargs)
        self.tasks = load_tasks(tasks, list(task_ids) if task_ids else None)
        self.image_for: ImageFor = image_for or task_image
        self.bash_timeout_s = float(bash_timeout_s)
        self._pending: int | None = None
        self._task_image: TaskImageLike = BaseImage()

    async def areset(self, *, seed: int | None = None,
                     options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        wanted = (options or {}).get("task_id")
        if wanted is not None:
            names = [t.name for t in self.tasks]
            if wanted not in names:
                raise HarborTaskNotFound(f"no Harbor task {wanted!r} in this env; it has {names[:5]}...")
            self._pending = names.index(wanted)
        else:
            self._pending = None if seed is None else seed % len(self.tasks)
        return await super().areset(seed=seed, options=options)

    def generate(self, rng: np.random.Generator) -> HarborTask:
        index = self._pending if self._pending is not None else int(rng.integers(len(self.tasks)))
        return self.tasks[index]

    def prompt(self, task: HarborTask) -> str:
        return task.instruction

    def task_id(self, task: HarborTask) -> str:
        return task.name

    def limits_for(self, task: HarborTask) -> Limits:
        """The sandbox limits of ``task``: its [environment] resources over the env's own limits."""
        mine, asked = self._limits, task.limits
        return Limits(cpus=asked.cpus or mine.cpus, memory_mb=asked.memory_mb or mine.memory_mb,
                      pids=mine.pids, disk_mb=asked.storage_mb or mine.disk_mb,
                      output_bytes=mine.output_bytes, timeout_s=mine.timeout_s, shm_mb=mine.shm_mb,
                      open_files=mine.open_files)

    async def _get_pool(self) -> SandboxPool:
        assert self.task is not None
        self._task_image = await asyncio.to_thread(self.image_for, self.task)
        return self._pools.get(self._backend_name, self._task_image.tag, self.limits_for(self.task))

    async def setup(self, sb: Sandbox, task: HarborTask) -> None:
        """The image's writable folders (``/app`` and the like, kept in the image's seed) into the sandbox's
        workspace, where their symlinks point (``envfarm.sandbox.harbor_image.writable_dirs``)."""
        from envfarm.sandbox.harbor_image import seed_command

        await sb.exec(["bash", "-c", seed_command()], timeout_s=SEED_TIMEOUT_S)

    def _info(self) -> dict[str, Any]:
        info = super()._info()
        if self.task is not None:
            info["internet_requested"] = self.task.allow_internet
            if self.task.verifier_user:
                info["verifier_user"] = self.task.verifier_user
        return info

    @property
    def _env_vars(self) -> dict[str, str]:
        assert self.task is not None
        return {**dict(self._task_image.env), **dict(self.task.environment_env)}

    async def _dispatch(self, action: Action) -> Outcome:
        outcome = await super()._dispatch(action)
        if outcome.done or self.steps < self.max_episode_steps:
            return outcome
        graded = await self._verify()
        return Outcome(f"{outcome.observation}\n\n[step limit reached: the task was verified] "
                       f"{graded.observation}", graded.reward, False,
                       {**outcome.info, **graded.info, "step_limit": True})

    @tool("Run a bash command in the task's environment; returns its output and exit code.")
    async def bash(self, args: BashArgs) -> str:
        timeout = args.timeout_s or self.bash_timeout_s
        res = await self._sb.exec(["bash", "-c", args.command], timeout_s=timeout,
                                  cwd=self._task_image.workdir, env=self._env_vars)
        return command_output(res, timeout, "pipe it through head, tail or grep", 30_000)

    @tool("Finish: the task's tests check the environment's state. Ends the episode.")
    async def submit(self, args: NoArgs) -> Outcome:
        return await self._verify()

    async def _verify(self) -> Outcome:
        assert self.task is not None
        v = await verify(self._sb, self.task, self._task_image.workdir, self._env_vars)
        info = {"reward_source": v.source, "reason": v.reason,
                "rewards": dict(v.rewards), "verifier_output": v.output, "verifier_exit_code": v.exit_code,
                "verifier_s": round(v.seconds, 3)}
        said = f"Reward {v.reward:g}." if v.reason is None else f"Reward 0: {v.reason}."
        return Outcome(f"The task was verified. {said}", v.reward, True, info)

    @property
    def _sb(self) -> Sandbox:
        assert self.sandbox is not None
        return self.sandbox

    def has_oracle(self) -> bool:
        return self.task is not None and self.task.has_solution

    def task_count(self) -> int:
        return len(self.tasks)

    def oracle(self) -> list[str]:
        """Harbor's oracle agent as actions: unpack solution/, run solve.sh, submit."""
        assert self.task is not None
        submit = json.dumps({"name": "submit", "arguments": {}})
        if not self.task.has_solution:
            return [submit]
        return [*self._solution_actions(self.task), submit]

    def _solution_actions(self, task: HarborTask) -> list[str]:
        blob = base64.b64encode(_tar_rewritten(task.solution_dir)).decode()
        tarball = "/tmp/envfarm-solution.tar.gz.b64"
        calls = [f"rm -f {tarball}"] + [f"printf %s {blob[i:i + CHUNK_CHARS]} >> {tarball}"
                                        for i in range(0, len(blob), CHUNK_CHARS)]
        env = " ".join(f"{k}={shlex.quote(v)}" for k, v in task.solution_env)
        calls.append(f"mkdir -p {SOLUTION_DIR} && base64 -d {tarball} | tar -xz -C {SOLUTION_DIR} && "
                     f"{'env ' + env + ' ' if env else ''}bash {SOLUTION_DIR}/solve.sh")
        timeout = min(task.agent_timeout_s, MAX_BASH_TIMEOUT_S)
        return [json.dumps({"name": "bash", "arguments": {"command": c, "timeout_s": timeout}})
                for c in calls]


def _tar_rewritten(folder: Path) -> bytes:
    staged = staged_copy(folder, {"/solution": SOLUTION_DIR})
    try:
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            tar.add(staged, arcname=".")
        return buf.getvalue()
    finally:
        import shutil

        shutil.rmtree(staged.parent, ignore_errors=True)


__all__ = ["BaseImage", "HarborEnv", "base_image", "rewrite_paths", "task_image"]
