"""``envfarm train`` in one call: SFT warm start, then three arms from that one checkpoint, each evaluated
greedy and sampled on the same held-out seeds, in one asyncio process.

    result = await train(TrainConfig(env_id="envfarm/ToolCalc-v0", teacher="noisy"), Path("out"))
    result = await train(None, Path("out"), resume=True)      # after a crash: the stored config, last ckpt

    DIR/config.json  metrics.jsonl  tensorboard/  checkpoints/{sft-*,sft,rl-*,sft_more-*,sft_more,latest}
        ingest.jsonl  runs/{demos,val-demos,more-demos,rl,eval-<arm>-<mode>}/ (farm run folders)
        evals/<arm>-<mode>.json  summary.json  reward_curve.png  timings.json

1. demos: teacher episodes (``runs/demos``; teacher.py: oracle or noisy) and a few on validation seeds for
   the held-out check (``runs/val-demos``); SFT until the check passes or ``sft_steps`` (with ``sft_settle``,
   its lr drops once the check shows the loss has left its plateau); the result is ``checkpoints/sft``, the
   ``sft`` arm.
2. The rollout engine (engines.py: a :class:`PolicyServer` with its own copy of the policy, or with
   ``engine="vllm"`` a vLLM server) starts on loopback; the ``sft`` arm is evaluated on ``eval_episodes``
   seeds of the evaluation range, greedy (temperature 0) and sampled (``temperature``).
3. RL (rl.py): farm -> HTTP -> server, farm -> NDJSON -> learner inbox, learner -> POST /weights -> server;
   the result, the ``rl`` arm, is evaluated the same way.
4. ``sft_more``: SFT continued from its checkpoint (its AdamW moments and learning-rate schedule, as if it
   had not stopped) on fresh teacher demos (``runs/more-demos``) until it has spent RL's wall time and
   trained on as many completion tokens as RL sampled; evaluated the same way.
5. ``summary.json`` (summary.py): every arm and mode, RL minus each baseline by paired bootstrap, the seed
   ranges, the teacher, the compute of RL and sft_more, the wall time per phase; ``reward_curve.png``.

Every phase resumes: farm runs from their run folders, SFT, RL and sft_more from the newest checkpoint (the
inbox re-queues what the last checkpoint had not trained on; the farm re-sends what the inbox had not
stored), evaluations from ``evals/``.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from collections.abc import Awaitable, Mapping, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

import torch

from envfarm.errors import ConfigError

from .checkpoint import latest_checkpoint, load_checkpoint, prune, save_checkpoint
from .distributed import DistContext
from .engines import RolloutEngine, make_engine
from .evaluation import EvalResult, evaluate_served
from .learner import Learner, UpdateStats, learner_config
from .metrics import Metrics, Phase, plot_rewards
from .policy import Policy, load_policy, save_policy
from .ranks import Leader, start_followers
from .rl import RLPhase, RLState
from .samples import TokenSample, sft_samples
from .sft import collect_demos, completed_demos, greedy_match, sft_batch
from .state import LoopState
from .summary import MODES, Compute, TrainResult
from .teacher import make_teacher
from .train_config import CONFIG_FILE, TrainConfig

log = logging.getLogger(__name__)
T = TypeVar("T")

SFT_CHECKPOINT_EVERY = 100


@dataclass
class TrainProgress:
    """What the loop is doing now; the CLI draws it (mutable, read from the event loop)."""

    phase: str = "setup"
    step: int = 0
    total: int = 0
    version: int = 0
    reward: float | None = None
    loss: float | None = None
    evals: dict[str, float] | None = None
    """Mean reward of each evaluation so far, keyed "<arm> <mode>"."""


class Training:
    """One training folder; see the module docstring."""

    def __init__(self, config: TrainConfig, out: Path, progress: TrainProgress | None = None,
                 init_method: str | None = None) -> None:
        self.config = config
        self.out = Path(out)
        self.progress = progress or TrainProgress()
        self.ckpt_dir = self.out / "checkpoints"
        self.timings: dict[str, float] = {}
        self.metrics: Metrics | None = None
        self.policy: Policy | None = None
        self.learner: Learner | None = None
        self.loop_state = LoopState()
        self.rl_state = RLState()
        self.init_method = init_method
        self.leader: Leader | None = None
        self.evals: dict[tuple[str, str], EvalResult] = {}

    # ------------------------------------------------------------------------------------------ entry

    async def run(self, resume: bool) -> TrainResult:
        await asyncio.to_thread(self._setup, resume)
        assert self.policy is not None and self.metrics is not None and self.learner is not None
        server: RolloutEngine | None = None
        try:
            if self.loop_state.phase == "sft":
                await self._sft()
            c = self.config
            server = make_engine(c.engine, self.policy, version=self.rl_state.version, max_batch=c.max_batch,
                                 max_tokens=c.max_tokens, seed=c.seed, workdir=self.out / "engine",
                                 threads=c.threads)
            await server.start("127.0.0.1", 0)
            await self._evaluate_arm("sft", server)
            if self.loop_state.phase == "rl":
                await server.swap(self.learner.module, self.rl_state.version)
                await self._timed("rl", self._rl(server))
            await self._evaluate_arm("rl", server)
            if self.loop_state.phase == "rl":
                self.loop_state = replace(self.loop_state, phase="sft_more" if c.sft_more else "eval")
            if self.loop_state.phase == "sft_more":
                await self._sft_more()
            if c.sft_more:
                await self._evaluate_arm("sft_more", server)
            return await asyncio.to_thread(self._finish)
        finally:
            if server is not None:
                await server.stop()
            self.metrics.close()
            if self.leader is not None:
                await asyncio.to_thread(self._close_ranks)

    def _close_ranks(self) -> None:
        assert self.leader is not None
        try:
            self.leader.stop()
        finally:
            self.leader.ctx.close()

    def _setup(self, resume: bool) -> None:
        c = self.config
        if c.threads:
            torch.set_num_threads(c.threads)
        self.out.mkdir(parents=True, exist_ok=True)
        if not resume and (self.out / CONFIG_FILE).exists():
            raise ConfigError(f"{self.out} already holds a training run; continue it with --resume "
                              f"{self.out} or choose another --out")
        c.save(self.out)
        self.policy = load_policy(c.preset if c.checkpoint is None else None, path=c.checkpoint,
                                  device=c.device, seed=c.seed)
        ctx = DistContext.single(self.policy.device)
        if c.nproc > 1 and self.init_method is not None:
            ctx = DistContext.init(0, c.nproc, self.init_method, device=self.policy.device)
        self.learner = Learner(self.policy.module, learner_config(c), self.policy.tokenizer.pad_id,
                               self.policy.device, dist=ctx)
        self.leader = Leader(self.learner, ctx)
        timings = self.out / "timings.json"
        self.timings = json.loads(timings.read_text()) if timings.exists() else {}
        if c.sft_steps == 0:
            self.loop_state = replace(self.loop_state, phase="rl")
        found = latest_checkpoint(self.ckpt_dir) if resume else None
        if found is not None:
            self.loop_state, self.rl_state = LoopState.from_json(load_checkpoint(found, self.learner))
            if found.name == "sft":  # SFT's moments are sft_more's; RL starts afresh
                self.learner.reset_optimizer()
            self.policy.version = self.rl_state.version
            log.info("resumed from %s (phase %s, version %d)", found, self.loop_state.phase,
                     self.rl_state.version)
        self.leader.sync()  # every rank starts from rank 0's weights and optimizer state
        if found is not None:
            self._restore_reference(found.name)
        self.metrics = Metrics(self.out, keep=self._logged_before if resume else None)

    def _restore_reference(self, resumed: str) -> None:
        """The KL term's reference on resume: the SFT policy (the weights resumed from, when that is SFT's
        checkpoint; else SFT's checkpoint); without a warm start, the starting weights built in _setup."""
        assert self.leader is not None
        sft = self.ckpt_dir / "sft" / "model.safetensors"
        if self.config.kl_coef <= 0 or (resumed != "sft" and not sft.exists()):
            return
        from safetensors.torch import load_file

        self.leader.reset_reference(None if resumed == "sft" else load_file(sft))

    def _logged_before(self, record: dict[str, Any]) -> bool:
        """Whether a metrics record of an earlier session belongs to the state resumed from."""
        kind, phase = record.get("kind"), record.get("phase")
        if kind == "update" and phase == "sft":
            return int(record.get("step", 0)) <= self.loop_state.sft_step
        if kind == "update" and phase == "sft_more":
            return int(record.get("step", 0)) <= self.loop_state.more_step
        if (kind == "update" and phase == "rl") or kind == "publish":
            return int(record.get("version", 0)) <= self.rl_state.version
        if kind == "eval":
            return (self.out / "evals" / f"{phase}.json").exists()
        return True

    async def _timed(self, name: str, work: Awaitable[T]) -> T:
        t0 = time.monotonic()
        try:
            return await work
        finally:
            self.timings[name] = round(self.timings.get(name, 0.0) + time.monotonic() - t0, 2)
            await asyncio.to_thread(_write_json, self.out / "timings.json", self.timings)

    # -------------------------------------------------------------------------------------------- SFT

    async def _demos(self, run: str, episodes: int, seed: int) -> list[TokenSample]:
        """The teacher's completed episodes of a demonstration run, rendered for the policy."""
        c = self.config
        assert self.policy is not None
        if episodes == 0:
            return []
        teacher = make_teacher(c.teacher, c.teacher_error, c.seed)
        demos = await collect_demos(c.farm_config(episodes=episodes, seed=seed), self.out / "runs" / run,
                                    teacher)
        return await asyncio.to_thread(sft_samples, completed_demos(demos), self.policy)

    async def _sft_step(self, samples: Sequence[TokenSample], step: int, phase: Phase) -> UpdateStats:
        """SFT step ``step`` (0-based) of ``phase`` on its seeded batch, linear warm-up of the lr, which drops
        by ``sft_settle_lr`` once SFT has settled (``TrainConfig.sft_settle``)."""
        c = self.config
        assert self.leader is not None
        offset = 0 if phase == "sft" else self.loop_state.sft_step  # sft_more goes on where SFT stopped
        lr = c.sft_lr_at(offset + step, settled=bool(self.loop_state.sft_settled))
        seed = c.seed if phase == "sft" else c.seed + 1
        batch = sft_batch(samples, c.sft_batch, seed, step)
        return await asyncio.to_thread(self.leader.update, batch, "sft", lr)

    async def _sft(self) -> None:
        c, learner, metrics = self.config, self.learner, self.metrics
        assert learner is not None and metrics is not None and self.leader is not None
        self.progress.phase = "demos"
        samples = await self._timed("demos", self._demos("demos", c.sft_demos, c.demo_seed))
        checks = await self._timed("demos", self._demos("val-demos", c.sft_held_out if c.sft_target else 0,
                                                        c.val_seed))
        target = c.sft_target * c.greedy_ceiling
        self.progress.phase, self.progress.total = "sft", c.sft_steps
        t0, base = time.monotonic(), self.loop_state.sft_seconds

        def spent() -> float:  # SFT training time over all sessions
            return round(base + time.monotonic() - t0, 3)

        for step in range(self.loop_state.sft_step, c.sft_steps):
            stats = await self._sft_step(samples, step, "sft")
            match = None
            if target > 0 and checks and (step + 1) % c.sft_check_every == 0:
                match = await asyncio.to_thread(greedy_match, learner.module, checks, learner.pad_id,
                                                learner.device, c.micro_batch_tokens)
            metrics.update(step=step + 1, phase="sft", loss=stats.loss, reward_mean=None, kl=None,
                           clip_frac=None, lr=stats.lr, samples=stats.samples, tokens=stats.tokens, version=0,
                           grad_norm=stats.grad_norm, held_out_match=match)
            self.progress.step, self.progress.loss = step + 1, stats.loss
            self.loop_state = replace(self.loop_state, sft_step=step + 1)
            if match is not None and not self.loop_state.sft_settled and c.settles(match):
                log.info("SFT settles at step %d: held-out greedy match %.3f; lr x%g from here", step + 1,
                         match, c.sft_settle_lr)
                self.loop_state = replace(self.loop_state, sft_settled=step + 1)
            if match is not None and match >= target:
                log.info("SFT stops at step %d: held-out greedy match %.3f >= %.3f", step + 1, match, target)
                self.loop_state = replace(self.loop_state, sft_match=match)
                break
            if (step + 1) % SFT_CHECKPOINT_EVERY == 0 and step + 1 < c.sft_steps:
                self.loop_state = replace(self.loop_state, sft_seconds=spent())
                await asyncio.to_thread(self._save, f"sft-{step + 1:06d}")
        self.loop_state = replace(self.loop_state, phase="rl", sft_seconds=spent())
        await self._set_time("sft", self.loop_state.sft_seconds)
        await asyncio.to_thread(self._save, "sft")  # with SFT's AdamW moments: sft_more continues them
        await asyncio.to_thread(prune, self.ckpt_dir, 0, "sft-")
        self._begin_rl()

    def _begin_rl(self) -> None:
        """RL starts with fresh AdamW moments, and its KL term (if any) measures the distance to the SFT
        policy (the current weights)."""
        assert self.leader is not None
        self.leader.reset_optimizer()
        self.leader.reset_reference()

    async def _sft_more(self) -> None:
        """The sft_more arm: the SFT checkpoint trained on fresh teacher demos with RL's compute (wall time
        and completion tokens, whichever binds last)."""
        c, learner, metrics = self.config, self.learner, self.metrics
        assert learner is not None and metrics is not None and self.leader is not None
        if self.loop_state.more_step == 0:  # the learner holds RL's weights: back to the SFT checkpoint
            await asyncio.to_thread(load_checkpoint, self.ckpt_dir / "sft", learner, False)  # and its moments
            self.leader.sync()
        self.progress.phase = "demos (sft_more)"
        more = c.seed_ranges().more_demos.start
        samples = await self._timed("more_demos", self._demos("more-demos", c.sft_more_demos, more))
        budget_s, budget_tokens = self.rl_state.seconds, self.rl_state.sampled_tokens
        self.progress.phase, self.progress.total = "sft_more", 0
        t0, state = time.monotonic(), self.loop_state
        while state.more_seconds < budget_s or state.more_tokens < budget_tokens:
            stats = await self._sft_step(samples, state.more_step, "sft_more")
            state = replace(state, more_step=state.more_step + 1,
                            more_tokens=state.more_tokens + stats.tokens,
                            more_seconds=round(self.loop_state.more_seconds + time.monotonic() - t0, 3))
            metrics.update(step=state.more_step, phase="sft_more", loss=stats.loss, reward_mean=None, kl=None,
                           clip_frac=None, lr=stats.lr, samples=stats.samples, tokens=stats.tokens, version=0,
                           grad_norm=stats.grad_norm)
            self.progress.step, self.progress.loss = state.more_step, stats.loss
            if state.more_step % SFT_CHECKPOINT_EVERY == 0:
                self.loop_state = state
                await asyncio.to_thread(self._save, f"sft_more-{state.more_step:06d}")
                t0, state = time.monotonic(), self.loop_state
        await self._set_time("sft_more", state.more_seconds)  # training time only, over all sessions
        self.loop_state = replace(state, phase="eval")
        await asyncio.to_thread(self._save, "sft_more")
        await asyncio.to_thread(prune, self.ckpt_dir, 0, "sft_more-")

    async def _set_time(self, name: str, seconds: float) -> None:
        self.timings[name] = round(seconds, 2)
        await asyncio.to_thread(_write_json, self.out / "timings.json", dict(self.timings))

    def _save(self, name: str, rl: RLState | None = None) -> None:
        assert self.learner is not None and self.policy is not None
        state = self.loop_state.to_json(rl or self.rl_state)
        self.policy.version = (rl or self.rl_state).version
        policy = self.policy
        save_checkpoint(self.ckpt_dir / name, self.learner, state,
                        extra=lambda folder: _save_policy(policy, folder / "policy"))

    # --------------------------------------------------------------------------------------------- RL

    async def _rl(self, server: RolloutEngine) -> None:
        c = self.config
        assert self.learner is not None and self.policy is not None and self.metrics is not None
        self.progress.phase, self.progress.total = "rl", c.rl_updates
        self.progress.step, self.progress.version = self.rl_state.updates, self.rl_state.version

        def checkpoint(state: RLState) -> None:
            self._save(f"rl-{state.updates:06d}", state)
            prune(self.ckpt_dir, 2, "rl-")

        def on_update(state: RLState, reward: float | None) -> None:
            self.progress.step, self.progress.version, self.progress.reward = (state.updates, state.version,
                                                                               reward)

        assert self.leader is not None
        phase = RLPhase(c, self.out, self.learner, server.url, self.metrics, self.rl_state, checkpoint,
                        self.policy.max_context, on_update, step=self.leader.update,
                        check_logprobs=getattr(server, "checks_logprobs", False))
        self.rl_state = await phase.run()

    # ------------------------------------------------------------------------------------- evaluation

    async def _evaluate_arm(self, arm: str, server: RolloutEngine) -> None:
        """Evaluate ``arm`` in every mode (each once: a finished evaluation is read back from evals/)."""
        for mode, temperature in MODES.items():
            path = self.out / "evals" / f"{arm}-{mode}.json"
            if path.exists():
                data = json.loads(await asyncio.to_thread(path.read_text))
                data["per_seed"] = {int(k): v for k, v in data["per_seed"].items()}
                self.evals[arm, mode] = EvalResult(**data)
                continue
            self.evals[arm, mode] = await self._timed(f"eval_{arm}", self._evaluate(arm, mode, temperature,
                                                                                      server, path))

    async def _evaluate(self, arm: str, mode: str, temperature: float | None, server: RolloutEngine,
                        path: Path) -> EvalResult:
        assert self.metrics is not None and self.learner is not None
        c = self.config
        self.progress.phase = f"eval {arm} {mode}"
        version = self.rl_state.version if arm == "rl" else arm
        if server.version != version:
            await server.swap(await asyncio.to_thread(self._arm_weights, arm), version)
        result = await evaluate_served(server.url, c.farm_config(episodes=c.eval_episodes, seed=c.eval_seed),
                                       self.out / "runs" / f"eval-{arm}-{mode}",
                                       temperature=c.temperature if temperature is None else temperature,
                                       max_tokens=c.max_tokens)
        await asyncio.to_thread(_write_json, path, asdict(result))
        self.metrics.eval(arm=arm, mode=mode, mean_reward=result.mean_reward, episodes=result.episodes,
                          infra_errors=result.infra_errors, wall_s=result.wall_s)
        self.progress.evals = {**(self.progress.evals or {}), f"{arm} {mode}": result.mean_reward}
        return result

    def _arm_weights(self, arm: str) -> Mapping[str, torch.Tensor] | torch.nn.Module:
        """The weights of ``arm``: the learner's while it holds them, else the arm's checkpoint."""
        assert self.learner is not None
        phase = self.loop_state.phase
        if (arm == "rl" and phase == "rl") or (arm == "sft_more" and phase == "eval") or \
                (arm == "sft" and phase == "rl" and self.rl_state.updates == 0):
            return self.learner.module
        from safetensors.torch import load_file

        rl = sorted(p.name for p in self.ckpt_dir.glob("rl-0*"))
        name = arm if arm != "rl" else (rl[-1] if rl else "sft")
        return load_file(self.ckpt_dir / name / "model.safetensors")

    def _finish(self) -> TrainResult:
        c, r, s = self.config, self.config.seed_ranges(), self.rl_state
        seeds = {k: (v["start"], v["stop"]) for k, v in asdict(r).items()}
        seeds["eval"] = (c.eval_seed, c.eval_seed + c.eval_episodes)
        ls = self.loop_state
        result = TrainResult.build(
            self.evals, env_id=c.env_id, teacher={"name": c.teacher, "error": c.teacher_error
                                                  if c.teacher == "noisy" else 0.0},
            eval_split=c.eval_split, eval_episodes=c.eval_episodes, eval_temperature=c.temperature,
            seeds=seeds, compute=Compute(s.seconds, s.sampled_tokens, s.updates, ls.more_seconds,
                                         ls.more_tokens, ls.more_step),
            phase_s=dict(self.timings), wall_s=round(sum(self.timings.values()), 1), sft_steps=ls.sft_step,
            sft_held_out_match=ls.sft_match, sft_settled=ls.sft_settled, final_version=s.version,
            dropped=dict(s.dropped),
            load_avg_end=tuple(round(x, 2) for x in os.getloadavg()),
            device=str(self.policy.device if self.policy else "cpu"), torch_threads=torch.get_num_threads(),
            config=asdict(c))
        _write_json(self.out / "summary.json", result.to_json())
        plot_rewards(self.out / "metrics.jsonl", self.out / "reward_curve.png",
                     title=f"{c.env_id} {c.preset}: RL reward (T={c.temperature:g})")
        self.progress.phase = "done"
        return result


