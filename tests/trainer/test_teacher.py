"""The noisy teacher: a seeded fraction of ToolCalc demonstrations carry the env's systematic mistake."""

from __future__ import annotations

import json

import numpy as np
import pytest

from envfarm.envs.tool_use.toolcalc import ToolCalcEnv, parse_number
from envfarm.errors import ConfigError
from envfarm.rollout.policies import OraclePolicy
from envfarm.trainer.teacher import NoisyTeacher, make_teacher


def _env_at(seed: int) -> ToolCalcEnv:
    env = ToolCalcEnv.__new__(ToolCalcEnv)  # generate/oracle need no sandbox
    env.difficulty = None
    env.task = env.generate(np.random.default_rng(seed))
    return env


def _answer(plan: list[str]) -> str:
    return json.loads(plan[-1])["arguments"]["answer"]


def test_a_seeded_fraction_of_demos_is_mistaken_and_wrong() -> None:
    teacher = NoisyTeacher(0.6, seed=0)
    seeds = range(1_000_000, 1_002_000)
    mistaken = [s for s in seeds if teacher.mistaken(s)]
    assert abs(len(mistaken) / len(seeds) - 0.6) < 0.03
    assert mistaken == [s for s in seeds if NoisyTeacher(0.6, seed=0).mistaken(s)]  # reproducible
    assert mistaken != [s for s in seeds if NoisyTeacher(0.6, seed=1).mistaken(s)]  # the seed decides
    wrong = 0
    for s in seeds[:600]:
        env = _env_at(s)
        plan = teacher.plan(env, s)
        right = parse_number(_answer(plan)) == env.task.problem.answer
        wrong += not right
        if teacher.mistaken(s):
            if env.task.level == 1:  # the calculator call skipped
                assert len(plan) == 1 and json.loads(plan[0])["name"] == "submit"
            else:  # the first operator swapped, the calculator's (wrong) result submitted
                expr = json.loads(plan[0])["arguments"]["expr"]
                assert expr != env.task.problem.expression and len(expr) <= len(env.task.problem.expression)
        else:
            assert plan == env.oracle() and right
    assert abs(wrong / 600 - sum(teacher.mistaken(s) for s in seeds[:600]) / 600) < 0.01


def test_error_zero_is_the_oracle_and_bad_teachers_are_config_errors() -> None:
    env = _env_at(5)
    assert NoisyTeacher(0.0).plan(env, 5) == env.oracle()
    assert isinstance(make_teacher("oracle"), OraclePolicy)
    with pytest.raises(ConfigError, match="unknown teacher"):
        make_teacher("sloppy")
    with pytest.raises(ConfigError, match=r"0\.\.1"):
        NoisyTeacher(1.5)

    class NoMistakes:
        def oracle(self) -> list[str]:
            return ["x"]

    with pytest.raises(ConfigError, match="mistaken_oracle"):
        NoisyTeacher(1.0).plan(NoMistakes(), 0)
