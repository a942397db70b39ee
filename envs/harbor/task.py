"""Harbor task folders, loaded into frozen dataclasses.

A task folder (Harbor's layout, also terminal-bench's)::

    task.toml             [task] name ...; [verifier] timeout_sec, env, user; [agent] timeout_sec;
                          [environment] cpus, memory_mb, storage_mb, allow_internet, docker_image, env
                          (older sets: ``version = "1.0"`` at the top and no [task] table)
    instruction.md        the task, given to the agent as its first observation
    environment/          Dockerfile and its files (the image: ``envfarm.sandbox.harbor_image``)
    tests/test.sh         the verifier: writes /logs/verifier/reward.txt (a number) or reward.json
    solution/solve.sh     optional: the reference solution (the oracle)

``load_task(dir)`` reads one folder; ``load_tasks(dir, task_ids)`` reads a folder of task folders (or one
task folder), sorted by name. A malformed folder raises :class:`~envfarm.errors.HarborTaskError` naming the
file and the fix; an unknown id raises :class:`~envfarm.errors.HarborTaskNotFound` with a suggestion.
"""

from __future__ import annotations

import difflib
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envfarm.errors import HarborTaskError, HarborTaskNotFound

DEFAULT_VERIFIER_TIMEOUT_S = 600.0
DEFAULT_AGENT_TIMEOUT_S = 600.0


@dataclass(frozen=True)
class HarborLimits:
    """``[environment]``'s resources (None: not given)."""

    cpus: float | None = None
    memory_mb: int | None = None
    storage_mb: int | None = None
    gpus: int = 0


@dataclass(frozen=True)
class HarborTask:
    """One Harbor task folder."""

    name: str
    """The folder's name: the task id."""
    path: Path
    instruction: str
    title: str
    """``[task] name`` when given, else the folder's name."""
    verifier_timeout_s: float
    verifier_env: tuple[tuple[str, str], ...]
    verifier_user: str | None
    agent_timeout_s: float
    limits: HarborLimits
    allow_internet: bool
    """What the task asked for; sandboxes here never have a network."""
    docker_image: str | None
    environment_env: tuple[tuple[str, str], ...]
    solution_env: tuple[tuple[str, str], ...]
    has_solution: bool
    """``solution/solve.sh`` exists: the task has an oracle."""
    metadata: tuple[tuple[str, Any], ...] = ()

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path:
        return self.path / "solution"


