"""Best-of-N from the middle of an episode: play a prefix once, fork the env N times, keep the best child.

    python examples/best_of_n.py                                    # CodeRepair-v0 on bwrap, a built-in task
    python examples/best_of_n.py --n 8 --slip 0.3 --depth 2         # then fork again from the best child
    python examples/best_of_n.py --env envfarm/ToolCalc-v0 --seed 3
    python examples/best_of_n.py --base-url http://127.0.0.1:8000/v1 --model NAME --temperature 1.0

The env is reset for ``--seed`` and the prefix policy plays ``--prefix-steps`` actions. Then ``env.afork()``
makes N envs at that state (copy-on-write sandboxes, Python state copied), and each child plays to the end
with a sampling policy of its own seed; the best reward wins. With ``--depth 2`` every child first plays
``--branch-steps`` actions, is forked once more there (kept aside), then finishes: the best child's kept state
is forked N times again. The table shows each child's actions, reward and seconds, and what a fork cost
against a fresh env that resets and replays the prefix.

Policies: by default the prefix is the env's oracle and the children play a *noisy oracle*: at each step,
with probability ``--slip`` (drawn from the child's seeded RNG), a random tool call (``RandomPolicy``) takes
the place of the reference action, which is lost. The plain oracle solves every task, so a search over it
shows nothing; the noisy one fails now and then, and best-of-N beats one attempt. (The trainer's
``NoisyTeacher`` decides per task seed, so all forks of one state would make the same choice: it does not
fit here.) With ``--base-url`` (any OpenAI-compatible server: vLLM, SGLang, ``envfarm serve``) the model
plays both the prefix and the children (``OpenAIPolicy``), sampling at ``--temperature``.

Every env is closed at the end; the run reports how many sandboxes its backend still had open (0).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import time
from collections.abc import Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from rich.console import Console
from rich.table import Table

import envfarm.envs  # noqa: F401 - registers the envs
from envfarm.envs.actions import ParsedAction
from envfarm.envs.core import AgentEnv
from envfarm.errors import ConfigError, InfraError, PolicyError
from envfarm.rollout import EpisodeView, OpenAIPolicy, OraclePolicy, Policy, RandomPolicy, Reply
from envfarm.rollout.environments import make_env
from envfarm.rollout.policies import text_reply, tool_messages
from envfarm.sandbox import DEFAULT_BACKEND, Backend, get_backend
from envfarm.sandbox.pool import Pools


class NoisyOracle(Policy):
    """The env's reference solution, except that with probability ``slip`` at each step a random tool call
    takes the reference action's place (that action is lost). Past the plan's end it repeats the plan's last
    action (the ``submit``). The steps it slipped on are in ``view.state["slips"]``."""

    def __init__(self, slip: float) -> None:
        if not 0 <= slip <= 1:
            raise ConfigError(f"slip must be in 0..1, got {slip}")
        self.slip = slip
        self.name = f"noisy-oracle(slip={slip:g})"
        self._random = RandomPolicy()

    async def act(self, view: EpisodeView) -> Reply:
        if view.rng.random() < self.slip:
            view.state.setdefault("slips", []).append(view.step)
            return await self._random.act(view)
        plan: list[str] = view.state.setdefault("oracle", list(view.env.oracle()))
        return text_reply(plan[min(view.step, len(plan) - 1)], view)


@dataclass(frozen=True)
class SearchConfig:
    """What to search: the env, the state to branch from, how wide and how deep."""

    env_id: str = "envfarm/CodeRepair-v0"
    """A registered env whose family forks (``forkable = True``)."""
    backend: str = DEFAULT_BACKEND
    """The sandbox backend (bwrap or docker: the local backend cannot fork)."""
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Arguments for the env (``gymnasium.make``)."""
    seed: int = 0
    """The task: ``reset(seed=...)``."""
    prefix_steps: int = 1
    """Actions the prefix policy plays before the fork."""
    n: int = 4
    """Children per fork."""
    depth: int = 1
    """1: one level of children; 2: fork again from the best child's state after ``branch_steps``."""
    branch_steps: int = 1
    """With depth 2: actions a child plays before its state is kept for the next level."""
    policy_seed: int = 0
    """Seeds the children's RNGs (child ``k`` of level ``l``: ``[policy_seed, l, k]``)."""


