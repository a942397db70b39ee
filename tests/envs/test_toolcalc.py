"""ToolCalc: the calculator is exact and safe, answers are checked exactly, the env conforms."""

from __future__ import annotations

from fractions import Fraction

import gymnasium
import numpy as np
import pytest

import envfarm.envs  # noqa: F401 - registers the envs
from envfarm.envs.checks import run_conformance
from envfarm.envs.tool_use.calc_program import CalcError, evaluate
from envfarm.envs.tool_use.toolcalc import parse_number
from envfarm.envs.tool_use.word_problems import make_problem


@pytest.mark.parametrize(("expr", "value"), [
    ("1+2*3", 7), ("(1+2)*3", 9), ("08+1", 9), ("7/2", Fraction(7, 2)), ("2**10", 1024), ("2^3^2", 512),
    ("-3--3", 0), ("17//5", 3), ("17%5", 2), ("0.1+0.2", Fraction(3, 10)),
])
def test_calculator_is_exact(expr: str, value: Fraction) -> None:
    assert evaluate(expr) == value


@pytest.mark.parametrize("expr", ["__import__('os')", "1/0", "2**99999", "(1+2", "", "1 2", "9**9**9"])
def test_calculator_refuses_code_and_nonsense(expr: str) -> None:
    with pytest.raises(CalcError):
        evaluate(expr)


def test_answers_compare_as_numbers() -> None:
    assert parse_number("42") == parse_number("42.0") == parse_number("84/2") == parse_number("42.")
    assert parse_number("1,000") == 1000 and parse_number("forty-two") is None


def test_generated_problems_have_whole_answers() -> None:
    rng = np.random.default_rng(0)
    for level in (1, 2, 3):
        for _ in range(300):
            p = make_problem(rng, level)
            assert p.answer.denominator == 1 and p.answer >= 0, p


@pytest.mark.bwrap
def test_calc_runs_in_the_sandbox_and_wrong_answers_score_zero() -> None:
    env = gymnasium.make("envfarm/ToolCalc-v0", backend="bwrap", difficulty=2)
    try:
        env.reset(seed=5)
        obs, *_ = env.step('{"name": "calc", "arguments": {"expr": "__import__(\\"os\\").getcwd()"}}')
        assert obs.startswith("calc error")
        obs, reward, terminated, _, info = env.step('{"name": "submit", "arguments": {"answer": "-1"}}')
        assert reward == 0.0 and terminated and info["correct"] is False
    finally:
        env.close()


@pytest.mark.bwrap
def test_tool_help_off_leaves_the_prompt_alone_and_the_tools_in_info() -> None:
    plain = gymnasium.make("envfarm/ToolCalc-v0", backend="bwrap", tool_help=False)
    helped = gymnasium.make("envfarm/ToolCalc-v0", backend="bwrap")
    try:
        short, info = plain.reset(seed=3)
        full, _ = helped.reset(seed=3)
        assert full.startswith(short + "\n\nTools:") and "calc(" not in short
        assert [t["function"]["name"] for t in info["tools"]] == ["calc", "submit"]
        _, reward, terminated, _, _ = plain.step(plain.unwrapped.oracle()[0])
        assert not terminated
        _, reward, terminated, _, _ = plain.step(plain.unwrapped.oracle()[1])
        assert terminated and reward == 1.0
    finally:
        plain.close()
        helped.close()


@pytest.mark.bwrap
@pytest.mark.slow
def test_conformance_suite_passes() -> None:
    report = run_conformance("envfarm/ToolCalc-v0", backend="bwrap", seeds=200)
    assert not report.failures, report.failures
