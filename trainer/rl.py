"""The RL phase: the farm samples from the policy server, the learner updates and publishes, concurrently.

    phase = RLPhase(config, out, learner, policy, server_url, metrics, state)
    await phase.run()

One asyncio loop holds the farm (``openai:`` policy over HTTP to the server, NDJSON over HTTP to the
learner's :class:`Inbox`), the inbox and this loop; the learner's compute runs in a worker thread, so the
farm keeps sampling with the current weights while an update is computed (asynchronous RL, at most
``max_staleness`` versions behind). Each update:

1. takes ``prompts_per_update`` complete GRPO groups from the inbox (with ``group_window`` > 1, more until
   that many are informative, DAPO-style; groups whose rewards are all equal carry no gradient);
2. turns them into samples (behaviour logprobs, group advantages; broken episodes, stale turns dropped);
3. runs ``ppo_epochs`` PPO-clipped optimizer steps on them (worker thread), bumps the weight version and
   POSTs the weights to the server (version, bytes, seconds go to metrics.jsonl);
4. checkpoints (weights, optimizer, version, the inbox cursor) every ``checkpoint_every`` updates.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import aiohttp

from envfarm.errors import TrainerError
from envfarm.rollout.farm import Farm
from envfarm.rollout.openai_policy import OpenAIPolicy
from envfarm.rollout.sinks import HTTPSink
from envfarm.rollout.trajectory import Trajectory

from .ingest import Inbox
from .learner import Learner, UpdateStats
from .logprob_check import LogprobMismatch, logprob_mismatch
from .metrics import Metrics
from .samples import TokenSample, rl_samples
from .train_config import TrainConfig
from .weights import publish

log = logging.getLogger(__name__)

RL_RUN = "runs/rl"
RL_EPISODES = 200_000
"""Episodes of the asynchronous RL farm run: more than any run uses (it is stopped when RL ends)."""
INGEST_STORE = "ingest.jsonl"
CHECK_SAMPLES = 16
"""Samples per update whose behaviour logprobs the learner recomputes (``check_logprobs``): a forward of
all of them would cost a third of the update; 16 turns give the distribution (~1,000+ tokens)."""


@dataclass
class RLState:
    """The RL phase's progress; saved in every checkpoint (JSON-ready)."""

    version: int = 0
    updates: int = 0
    seconds: float = 0.0
    """RL wall time so far (all sessions), for ``minutes``."""
    cursor: dict[str, Any] | None = None
    dropped: dict[str, int] = field(default_factory=dict)
    sampled_tokens: int = 0
    """Completion tokens the farm sampled in the episodes the learner took (the sft_more arm's budget)."""


Checkpointer = Callable[[RLState], Any]
StepFn = Callable[[list[TokenSample], Literal["rl", "sft"]], UpdateStats]


