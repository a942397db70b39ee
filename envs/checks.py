"""The conformance suite every registered env must pass (used by the tests and `envfarm envs check ID`).

1. ``check_env``: Gymnasium's own API checker on the unwrapped env.
2. determinism: ``reset(seed=s)`` twice gives the same task and first observation; seeds differ.
3. oracle: the env's reference solution solves at least 99% of N seeds (every generated task is solvable).
4. malformed actions: bad JSON, unknown tools, wrong argument types… give an error observation, reward 0,
   and never raise or end the episode.
5. no leaks: after many episodes the env holds at most its warm sandbox, and none after ``close()``.
6. vector: ``gymnasium.vector.AsyncVectorEnv`` runs it in subprocesses.
"""

from __future__ import annotations

import logging
import time
import warnings
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import gymnasium

from envfarm.sandbox.values import DEFAULT_BACKEND

from .core import AgentEnv

ORACLE_MIN_RATE = 0.99
MALFORMED = (
    "",
    "I think the answer is 4.",
    '{"name": "calc", "arguments": {"expr": ',
    "<tool_call>not json</tool_call>",
    '{"arguments": {}}',
    '{"name": "no_such_tool_xyz", "arguments": {}}',
    '{"name": "%TOOL%", "arguments": {"no_such_argument_xyz": [1, 2, 3]}}',
    '{"name": "%TOOL%", "arguments": "[1, 2]"}',
    '<tool_call>{"name": "%TOOL%", "arguments": {}}</tool_call><tool_call>{"name": "%TOOL%"}</tool_call>',
    "\x00\x01 ünïcödé 🚀",
)


@dataclass(frozen=True)
class CheckResult:
    name: str
    passed: bool
    detail: str
    seconds: float


@dataclass(frozen=True)
class ConformanceReport:
    env_id: str
    backend: str
    results: tuple[CheckResult, ...]

    @property
    def passed(self) -> bool:
        return all(r.passed for r in self.results)

    @property
    def failures(self) -> list[str]:
        """``"check: detail"`` for every failed check."""
        return [f"{r.name}: {r.detail}" for r in self.results if not r.passed]

    def log(self, logger: logging.Logger) -> None:
        """One INFO line per check: name, result, time, detail."""
        for r in self.results:
            logger.info("%s %s: %s (%.1fs) %s", self.env_id, r.name, r.passed, r.seconds, r.detail)


Progress = Callable[[str, int, int], None]


Kwargs = Mapping[str, Any] | None
"""The env's arguments beyond the backend (``envs check --env-kwargs``), e.g. a Harbor env's ``tasks``."""


def make(env_id: str, backend: str, kwargs: Kwargs = None) -> AgentEnv[Any]:
    env = gymnasium.make(env_id, backend=backend, **dict(kwargs or {})).unwrapped
    if not isinstance(env, AgentEnv):
        raise TypeError(f"{env_id} is not an envfarm AgentEnv (got {type(env).__name__})")
    return env


@contextmanager
def opened(env_id: str, backend: str, kwargs: Kwargs = None) -> Iterator[AgentEnv[Any]]:
    env = make(env_id, backend, kwargs)
    try:
        yield env
    finally:
        env.close()


def run_episode(env: AgentEnv[Any], seed: int) -> tuple[float, bool, dict[str, Any]]:
    """Play the oracle on ``seed``; (total reward, terminated, last info)."""
    env.reset(seed=seed)
    return play_oracle(env)


def play_oracle(env: AgentEnv[Any]) -> tuple[float, bool, dict[str, Any]]:
    """Play the oracle on the task ``env`` was reset to; (total reward, terminated, last info)."""
    return _play(env, env.oracle())


def check_api(env_id: str, backend: str, kwargs: Kwargs = None) -> str:
    from gymnasium.utils.env_checker import check_env

    with opened(env_id, backend, kwargs) as env, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        check_env(env, skip_render_check=True)
    return "gymnasium check_env passed"


