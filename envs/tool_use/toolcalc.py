"""``envfarm/ToolCalc-v0``: arithmetic word problems solved with a sandboxed calculator.

Each seed draws a difficulty (1-3, or the ``difficulty`` given) and a word-problem template with numbers
chosen so the answer is a whole number. The ``calc`` tool runs envfarm's own exact calculator inside the
sandbox (a small recursive-descent parser over fractions: no Python ``eval``); ``submit`` checks the answer
exactly (``42``, ``42.0`` and ``84/2`` are the same number).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from fractions import Fraction
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from envfarm.errors import ConfigError
from envfarm.sandbox import Sandbox

from ..core import AgentEnv, Outcome, tool, truncate
from ..meta import AnswerMeta
from .calc_program import evaluate
from .word_problems import Problem, make_problem

CALC_PATH = "/tmp/envfarm_calc.py"
CALC_SOURCE = (Path(__file__).with_name("calc_program.py")).read_text()
OPERATOR_SWAP = {"+": "-", "-": "+", "*": "+", "/": "*", "//": "*", "**": "*"}
"""The operator a mistaken teacher writes for the expression's first operator (see ``mistaken_oracle``)."""
_FIRST_OPERATOR = re.compile(r"\*\*|//|[-+*/]")


@dataclass(frozen=True)
class CalcTask:
    task_id: str
    level: int
    problem: Problem


class CalcArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    expr: str = Field(description="Arithmetic expression: numbers, + - * / // % ** and parentheses.")


class AnswerArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    answer: str = Field(description="The final numeric answer, e.g. 42.")


def parse_number(text: str) -> Fraction | None:
    """``42``, ``42.0``, ``1,000``, ``84/2`` → a Fraction; None when it is not a number."""
    cleaned = text.strip().replace(",", "").replace("_", "").rstrip(".")
    try:
        return Fraction(cleaned)
    except (ValueError, ZeroDivisionError):
        return None


class ToolCalcEnv(AgentEnv[CalcTask]):
    """Arithmetic word problems; tools ``calc`` and ``submit``."""

    forkable = True  # the episode is the sandbox plus plain Python state: AgentEnv.afork copies both
    default_max_steps = 4
    meta_type = AnswerMeta
    """``calc`` then ``submit`` solve every task in 2 steps; 4 leaves room for two retries after an error.
    Successful episodes of trained policies take 2 steps; a policy that has derailed rarely recovers, and
    each extra turn of its (growing) transcript costs generation time in RL and evaluation."""

    def __init__(self, difficulty: int | None = None, **kwargs: object) -> None:
        if difficulty is not None and difficulty not in (1, 2, 3):
            raise ConfigError(f"ToolCalc difficulty must be 1, 2 or 3 (None: mixed), got {difficulty!r}")
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.difficulty = difficulty

    def generate(self, rng: np.random.Generator) -> CalcTask:
        level = self.difficulty or int(rng.integers(1, 4))
        problem = make_problem(rng, level)
        return CalcTask(f"toolcalc-{level}-{problem.template}-{problem.key}", level, problem)

    def prompt(self, task: CalcTask) -> str:
        return (f"Solve this problem. Use the calc tool for the arithmetic, then submit the final number.\n\n"
                f"{task.problem.text}")

    async def setup(self, sb: Sandbox, task: CalcTask) -> None:
        await sb.write_file(CALC_PATH, CALC_SOURCE)

    @tool("Evaluate an arithmetic expression exactly and return the result.")
    async def calc(self, args: CalcArgs) -> str:
        assert self.sandbox is not None
        # -I -S: no site, no user paths, no PYTHON* env (about a fifth of the call; the calculator needs none)
        res = await self.sandbox.exec(["python3", "-I", "-S", CALC_PATH, args.expr], timeout_s=5)
        if res.timed_out:
            return "calc error: the expression took too long to evaluate"
        return truncate((res.stdout or res.stderr).strip(), 2000)

    @tool("Submit the final numeric answer. Ends the episode.")
    async def submit(self, args: AnswerArgs) -> Outcome:
        assert self.task is not None
        given = parse_number(args.answer)
        correct = given is not None and given == self.task.problem.answer
        verdict = "Correct." if correct else "Incorrect."
        return Outcome(f"{verdict} Episode finished.", reward=1.0 if correct else 0.0, done=True,
                       info={"correct": correct, "expected": str(self.task.problem.answer)})

    def oracle(self) -> list[str]:
        assert self.task is not None
        expr = self.task.problem.expression
        return [f'{{"name": "calc", "arguments": {{"expr": "{expr}"}}}}',
                f'{{"name": "submit", "arguments": {{"answer": "{self.task.problem.answer}"}}}}']

    def mistaken_oracle(self) -> list[str]:
        """The reference solution with this env's systematic teacher mistake (an imperfect teacher's demos):
        on a one-step problem (level 1) the calculator call is skipped and the first number of the problem's
        expression is submitted; on longer problems the expression's first operator is swapped
        (``OPERATOR_SWAP``) and the calculator's result of that wrong expression is submitted. Nearly every
        such answer is wrong (1 in ~3,000 seeds: a swap gives the same number, as 2*2 and 2+2 do), so the
        env's reward tells these demos from correct ones."""
        assert self.task is not None
        problem = self.task.problem
        if self.task.level == 1:
            first = re.search(r"\d+", problem.expression)
            assert first is not None
            return [f'{{"name": "submit", "arguments": {{"answer": "{first.group()}"}}}}']
        op = _FIRST_OPERATOR.search(problem.expression)
        assert op is not None
        expr = problem.expression[: op.start()] + OPERATOR_SWAP[op.group()] + problem.expression[op.end():]
        value = evaluate(expr)
        answer = str(value.numerator) if value.denominator == 1 else f"{value.numerator}/{value.denominator}"
        return [f'{{"name": "calc", "arguments": {{"expr": "{expr}"}}}}',
                f'{{"name": "submit", "arguments": {{"answer": "{answer}"}}}}']

