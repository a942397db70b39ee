"""Counting: :class:`Tally` (whole run, across resumes), :class:`Live` (this process, for the live view) and
the :class:`Summary` written as summary.json.

"Where the time goes" splits the episodes' wall time into sandbox (lease + setup), policy (waiting for the
model), env (``astep``: parsing, tools in the sandbox, grading), queue (waiting for a step slot) and farm
(everything else: the orchestrator).
"""

from __future__ import annotations

import time
from collections import deque
from dataclasses import asdict, dataclass, field
from typing import Any

from .trajectory import Trajectory


@dataclass
class Tally:
    """Counts over finished trajectories."""

    completed: int = 0
    infra_errors: int = 0
    policy_errors: int = 0
    errors: int = 0
    steps: int = 0
    infra_retries: int = 0
    reward_sum: float = 0.0
    sandbox_s: float = 0.0
    policy_s: float = 0.0
    env_s: float = 0.0
    queue_s: float = 0.0
    total_s: float = 0.0
    versions: set[Any] = field(default_factory=set)

    def add(self, t: Trajectory) -> None:
        if t.status == "completed":
            self.completed += 1
            self.reward_sum += t.reward
        elif t.status == "infra_error":
            self.infra_errors += 1
        elif t.status == "policy_error":
            self.policy_errors += 1
        else:
            self.errors += 1
        self.steps += t.steps
        self.infra_retries += t.retries
        self.sandbox_s += t.timings.sandbox_s
        self.policy_s += t.timings.policy_s
        self.env_s += t.timings.env_s
        self.queue_s += t.timings.queue_s
        self.total_s += t.timings.total_s
        if t.weight_version is not None:
            self.versions.add(t.weight_version)

    @property
    def failed(self) -> int:
        return self.infra_errors + self.policy_errors + self.errors

    @property
    def finished(self) -> int:
        return self.completed + self.failed

    @property
    def mean_reward(self) -> float | None:
        return self.reward_sum / self.completed if self.completed else None

    def time_split(self) -> dict[str, float]:
        """Fractions of episode wall time: sandbox, policy, env, queue (step slots), farm (the rest)."""
        parts = {"sandbox": self.sandbox_s, "policy": self.policy_s, "env": self.env_s, "queue": self.queue_s}
        if self.total_s <= 0:
            return {**dict.fromkeys(parts, 0.0), "farm": 0.0}
        out = {k: round(v / self.total_s, 4) for k, v in parts.items()}
        out["farm"] = round(max(0.0, 1.0 - sum(out.values())), 4)
        return out


@dataclass
class Live:
    """What this process is doing now (read by the live view)."""

    total: int = 0
    """Episodes in the run."""
    done_before: int = 0
    """Finished in earlier invocations (resume)."""
    active: int = 0
    max_active: int = 0
    steps: int = 0
    interrupted: int = 0
    paused: str | None = None
    """Why no episode is being started (backpressure, staleness), or None."""
    started: float = field(default_factory=time.monotonic)
    step_times: deque[float] = field(default_factory=lambda: deque(maxlen=100_000))

    def begin(self) -> None:
        self.active += 1
        self.max_active = max(self.max_active, self.active)

    def end(self) -> None:
        self.active -= 1

    def step(self) -> None:
        self.steps += 1
        self.step_times.append(time.monotonic())

    def steps_per_s(self, window_s: float = 5.0) -> float:
        now = time.monotonic()
        span = min(window_s, now - self.started)
        if span <= 0:
            return 0.0
        times = self.step_times
        n = 0
        for t in reversed(times):
            if now - t > span:
                break
            n += 1
        return n / span

    def wall_s(self) -> float:
        return time.monotonic() - self.started


@dataclass(frozen=True)
class Undelivered:
    """Finished trajectories that a sink had not acknowledged when the run stopped: they are in the spool."""

    sinks: dict[str, int]
    """Per sink that has some: how many it has not acknowledged."""
    spool: str
    """The run's spool, which holds them."""
    command: str
    """The command that delivers them (run it once the sink is back or fixed)."""

    def message(self) -> str:
        parts = ", ".join(f"{n} trajectories to sink {name}" for name, n in self.sinks.items())
        return f"not delivered: {parts}; they are in {self.spool}: `{self.command}` delivers them"


@dataclass(frozen=True)
class Summary:
    """summary.json. Counts cover the whole run (all invocations); rates cover this invocation."""

    run_id: str
    run_dir: str | None
    env_id: str
    policy: str
    backend: str
    episodes_requested: int
    episodes_completed: int
    episodes_failed: int
    """Finished with an infra_error, a policy error or an env error."""
    episodes_interrupted: int
    """In flight when this invocation stopped; re-run by --resume."""
    episodes_remaining: int
    infra_errors: int
    infra_retries: int
    policy_errors: int
    errors: int
    max_concurrent: int
    concurrency: int
    steps: int
    wall_s: float
    """This invocation's wall time (``wall_s_total`` adds earlier invocations)."""
    wall_s_total: float
    steps_per_s: float
    episodes_per_s: float
    mean_reward: float | None
    """Mean return of completed episodes (infra errors are not rewards of 0)."""
    time_split: dict[str, float]
    weight_versions: list[Any]
    nodes_used: int
    stopped: str | None
    """None when the run finished; else why it stopped (``interrupted``, ``PolicyUnavailable: ...``)."""
    sinks: dict[str, dict[str, Any]]
    """Per sink: ``backlog`` (not acknowledged), ``delivered``, ``last_error``."""
    undelivered: Undelivered | None = None
    """None when every sink acknowledged every finished trajectory; else how many wait where, and the
    command that delivers them."""
    nodes: dict[str, dict[str, Any]] = field(default_factory=dict)
    """Per Ray node (``--ray``): episodes, steps, episodes/s and steps/s, requeued episodes, ``lost`` (why its
    worker was retired, else None). Empty on one machine."""

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


__all__ = ["Live", "Summary", "Tally", "Undelivered"]