def load_task(path: str | Path) -> HarborTask:
    """The task in folder ``path``; HarborTaskError names the file that is missing or malformed."""
    folder = Path(path)
    toml_path, instruction_path = folder / "task.toml", folder / "instruction.md"
    for need in (toml_path, instruction_path, folder / "tests" / "test.sh"):
        if not need.is_file():
            raise HarborTaskError(f"{need} is missing; a Harbor task folder needs task.toml, instruction.md "
                                  "and tests/test.sh (see https://harborframework.com/docs)")
    try:
        data = tomllib.loads(toml_path.read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
        raise HarborTaskError(f"{toml_path} is not valid TOML: {e}; fix the line it names") from e
    instruction = instruction_path.read_text(encoding="utf-8", errors="replace").strip()
    if not instruction:
        raise HarborTaskError(f"{instruction_path} is empty; write the task for the agent there")
    return _from_toml(folder, data, instruction)


def _from_toml(folder: Path, data: Mapping[str, Any], instruction: str) -> HarborTask:
    where = folder / "task.toml"
    task, verifier = _table(data, "task", where), _table(data, "verifier", where)
    agent, envt = _table(data, "agent", where), _table(data, "environment", where)
    solution = _table(data, "solution", where)
    limits = HarborLimits(cpus=_num(envt, "cpus", where, "environment", float),
                          memory_mb=_num(envt, "memory_mb", where, "environment", int),
                          storage_mb=_num(envt, "storage_mb", where, "environment", int),
                          gpus=_num(envt, "gpus", where, "environment", int) or 0)
    image = envt.get("docker_image")
    if image is not None and not isinstance(image, str):
        raise HarborTaskError(f"{where}: [environment] docker_image must be a string, got {image!r}")
    user = verifier.get("user")
    title = task.get("name")
    return HarborTask(
        name=folder.resolve().name, path=folder, instruction=instruction,
        title=title if isinstance(title, str) and title else folder.resolve().name,
        verifier_timeout_s=_num(verifier, "timeout_sec", where, "verifier", float)
        or DEFAULT_VERIFIER_TIMEOUT_S,
        verifier_env=_env(verifier, where, "verifier.env"),
        verifier_user=str(user) if user is not None else None,
        agent_timeout_s=_num(agent, "timeout_sec", where, "agent", float) or DEFAULT_AGENT_TIMEOUT_S,
        limits=limits, allow_internet=_bool(envt, "allow_internet", where), docker_image=image or None,
        environment_env=_env(envt, where, "environment.env"),
        solution_env=_env(solution, where, "solution.env"),
        has_solution=(folder / "solution" / "solve.sh").is_file(),
        metadata=tuple(sorted(_table(data, "metadata", where).items())))


def _table(data: Mapping[str, Any], key: str, where: Path) -> Mapping[str, Any]:
    value = data.get(key, {})
    if not isinstance(value, Mapping):
        raise HarborTaskError(f"{where}: [{key}] must be a table, got {value!r}; write it as [{key}]")
    return value


def _num(table: Mapping[str, Any], key: str, where: Path, section: str, kind: type) -> Any:
    value = table.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise HarborTaskError(f"{where}: [{section}] {key} must be a non-negative number, got {value!r}")
    if kind is int and value != int(value):
        raise HarborTaskError(f"{where}: [{section}] {key} must be a whole number, got {value!r}")
    return kind(value)


def _bool(table: Mapping[str, Any], key: str, where: Path) -> bool:
    value = table.get(key, False)
    if not isinstance(value, bool):
        raise HarborTaskError(f"{where}: [environment] {key} must be true or false, got {value!r}")
    return value


def _env(table: Mapping[str, Any], where: Path, name: str) -> tuple[tuple[str, str], ...]:
    env = table.get("env", {})
    if not isinstance(env, Mapping):
        raise HarborTaskError(f"{where}: [{name}] must be a table of NAME = \"value\", got {env!r}")
    for key, value in env.items():
        if not isinstance(value, (str, int, float, bool)):
            raise HarborTaskError(f"{where}: [{name}] {key} must be a string, got {value!r}")
    return tuple((str(k), str(v)) for k, v in sorted(env.items()))


def is_task_dir(path: Path) -> bool:
    return (path / "task.toml").is_file()


def select_dirs(path: str | Path, task_ids: Sequence[str] | None = None) -> list[Path]:
    """The task folders of ``path`` (a folder of task folders, or one task folder) sorted by name, without
    reading them; ``task_ids`` picks some by folder name (HarborTaskNotFound with a suggestion)."""
    root = Path(path)
    if not root.is_dir():
        raise HarborTaskError(f"{root} is not a folder; pass a Harbor task folder or a folder of them")
    if is_task_dir(root):
        return [root]
    found = sorted((p for p in root.iterdir() if p.is_dir() and is_task_dir(p)), key=lambda p: p.name)
    if not found:
        raise HarborTaskError(f"{root} holds no Harbor task folder (none has a task.toml); pass the folder "
                              "that holds the task folders")
    if not task_ids:
        return found
    by_name = {p.name: p for p in found}
    for wanted in task_ids:
        if wanted not in by_name:
            hint = difflib.get_close_matches(wanted, list(by_name), n=1)
            did = f"; did you mean {hint[0]!r}?" if hint else f"; {len(found)} tasks are in {root}"
            raise HarborTaskNotFound(f"no Harbor task {wanted!r} in {root}{did}")
    return sorted((by_name[w] for w in dict.fromkeys(task_ids)), key=lambda p: p.name)


def load_tasks(path: str | Path, task_ids: Sequence[str] | None = None) -> list[HarborTask]:
    """The tasks of ``path`` (see :func:`select_dirs`), read, sorted by name; only the picked folders are
    read, so a malformed task elsewhere in the folder does not stop them."""
    return sorted((load_task(p) for p in select_dirs(path, task_ids)), key=lambda t: t.name)


__all__ = ["HarborLimits", "HarborTask", "is_task_dir", "load_task", "load_tasks", "select_dirs"]