@dataclass(frozen=True)
class Child:
    """One child's play from its fork to the end of its episode."""

    label: str
    """``level.index``, e.g. ``2.3``."""
    parent: str
    """Whose state it was forked from: ``prefix``, or the label of the child of the level above."""
    start_step: int
    """The episode step it was forked at (the actions before it were its ancestors')."""
    actions: tuple[str, ...]
    """Its own actions' tool names; ``*`` marks a noisy oracle's slip, ``?`` an action that did not parse."""
    observations: tuple[str, ...]
    episode: tuple[str, ...]
    """The whole episode's tool names: the prefix, its ancestors' actions, its own."""
    reward: float | None
    """What its steps earned (the final grade); None when the episode broke (``error``)."""
    seconds: float
    """From its first action to its episode's end."""
    fork_s: float
    """``env.afork()`` alone."""
    error: str | None = None


@dataclass(frozen=True)
class SearchResult:
    """A finished search: the prefix, the children level by level, the best, and the costs."""

    config: SearchConfig
    policy: str
    prefix: tuple[str, ...]
    levels: tuple[tuple[Child, ...], ...]
    best: Child | None
    replay_s: float
    """A fresh env: reset, then the prefix's actions replayed (the policy's time not counted)."""
    sandboxes_left: int
    """Sandboxes the backend still had open once every env and pool was closed."""

    @property
    def children(self) -> tuple[Child, ...]:
        return tuple(c for level in self.levels for c in level)


@dataclass
class Line:
    """An env in play and its policy's view of the episode."""

    env: AgentEnv[Any]
    view: EpisodeView
    actions: list[ParsedAction] = field(default_factory=list)
    observations: list[str] = field(default_factory=list)
    history: tuple[str, ...] = ()
    """Tool names of the actions played before this line was forked off."""
    reward: float = 0.0
    done: bool = False


async def turn(line: Line, policy: Policy) -> None:
    """One action: the policy acts on the view, the env steps, the view's transcript grows."""
    line.view.step = line.env.steps
    reply = await policy.act(line.view)
    obs, reward, terminated, truncated, _ = await line.env.astep(reply.parsed)
    line.view.messages.append(dict(reply.message))
    line.view.messages.extend(tool_messages(reply.message, obs))
    line.actions.append(reply.parsed)
    line.observations.append(obs)
    line.reward += reward
    line.done = terminated or truncated


async def fork(line: Line, rng: np.random.Generator | None = None) -> tuple[Line, float]:
    """A line at ``line``'s state, with ``rng`` (default: a copy of ``line``'s), and the seconds ``afork``
    took; the caller closes it."""
    rng = rng if rng is not None else copy.deepcopy(line.view.rng)
    t0 = time.monotonic()
    env = await line.env.afork()
    took = time.monotonic() - t0
    view = EpisodeView(env, line.view.seed, copy.deepcopy(line.view.messages), line.view.tools,
                       step=line.view.step, rng=rng, state=copy.deepcopy(line.view.state))
    return Line(env, view, history=line.history + names(line)), took


def names(line: Line) -> tuple[str, ...]:
    """Tool names of the actions played on ``line``, slips and unparsed actions marked."""
    slips = set(line.view.state.get("slips", ()))
    start = line.env.steps - len(line.actions)
    return tuple((a.tool_name or "?") + ("*" if start + i in slips else "")
                 for i, a in enumerate(line.actions))


async def play_child(line: Line, policy: Policy, label: tuple[str, str], fork_s: float,
                     keep_after: int | None, stack: AsyncExitStack) -> tuple[Child, Line | None]:
    """Play a forked ``line`` (``label``: its own and its parent's) to its end; with ``keep_after``, fork
    it once more after that many actions (its kept state, returned; registered on ``stack`` to be closed)."""
    start, t0 = line.env.steps, time.monotonic()
    kept: Line | None = None
    error = None
    try:
        while not line.done:
            if keep_after is not None and kept is None and len(line.actions) == keep_after:
                kept, _ = await fork(line)
                stack.push_async_callback(kept.env.aclose)
            await turn(line, policy)
    except (InfraError, PolicyError) as e:
        error = f"{type(e).__name__}: {e}"
    finally:
        await line.env.aclose()  # its sandbox goes back now, not at the end of the search
    own = names(line)
    child = Child(*label, start, own, tuple(line.observations), line.history + own,
                  None if error else line.reward, time.monotonic() - t0, fork_s, error)
    return child, kept


