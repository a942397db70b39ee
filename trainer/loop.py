"""``envfarm train`` in one call: SFT warm start -> evaluation -> RL -> evaluation, in one asyncio process.

    summary = await train(TrainConfig(env_id="envfarm/ToolCalc-v0"), Path("out"))
    summary = await train(None, Path("out"), resume=True)      # after a crash: the stored config, last ckpt

    DIR/config.json  metrics.jsonl  tensorboard/  checkpoints/{sft-*,sft,rl-*,latest}  ingest.jsonl
        runs/{demos,eval-before_rl,rl,eval-after_rl}/ (farm run folders)  evals/*.json  summary.json
        reward_curve.png  timings.json

1. demos: oracle episodes (``runs/demos``); SFT for ``sft_steps`` steps, checkpointed every 100; the result
   is ``checkpoints/sft`` (the SFT-only policy).
2. A :class:`PolicyServer` (its own copy of the policy) starts on loopback; the SFT policy is evaluated on
   ``eval_episodes`` held-out seeds at the training temperature (``runs/eval-before_rl``).
3. RL (rl.py): farm -> HTTP -> server, farm -> NDJSON -> learner inbox, learner -> POST /weights -> server.
4. The final policy is evaluated on the same seeds; ``summary.json`` gets both means and the paired
   bootstrap 95% CI of their difference; ``reward_curve.png`` is drawn from metrics.jsonl.

Every phase resumes: farm runs from their run folders, SFT and RL from the newest checkpoint (the inbox
re-queues what the last checkpoint had not trained on; the farm re-sends what the inbox had not stored).
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import time
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import torch

from envfarm.errors import ConfigError

from .checkpoint import latest_checkpoint, load_checkpoint, prune, save_checkpoint
from .distributed import DistContext
from .evaluation import EvalResult, evaluate_served, paired_bootstrap
from .learner import Learner, learner_config
from .metrics import Metrics, plot_rewards
from .policy import Policy, clone_policy, load_policy, save_policy
from .ranks import Leader, start_followers
from .rl import RLPhase, RLState
from .samples import sft_samples
from .server import PolicyServer, ServerConfig
from .sft import collect_demos, greedy_match, sft_batch, split_demos
from .state import LoopState
from .train_config import CONFIG_FILE, TrainConfig

log = logging.getLogger(__name__)

SFT_CHECKPOINT_EVERY = 100
SFT_WARMUP = 20
EVAL_PHASES = ("before_rl", "after_rl")


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

    # ------------------------------------------------------------------------------------------ entry

    async def run(self, resume: bool) -> dict[str, Any]:
        await asyncio.to_thread(self._setup, resume)
        assert self.policy is not None and self.metrics is not None
        server: PolicyServer | None = None
        try:
            if self.loop_state.phase == "sft":
                await self._timed("sft", self._sft())
            served = clone_policy(self.policy)
            served.version = self.rl_state.version
            c = self.config
            server = PolicyServer(served, ServerConfig(max_batch=c.max_batch, max_tokens=c.max_tokens,
                                                       seed=c.seed))
            await server.start("127.0.0.1", 0)
            before = await self._timed("eval_before_rl", self._evaluate("before_rl", server))
            await self._timed("rl", self._rl(server))
            after = await self._timed("eval_after_rl", self._evaluate("after_rl", server))
            return await asyncio.to_thread(self._finish, before, after)
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
            self.policy.version = self.rl_state.version
            log.info("resumed from %s (phase %s, version %d)", found, self.loop_state.phase,
                     self.rl_state.version)
        self.leader.sync()  # every rank starts from rank 0's weights and optimizer state
        self.metrics = Metrics(self.out, keep=self._logged_before if resume else None)

    def _logged_before(self, record: dict[str, Any]) -> bool:
        """Whether a metrics record of an earlier session belongs to the state resumed from."""
        kind, phase = record.get("kind"), record.get("phase")
        if kind == "update" and phase == "sft":
            return int(record.get("step", 0)) <= self.loop_state.sft_step
        if (kind == "update" and phase == "rl") or kind == "publish":
            return int(record.get("version", 0)) <= self.rl_state.version
        if kind == "eval":
            return (self.out / "evals" / f"{phase}.json").exists()
        return True

    async def _timed(self, name: str, work: Any) -> Any:
        t0 = time.monotonic()
        try:
            return await work
        finally:
            self.timings[name] = round(self.timings.get(name, 0.0) + time.monotonic() - t0, 2)
            await asyncio.to_thread(_write_json, self.out / "timings.json", self.timings)

    # -------------------------------------------------------------------------------------------- SFT

    async def _sft(self) -> None:
        c, learner, policy, metrics = self.config, self.learner, self.policy, self.metrics
        assert learner is not None and policy is not None and metrics is not None
        assert self.leader is not None
        self.progress.phase = "demos"
        demo_config = c.farm_config(episodes=c.sft_demos, seed=c.demo_seed)
        train, held = split_demos(await collect_demos(demo_config, self.out / "runs" / "demos"),
                                  c.sft_held_out)
        samples = await asyncio.to_thread(sft_samples, train, policy)
        checks = await asyncio.to_thread(sft_samples, held, policy)
        self.progress.phase, self.progress.total = "sft", c.sft_steps
        for step in range(self.loop_state.sft_step, c.sft_steps):
            lr = c.sft_lr * min(1.0, (step + 1) / SFT_WARMUP)
            batch = sft_batch(samples, c.sft_batch, c.seed, step)
            stats = await asyncio.to_thread(self.leader.update, batch, "sft", lr)
            match = None
            if c.sft_target > 0 and checks and (step + 1) % c.sft_check_every == 0:
                match = await asyncio.to_thread(greedy_match, learner.module, checks, learner.pad_id,
                                                learner.device, c.micro_batch_tokens)
            metrics.update(step=step + 1, phase="sft", loss=stats.loss, reward_mean=None, kl=None,
                           clip_frac=None, lr=lr, samples=stats.samples, tokens=stats.tokens, version=0,
                           grad_norm=stats.grad_norm, held_out_match=match)
            self.progress.step, self.progress.loss = step + 1, stats.loss
            self.loop_state = replace(self.loop_state, sft_step=step + 1)
            if match is not None and match >= c.sft_target:
                log.info("SFT stops at step %d: held-out greedy match %.3f >= %.3f", step + 1, match,
                         c.sft_target)
                self.loop_state = replace(self.loop_state, sft_match=match)
                break
            if (step + 1) % SFT_CHECKPOINT_EVERY == 0 and step + 1 < c.sft_steps:
                await asyncio.to_thread(self._save, f"sft-{step + 1:06d}")
        self.loop_state = replace(self.loop_state, phase="rl")
        self.leader.reset_optimizer()  # RL starts with fresh AdamW moments at its own learning rate
        await asyncio.to_thread(self._save, "sft")
        await asyncio.to_thread(prune, self.ckpt_dir, 0, "sft-")

    def _save(self, name: str, rl: RLState | None = None) -> None:
        assert self.learner is not None and self.policy is not None
        state = self.loop_state.to_json(rl or self.rl_state)
        self.policy.version = (rl or self.rl_state).version
        policy = self.policy
        save_checkpoint(self.ckpt_dir / name, self.learner, state,
                        extra=lambda folder: _save_policy(policy, folder / "policy"))

    # --------------------------------------------------------------------------------------------- RL

    async def _rl(self, server: PolicyServer) -> None:
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
                        self.policy.max_context, on_update, step=self.leader.update)
        self.rl_state = await phase.run()
        self.loop_state = replace(self.loop_state, phase="eval")

    # ------------------------------------------------------------------------------------- evaluation

    async def _evaluate(self, phase: str, server: PolicyServer) -> EvalResult:
        path = self.out / "evals" / f"{phase}.json"
        if path.exists():
            data = json.loads(await asyncio.to_thread(path.read_text))
            data["per_seed"] = {int(k): v for k, v in data["per_seed"].items()}
            return EvalResult(**data)
        assert self.metrics is not None
        self.progress.phase = f"eval {phase}"
        c = self.config
        swapped = phase == "before_rl" and self.rl_state.updates > 0
        if swapped:  # the SFT-only weights, when a resumed run lost this evaluation
            await server.swap(await asyncio.to_thread(_sft_weights, self.ckpt_dir), "sft")
        result = await evaluate_served(server.url, c.farm_config(episodes=c.eval_episodes, seed=c.eval_seed),
                                       self.out / "runs" / f"eval-{phase}", temperature=c.temperature,
                                       max_tokens=c.max_tokens)
        if swapped:
            assert self.learner is not None
            await server.swap(self.learner.module, self.rl_state.version)
        await asyncio.to_thread(_write_json, path, asdict(result))
        self.metrics.eval(phase=phase, mean_reward=result.mean_reward, episodes=result.episodes,  # type: ignore[arg-type]
                          infra_errors=result.infra_errors, wall_s=result.wall_s)
        self.progress.evals = {**(self.progress.evals or {}), phase: result.mean_reward}
        return result

    def _finish(self, before: EvalResult, after: EvalResult) -> dict[str, Any]:
        c = self.config
        diff, low, high, n = paired_bootstrap(before.per_seed, after.per_seed)
        summary = {
            "env_id": c.env_id, "eval_before_rl": round(before.mean_reward, 4),
            "eval_after_rl": round(after.mean_reward, 4), "eval_episodes": n, "diff": round(diff, 4),
            "diff_ci95": [round(low, 4), round(high, 4)], "eval_temperature": c.temperature,
            "eval_seeds": [c.eval_seed, c.eval_seed + c.eval_episodes],
            "eval_infra_errors": {"before_rl": before.infra_errors, "after_rl": after.infra_errors},
            "sft_steps": self.loop_state.sft_step,
            "sft_held_out_match": self.loop_state.sft_match, "rl_updates": self.rl_state.updates,
            "final_version": self.rl_state.version, "rl_seconds": self.rl_state.seconds,
            "dropped": self.rl_state.dropped, "wall_s": round(sum(self.timings.values()), 1),
            "phase_s": self.timings, "load_avg_end": [round(x, 2) for x in os.getloadavg()],
            "device": str(self.policy.device if self.policy else "cpu"),
            "torch_threads": torch.get_num_threads(),
            "config": asdict(c),
        }
        _write_json(self.out / "summary.json", summary)
        plot_rewards(self.out / "metrics.jsonl", self.out / "reward_curve.png",
                     title=f"{c.env_id} {c.preset}: RL reward (T={c.temperature:g})")
        self.progress.phase = "done"
        return summary


async def train(config: TrainConfig | None, out: Path, *, resume: bool = False,
                progress: TrainProgress | None = None) -> dict[str, Any]:
    """Run (or with ``resume``, continue) a training folder; returns the summary (also DIR/summary.json).
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


def _sft_weights(ckpt_dir: Path) -> dict[str, torch.Tensor]:
    from safetensors.torch import load_file

    return load_file(ckpt_dir / "sft" / "model.safetensors")


def _write_json(path: Path, data: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    tmp.replace(path)


__all__ = ["TrainProgress", "Training", "train"]
