"""SqlQuery: unique answers that SQL agrees with, read-only queries, answer normalisation, conformance."""

from __future__ import annotations

import hashlib
import json
import logging
import sqlite3
from collections import Counter
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envfarm.envs  # noqa: F401 - registers the envs
from envfarm.envs.checks import run_conformance
from envfarm.envs.tool_use.sql_answers import Answer, parse_number
from envfarm.envs.tool_use.sql_data import SCHEMAS, make_database
from envfarm.envs.tool_use.sql_questions import TEMPLATES, make_question
from envfarm.envs.tool_use.sqlquery import DB_PATH, SqlQueryEnv

log = logging.getLogger(__name__)
ENV_ID = "envfarm/SqlQuery-v0"


def call(name: str, **arguments: Any) -> str:
    return json.dumps({"name": name, "arguments": arguments})


def first_column(table: str) -> str:
    """The first column of a helper result table (header, rule, rows, count line), comma-joined."""
    rows = table.strip().splitlines()[2:-1]
    return ", ".join(row.split(" | ")[0] for row in rows)


@pytest.fixture
def env() -> Iterator[SqlQueryEnv]:
    made = gymnasium.make(ENV_ID, backend="bwrap")
    try:
        yield made.unwrapped  # type: ignore[misc]
    finally:
        made.close()


# ------------------------------------------------------------------------------------- host-side only


TWELVE, MONEY = Answer.integer(12), Answer.number(Fraction(12345, 1000))


@pytest.mark.parametrize(("answer", "given", "ok"), [
    (TWELVE, "12", True), (TWELVE, "12.0", True), (Answer.integer(1200), "1,200", True),
    (TWELVE, "13", False), (TWELVE, "twelve", False), (TWELVE, "12 13", False),
    (MONEY, "12.35", True), (MONEY, "12.34", True), (MONEY, "12.345000000001", True), (MONEY, "$12.35", True),
    (MONEY, "12.36", False), (Answer.number(Fraction(1234, 100)), "12.33", False),
    (Answer.text("Ada Khan"), "  ada   KHAN. ", True), (Answer.text("Ada Khan"), '"Ada Khan"', True),
    (Answer.text("Ada Khan"), "Ada", False),
    (Answer.ordered(["A b", "C"]), "a b, c", True), (Answer.ordered(["A b", "C"]), "C, A b", False),
    (Answer.ordered(["A b", "C"]), '["A b", "C"]', True), (Answer.ordered(["A b", "C"]), "A b", False),
    (Answer.unordered(["A b", "C"]), "c;\nA B", True), (Answer.unordered(["A b", "C"]), "c, a b, d", False),
])
def test_answers_are_normalised(answer: Answer, given: str, ok: bool) -> None:
    assert answer.check(given) is ok


def test_numbers_parse_leniently_but_singly() -> None:
    assert parse_number("$1,234.50") == Fraction(246_900, 200)
    assert parse_number("84/2") == 42 and parse_number("42 orders") == 42
    assert parse_number("3 or 4") is None and parse_number("none") is None


def _host_db(spec: dict[str, Any]) -> sqlite3.Connection:
    conn = sqlite3.connect(":memory:")
    for table in spec["tables"]:
        conn.execute(table["ddl"])
        marks = ",".join("?" * len(table["rows"][0]))
        conn.executemany(f"INSERT INTO {table['name']} VALUES ({marks})", table["rows"])
    return conn


def test_generated_answers_match_the_reference_sql() -> None:
    """Answers are computed in Python; SQLite running each question's SQL over the same data agrees."""
    rng = np.random.default_rng(1)
    seen: Counter[str] = Counter()
    for i in range(450):
        db = make_database(rng)
        question = make_question(db, rng, level=1 + i % 3)
        seen[question.template] += 1
        rows = _host_db(db.spec()).execute(question.sql).fetchall()
        got = ", ".join(str(row[0]) for row in rows)
        assert question.answer.check(got), (question, got)
    all_templates = {t.__name__ for level in TEMPLATES.values() for t in level}
    assert set(seen) == all_templates, f"never drawn: {all_templates - set(seen)}"


def test_tasks_are_deterministic_and_varied() -> None:
    env = SqlQueryEnv(backend="bwrap")
    tasks = [env.generate(np.random.default_rng(s)) for s in range(60)]
    again = [env.generate(np.random.default_rng(s)) for s in range(60)]
    assert tasks == again
    assert {t.db.schema.key for t in tasks} == {s.key for s in SCHEMAS}
    assert {t.level for t in tasks} == {1, 2, 3}
    assert len({t.task_id for t in tasks}) == len(tasks)
    rows = [len(t.db.persons) + len(t.db.items) + len(t.db.orders) + len(t.db.lines) for t in tasks]
    assert 50 <= min(rows) and max(rows) <= 600, (min(rows), max(rows))


# ------------------------------------------------------------------------------------------ in bwrap


@pytest.mark.bwrap
@pytest.mark.slow
def test_conformance_suite_passes() -> None:
    """check_env, determinism, the oracle on 200 seeds (>= 99%), malformed actions, leaks, AsyncVectorEnv."""
    report = run_conformance(ENV_ID, backend="bwrap", seeds=200)
    report.log(log)
    assert not report.failures, report.failures


@pytest.mark.bwrap
def test_oracle_sql_gives_the_answer_in_the_sandbox(env: SqlQueryEnv) -> None:
    """The sandbox's SQLite agrees with the host-computed answers, and the oracle scores 1."""
    for seed in range(45):
        env.reset(seed=seed)
        assert env.task is not None
        query, submit = env.oracle()
        obs, *_ = env.step(query)
        assert env.task.question.answer.check(first_column(obs)), (seed, env.task.question, obs)
        _, reward, terminated, _, info = env.step(submit)
        assert reward == 1.0 and terminated and "infra_error" not in info