async def expand(parent: Line, parent_label: str, policy: Policy, config: SearchConfig, level: int,
                 stack: AsyncExitStack) -> list[tuple[Child, Line | None]]:
    """``config.n`` forks of ``parent`` (one after the other, each timed), then played at once."""
    forks = []
    for k in range(config.n):
        line, fork_s = await fork(parent, np.random.default_rng([config.policy_seed, level, k]))
        stack.push_async_callback(line.env.aclose)
        forks.append((line, fork_s))
    keep_after = config.branch_steps if level < config.depth else None
    async with asyncio.TaskGroup() as tg:
        tasks = [tg.create_task(play_child(line, policy, (f"{level}.{k + 1}", parent_label), fork_s,
                                           keep_after, stack))
                 for k, (line, fork_s) in enumerate(forks)]
    return [t.result() for t in tasks]


def best_of(children: Sequence[tuple[Child, Line | None]]) -> tuple[Child, Line | None] | None:
    """The highest reward (the first on a tie); children that broke do not count."""
    scored = [c for c in children if c[0].reward is not None]
    return max(scored, key=lambda c: c[0].reward or 0.0) if scored else None


def open_env(config: SearchConfig, pools: Pools) -> AgentEnv[Any]:
    """The bare env leasing from ``pools``, made as the farm makes its envs (``make_env``)."""
    return make_env(config.env_id, config.backend, pools, config.env_kwargs)


async def open_root(config: SearchConfig, pools: Pools, stack: AsyncExitStack) -> Line:
    """The env reset for the seed, its first observation in the view."""
    env = open_env(config, pools)
    stack.push_async_callback(env.aclose)
    obs, info = await env.areset(seed=config.seed)
    view = EpisodeView(env, config.seed, [{"role": "user", "content": obs}], list(info["tools"]),
                       rng=np.random.default_rng([config.policy_seed]))
    return Line(env, view)


async def replay(config: SearchConfig, pools: Pools, actions: Sequence[ParsedAction]) -> float:
    """Seconds a fresh env takes to reach the prefix's state: reset, then the prefix's actions again."""
    env = open_env(config, pools)
    try:
        t0 = time.monotonic()
        await env.areset(seed=config.seed)
        for action in actions:
            await env.astep(action)
        return time.monotonic() - t0
    finally:
        await env.aclose()


async def search(config: SearchConfig, prefix_policy: Policy, child_policy: Policy) -> SearchResult:
    """Play the prefix, fork ``n`` children (``depth`` levels) and keep the best; every env closed."""
    backend: Backend = get_backend(config.backend)
    try:
        async with AsyncExitStack() as stack:
            pools = Pools([backend], size=0)  # no warm sandboxes: the replay opens one cold, as a reset would
            stack.push_async_callback(pools.aclose)
            root = await open_root(config, pools, stack)
            for _ in range(config.prefix_steps):
                if not root.done:
                    await turn(root, prefix_policy)
            if root.done:
                raise ConfigError(f"the episode of {config.env_id} ended within the prefix "
                                  f"({config.prefix_steps} steps): nothing is left to fork; use fewer")
            levels, best = await grow(root, child_policy, config, stack)
            replay_s = await replay(config, pools, root.actions)
        left = backend.live
    finally:
        await backend.aclose()
    return SearchResult(config, child_policy.name, names(root), levels, best, replay_s, left)


async def grow(root: Line, policy: Policy, config: SearchConfig,
               stack: AsyncExitStack) -> tuple[tuple[tuple[Child, ...], ...], Child | None]:
    """The levels of children below ``root`` and the best child of all; each next level forks from the kept
    state of the best child that kept one (a child that ended within ``branch_steps`` kept none)."""
    levels: list[tuple[Child, ...]] = []
    parent: tuple[str, Line] | None = ("prefix", root)
    for level in range(1, config.depth + 1):
        if parent is None:
            break
        played = await expand(parent[1], parent[0], policy, config, level, stack)
        levels.append(tuple(c for c, _ in played))
        top = best_of([(c, kept) for c, kept in played if kept is not None])
        parent = (top[0].label, top[1]) if top is not None and top[1] is not None else None
    best = best_of([(c, None) for level in levels for c in level])
    return tuple(levels), best[0] if best is not None else None


