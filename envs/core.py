"""The environment contract: read this file first.

An :class:`AgentEnv` is a ``gymnasium.Env[str, str]``: observations are text, actions are text (an assistant
message holding one tool call; see ``envs/actions.py`` for the accepted forms). Each episode gets a fresh
sandbox from a warm pool; the task is generated from the seed, so ``reset(seed=s)`` is deterministic.

    env = gymnasium.make("envfarm/ToolCalc-v0", backend="bwrap")   # the default; or "docker"
    obs, info = env.reset(seed=7)                 # info["tools"]: OpenAI function-calling schema
    obs, reward, terminated, truncated, info = env.step('{"name": "calc", "arguments": {"expr": "6*7"}}')

The async core (``areset``/``astep``) is what the farm calls; ``reset``/``step`` run it on a private event
loop for plain Gymnasium use (a script, ``AsyncVectorEnv``). Rules:

- Bad actions never raise: malformed JSON, an unknown tool or wrong argument types give an observation that
  says what was wrong and what is accepted, reward 0 for that step.
- A sandbox failure (any :class:`~envfarm.errors.InfraError`) ends the episode and is raised from
  ``astep`` as that typed exception; the farm replays the episode, then records it as an infrastructure
  error. Only the sync ``step`` turns it into ``truncated=True`` with ``info["infra_error"]`` (Gymnasium's
  contract has no exceptions for it). Either way it is never a reward of 0.
- ``astep`` takes raw text, a dict, or a :class:`~envfarm.envs.actions.ParsedAction` (what a policy's reply
  carries: the action parsed once, see ``actions.py``).
- ``max_episode_steps`` gives ``truncated``; a final tool (``submit``) gives ``terminated`` and the reward.
- ``oracle()`` returns a reference action sequence that solves the current task.
- The first observation is the task's prompt followed by the tool list and the call format
  (``tool_help=True``, for plain-text agents). ``tool_help=False`` leaves the prompt alone: for policies that
  get the tools through their API (``info["tools"]``, OpenAI's ``tools``), which is also what the farm sends.

Pools: an env leases from the :class:`~envfarm.sandbox.pool.Pools` registry it is given (``pools=``; the farm
hands one registry to all its envs and warms the pool of the env's image) or from a registry of its own.
``sandboxes`` says how a family uses them: ``"shared"`` (every episode from the one image/limits the class
or its arguments name: the farm warms that pool), ``"per_task"`` (the image depends on the task, e.g.
CodeRepair's instance images: pools are made on demand, nothing kept warm) or ``"none"`` (no sandbox, e.g.
a proxy to a remote env: the farm starts no backend).

Fork: ``twin = await env.afork()`` (``env.fork()`` sync) mid-episode gives an env at the same state: its
sandbox forked (``Sandbox.fork``: copy-on-write files, a fresh agent, no processes copied) and its Python
state copied (task, step count, transcript, RNG, whatever the family keeps of the episode), so both can be
played on independently, e.g. to try several actions from one state. The twin owns its sandbox (released
when its episode ends) and shares the env's pool registry and what the family lists in ``fork_shared``
(clients, caches, immutable task sets). Families opt in with ``forkable = True``; ``envs check`` plays the
oracle on a fork and on its original.

A family subclasses AgentEnv and provides ``generate`` (seed → task), ``setup`` (prepare the sandbox),
tools (async methods decorated with :func:`tool`, arguments as a pydantic model) and ``oracle``.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import typing
from abc import ABCMeta, abstractmethod
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Generic, Literal, Protocol, TypeVar

import gymnasium
import numpy as np
from pydantic import BaseModel, ValidationError

from envfarm.errors import ForkError, ForkUnsupported, InfraError
from envfarm.sandbox import DEFAULT_BACKEND, ExecResult, Limits, Sandbox
from envfarm.sandbox.pool import Pools, SandboxPool

from .actions import FORMAT_HELP, Action, read_action
from .meta import EpisodeMeta
from .spaces import AnyText

log = logging.getLogger(__name__)

MAX_ACTION_CHARS = 1 << 16
MAX_OBS_CHARS = 1 << 20
TaskT = TypeVar("TaskT")
ArgsT = TypeVar("ArgsT", bound=BaseModel)


@dataclass(frozen=True)
class Outcome:
    """What a tool returns when it is more than an observation: a final answer and its reward."""

    observation: str
    reward: float = 0.0
    done: bool = False
    info: Mapping[str, Any] = field(default_factory=dict)


ToolFn = Callable[[Any, Any], Awaitable["str | Outcome"]]


@dataclass(frozen=True)
class Tool:
    """One tool: its name, description, argument model and implementation (an async env method)."""

    name: str
    description: str
    args: type[BaseModel]
    fn: ToolFn

    def schema(self) -> dict[str, Any]:
        """The OpenAI function-calling schema of this tool."""
        params = self.args.model_json_schema()
        params.pop("title", None)
        for prop in params.get("properties", {}).values():
            prop.pop("title", None)
        params.setdefault("properties", {})
        return {"type": "function", "function": {"name": self.name, "description": self.description,
                                                 "parameters": params}}


class EpisodeRecord(Protocol):
    """What an env's eval artifact writer reads of one finished episode. The farm's ``Trajectory`` has it;
    an env never imports the farm (tests/test_architecture.py)."""

    @property
    def task_id(self) -> str: ...
    @property
    def attempt(self) -> int: ...
    @property
    def policy(self) -> str: ...
    @property
    def ok(self) -> bool: ...
    @property
    def meta(self) -> Mapping[str, Any]: ...


ArtifactWriter = Callable[[Sequence[EpisodeRecord], Path], Iterable[Path]]
"""``writer(episodes, run_dir) -> paths written``: an env's extra output of an evaluation (blocking I/O is
fine: the farm runs it in a worker thread)."""


def tool(description: str) -> Callable[[ToolFn], ToolFn]:
    """Mark an async method ``(self, args: SomeModel) -> str | Outcome`` as a tool of its env."""

    def mark(fn: ToolFn) -> ToolFn:
        fn.__envfarm_tool__ = description  # type: ignore[attr-defined]
        return fn

    return mark


def truncate(text: str, limit: int, hint: str = "") -> str:
    """``text`` cut to ``limit`` characters with a note saying how much was dropped."""
    if len(text) <= limit:
        return text
    note = f"\n[... {len(text) - limit} more characters truncated{'; ' + hint if hint else ''}]"
    return text[: max(0, limit - len(note))] + note


def tail_cut(text: str, limit: int, hint: str) -> str:
    """``text``'s last ``limit`` characters with a note in front (test summaries are at the end)."""
    if len(text) <= limit:
        return text
    return f"[... {len(text) - limit} earlier characters truncated; {hint}]\n" + text[-limit:]


