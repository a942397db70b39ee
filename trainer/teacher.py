"""The teacher whose demonstrations SFT imitates: ``oracle`` (the env's reference solution) or ``noisy``.

    policy = make_teacher("noisy", error=0.6, seed=0)      # a farm policy, like make_policy("oracle")

The noisy teacher is the setting where RL has to earn its keep: in a seeded fraction ``error`` of its
episodes it plays the env's systematic mistake (``env.mistaken_oracle()``; ToolCalc: the calculator call
skipped on one-step problems, the first operator swapped on longer ones), in the rest the reference
solution. Imitating it caps the success rate near ``1 - error`` when sampling, and greedy decoding imitates
its most common behaviour (the mistake, for ``error`` > 0.5), while the env's reward still tells right from
wrong. Whether an episode is mistaken is a function of (teacher seed, task seed) alone, so demonstrations
are reproducible and a resumed collection makes the same choices.
"""

from __future__ import annotations

import random
from typing import Any, Literal

from envfarm.errors import ConfigError, PolicyError
from envfarm.rollout.policies import EpisodeView, OraclePolicy, Policy, Reply, text_reply

Teacher = Literal["oracle", "noisy"]
TEACHERS: tuple[Teacher, ...] = ("oracle", "noisy")


class NoisyTeacher(Policy):
    """The env's reference solution, or in a seeded fraction ``error`` of episodes its systematic mistake."""

    name = "noisy"

    def __init__(self, error: float, seed: int = 0) -> None:
        if not 0 <= error <= 1:
            raise ConfigError(f"teacher error must be in 0..1, got {error}")
        self.error, self.seed = error, seed

    def mistaken(self, task_seed: int) -> bool:
        """Whether the demonstration of ``task_seed`` is one of the mistaken ones."""
        return random.Random(f"teacher:{self.seed}:{task_seed}").random() < self.error

    def plan(self, env: Any, task_seed: int) -> list[str]:
        if not self.mistaken(task_seed):
            return list(env.oracle())
        mistaken = getattr(env, "mistaken_oracle", None)
        if mistaken is None:
            raise ConfigError(f"the noisy teacher needs the env's mistaken_oracle() (its systematic "
                              f"mistake); {type(env).__name__} has none: use --teacher oracle, or an env "
                              "that has one (envfarm/ToolCalc-v0)")
        return list(mistaken())

    async def act(self, view: EpisodeView) -> Reply:
        if "teacher" not in view.state:
            view.state["teacher"] = self.plan(view.env, view.seed)
        plan: list[str] = view.state["teacher"]
        if view.step >= len(plan):
            raise PolicyError(f"the noisy teacher's plan for seed {view.seed} has {len(plan)} actions and "
                              f"the episode asked for action {view.step + 1}")
        return text_reply(plan[view.step], view)


def make_teacher(name: str, error: float = 0.0, seed: int = 0) -> Policy:
    """The demonstrating policy ``name`` (``TEACHERS``)."""
    if name == "oracle":
        return OraclePolicy()
    if name == "noisy":
        return NoisyTeacher(error, seed)
    raise ConfigError(f"unknown teacher {name!r}; choose one of {', '.join(TEACHERS)}")


__all__ = ["TEACHERS", "NoisyTeacher", "Teacher", "make_teacher"]