def check_determinism(env_id: str, backend: str, kwargs: Kwargs = None) -> str:
    with opened(env_id, backend, kwargs) as env:
        firsts = [env.reset(seed=s) for s in (11, 11, 12, 13)]
        count = env.task_count()
    (a, ia), (b, ib) = firsts[0], firsts[1]
    assert a == b and ia.get("task_id") == ib.get("task_id"), "reset(seed=11) twice gave different tasks"
    if count == 1:
        return "same seed, same task and first observation (the env has one task)"
    assert len({o for o, _ in firsts}) >= 2, "seeds 11, 12, 13 all gave the same first observation"
    return "same seed, same task and first observation; different seeds differ"


def check_oracle(env_id: str, backend: str, seeds: int, progress: Progress | None,
                 kwargs: Kwargs = None) -> str:
    """The oracle solves >= ``ORACLE_MIN_RATE`` of the seeds whose task has one; tasks without an oracle
    (``AgentEnv.has_oracle``: a Harbor task without solution/solve.sh) are counted and said, not failed."""
    solved, failures, infra, missing = 0, list[str](), 0, 0
    with opened(env_id, backend, kwargs) as env:
        for seed in range(seeds):
            env.reset(seed=seed)
            if not env.has_oracle():
                missing += 1
            else:
                reward, terminated, info = play_oracle(env)
                infra += "infra_error" in info
                if reward > 0 and terminated:
                    solved += 1
                elif len(failures) < 5:
                    failures.append(f"seed {seed}: reward {reward} {info.get('infra_error', '')}".strip())
            if progress:
                progress("oracle", seed + 1, seeds)
    tried = seeds - missing
    if not tried:
        return f"no oracle: none of the {seeds} seeds' tasks has one"
    rate = solved / tried
    detail = f"oracle solved {solved}/{tried} seeds ({rate:.1%}); infra errors {infra}"
    if missing:
        detail += f"; no oracle for {missing} of {seeds} seeds"
    assert rate >= ORACLE_MIN_RATE, f"{detail}; first failures: {failures}"
    return detail


def check_malformed(env_id: str, backend: str, kwargs: Kwargs = None) -> str:
    with opened(env_id, backend, kwargs) as env:
        _, info = env.reset(seed=0)
        tool = info["tools"][0]["function"]["name"]
        for raw in MALFORMED:
            action = raw.replace("%TOOL%", tool)
            obs, reward, terminated, truncated, info = env.step(action)
            assert isinstance(obs, str) and "error" in obs.lower(), f"{action!r} gave no error: {obs[:200]!r}"
            assert reward == 0 and not terminated, f"{action!r} ended the episode or paid a reward"
            assert "infra_error" not in info, f"{action!r} was treated as an infrastructure error"
            if truncated:  # step limit reached: start over
                env.reset(seed=0)
    return f"{len(MALFORMED)} malformed actions gave error observations"


def check_leaks(env_id: str, backend: str, episodes: int, progress: Progress | None,
                kwargs: Kwargs = None) -> str:
    env = make(env_id, backend, kwargs)
    try:
        peak = 0
        backend_obj = env.pools.backend(backend)
        for i in range(episodes):
            run_episode(env, 10_000 + i)
            peak = max(peak, _held(env, backend_obj.live))
            if progress:
                progress("leaks", i + 1, episodes)
    finally:
        env.close()
    assert peak <= 2, f"{peak} sandboxes held between episodes (expected the warm one and at most one more)"
    left = backend_obj.live
    assert left == 0, f"{left} sandboxes still open after close()"
    return f"{episodes} episodes: at most {peak} sandboxes held between episodes, 0 after close()"


def _held(env: AgentEnv[Any], live: int) -> int:
    """Sandboxes the env holds between episodes: its pools' warm, leased and starting ones, plus any the
    backend runs that no pool tracks (a leak). Released ones still closing in the background are not held:
    on a loaded machine their close may not have run yet when the episode returns."""
    held, tracked = 0, 0
    for pool in env.pools:
        stats = pool.stats()
        held += stats.idle + stats.leased + stats.starting
        tracked += stats.live
    return held + max(0, live - tracked)


