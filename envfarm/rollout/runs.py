"""The run folder: everything a run needs to be resumed without duplicates.

    RUN/
      run.json            what the run is (env, episodes, seeds, attempts, policy, backend): fixed at creation
      spool.jsonl         every finished trajectory, fsync'd before it counts (the source of every sink)
      cursors/<sink>.json how far each sink's delivery got (byte offset + records in spool.jsonl)
      interrupted.jsonl   episodes cut short by a stop or a fatal error (partial; re-run on --resume)
      summary.json        the latest summary

Episode ``index`` (0 .. episodes-1) fixes the task: ``seed = base_seed + index // attempts`` and
``attempt = index % attempts``; its ``episode_id`` is ``<run_id>:<index>``. ``--resume RUN`` runs exactly the
indices with no trajectory in the spool, so nothing is run twice, and the sinks continue from their cursors.
"""

from __future__ import annotations

import asyncio
import json
import logging
import time
import uuid
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

from envfarm.errors import ConfigError

from .spool import repair_jsonl
from .trajectory import Trajectory

log = logging.getLogger(__name__)

RUN_FILE = "run.json"
IDENTITY = ("env_id", "episodes", "seed", "attempts", "env_kwargs")
"""Fields a resumed run must keep; anything else (concurrency, policy URL, sinks) may change."""


@dataclass(frozen=True)
class RunSpec:
    """What a run is; stored in RUN/run.json."""

    env_id: str
    episodes: int
    """Episodes in the whole run (tasks x attempts for an evaluation)."""
    seed: int = 0
    """Seed of task 0; task t uses seed + t."""
    attempts: int = 1
    """Attempts per task (evaluation's k); 1 for plain rollouts."""
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    policy: str = ""
    backend: str = ""
    options: Mapping[str, Any] = field(default_factory=dict)
    """How the run was started (outputs, learner, ...): what ``--resume`` reuses unless told otherwise."""
    run_id: str = field(default_factory=lambda: uuid.uuid4().hex[:12])
    created_at: float = field(default_factory=time.time)

    def __post_init__(self) -> None:
        if self.episodes < 0 or self.attempts < 1:
            raise ConfigError(f"a run needs episodes >= 0 and attempts >= 1; got {self.episodes}, "
                              f"{self.attempts}")

    def seed_of(self, index: int) -> int:
        return self.seed + index // self.attempts

    def attempt_of(self, index: int) -> int:
        return index % self.attempts

    def episode_id(self, index: int) -> str:
        return f"{self.run_id}:{index:06d}"


class RunDir:
    """One run folder (see the module docstring)."""

    def __init__(self, path: Path, spec: RunSpec) -> None:
        self.path = Path(path)
        self.spec = spec

    spool_path = property(lambda self: self.path / "spool.jsonl")
    cursor_dir = property(lambda self: self.path / "cursors")
    interrupted_path = property(lambda self: self.path / "interrupted.jsonl")
    summary_path = property(lambda self: self.path / "summary.json")

    @classmethod
    async def create(cls, path: Path, spec: RunSpec) -> RunDir:
        path = Path(path)
        if await asyncio.to_thread((path / RUN_FILE).exists):
            raise ConfigError(f"{path} already holds a run; continue it with --resume {path}, or choose "
                              "another --run-dir")
        await asyncio.to_thread(_write_json, path / RUN_FILE, asdict(spec))
        return cls(path, spec)

    @classmethod
    async def load(cls, path: Path) -> RunDir:
        path = Path(path)
        return cls(path, await asyncio.to_thread(read_spec, path))

    def check_matches(self, wanted: RunSpec) -> None:
        """ConfigError naming every identity field where ``wanted`` differs from the stored run."""
        diff = [f"{k}: run has {getattr(self.spec, k)!r}, asked {getattr(wanted, k)!r}"
                for k in IDENTITY if getattr(self.spec, k) != getattr(wanted, k)]
        if diff:
            raise ConfigError(f"--resume {self.path}: the options differ from the run's: {'; '.join(diff)}. "
                              "Leave them out to take the run's own")

    async def finished(self) -> list[Trajectory]:
        """Every trajectory in the spool (a torn last line is dropped first)."""
        return await asyncio.to_thread(_read_trajectories, self.spool_path)

    async def previous_summary(self) -> dict[str, Any]:
        if not await asyncio.to_thread(self.summary_path.exists):
            return {}
        try:
            data = json.loads(await asyncio.to_thread(self.summary_path.read_text))
        except (OSError, ValueError) as e:  # only wall_s_total comes from it: start that count again
            log.warning("%s is unreadable (%s); the total wall time restarts from this run",
                        self.summary_path, e)
            return {}
        return data if isinstance(data, dict) else {}

    async def write_summary(self, data: Mapping[str, Any], also: Path | None = None) -> None:
        await asyncio.to_thread(_write_json, self.summary_path, data)
        if also is not None:
            await asyncio.to_thread(_write_json, also, data)

    async def record_interrupted(self, trajectories: list[Trajectory]) -> None:
        if trajectories:
            data = "".join(t.to_json() + "\n" for t in trajectories)
            await asyncio.to_thread(_append_text, self.interrupted_path, data)


def read_spec(path: Path) -> RunSpec:
    """The RunSpec stored in run folder ``path``; ConfigError when it is no readable run folder. Blocking."""
    file = Path(path) / RUN_FILE
    if not file.is_file():
        raise ConfigError(f"{path} is not a run folder (no {RUN_FILE}); pass the folder printed when the run "
                          "started")
    try:
        data = json.loads(file.read_text())
        known = {f.name for f in fields(RunSpec)}
        return RunSpec(**{k: v for k, v in data.items() if k in known})
    except (OSError, UnicodeDecodeError, json.JSONDecodeError, TypeError, AttributeError) as e:
        raise ConfigError(f"{file} is damaged ({type(e).__name__}: {e}); restore it, or start a new run "
                          "without --resume") from e


def _read_trajectories(path: Path) -> list[Trajectory]:
    if not path.exists():
        return []
    repair_jsonl(path)
    out = []
    with path.open("rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                out.append(Trajectory.from_json(line))
            except (ValueError, TypeError, KeyError, AttributeError) as e:  # JSONDecodeError is a ValueError
                raise ConfigError(f"{path} line {n} is not a trajectory ({type(e).__name__}: {e}); the "
                                  "spool was edited or damaged: restore it, or start a new run") from e
    return out


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    tmp.replace(path)


def _append_text(path: Path, text: str) -> None:
    with path.open("a") as f:
        f.write(text)


__all__ = ["IDENTITY", "RunDir", "RunSpec", "read_spec"]