@pytest.mark.bwrap
def test_reset_is_deterministic(env: SqlQueryEnv) -> None:
    first = [env.reset(seed=s)[0] for s in (3, 4)]
    ids = env.task_id(env.task)  # type: ignore[arg-type]
    again = [env.reset(seed=s)[0] for s in (3, 4)]
    assert first == again and first[0] != first[1]
    assert env.task_id(env.task) == ids  # type: ignore[arg-type]
    tables = env.step(call("list_tables"))[0]
    assert tables == env.step(call("list_tables"))[0] and "rows)" in tables


@pytest.mark.bwrap
def test_wrong_answers_score_zero(env: SqlQueryEnv) -> None:
    for seed, wrong in ((0, "no idea"), (1, "-1"), (2, "")):
        env.reset(seed=seed)
        _, reward, terminated, _, info = env.step(call("submit", answer=wrong))
        assert reward == 0.0 and terminated and info["correct"] is False and info["expected"]


@pytest.mark.bwrap
def test_bad_actions_and_bad_sql_are_observations(env: SqlQueryEnv) -> None:
    env.reset(seed=0)
    env.max_episode_steps = 100
    cases = [
        ("not json at all", "No tool call"),
        ('{"name": "query", "arguments": {"sql": "SELECT 1"', "not valid JSON"),
        (call("drop_everything"), "unknown tool"),
        (call("query"), "sql: Field required"),
        (call("query", sql=5), "valid string"),
        (call("query", sql="SELECT 1", limit=3), "Extra inputs"),
        (call("describe", table=""), "at least 1 character"),
        (call("list_tables", verbose=True), "Extra inputs"),
        (call("describe", table="nope"), "no table named 'nope'"),
        (call("query", sql="SELEC 1"), "syntax error"),
        (call("query", sql="SELECT missing FROM nowhere"), "no such table"),
        (call("query", sql="   "), "empty query"),
    ]
    for action, expected in cases:
        obs, reward, terminated, truncated, info = env.step(action)
        assert expected in obs, (action, obs)
        assert reward == 0.0 and not terminated and not truncated and "infra_error" not in info


@pytest.mark.bwrap
def test_describe_and_paging(env: SqlQueryEnv) -> None:
    env.reset(seed=0)
    assert env.task is not None
    s = env.task.db.schema
    described = env.step(call("describe", table=s.line.upper()))[0]
    assert f"references {s.order}.id" in described and "the first 3" in described
    obs = env.step(call("query", sql=f"SELECT * FROM {s.line}"))[0]
    assert "50 rows shown" in obs and "LIMIT 50 OFFSET 50" in obs
    assert len(obs.splitlines()) == 2 + 50 + 1


@pytest.mark.bwrap
def test_queries_cannot_change_the_database(env: SqlQueryEnv) -> None:
    env.reset(seed=2)
    env.max_episode_steps = 100
    assert env.task is not None and env.sandbox is not None
    s = env.task.db.schema

    def db_hash() -> str:
        return hashlib.sha256(env._run(env.sandbox.read_file(DB_PATH))).hexdigest()  # type: ignore[union-attr]

    before, count = db_hash(), env.step(call("query", sql=f"SELECT COUNT(*) FROM {s.order}"))[0]
    refused = {
        f"INSERT INTO {s.order} VALUES (9999, 1, '2024-01-01', 'x')": "read-only",
        f"UPDATE {s.item} SET {s.i_price} = 0": "read-only",
        f"DELETE FROM {s.line}": "read-only",
        f"DROP TABLE {s.person}": "read-only",
        "CREATE TABLE t (x)": "read-only",
        "CREATE TEMP TABLE t (x)": "read-only",
        "ATTACH DATABASE '/tmp/other.db' AS other": "read-only",
        "PRAGMA query_only = OFF": "read-only",
        "PRAGMA writable_schema = ON": "read-only",
        "VACUUM INTO '/tmp/copy.db'": "SQL error",
        f"SELECT 1; DROP TABLE {s.person}": "one statement",
        f"SELECT 1; DELETE FROM {s.line}": "one statement",
    }
    for sql, expected in refused.items():
        obs = env.step(call("query", sql=sql))[0]
        assert obs.startswith("SQL error") and expected in obs, (sql, obs)
    assert db_hash() == before
    assert env.step(call("query", sql=f"SELECT COUNT(*) FROM {s.order}"))[0] == count
    listing = env._run(env.sandbox.exec("ls /tmp")).stdout
    assert "other.db" not in listing and "copy.db" not in listing


@pytest.mark.bwrap
def test_read_only_introspection_still_works(env: SqlQueryEnv) -> None:
    env.reset(seed=2)
    assert env.task is not None
    table = env.task.db.schema.order
    for sql in (f"PRAGMA table_info({table})", f"SELECT name FROM pragma_table_info('{table}')",
                "SELECT name FROM sqlite_master WHERE type = 'table'", "SELECT value FROM json_each('[1,2]')",
                "WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 3) "
                "SELECT * FROM c"):
        obs = env.step(call("query", sql=sql))[0]
        assert not obs.startswith("SQL error"), (sql, obs)


@pytest.mark.bwrap
@pytest.mark.filterwarnings("ignore:.*render fps")  # AgentEnv.metadata declares no render_fps (text env)
def test_check_env_passes(env: SqlQueryEnv) -> None:
    check_env(env)
