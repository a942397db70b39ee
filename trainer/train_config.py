"""What ``envfarm train`` runs: one frozen config, stored as ``DIR/config.json`` (``--resume`` reads it back).

Seeds (:class:`SeedRanges`, written in summary.json): SFT demonstrations, the fresh demonstrations of the
``sft_more`` arm, RL tasks, validation and test come from disjoint seed ranges. Validation seeds serve
every choice (SFT's held-out check, tuning runs with ``eval_split="validation"``); test seeds only the final
numbers, so no reported task was trained on or tuned on.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from envfarm.errors import ConfigError
from envfarm.rollout.farm import FarmConfig
from envfarm.sandbox.values import DEFAULT_BACKEND

from .teacher import TEACHERS, Teacher

CONFIG_FILE = "config.json"
SEED_RANGE = 1_000_000
SFT_WARMUP = 20
"""Linear warm-up steps of the SFT learning rate."""
ENV_DEFAULTS: dict[str, Any] = {"tool_help": False}
"""Env arguments of every training run; ``--env-kwargs`` adds to them (see ``TrainConfig.env_kwargs``)."""


@dataclass(frozen=True)
class SeedRange:
    """Seeds ``start`` (included) to ``stop`` (excluded)."""

    start: int
    stop: int

    def overlaps(self, other: SeedRange) -> bool:
        return self.start < other.stop and other.start < self.stop


@dataclass(frozen=True)
class SeedRanges:
    """Where each use of a training run draws its tasks from; pairwise disjoint (:meth:`check`)."""

    demos: SeedRange
    """SFT demonstrations (the first ``sft_demos`` seeds of the demo range)."""
    more_demos: SeedRange
    """Fresh demonstrations for the ``sft_more`` arm."""
    rl: SeedRange
    """RL tasks."""
    validation: SeedRange
    """SFT's held-out check and tuning evaluations."""
    test: SeedRange
    """Final evaluations only."""

    def check(self) -> None:
        """ConfigError naming the first two ranges that overlap."""
        named = list(asdict(self).items())
        for i, (a, ra) in enumerate(named):
            for b, rb in named[i + 1 :]:
                if SeedRange(**ra).overlaps(SeedRange(**rb)):
                    raise ConfigError(f"seed ranges {a} {ra} and {b} {rb} overlap: set demo_seed, rl_seed, "
                                      f"val_seed and test_seed at least {SEED_RANGE:,} apart")