def render(result: SearchResult, console: Console) -> None:
    """The children's table, the costs, the choice."""
    c = result.config
    table = Table(title=f"best of {c.n} from step {c.prefix_steps} of {c.env_id} (seed {c.seed}), "
                        f"children: {result.policy}")
    for col in ("child", "forked from", "actions", "reward", "seconds", "fork ms"):
        table.add_column(col, justify="left" if col == "actions" else "right")
    for child in result.children:
        chosen = child is result.best
        reward = "error" if child.reward is None else f"{child.reward:g}"
        table.add_row(child.label + (" (best)" if chosen else ""),
                      f"{child.parent} @ step {child.start_step}", ", ".join(child.actions) or "-", reward,
                      f"{child.seconds:.2f}", f"{child.fork_s * 1000:.1f}",
                      style="bold green" if chosen else None)
    console.print(table)
    console.print(f"prefix, played once: {', '.join(result.prefix)}")
    for child in result.children:
        if child.error:
            console.print(f"child {child.label}: {child.error}")
    if len(result.levels) < c.depth:
        console.print(f"no child of level {len(result.levels)} was still playing after {c.branch_steps} "
                      "action(s): nothing to fork the next level from")
    summary(result, console)


def summary(result: SearchResult, console: Console) -> None:
    """Fork against replay, one attempt against the best of N, the choice, the leak check."""
    kids = result.children
    fork_ms, replay_ms = 1000 * sum(k.fork_s for k in kids) / len(kids), 1000 * result.replay_s
    console.print(f"fork: {fork_ms:.1f} ms a child (mean of {len(kids)}); a fresh env reset and the prefix "
                  f"replayed: {replay_ms:.0f} ms ({replay_ms / max(fork_ms, 1e-3):.0f}x)")
    for number, level in enumerate(result.levels, 1):
        rewards = [k.reward for k in level if k.reward is not None]
        if rewards:
            console.print(f"level {number} (forked from {level[0].parent}): one attempt "
                          f"scores {sum(rewards) / len(rewards):.2f} on average; the best of {len(rewards)}: "
                          f"{max(rewards):g}")
    if result.best is not None:
        console.print(f"chosen: child {result.best.label}, reward {result.best.reward:g}, the episode: "
                      f"{', '.join(result.best.episode)}")
    if result.policy.startswith("noisy-oracle"):
        console.print("The children play a noisy oracle: a seeded share of their actions are random tool "
                      "calls (marked *) instead of the reference solution, so some fail; the plain oracle "
                      "would solve every child, and a search over it would show nothing.")
    console.print(f"sandboxes open after closing every env: {result.sandboxes_left}")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0] if __doc__ else None)
    p.add_argument("--env", default=SearchConfig.env_id, help="a registered env that forks")
    p.add_argument("--backend", default=DEFAULT_BACKEND, help="sandbox backend (bwrap or docker)")
    p.add_argument("--env-kwargs", default="{}", help="the env's arguments as JSON")
    p.add_argument("--seed", type=int, default=0, help="the task's reset seed")
    p.add_argument("--prefix-steps", type=int, default=1, help="actions played before the fork")
    p.add_argument("--n", type=int, default=4, help="children per fork")
    p.add_argument("--depth", type=int, choices=(1, 2), default=1, help="2: fork again from the best child")
    p.add_argument("--branch-steps", type=int, default=1, help="depth 2: a child's actions before its fork")
    p.add_argument("--slip", type=float, default=0.5, help="noisy oracle: chance of a random action a step")
    p.add_argument("--policy-seed", type=int, default=0, help="seeds the children's sampling")
    p.add_argument("--base-url", help="an OpenAI-compatible server (e.g. http://127.0.0.1:8000/v1)")
    p.add_argument("--model", help="the served model (default: the first the server lists)")
    p.add_argument("--temperature", type=float, default=1.0, help="the model's sampling temperature")
    return p.parse_args(argv)


async def run(args: argparse.Namespace) -> SearchResult:
    config = SearchConfig(env_id=args.env, backend=args.backend, env_kwargs=json.loads(args.env_kwargs),
                          seed=args.seed, prefix_steps=args.prefix_steps, n=args.n, depth=args.depth,
                          branch_steps=args.branch_steps, policy_seed=args.policy_seed)
    if args.base_url is None:
        return await search(config, OraclePolicy(), NoisyOracle(args.slip))
    async with OpenAIPolicy(args.base_url, args.model, temperature=args.temperature) as model:
        return await search(config, model, model)


def main(argv: Sequence[str] | None = None, console: Console | None = None) -> SearchResult:
    """Parse the arguments, search, print the table; the result for callers (tests)."""
    result = asyncio.run(run(parse_args(argv)))
    render(result, console or Console())
    return result


if __name__ == "__main__":
    try:
        main()
    except ConfigError as e:
        raise SystemExit(f"best_of_n: {e}") from e