def command_output(res: ExecResult, timeout: float, hint: str, limit: int, keep_tail: bool = False) -> str:
    """A command's result for the agent: stdout, stderr (half the room), and how it ended.

    Output past ``limit`` characters is cut with a note built from ``hint`` (how to see more); with
    ``keep_tail`` the end is kept instead of the start."""
    cut = tail_cut if keep_tail else truncate
    parts = [cut(res.stdout.rstrip("\n"), limit, hint)] if res.stdout else []
    if res.stderr:
        parts.append("[stderr]\n" + cut(res.stderr.rstrip("\n"), limit // 2, hint))
    if res.timed_out:
        parts.append(f"[killed: the command ran longer than {timeout:g} s]")
    elif res.exit_code != 0:
        parts.append(f"[exit code {res.exit_code}]")
    if res.truncated:
        parts.append("[output beyond the sandbox's capture limit was dropped]")
    return "\n".join(parts) or "(no output)"


class AgentEnv(gymnasium.Env[str, str], Generic[TaskT], metaclass=ABCMeta):
    """Base of every envfarm environment (see module docstring)."""

    metadata: dict[str, Any] = {"render_modes": ["ansi"], "render_fps": 4}
    tools: ClassVar[dict[str, Tool]] = {}
    _schemas: ClassVar[tuple[dict[str, Any], ...]] = ()
    default_max_steps: ClassVar[int] = 20
    default_limits: ClassVar[Limits] = Limits(memory_mb=256, pids=128, disk_mb=64, timeout_s=20)
    default_image: ClassVar[str | None] = None
    sandboxes: ClassVar[Literal["shared", "per_task", "none"]] = "shared"
    """How episodes get sandboxes (module docstring, "Pools")."""
    meta_type: ClassVar[type[EpisodeMeta]] = EpisodeMeta
    """The family's record of a finished episode (``Trajectory.meta``; shapes in ``meta.py``)."""
    eval_artifacts: ClassVar[tuple[ArtifactWriter, ...]] = ()
    """Writers ``envfarm eval`` calls after its report, with every finished episode of the run and the run
    folder; the paths they return are listed in the report (e.g. CodeRepair's SWE-bench predictions)."""

    forkable: ClassVar[bool] = False
    """Whether ``afork`` works for this family (module docstring, "Fork")."""
    fork_shared: ClassVar[frozenset[str]] = frozenset()
    """Attributes a fork shares with its original instead of deep-copying them: what no episode changes."""

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        found = dict(getattr(cls, "tools", {}))
        for name, fn in vars(cls).items():
            if hasattr(fn, "__envfarm_tool__"):
                found[name] = Tool(name, fn.__envfarm_tool__, _args_model(fn), fn)
        cls.tools = found
        cls._schemas = tuple(t.schema() for t in found.values())

    def __init__(
        self,
        backend: str = DEFAULT_BACKEND,
        image: str | None = None,
        limits: Limits | None = None,
        max_episode_steps: int | None = None,
        pools: Pools | None = None,
        render_mode: str | None = None,
        tool_help: bool = True,
    ) -> None:
        self.observation_space = AnyText(MAX_OBS_CHARS)
        self.action_space = AnyText(MAX_ACTION_CHARS)
        self.render_mode = render_mode
        self.max_episode_steps = max_episode_steps or self.default_max_steps
        self.tool_help_in_prompt = tool_help
        self._backend_name = backend
        self._image = image if image is not None else self.default_image
        self._limits = limits or self.default_limits
        self._own_pools = pools is None
        self._pools = pools if pools is not None else self._private_pools()
        self._episode = AsyncExitStack()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._loop_users = [1]  # envs running on _loop: an env and its sync forks share one
        self.task: TaskT | None = None
        self.sandbox: Sandbox | None = None
        self.steps = 0
        self.done = True
        self.transcript: list[str] = []

    # --------------------------------------------------------------------------- for families to implement

    @abstractmethod
    def generate(self, rng: np.random.Generator) -> TaskT:
        """A task drawn from ``rng`` (seeded by reset): everything needed to set up, prompt and verify."""

    @abstractmethod
    def prompt(self, task: TaskT) -> str:
        """The first observation: what the agent must do."""

    async def setup(self, sb: Sandbox, task: TaskT) -> None:
        """Prepare the fresh sandbox for ``task`` (files, databases)."""

    @abstractmethod
    def oracle(self) -> list[str]:
        """Reference actions that solve the current task (call after reset)."""

    def has_oracle(self) -> bool:
        """Whether ``oracle()`` solves the current task (a family whose tasks may lack a reference solution,
        e.g. a Harbor task without solution/solve.sh, says False; ``envs check`` then reports it)."""
        return True

    def task_count(self) -> int | None:
        """How many distinct tasks the seeds map onto (None: generated, unbounded); a fixed set of tasks,
        e.g. a folder of Harbor tasks, says its size."""
        return None

    def task_id(self, task: TaskT) -> str:
        """A stable identifier of the task (defaults to the seed-derived repr)."""
        return str(getattr(task, "task_id", ""))

    # ------------------------------------------------------------------------------------------ async core

    async def areset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        """Start an episode: release the previous sandbox, draw the task, lease and prepare a sandbox."""
        await self._end_episode()
        gymnasium.Env.reset(self, seed=seed)
        self.task = self.generate(self.np_random)
        self.steps, self.done, self.transcript = 0, False, []
        pool = await self._get_pool()
        self.sandbox = await self._episode.enter_async_context(pool.lease())
        try:
            await self.setup(self.sandbox, self.task)
        except BaseException:
            await self._end_episode()
            raise
        obs = self.prompt(self.task)
        if self.tool_help_in_prompt:
            obs += "\n\n" + self.tool_help()
        self.transcript.append(obs)
        return obs, self._info()

    async def astep(self, action: Action) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Run one action. Never raises for bad actions; an InfraError ends the episode and is raised."""
        if self.done or self.sandbox is None:
            return "The episode is over; call reset() to start a new one.", 0.0, True, False, self._info()
        self.steps += 1
        info = self._info()
        try:
            outcome = await self._dispatch(action)
        except InfraError as e:
            log.warning("infra error in %s step %d: %s", type(self).__name__, self.steps, e)
            await self._end_episode()
            raise
        info.update(outcome.info)
        truncated = not outcome.done and self.steps >= self.max_episode_steps
        if outcome.done or truncated:
            await self._end_episode()
        obs = truncate(outcome.observation, MAX_OBS_CHARS)
        self.transcript.append(obs)
        return obs, float(outcome.reward), outcome.done, truncated, info

    async def _dispatch(self, action: Action) -> Outcome:
        parsed = read_action(action)
        call = parsed.call
        if call is None:
            return Outcome(f"Error: {parsed.error}", info={"action_error": "parse"})
        spec = self.tools.get(call.name)
        if spec is None:
            names = ", ".join(sorted(self.tools))
            return Outcome(f"Error: unknown tool {call.name!r}. Available tools: {names}.",
                           info={"action_error": "unknown_tool"})
        try:
            args = spec.args.model_validate(dict(call.arguments))
        except ValidationError as e:
            return Outcome(_explain(spec, e), info={"action_error": "arguments"})
        result = await spec.fn(self, args)
        return result if isinstance(result, Outcome) else Outcome(result)

    async def afork(self) -> typing.Self:
        """An env at this env's state mid-episode (module docstring, "Fork"); the caller closes it."""
        if not self.forkable:
            raise ForkUnsupported(f"{type(self).__name__} cannot fork (forkable = False)")
        if self.done or self.sandbox is None:
            raise ForkError(f"{type(self).__name__} has no episode in progress to fork; reset() first")
        sandbox = await self.sandbox.fork()
        try:
            twin = self._fork_copy()
            twin.sandbox = sandbox
            twin._episode.push_async_callback(sandbox.close)
        except BaseException:
            await sandbox.close()
            raise
        return twin

    def _fork_copy(self) -> typing.Self:
        """A copy of this env without its episode's sandbox: episode state deep-copied, the rest shared."""
        twin = copy.copy(self)
        memo: dict[int, Any] = {}
        for name, value in vars(self).items():
            if name not in _NEVER_COPIED and name not in self.fork_shared:
                setattr(twin, name, copy.deepcopy(value, memo))
        twin._own_pools = False  # the registry stays this env's to close
        twin._episode = AsyncExitStack()
        twin._loop, twin._loop_users = None, [1]
        return twin

    async def aclose(self) -> None:
        """Release the sandbox and, if this env made its pool registry, the registry."""
        await self._end_episode()
        if self._own_pools:  # a later reset makes a new one
            pools, self._pools = self._pools, self._private_pools()
            await pools.aclose()

    def _private_pools(self) -> Pools:
        return Pools(size=1 if self.sandboxes == "shared" else 0)

    @property
    def pools(self) -> Pools:
        """The pool registry this env leases from (the farm's, or its own)."""
        return self._pools

    async def _get_pool(self) -> SandboxPool:
        """The pool the next episode leases from (per-task families override this)."""
        return self._pools.get(self._backend_name, self._image, self._limits)

    async def _end_episode(self) -> None:
        self.done = True
        self.sandbox = None
        await self._episode.aclose()
        self._episode = AsyncExitStack()

    # ------------------------------------------------------------------------------------- gymnasium API

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[str, dict[str, Any]]:
        first: tuple[str, dict[str, Any]] = self._run(self.areset(seed=seed, options=options))
        return first

    def step(self, action: Action) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Gymnasium's step: ``astep`` on the env's private loop, an InfraError reported in ``info``."""
        try:
            result: tuple[str, float, bool, bool, dict[str, Any]] = self._run(self.astep(action))
        except InfraError as e:
            return self.infra_result(f"{type(e).__name__}: {e}")
        return result

    def infra_result(self, why: str) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """The step result a sync boundary (``step``, the OpenEnv wire) reports for an episode that ended on
        an infrastructure error: truncated, reward 0 that the farm never scores, ``info["infra_error"]``."""
        return f"[infrastructure error: {why}]", 0.0, False, True, {**self._info(), "infra_error": why}

    def fork(self) -> typing.Self:
        """Sync ``afork``: the fork runs on this env's event loop (its sandbox lives there); the loop is
        closed when the last of them closes."""
        twin: typing.Self = self._run(self.afork())
        twin._loop, twin._loop_users = self._loop, self._loop_users
        self._loop_users[0] += 1
        return twin

    def close(self) -> None:
        if self._loop is not None and not self._loop.is_closed():
            self._loop.run_until_complete(self.aclose())
            self._loop_users[0] -= 1
            if self._loop_users[0] <= 0:
                self._loop.close()
        self._loop, self._loop_users = None, [1]

    def render(self) -> str | None:
        if self.render_mode == "ansi":
            return "\n---\n".join(self.transcript)
        return None

    def _run(self, coro: Awaitable[Any]) -> Any:
        if self._loop is None or self._loop.is_closed():
            self._loop = asyncio.new_event_loop()
        return self._loop.run_until_complete(coro)

    # ------------------------------------------------------------------------------------------- helpers

    def tool_help(self) -> str:
        lines = ["Tools:"]
        for spec in self.tools.values():
            params = spec.schema()["function"]["parameters"].get("properties", {})
            args = ", ".join(f"{k}: {v.get('type', 'any')}" for k, v in params.items())
            lines.append(f"- {spec.name}({args}): {spec.description}")
        lines.append(FORMAT_HELP)
        return "\n".join(lines)

    def _info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"tools": copy.deepcopy(list(self._schemas)), "step": self.steps}
        if self.task is not None:
            info["task_id"] = self.task_id(self.task)
        return info


_NEVER_COPIED = frozenset({"_pools", "_loop", "_loop_users", "_episode", "sandbox", "observation_space",
                           "action_space", "_own_pools", "spec"})
"""What ``AgentEnv._fork_copy`` never deep-copies: the pools, the event loop, the episode's sandbox, and the
EnvSpec ``gymnasium.make`` attached (its kwargs may hold the live pools)."""


def _args_model(fn: ToolFn) -> type[BaseModel]:
    model = typing.get_type_hints(fn).get("args")
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise TypeError(f"tool {fn.__qualname__} must take `args: <pydantic model>`; got {model!r}")
    return model


def _explain(spec: Tool, err: ValidationError) -> str:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc']) or '(arguments)'}: {e['msg']}" for e in err.errors()
    )
    params = spec.schema()["function"]["parameters"]
    return (f"Error: bad arguments for {spec.name}: {problems}. Expected arguments matching this JSON "
            f"schema: {params}")
