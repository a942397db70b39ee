"""``envfarm/SqlQuery-v0``: answer a question about a generated SQLite database with read-only SQL.

Each seed draws a schema variant (a shop, a bookstore, a parts wholesaler: same shape, different names; see
``sql_data.py``), its rows (tens to a few hundred) and a question of difficulty 1-3 (or the ``difficulty``
given; see ``sql_questions.py``). The host computes the answer from the same data in Python and makes sure
it is unique (argmax questions are redrawn on ties). ``setup`` writes the data as JSON plus a stdlib helper
(``sql_program.py``) into the sandbox, which builds the database file; the sandbox needs no randomness.

Tools: ``list_tables``, ``describe(table)``, ``query(sql)`` (one SELECT; the database is opened read-only,
with ``PRAGMA query_only`` and an authorizer that denies writes, ATTACH and PRAGMA; results are a compact
text table of at most 50 rows, with a note on paging) and ``submit(answer)``, checked after normalisation
(``sql_answers.py``: numbers within 0.006, text case-insensitive, lists as sets when the question says
"in any order").
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from envfarm.errors import ConfigError
from envfarm.sandbox import Sandbox

from ..core import AgentEnv, Outcome, tool, truncate
from ..meta import AnswerMeta
from .sql_data import Database, make_database
from .sql_questions import Question, make_question

HELPER_PATH = "/tmp/envfarm_sql.py"
SPEC_PATH = "/tmp/envfarm_sql_spec.json"
DB_PATH = "/tmp/envfarm_sql/data.db"
HELPER_SOURCE = Path(__file__).with_name("sql_program.py").read_text()
QUERY_TIMEOUT_S = 5.0
MAX_OUTPUT_CHARS = 6000


@dataclass(frozen=True)
class SqlTask:
    task_id: str
    level: int
    db: Database
    question: Question


class NoArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")


class DescribeArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    table: str = Field(min_length=1, max_length=200, description="Name of a table, as listed by list_tables.")


class QueryArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    sql: str = Field(min_length=1, max_length=20_000,
                     description="One read-only SQLite SELECT statement (WITH ... SELECT is fine).")


class AnswerArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    answer: str = Field(max_length=5_000,
                        description="The final answer: a number, a name, or a comma-separated list of names.")


class SqlQueryEnv(AgentEnv[SqlTask]):
    """Questions over a generated SQLite database; tools list_tables, describe, query and submit."""

    forkable = True  # the episode is the sandbox plus plain Python state: AgentEnv.afork copies both
    default_max_steps = 20
    meta_type = AnswerMeta

    def __init__(self, difficulty: int | None = None, **kwargs: object) -> None:
        if difficulty is not None and difficulty not in (1, 2, 3):
            raise ConfigError(f"SqlQuery difficulty must be 1, 2 or 3 (None: mixed), got {difficulty!r}")
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.difficulty = difficulty

    def generate(self, rng: np.random.Generator) -> SqlTask:
        level = self.difficulty or int(rng.integers(1, 4))
        db = make_database(rng)
        question = make_question(db, rng, level)
        digest = hashlib.sha1(f"{db.spec_json()}\n{question.text}".encode()).hexdigest()[:10]
        return SqlTask(f"sqlquery-{level}-{db.schema.key}-{question.template}-{digest}", level, db, question)

    def prompt(self, task: SqlTask) -> str:
        return (f"You can query the SQLite database of {task.db.schema.about} (read-only). Explore its "
                f"tables, answer the question with SQL, then submit the answer.\n\n"
                f"Question: {task.question.text}")

    async def setup(self, sb: Sandbox, task: SqlTask) -> None:
        await sb.write_file(HELPER_PATH, HELPER_SOURCE)
        await sb.write_file(SPEC_PATH, task.db.spec_json())
        await sb.exec(["python3", "-I", HELPER_PATH, "build", SPEC_PATH, DB_PATH], timeout_s=30, check=True)

    async def _helper(self, *args: str) -> str:
        assert self.sandbox is not None
        res = await self.sandbox.exec(["python3", "-I", HELPER_PATH, *args], timeout_s=QUERY_TIMEOUT_S)
        if res.timed_out:
            return (f"SQL error: the query ran longer than {QUERY_TIMEOUT_S:.0f} s and was stopped; simplify "
                    f"it or add LIMIT")
        text = (res.stdout + res.stderr).strip()
        return truncate(text, MAX_OUTPUT_CHARS, "select fewer columns, add LIMIT/OFFSET, or aggregate")

    @tool("List the tables of the database with their row counts.")
    async def list_tables(self, args: NoArgs) -> str:
        return await self._helper("tables", DB_PATH)

    @tool("Show a table's columns (types, keys, references) and its first rows.")
    async def describe(self, args: DescribeArgs) -> str:
        return await self._helper("describe", DB_PATH, args.table)

    @tool("Run one read-only SQL SELECT statement; returns at most 50 rows as a text table.")
    async def query(self, args: QueryArgs) -> str:
        return await self._helper("query", DB_PATH, args.sql)

    @tool("Submit the final answer to the question. Ends the episode.")
    async def submit(self, args: AnswerArgs) -> Outcome:
        assert self.task is not None
        expected = self.task.question.answer
        correct = expected.check(args.answer)
        verdict = "Correct." if correct else "Incorrect."
        return Outcome(f"{verdict} Episode finished.", reward=1.0 if correct else 0.0, done=True,
                       info={"correct": correct, "expected": expected.display})

    def oracle(self) -> list[str]:
        assert self.task is not None
        question = self.task.question
        return [json.dumps({"name": "query", "arguments": {"sql": question.sql}}),
                json.dumps({"name": "submit", "arguments": {"answer": question.answer.display}})]
