"""Helpers of the learner tests: a tiny built-in policy, synthetic trajectories, samples with logprobs."""

from __future__ import annotations

from collections.abc import Sequence

import torch

from envfarm.rollout.trajectory import Trajectory, Turn
from envfarm.trainer.learner import Learner, LearnerConfig
from envfarm.trainer.loss import token_logprobs
from envfarm.trainer.policy import Policy, load_policy
from envfarm.trainer.samples import TokenSample

TINY = {"d_model": 32, "n_layers": 1, "n_heads": 2, "d_ff": 64, "max_context": 128}


def tiny_policy(seed: int = 0) -> Policy:
    return load_policy("tiny-cpu", overrides=TINY, seed=seed, device="cpu")


def tiny_learner(seed: int = 0, **config: object) -> Learner:
    policy = tiny_policy(seed)
    return Learner(policy.module, LearnerConfig(**config), pad_id=policy.tokenizer.pad_id)  # type: ignore[arg-type]


def own_logprobs(module: torch.nn.Module, prompt: Sequence[int],
                 completion: Sequence[int]) -> tuple[float, ...]:
    """log p(completion | prompt) per token under ``module`` (what the server would report)."""
    ids = torch.tensor([list(prompt) + list(completion)])
    with torch.no_grad():
        lp = token_logprobs(module(ids[:, :-1]), ids[:, 1:])[0]
    return tuple(lp[len(prompt) - 1:].tolist())


def rl_batch(module: torch.nn.Module, n: int = 6, seed: int = 0) -> list[TokenSample]:
    """``n`` samples of random tokens with on-policy logprobs and alternating +/- advantages."""
    g = torch.Generator().manual_seed(seed)
    out = []
    for i in range(n):
        prompt = tuple(torch.randint(0, 256, (5 + i % 3,), generator=g).tolist())
        completion = tuple(torch.randint(0, 256, (3 + i % 4,), generator=g).tolist())
        lps = own_logprobs(module, prompt, completion)
        out.append(TokenSample.turn(prompt, completion, lps, advantage=1.0 if i % 2 else -1.0, version=0,
                                    episode_id=f"r:{i}"))
    return out


def trajectory(index: int, seed: int, reward: float, status: str = "completed", run: str = "run",
               turns: int = 2, version: int = 0) -> Trajectory:
    """A ToolCalc-shaped trajectory with token ids; turn k's prompt continues turn k-1's prompt and
    completion."""
    made: list[Turn] = []
    prompt: tuple[int, ...] = (1, 2, 3, seed % 200)
    for k in range(turns):
        completion = (10 + k, 11 + k, 257)
        last = k == turns - 1
        made.append(Turn(action="a", observation="o", reward=reward if last else 0.0, terminated=last,
                         truncated=False, weight_version=version, prompt_token_ids=prompt,
                         token_ids=completion, logprobs=(-1.0, -2.0, -0.5)))
        prompt = prompt + completion + (40, 41)
    infra = "sandbox crashed" if status == "infra_error" else None
    return Trajectory(episode_id=f"{run}:{index:06d}", env_id="envfarm/ToolCalc-v0", index=index, seed=seed,
                      task_id=f"t{seed}", status=status, turns=tuple(made) if status == "completed" else (),
                      infra_error=infra, weight_version=version)  # type: ignore[arg-type]


def params(module: torch.nn.Module) -> torch.Tensor:
    return torch.cat([p.detach().reshape(-1) for p in module.parameters()])