def check_fork(env_id: str, backend: str, kwargs: Kwargs = None) -> str:
    """``AgentEnv.fork`` mid-episode: the fork and its original each finish the oracle's episode, and a step
    taken by one is not seen by the other."""
    with opened(env_id, backend, kwargs) as env:
        if not env.forkable:
            return "skipped: the family does not fork (forkable = False)"
        env.reset(seed=1)
        if not env.has_oracle():
            return "skipped: seed 1's task has no oracle"
        actions = env.oracle()
        head, rest = actions[: len(actions) // 2], actions[len(actions) // 2:]
        for action in head:
            env.step(action)
        twin = env.fork()
        try:
            assert twin.steps == env.steps and twin.transcript == env.transcript, "the fork's state differs"
            env.step("not a tool call")  # the original moves on alone
            assert (twin.steps, env.steps) == (len(head), len(head) + 1), "one's step was seen by the other"
            for who, played in (("the fork", twin), ("the original", env)):
                reward, terminated, info = _play(played, rest)
                why = f"reward {reward} {info.get('infra_error', '')}".strip()
                assert reward > 0 and terminated, f"{who} did not finish the oracle's episode: {why}"
        finally:
            twin.close()
    return f"forked after {len(head)} of {len(actions)} oracle actions: the fork and the original both solved"


def _play(env: AgentEnv[Any], actions: list[str]) -> tuple[float, bool, dict[str, Any]]:
    total, terminated, info = 0.0, False, dict[str, Any]()
    for action in actions:
        _, reward, terminated, truncated, info = env.step(action)
        total += reward
        if terminated or truncated:
            break
    return total, terminated, info


def check_vector(env_id: str, backend: str, kwargs: Kwargs = None) -> str:
    fns = [lambda: gymnasium.make(env_id, backend=backend, **dict(kwargs or {})) for _ in range(2)]
    venv = gymnasium.vector.AsyncVectorEnv(fns, shared_memory=False)  # text cannot use shared memory
    try:
        obs, _ = venv.reset(seed=[1, 2])
        assert len(obs) == 2 and all(isinstance(o, str) and "\n" in o for o in obs), "observations lost text"
        obs, rewards, _, _, _ = venv.step(("not a tool call ✓", "not a tool call ✓"))
        assert all("error" in o.lower() for o in obs) and list(rewards) == [0.0, 0.0]
    finally:
        venv.close()
    return "AsyncVectorEnv with 2 workers reset and stepped"


def run_conformance(
    env_id: str,
    backend: str = DEFAULT_BACKEND,
    seeds: int = 200,
    leak_episodes: int = 100,
    vector: bool = True,
    progress: Progress | None = None,
    env_kwargs: Kwargs = None,
) -> ConformanceReport:
    """Run every check on ``env_id`` (made with ``env_kwargs``); failures are recorded, not raised."""
    kw = env_kwargs
    checks: list[tuple[str, Callable[[], str]]] = [
        ("check_env", lambda: check_api(env_id, backend, kw)),
        ("determinism", lambda: check_determinism(env_id, backend, kw)),
        ("oracle", lambda: check_oracle(env_id, backend, seeds, progress, kw)),
        ("malformed_actions", lambda: check_malformed(env_id, backend, kw)),
        ("no_leaks", lambda: check_leaks(env_id, backend, leak_episodes, progress, kw)),
        ("fork", lambda: check_fork(env_id, backend, kw)),
    ]
    if vector:
        checks.append(("async_vector_env", lambda: check_vector(env_id, backend, kw)))
    results = []
    for name, fn in checks:
        t0 = time.perf_counter()
        try:
            results.append(CheckResult(name, True, fn(), time.perf_counter() - t0))
        except Exception as e:  # a failing check is a result, not a crash
            results.append(CheckResult(name, False, f"{type(e).__name__}: {e}", time.perf_counter() - t0))
        if progress:
            progress(name, 1, 1)
    return ConformanceReport(env_id, backend, tuple(results))