@dataclass(frozen=True)
class TrainConfig:
    """The whole SFT -> RL -> evaluation run."""

    env_id: str = "envfarm/ToolCalc-v0"
    """A registered env id."""
    env_kwargs: dict[str, Any] = field(default_factory=lambda: dict(ENV_DEFAULTS))
    """Arguments of the env in every farm run (demos, RL, evaluations). ``tool_help`` False: the tools reach
    the model through the API only (the template names them in one line), not also as ~350 bytes of help
    text in every first prompt; a byte-level model trains twice as fast per step on the shorter prompt."""
    preset: str = "tiny-cpu"
    """Built-in model preset to start from (random init), unless ``checkpoint`` is given."""
    checkpoint: str | None = None
    """A policy folder (``save_policy`` output or a Hugging Face folder) to start from instead."""
    device: str | None = None
    """cpu, cuda, cuda:N; None: cuda when available, else cpu."""
    backend: str = DEFAULT_BACKEND
    """Sandbox backend of every farm run (bwrap: fastest here)."""
    seed: int = 0
    """Model init and SFT batch order."""
    threads: int | None = None
    """torch intra-op threads (None: torch's default)."""
    # -- warm start
    teacher: Teacher = "oracle"
    """Who demonstrates for SFT: "oracle" (the env's reference solution) or "noisy" (the reference solution,
    but the env's systematic mistake in a seeded ``teacher_error`` fraction of demos; see teacher.py)."""
    teacher_error: float = 0.6
    """Fraction of the noisy teacher's demonstrations that carry its mistake (ignored for the oracle)."""
    sft_demos: int = 2000
    """Teacher demonstration episodes for SFT."""
    sft_steps: int = 3000
    """Most SFT optimizer steps (0: no warm start); ``sft_target`` usually stops it earlier. Tuned on
    validation seeds: the noisy teacher's loss sits on a plateau (~0.15) for the first ~6,600 demonstrations
    (~1,650 steps of 4; batch 2 had not left it after 3,000 steps), then drops; 1500 stopped it with greedy
    match 0.02 and sampled reward 0.00, leaving RL no signal. 3000 bounds a slow seed's warm start to ~9
    minutes of the run's 25 (~0.17 s per step with the held-out checks). Measured before tiny-cpu had its
    token shift, with which the slow seeds 1 and 2 reach ``sft_target`` by step 1,850 and 2,500 (model.py)."""
    sft_batch: int = 4
    """Episodes per SFT step. The plateau is left after about as many steps with 4 as with 8 (validation
    seeds), at half the cost per step."""
    sft_lr: float = 1e-3
    """SFT learning rate (AdamW, linear warm-up over the first 20 steps)."""
    sft_settle: float = 0.0
    """Once the held-out greedy match first reaches this fraction of ``greedy_ceiling`` (the loss has left
    its plateau), SFT and the sft_more arm go on at ``sft_lr * sft_settle_lr`` (0: never, the default).
    Measured on the held-out (validation) curve of a slow seed (seed 2, noisy teacher) that left the plateau
    at step ~1,650 and then stalled at match ~0.1 of 0.6 at 1e-3: 0.1 (lr x0.3 from step 1,650) gave match
    ~0.11 at step 3,000, a drop at step 2,300 ~0.15 and 0.23 at 4,000, against ~0.09 at 1e-3 throughout;
    too little to make that seed's warm start useful (its sft arm still scored under 0.01), so off by
    default until a seed-robust SFT is found."""
    sft_settle_lr: float = 0.3
    """The SFT learning rate's factor after ``sft_settle`` (0..1)."""
    sft_target: float = 0.6
    """Stop SFT once greedy decoding reproduces this fraction of what a greedy imitator can reproduce of the
    held-out demonstrations (all of the oracle's; the share of the noisy teacher's most common behaviour,
    ``max(teacher_error, 1 - teacher_error)``) (0: run all ``sft_steps``). A competent warm start, past
    the steep part of the curve: at 0.5 (batch 8) the noisy teacher's SFT stopped 250 steps after the plateau
    with sampled reward 0.06 and sft_more gained most at T=1. With batch 4 the held-out match climbs from 0
    to ~0.3 of 0.6 within ~500 steps of the plateau's end, then creeps (0.36-0.45 for the next ~1,000 steps):
    0.6 stops near the bend (seed 0: step 2,400), 0.8 (0.48) took 3,350 steps or more (validation seeds).
    A seed that leaves the plateau later can still be climbing at 0.6 (test run 1: match 0.39 at step 2,650,
    and sft_more gained most at T=1). See sft.py."""
    sft_check_every: int = 50
    """SFT steps between two held-out checks (each a greedy decode of ``sft_held_out`` demos, ~1.4 s)."""
    sft_held_out: int = 64
    """Demonstrations held out of SFT for the check."""
    # -- RL
    rl_updates: int = 12
    """RL updates (each one a new weight version); ``minutes`` may stop earlier. A count, not a clock, by
    default: RL then does the same work on a loaded machine (the sft_more arm matches its wall time)."""
    minutes: float | None = None
    """Wall-clock budget of the RL phase (None: no limit but ``rl_updates``)."""
    group_size: int = 8
    """Attempts per task: the GRPO group."""
    prompts_per_update: int = 8
    """GRPO groups (tasks) per update. 8 instead of 16, from the same SFT checkpoint on validation seeds: 12
    updates took 102 s instead of 259 s and reached 0.716 greedy / 0.470 sampled (16: 0.884 / 0.632; the
    checkpoint: 0.114 / 0.202)."""
    group_window: float = 1.0
    """Above 1: an update takes up to this many times ``prompts_per_update`` groups, until that many are
    informative (rewards not all equal; DAPO's dynamic sampling). 1: plain GRPO batches. When sampling is
    the bottleneck and successes are rare, frequent small updates learn faster per second."""
    lr: float = 2e-4
    """RL learning rate (AdamW, fresh moments after SFT). Since tiny-cpu has its token shift, 3e-4 broke the
    tool-call syntax in 3 of 6 RL runs from its SFT checkpoints (from update ~7-9 the submit call's
    arguments stopped opening with ``{``; noisy teacher, 12 updates). With 1e-4 it held in a test series
    (at most 15 of 500 greedy episodes with an invalid call) but sft_more scored above rl on
    validation seeds from test run 0's checkpoint (0.644 / 0.430 greedy / sampled against 0.530 / 0.358).
    From that checkpoint and test run 1's, on validation seeds: 2e-4 gave rl 0.594 / 0.478 and 0.434 /
    0.326 (no breakage: at most 8 of a version's 93 episodes with an invalid call), and with
    ``max_staleness`` 2 as well 0.644 / 0.516 and 0.480 / 0.416 (sft_more 0.644 / 0.430 and 0.006 / 0.144).
    The test series of these defaults (README): rl above sft and sft_more in all 12 paired CIs, at most 21
    of 500 greedy episodes with an invalid call. Before the token shift the default was 3e-4."""
    ppo_epochs: int = 1
    """Optimizer steps on each update's samples (PPO epochs). Above 1 the later steps are off-policy and the
    behaviour logprobs' clipped ratio bounds how far they move: more learning per sampled episode, and
    more drift. On ToolCalc (8 tasks x 8 per update, lr 3e-4) 2 epochs raised the share of episodes with
    no valid call from 0.32 to 0.59 within 9 updates. One weight version per update either way."""
    loss_agg: Literal["token", "sequence"] = "sequence"
    """RL loss aggregation: "sequence" (each episode weighs the same) or "token" (DAPO's token mean; in
    multi-turn envs the failed, longer episodes then outweigh the successes on shared tokens)."""
    kl_coef: float = 0.0
    """Weight of the k3 KL to the SFT policy (0: none, no reference kept)."""
    clip_eps: float = 0.2
    """PPO clip range of the per-token ratio."""
    max_staleness: int = 2
    """Episodes start only on weights at most this many versions behind; older turns are dropped. 2: at 1
    the asynchronous farm's ToolCalc runs dropped 20-31% of the turns they sampled (sampled two or more
    versions behind the learner); at 2, 1-2%, and RL from the same SFT checkpoint scored 0.604 / 0.430
    greedy / sampled on validation seeds instead of 0.530 / 0.358 (lr 1e-4; with lr 2e-4, see ``lr``)."""
    sync: bool = False
    """Synchronous RL (benchmarks): each update's episodes are sampled by a farm run of their own, and the
    farm is idle while the learner updates. Default: asynchronous, the farm keeps sampling."""
    temperature: float = 0.7
    """Sampling temperature of RL and of the sampled evaluations (every arm is also scored greedy). 0.7,
    tuned on validation seeds (noisy teacher, seed 0, one SFT checkpoint, 12 updates each): at 1.0 the
    training reward stayed at 0.05-0.2 and rl - sft_more was +0.268 [+0.212, +0.324] greedy but -0.032
    [-0.080, +0.016] sampled; at 0.7 the reward rose to 0.25-0.58 and rl - sft_more was +0.352 [+0.298,
    +0.406] greedy, +0.144 [+0.090, +0.198] sampled (the arms scored at 0.7). The imitators lose at a lower
    temperature what RL gains: the noisy teacher's mistake is the demonstrations' majority, so sharper
    sampling of imitation makes it more often. The PPO ratio uses the model's temperature-1 log-probs on
    both sides (base.py), not the sampler's."""
    max_tokens: int = 96
    """Tokens per completion."""
    concurrency: int = 64
    """Episodes in flight (RL farm and evaluations)."""
    step_slots: int | None = 2
    """Env steps running in sandboxes at once (the calculator is CPU-bound)."""
    max_batch: int = 64
    """Policy server: rows per generation batch."""
    engine: Literal["builtin", "vllm"] = "builtin"
    """Rollout engine: "builtin" (envfarm's policy server, in this process) or "vllm" (a vLLM server on
    loopback, run from .venv-vllm, for a Hugging Face ``checkpoint``; ``max_batch`` is its --max-num-seqs;
    weights reloaded in place after every update, and the learner checks its logprobs). See engines.py."""
    nproc: int = 1
    """Learner processes (data parallel; gloo on CPU, nccl on CUDA with one device per rank)."""
    micro_batch_tokens: int = 16384
    """Learner: padded tokens per micro-batch (gradient accumulation unit)."""
    checkpoint_every: int = 1
    """RL updates between checkpoints (SFT: every 100 steps)."""
    # -- the sft_more arm
    sft_more: bool = True
    """Train and evaluate the sft_more arm: SFT continued from its checkpoint (AdamW moments and learning
    rate as if it had not stopped) on fresh teacher demos until it has spent RL's wall time and trained on
    as many completion tokens as RL sampled (equal compute)."""
    sft_more_demos: int = 2000
    """Fresh teacher demonstrations for the sft_more arm (from their own seed range)."""
    # -- evaluation
    eval_episodes: int = 500
    """Held-out tasks on which every arm is evaluated (the same seeds for each arm and mode)."""
    eval_split: Literal["test", "validation"] = "test"
    """Which seed range the arms are evaluated on: "test" for the numbers reported, "validation" for tuning
    runs (a tuned default never sees a test seed)."""
    demo_seed: int = SEED_RANGE
    """First seed of the SFT demonstrations; the ``sft_more`` arm's fresh ones start half a range later."""
    rl_seed: int = 2 * SEED_RANGE
    """First seed of the RL tasks."""
    test_seed: int = 3 * SEED_RANGE
    """First seed of the test range (final numbers only)."""
    val_seed: int = 4 * SEED_RANGE
    """First seed of the validation range (SFT's held-out check, tuning evaluations)."""

    def __post_init__(self) -> None:
        positive = {"sft_demos": self.sft_demos, "sft_batch": self.sft_batch, "group_size": self.group_size,
                    "prompts_per_update": self.prompts_per_update, "max_tokens": self.max_tokens,
                    "concurrency": self.concurrency, "max_batch": self.max_batch,
                    "sft_more_demos": self.sft_more_demos,
                    "micro_batch_tokens": self.micro_batch_tokens, "checkpoint_every": self.checkpoint_every,
                    "eval_episodes": self.eval_episodes, "nproc": self.nproc,
                    "ppo_epochs": self.ppo_epochs}
        bad = [f"{k}={v}" for k, v in positive.items() if v < 1]
        bad += [f"{k}={v}" for k, v in {"sft_steps": self.sft_steps, "rl_updates": self.rl_updates,
                                         "max_staleness": self.max_staleness, "kl_coef": self.kl_coef,
                                         "temperature": self.temperature}.items() if v < 0]
        if self.sft_demos > SEED_RANGE // 2:
            bad.append(f"sft_demos={self.sft_demos} (at most {SEED_RANGE // 2:,}: half a seed range)")
        if not 0 <= self.sft_target <= 1 or self.sft_check_every < 1 or self.sft_held_out < 0:
            bad.append(f"sft_target={self.sft_target} (0..1), sft_check_every={self.sft_check_every}, "
                       f"sft_held_out={self.sft_held_out}")
        if self.lr <= 0 or self.sft_lr <= 0:
            bad.append(f"lr={self.lr}, sft_lr={self.sft_lr}")
        if not 0 <= self.sft_settle <= 1 or not 0 < self.sft_settle_lr <= 1:
            bad.append(f"sft_settle={self.sft_settle} (0..1), "
                       f"sft_settle_lr={self.sft_settle_lr} (above 0, at most 1)")
        if self.minutes is not None and self.minutes <= 0:
            bad.append(f"minutes={self.minutes}")
        if bad:
            raise ConfigError(f"invalid training options: {', '.join(bad)} (counts must be >= 1, rates > 0)")
        if self.group_size < 2:
            raise ConfigError(f"group_size {self.group_size}: GRPO needs at least 2 attempts per task")
        if self.teacher not in TEACHERS or not 0 <= self.teacher_error <= 1:
            raise ConfigError(f"teacher must be one of {', '.join(TEACHERS)} and teacher_error in 0..1, got "
                              f"{self.teacher!r}, {self.teacher_error}")
        if self.loss_agg not in ("token", "sequence"):
            raise ConfigError(f"loss_agg must be 'token' or 'sequence', got {self.loss_agg!r}")
        if not isinstance(self.env_kwargs, dict):
            raise ConfigError(f"env_kwargs must be a JSON object, got {self.env_kwargs!r}")
        if self.engine not in ("builtin", "vllm"):
            raise ConfigError(f"engine must be 'builtin' or 'vllm', got {self.engine!r}")
        if self.engine == "vllm" and self.checkpoint is None:
            raise ConfigError("engine 'vllm' serves a Hugging Face model: give --checkpoint HF_DIR (the "
                              f"built-in preset {self.preset!r} runs on --engine builtin)")
        if self.eval_split not in ("test", "validation"):
            raise ConfigError(f"eval_split must be 'test' or 'validation', got {self.eval_split!r}")
        self.seed_ranges().check()

    def seed_ranges(self) -> SeedRanges:
        """The seed range of every use (see the module docstring)."""
        half = SEED_RANGE // 2
        return SeedRanges(demos=SeedRange(self.demo_seed, self.demo_seed + min(self.sft_demos, half)),
                          more_demos=SeedRange(self.demo_seed + half, self.demo_seed + SEED_RANGE),
                          rl=SeedRange(self.rl_seed, self.rl_seed + SEED_RANGE),
                          validation=SeedRange(self.val_seed, self.val_seed + SEED_RANGE),
                          test=SeedRange(self.test_seed, self.test_seed + SEED_RANGE))

    @property
    def eval_seed(self) -> int:
        """First seed of the arms' evaluations (test or validation, by ``eval_split``)."""
        return self.test_seed if self.eval_split == "test" else self.val_seed

    @property
    def greedy_ceiling(self) -> float:
        """The fraction of the teacher's demonstrations a deterministic (greedy) imitator can reproduce."""
        e = self.teacher_error if self.teacher == "noisy" else 0.0
        return max(e, 1.0 - e)

    def sft_lr_at(self, step: int, settled: bool) -> float:
        """The learning rate of SFT step ``step`` (0-based; SFT or sft_more): linear warm-up over the first
        ``SFT_WARMUP`` steps, times ``sft_settle_lr`` once SFT has settled."""
        return self.sft_lr * (self.sft_settle_lr if settled else 1.0) * min(1.0, (step + 1) / SFT_WARMUP)

    def settles(self, match: float) -> bool:
        """Whether a held-out greedy match shows that SFT has left its loss plateau (``sft_settle``)."""
        return self.sft_settle > 0 and match >= self.sft_settle * self.greedy_ceiling

    def farm_config(self, *, episodes: int, seed: int, attempts: int = 1,
                    max_staleness: int | None = None) -> FarmConfig:
        """The farm run of one phase (demonstrations, RL, an evaluation) under this training config: the
        env, its kwargs, backend, concurrency and step slots are the run's; the rest is the phase's."""
        return FarmConfig(env_id=self.env_id, episodes=episodes, concurrency=self.concurrency,
                          backend=self.backend, seed=seed, attempts=attempts, step_slots=self.step_slots,
                          max_staleness=max_staleness, env_kwargs=dict(self.env_kwargs))

    def with_options(self, **changes: Any) -> TrainConfig:
        """A copy with the given (non-None) options changed; ConfigError for an unknown name."""
        known = {f.name for f in fields(self)}
        unknown = sorted(set(changes) - known)
        if unknown:
            raise ConfigError(f"unknown training options {unknown}")
        return replace(self, **{k: v for k, v in changes.items() if v is not None})

    def save(self, folder: Path) -> None:
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / (CONFIG_FILE + ".tmp")
        tmp.write_text(json.dumps(asdict(self), indent=2) + "\n")
        tmp.replace(folder / CONFIG_FILE)

    @classmethod
    def load(cls, folder: Path) -> TrainConfig:
        path = Path(folder) / CONFIG_FILE
        if not path.is_file():
            raise ConfigError(f"{folder} is not a training folder (no {CONFIG_FILE}); give the --out folder "
                              "of an earlier `envfarm train`")
        try:
            data = json.loads(path.read_text())
            if "eval_seed" in data:  # written before the validation/test split: its held-out range is test's
                data["test_seed"] = data.pop("eval_seed")
            return cls(**data)
        except (ValueError, TypeError) as e:
            raise ConfigError(f"{path} is damaged ({e}); start a new run with another --out") from e


__all__ = ["CONFIG_FILE", "ENV_DEFAULTS", "SEED_RANGE", "SeedRange", "SeedRanges", "TrainConfig"]