class RLPhase:
    """See the module docstring."""

    def __init__(self, config: TrainConfig, out: Path, learner: Learner, server_url: str, metrics: Metrics,
                 state: RLState, checkpoint: Checkpointer, max_context: int,
                 on_update: Callable[[RLState, float | None], None] | None = None,
                 step: StepFn | None = None, check_logprobs: bool = False) -> None:
        self.config = config
        self.out = out
        self.learner = learner
        self.server_url = server_url
        self.metrics = metrics
        self.state = state
        self.checkpoint = checkpoint
        self.max_context = max_context
        self.on_update = on_update
        self.step: StepFn = step or learner.update
        self.check_logprobs = check_logprobs
        """Compare on-policy behaviour logprobs with the learner's recompute before each update (an engine
        other than the built-in one; logprob_check.py); the distribution goes to metrics.jsonl."""
        self.dropped: Counter[str] = Counter(state.dropped)
        self.inbox = Inbox(out / INGEST_STORE, config.group_size, weight_version=state.version)
        self._t0, self._base_s = time.monotonic(), state.seconds

    def _spent(self) -> float:
        return self._base_s + time.monotonic() - self._t0

    def _done(self) -> bool:
        c, s = self.config, self.state
        return s.updates >= c.rl_updates or (c.minutes is not None and self._spent() >= c.minutes * 60)

    async def run(self) -> RLState:
        self._t0, self._base_s = time.monotonic(), self.state.seconds
        if self._done():
            return self.state
        url = await self.inbox.start(cursor=self.state.cursor)
        if self.config.sync:
            try:
                await self._run_sync(url)
            finally:
                await self.inbox.aclose()
            return self.state
        farm = self._farm(url)
        farm_task = asyncio.create_task(_consume(farm), name="rl farm")
        try:
            async with aiohttp.ClientSession() as session:
                while not self._done():
                    groups = await self._collect(farm_task)
                    await self._update(groups, session)
        finally:
            farm.stop(cancel=True)
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.wait_for(asyncio.shield(farm_task), timeout=120)
            await self.inbox.aclose()
        if farm_task.done() and not farm_task.cancelled() and farm_task.exception() is not None:
            log.warning("RL farm ended with %s", farm_task.exception())
        return self.state

    async def _run_sync(self, learner_url: str) -> None:
        """One farm run per update (its groups only), then the update while nothing samples."""
        c = self.config
        async with aiohttp.ClientSession() as session:
            while not self._done():
                k = self.state.updates
                farm = self._farm(learner_url, episodes=c.prompts_per_update * c.group_size,
                                  seed=c.rl_seed + k * c.prompts_per_update, run=f"{RL_RUN}-{k:04d}",
                                  max_staleness=None)
                await _consume(farm)
                await self._update(self.inbox.take_ready(), session)

    def _farm(self, learner_url: str, episodes: int | None = None, seed: int | None = None,
              run: str = RL_RUN, max_staleness: int | str | None = "config") -> Farm:
        c = self.config
        episodes = episodes or RL_EPISODES  # fixed: --rl-updates/--minutes may change on --resume
        staleness = c.max_staleness if max_staleness == "config" else max_staleness
        config = c.farm_config(episodes=episodes, seed=c.rl_seed if seed is None else seed,
                               attempts=c.group_size, max_staleness=staleness)  # type: ignore[arg-type]
        policy = OpenAIPolicy(self.server_url, temperature=c.temperature, max_tokens=c.max_tokens,
                              max_connections=c.concurrency, timeout_s=600.0)
        run_dir = self.out / run
        return Farm(config, policy, run_dir=run_dir, resume=(run_dir / "run.json").exists(),
                    sinks=[HTTPSink(learner_url, max_backlog=4 * c.prompts_per_update * c.group_size)])

    async def _collect(self, farm_task: asyncio.Task[None]) -> list[list[Trajectory]]:
        """Complete groups until ``prompts_per_update`` informative ones, or ``group_window`` times as many
        groups in all (a policy that always fails, or always succeeds, gives no signal), or the farm ends."""
        taken: list[list[Trajectory]] = []
        informative = 0
        limit = max(1, round(self.config.group_window * self.config.prompts_per_update))
        while informative < self.config.prompts_per_update and len(taken) < limit:
            take = asyncio.ensure_future(self.inbox.take(1))
            await asyncio.wait([take, farm_task], return_when=asyncio.FIRST_COMPLETED)
            if not take.done():
                take.cancel()
                taken.extend(self.inbox.take_ready())
                if taken:
                    break
                error = farm_task.exception() if not farm_task.cancelled() else None
                raise TrainerError(f"the RL farm stopped before the learner had its groups: "
                                   f"{error or 'done'}; see {self.out / RL_RUN}") from error
            group = take.result()[0]
            taken.append(group)
            rewards = {t.reward for t in group if t.status == "completed"}
            informative += len(rewards) > 1
        return taken

    async def _update(self, groups: list[list[Trajectory]], session: aiohttp.ClientSession) -> None:
        c, s = self.config, self.state
        samples, counts = rl_samples(groups, s.version, c.max_staleness, self.max_context)
        self.dropped.update({k: v for k, v in counts.items() if k not in ("samples", "episodes", "turns")})
        useful = [x for x in samples if x.advantage != 0.0]
        completed = [t.reward for g in groups for t in g if t.status == "completed"]
        reward_mean = sum(completed) / len(completed) if completed else None
        stats, update_s = None, 0.0
        mismatch = await self._check_logprobs(samples) if self.check_logprobs else None
        for _ in range(c.ppo_epochs if useful else 0):  # the last epoch's statistics are logged
            stats = await asyncio.to_thread(self.step, useful, "rl")
            update_s += stats.seconds
        if stats is None:
            self.dropped["skipped_updates"] += 1
            log.warning("update %d: no sample with a non-zero advantage in %d groups; no optimizer step",
                        s.updates + 1, len(groups))
        s.version += 1
        s.updates += 1
        s.sampled_tokens += sum(len(turn.token_ids or ()) for g in groups for t in g for turn in t.turns)
        result = await publish(self.server_url, self.learner.module, s.version, session=session)
        self.inbox.weight_version = s.version
        lag = [s.version - 1 - x.version for x in useful if x.version is not None]
        self.metrics.update(step=s.updates, phase="rl", loss=stats.loss if stats else 0.0,
                            reward_mean=reward_mean, kl=stats.kl if stats else None,
                            clip_frac=stats.clip_frac if stats else None, lr=c.lr,
                            samples=stats.samples if stats else 0, tokens=stats.tokens if stats else 0,
                            version=s.version, grad_norm=stats.grad_norm if stats else None,
                            ratio_mean=stats.ratio_mean if stats else None, groups=len(groups),
                            episodes=len(completed), update_s=round(update_s, 3),
                            staleness_mean=round(sum(lag) / len(lag), 3) if lag else None,
                            skipped=stats is None,
                            **({"logprob_mismatch": mismatch} if mismatch is not None else {}))
        self.metrics.publish(version=s.version, bytes=result.bytes, seconds=round(result.seconds, 4))
        # Checkpoint after both metrics lines: a crash between them and it resumes from the checkpoint before,
        # whose resume drops this update's lines (Metrics ``keep``) and logs the redone update once; a crash
        # after it keeps both. Before the lines, a crash could leave the update checkpointed but half logged.
        if s.updates % c.checkpoint_every == 0 or self._done():
            await self._checkpoint()
        if self.on_update is not None:
            self.on_update(s, reward_mean)

    async def _check_logprobs(self, samples: list[TokenSample]) -> dict[str, Any] | None:
        """The engine's logprobs of up to ``CHECK_SAMPLES`` samples drawn on the learner's current weights
        (spread over the update's groups) vs its recompute, and the seconds the forward took."""
        current = [x for x in samples if x.version == self.state.version]
        picked = current[:: max(1, len(current) // CHECK_SAMPLES)][:CHECK_SAMPLES]
        t0 = time.perf_counter()
        found: LogprobMismatch | None = await asyncio.to_thread(
            logprob_mismatch, self.learner.module, picked, self.learner.pad_id, self.learner.device,
            self.config.micro_batch_tokens)
        return None if found is None else {**found.to_json(), "seconds": round(time.perf_counter() - t0, 3)}

    async def _checkpoint(self) -> None:
        s = self.state
        s.seconds = round(self._spent(), 3)
        s.cursor = self.inbox.cursor()
        s.dropped = dict(self.dropped)
        await asyncio.to_thread(self.checkpoint, s)


async def _consume(farm: Farm) -> None:
    async for _ in farm.run():
        pass


__all__ = ["INGEST_STORE", "RL_RUN", "RLPhase", "RLState"]