async def train(config: TrainConfig | None, out: Path, *, resume: bool = False,
                progress: TrainProgress | None = None) -> TrainResult:
    """Run (or with ``resume``, continue) a training folder; returns the result (also DIR/summary.json).
    On resume, ``config`` None means the stored one."""
    if resume:
        stored = await asyncio.to_thread(TrainConfig.load, Path(out))
        config = config or stored
    elif config is None:
        raise ConfigError("train() needs a TrainConfig unless it resumes")
    if config.nproc == 1:
        return await Training(config, Path(out), progress).run(resume)
    await asyncio.to_thread(Path(out).mkdir, parents=True, exist_ok=True)
    init, procs = await asyncio.to_thread(start_followers, config.nproc, Path(out), asdict(config),
                                          config.threads)
    try:
        return await Training(config, Path(out), progress, init_method=init).run(resume)
    finally:
        await asyncio.to_thread(_join, procs, Path(init.removeprefix("file://")))


def _join(procs: list[Any], rendezvous: Path) -> None:
    for p in procs:
        p.join(timeout=60)
        if p.is_alive():
            p.terminate()
            p.join(timeout=10)
    rendezvous.unlink(missing_ok=True)


def _save_policy(policy: Policy, folder: Path) -> None:
    save_policy(policy, folder)


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    tmp.replace(path)


__all__ = ["TrainProgress", "Training", "train"]
