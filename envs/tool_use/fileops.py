"""``envfarm/FileOps-v0``: reach a target filesystem state with a shell tool; the state is verified.

Each seed draws a file tree (folders of notes, CSV data, an INI config, logs, scratch litter, a word list;
see ``fileops_tasks.py``) and 1-3 operations by difficulty (``difficulty`` 1-3, or mixed): create, rename
by extension, move by pattern, delete by rule, edit a config value, append a line, archive a folder, sort
and dedupe a file. ``setup`` writes the tree into the workspace. The agent runs ``bash(command)`` there
(``command_timeout_s``, default 10 s; output cut at 4,000 characters with a note) and calls ``submit()``;
the verifier then walks the workspace inside the sandbox (``fs_state.py``: paths, types, content hashes,
archive members) and compares it with the expected state the host computed by applying the operations to
its model of the tree. Only the state counts, never the transcript: reward 1.0 on an exact match, else 0.0
with a short diff (missing / extra / changed paths) in ``info["diff"]``.
"""

from __future__ import annotations

import hashlib
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from envfarm.errors import ConfigError
from envfarm.sandbox import Sandbox

from ..core import AgentEnv, Outcome, command_output, tool
from ..meta import FileOpsMeta
from .fileops_tasks import Layout, Op, State, Workspace, make_layout, make_ops, make_tree

log = logging.getLogger(__name__)

STATE_SOURCE = Path(__file__).with_name("fs_state.py").read_text()
BASH_TIMEOUT_S = 10.0
VERIFY_TIMEOUT_S = 30.0
MAX_OUTPUT_CHARS = 4000
DIFF_SHOWN = 10
"""Paths per kind named in the observation."""
DIFF_IN_INFO = 100
"""Paths per kind kept in ``info["diff"]``."""


@dataclass(frozen=True)
class FileTask:
    task_id: str
    level: int
    layout: Layout
    files: tuple[tuple[str, bytes], ...]
    """The initial tree: (relative path, content), sorted."""
    ops: tuple[Op, ...]
    target: Workspace
    """The host's model of the target tree (contents included); not to be mutated."""
    expected: Mapping[str, tuple[Any, ...]]
    """The target state in ``fs_state.py``'s format (``target.state()``)."""


class BashArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    command: str = Field(min_length=1, max_length=20_000,
                         description="A bash command line, run in the workspace (the current directory).")


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


def _canonical(state: Mapping[str, Any]) -> dict[str, Any]:
    """JSON round trip, so tuples (host model) and lists (sandbox walker) compare equal."""
    canonical: dict[str, Any] = json.loads(json.dumps(state, sort_keys=True))
    return canonical


def state_diff(expected: Mapping[str, Any], actual: Mapping[str, Any]) -> dict[str, list[str]]:
    """Paths missing from ``actual``, extra in it, and present in both with another type or content."""
    exp, act = _canonical(expected), _canonical(actual)
    return {"missing": sorted(set(exp) - set(act)), "extra": sorted(set(act) - set(exp)),
            "changed": sorted(p for p in set(exp) & set(act) if exp[p] != act[p])}


def _short(diff: Mapping[str, list[str]]) -> str:
    parts = []
    for kind, paths in diff.items():
        if paths:
            more = f" (+{len(paths) - DIFF_SHOWN} more)" if len(paths) > DIFF_SHOWN else ""
            parts.append(f"{kind}: {', '.join(paths[:DIFF_SHOWN])}{more}")
    return "; ".join(parts)


class FileOpsEnv(AgentEnv[FileTask]):
    """Reach a target file tree with ``bash``; ``submit`` compares the workspace state with the target."""

    forkable = True  # the episode is the sandbox plus plain Python state: AgentEnv.afork copies both
    default_max_steps = 30
    meta_type = FileOpsMeta

    def __init__(self, difficulty: int | None = None, command_timeout_s: float = BASH_TIMEOUT_S,
                 **kwargs: object) -> None:
        if difficulty is not None and difficulty not in (1, 2, 3):
            raise ConfigError(f"FileOps difficulty must be 1, 2 or 3 (None: mixed), got {difficulty!r}")
        if command_timeout_s <= 0:
            raise ConfigError(f"FileOps command_timeout_s must be positive, got {command_timeout_s!r}")
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.difficulty = difficulty
        self.command_timeout_s = float(command_timeout_s)

    def generate(self, rng: np.random.Generator) -> FileTask:
        level = self.difficulty or int(rng.integers(1, 4))
        layout = make_layout(rng)
        ws = make_tree(rng, layout)
        files = tuple(sorted(ws.files.items()))
        ops = make_ops(rng, layout, ws, level)
        digest = hashlib.sha1(repr((files, ops)).encode()).hexdigest()[:10]
        kinds = "+".join(op.kind for op in ops)
        return FileTask(f"fileops-{level}-{kinds}-{digest}", level, layout, files, ops, ws, ws.state())

    def prompt(self, task: FileTask) -> str:
        steps = "\n".join(f"{i}. {op.text}" for i, op in enumerate(task.ops, 1))
        return ("Your current directory is the workspace. Change it to reach this target state:\n"
                f"{steps}\n\nChange nothing else in the workspace (leave no extra files behind). Use the "
                "bash tool, then call submit; only the final state of the workspace is checked.")

    async def setup(self, sb: Sandbox, task: FileTask) -> None:
        for path, data in task.files:
            await sb.write_file(path, data)

    @tool("Run a bash command in the workspace; returns its output and exit code.")
    async def bash(self, args: BashArgs) -> str:
        assert self.sandbox is not None
        res = await self.sandbox.exec(args.command, timeout_s=self.command_timeout_s)
        hint = "page through it with head, tail, sed -n or grep"
        return command_output(res, self.command_timeout_s, hint, MAX_OUTPUT_CHARS)

    @tool("Finish: the workspace is compared with the target state. Ends the episode.")
    async def submit(self, args: NoArgs) -> Outcome:
        assert self.sandbox is not None and self.task is not None
        actual = await self.workspace_state()
        if actual is None:
            return Outcome("The workspace could not be read for checking (too large or unreadable). "
                           "Episode finished.", done=True,
                           info={"correct": False, "verify_error": "state walk failed"})
        diff = state_diff(self.task.expected, actual)
        correct = not any(diff.values())
        if correct:
            text = "The workspace matches the target state."
        else:
            text = f"The workspace does not match the target state ({_short(diff)})."
        return Outcome(f"{text} Episode finished.", reward=1.0 if correct else 0.0, done=True,
                       info={"correct": correct, "diff": {k: v[:DIFF_IN_INFO] for k, v in diff.items()}})

    async def workspace_state(self) -> State | None:
        """The workspace as ``fs_state.py`` sees it; None when the walk fails or times out."""
        assert self.sandbox is not None
        sb = self.sandbox
        res = await sb.exec(["python3", "-I", "-c", STATE_SOURCE, sb.workdir], timeout_s=VERIFY_TIMEOUT_S)
        try:
            if res.ok and not res.truncated:
                return dict(json.loads(res.stdout))
        except ValueError:
            pass
        log.info("FileOps state walk failed (exit %s, timed out %s): %s", res.exit_code, res.timed_out,
                 res.stderr[-500:])
        return None

    def oracle(self) -> list[str]:
        assert self.task is not None
        calls = [{"name": "bash", "arguments": {"command": op.command}} for op in self.task.ops]
        calls.append({"name": "submit", "arguments": {}})
        return [json.dumps(call) for call in calls]
