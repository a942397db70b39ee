"""CodeRepair: the built-in task set (loader, deterministic repos, honest rows) and the env on real docker.

The docker tests use the real harness images (built once per content hash, then found again) and grade
with the harness's own code. ``pytest --durations=0 -k oracle`` shows the time of each built-in task.
"""

from __future__ import annotations

import json
import logging
import textwrap
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import gymnasium
import pytest

import envfarm.envs  # noqa: F401 - registers the envs
from envfarm.envs.checks import run_conformance
from envfarm.envs.code_repair import builtin
from envfarm.envs.code_repair.env import CodeRepairEnv, builtin_instances
from envfarm.errors import DatasetError
from envfarm.harness import HarnessConfig, InstanceReport, Outcome, ResolutionStatus, TestResults
from envfarm.harness.screen import Suspicion

log = logging.getLogger(__name__)
ENV_ID = "envfarm/CodeRepair-v0"
PROJECTS = builtin.load_projects()
TASK_IDS = [p.instance_id(b) for p in PROJECTS for b in p.bugs]


def call(name: str, **arguments: Any) -> str:
    return json.dumps({"name": name, "arguments": arguments})


# ------------------------------------------------------------------------------------------ the task set

GOOD_BUGS = """\
[[bug]]
id = "wrong-sum"
problem_statement = "add(2, 3) gives 6"
[[bug.edit]]
file = "pkg/ops.py"
find = "return a + b"
replace = "return a * b"
[bug.regression_test]
file = "tests/test_regression_sum.py"
content = '''
from pkg.ops import add

def test_add_small():
    assert add(2, 3) == 5
'''
"""


def write_project(root: Path, bugs: str = GOOD_BUGS, name: str = "toy") -> Path:
    folder = root / name
    (folder / "pkg").mkdir(parents=True)
    (folder / "tests").mkdir()
    (folder / "pkg" / "__init__.py").write_text("")
    (folder / "pkg" / "ops.py").write_text(
        "def add(a, b):\n    return a + b\n\n\ndef neg(a):\n    return -a\n")
    (folder / "tests" / "test_ops.py").write_text(
        "from pkg.ops import add, neg\n\n\ndef test_add():\n    assert add(0, 0) == 0\n\n\n"
        "def test_neg():\n    assert neg(2) == -2\n")
    (folder / "bugs.toml").write_text(bugs)
    return folder


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda s: s.replace('find = "return a + b"', 'find = "return"'), r"occurs 2 times in pkg/ops.py"),
        (lambda s: s.replace('find = "return a + b"', 'find = "return a - b"'), r"occurs 0 times"),
        (lambda s: s.replace("tests/test_regression_sum.py", "tests/test_ops.py"), r"must be a new relative"),
        (lambda s: s.replace("tests/test_regression_sum.py", "tests/regression.py"), r"named test_\*\.py"),
        (lambda s: s + s, r"id 'wrong-sum' is used twice"),
        (lambda s: s.replace('id = "wrong-sum"', 'id = "Wrong Sum"'), r"lowercase letters, digits"),
        (lambda s: s.replace('file = "pkg/ops.py"', 'file = "pkg/nope.py"'), r"'pkg/nope.py' is not in"),
        (lambda s: s.replace("problem_statement", "problem"), r"bugs.toml is invalid"),
        (lambda s: s.replace("[[bug.edit]]", "[[bug.edit"), r"cannot read .*bugs.toml"),
    ],
)
def test_loader_errors_name_the_file(tmp_path: Path, change: Any, message: str) -> None:
    folder = write_project(tmp_path, change(GOOD_BUGS))
    with pytest.raises(DatasetError, match=message) as err:
        builtin.load_project(folder)
    assert str(folder) in str(err.value)


def test_loader_rejects_conftest_and_missing_bugs(tmp_path: Path) -> None:
    folder = write_project(tmp_path)
    (folder / "tests" / "conftest.py").write_text("")
    with pytest.raises(DatasetError, match=r"no conftest\.py allowed"):
        builtin.load_project(folder)
    (folder / "tests" / "conftest.py").unlink()
    (folder / "bugs.toml").unlink()
    with pytest.raises(DatasetError, match=r"has no bugs\.toml"):
        builtin.load_project(folder)


def test_rows_of_a_small_project_run_pytest(tmp_path: Path) -> None:
    project = builtin.load_project(write_project(tmp_path / "src"))
    (row,) = builtin.compute_rows([project], builtin.materialize(tmp_path / "repos", [project]))
    assert row["instance_id"] == "envfarm__toy-wrong-sum" and row["repo"] == "envfarm/toy"
    assert json.loads(row["FAIL_TO_PASS"]) == ["tests/test_regression_sum.py::test_add_small"]
    assert json.loads(row["PASS_TO_PASS"]) == ["tests/test_ops.py::test_add", "tests/test_ops.py::test_neg"]
    assert row["patch"].startswith("diff --git a/pkg/ops.py b/pkg/ops.py\n")
    assert "-    return a * b\n+    return a + b\n" in row["patch"]
    assert "new file mode 100644" in row["test_patch"] and "+def test_add_small():" in row["test_patch"]


def test_regression_test_that_passes_on_the_bug_is_rejected(tmp_path: Path) -> None:
    bugs = GOOD_BUGS.replace("assert add(2, 3) == 5", "assert add(2, 2) == 4")  # 2*2 == 2+2
    project = builtin.load_project(write_project(tmp_path, bugs))
    with pytest.raises(DatasetError, match=r"no test in tests/test_regression_sum\.py fails on the buggy"):
        builtin.suite_lists(project, project.bugs[0])


def test_materialize_is_deterministic_and_matches_tasks_jsonl(tmp_path: Path) -> None:
    shas = []
    for run in ("a", "b"):
        dest = builtin.materialize(tmp_path / run, PROJECTS)
        shas.append([r["base_commit"] for p in PROJECTS for r in builtin.base_rows(p, dest / p.key)])
    assert shas[0] == shas[1] and len(shas[0]) == len(TASK_IDS)
    cached = builtin.read_cache()
    assert sorted(cached) == sorted(TASK_IDS), "tasks.jsonl is stale: run python -m " \
        "envfarm.envs.code_repair.builtin --write"
    fresh = {r["instance_id"]: r for p in PROJECTS for r in builtin.base_rows(p, tmp_path / "a" / p.key)}
    for iid, row in fresh.items():
        lists = ("FAIL_TO_PASS", "PASS_TO_PASS")
        assert {k: v for k, v in cached[iid].items() if k not in lists} == \
            {k: v for k, v in row.items() if k not in lists}, iid


@pytest.mark.slow
def test_tasks_jsonl_equals_a_fresh_computation(tmp_path: Path) -> None:
    fresh = builtin.compute_rows(PROJECTS, builtin.materialize(tmp_path, PROJECTS))
    assert fresh == [builtin.read_cache()[r["instance_id"]] for r in fresh], \
        "tasks.jsonl is stale: run python -m envfarm.envs.code_repair.builtin --write"
    assert len(PROJECTS) >= 1 and len(fresh) == len(TASK_IDS)


# ------------------------------------------------------------------------------------------ the env (docker)


def _report(f2p_ok: int, f2p_bad: int, p2p_bad: int, resolved: bool = False) -> InstanceReport:
    tests = TestResults(tuple(f"ok{i}" for i in range(f2p_ok)), tuple(f"bad{i}" for i in range(f2p_bad)),
                        ("p2p",), tuple(f"broken{i}" for i in range(p2p_bad)))
    outcome = Outcome.RESOLVED if resolved else Outcome.UNRESOLVED
    return InstanceReport("x", "m", outcome, ResolutionStatus.NO, True, True, tests)


def _bare_env(partial_credit: bool, strict: bool = False) -> CodeRepairEnv:
    env = CodeRepairEnv.__new__(CodeRepairEnv)
    env.partial_credit = partial_credit
    env.harness = HarnessConfig(run_id="t", strict=strict)
    return env


def test_partial_credit_counts_fail_to_pass_when_nothing_broke() -> None:
    full, part = _bare_env(False), _bare_env(True)
    assert full._reward(_report(1, 1, 0)) == 0.0 and full._reward(_report(2, 0, 0, resolved=True)) == 1.0
    assert part._reward(_report(1, 3, 0)) == 0.25
    assert part._reward(_report(3, 1, 1)) == 0.0  # a previously passing test broke
    assert part._reward(_report(2, 0, 0, resolved=True)) == 1.0
    suspect = replace(_report(1, 3, 0), suspicions=(Suspicion("trace-hook", "pkg/__init__.py"),))
    assert part._reward(suspect) == 0.25 and _bare_env(True, strict=True)._reward(suspect) == 0.0



@pytest.fixture(scope="module")
def env() -> Iterator[CodeRepairEnv]:
    made = gymnasium.make(ENV_ID, backend="docker")
    try:
        yield made.unwrapped  # type: ignore[misc]
    finally:
        made.close()


def play(env: CodeRepairEnv, actions: list[str]) -> tuple[float, bool, bool, dict[str, Any], list[str]]:
    reward, terminated, truncated, info, seen = 0.0, False, False, {}, []
    for action in actions:
        obs, reward, terminated, truncated, info = env.step(action)
        seen.append(obs)
        if terminated or truncated:
            break
    return reward, terminated, truncated, info, seen


@pytest.mark.docker
@pytest.mark.parametrize("instance_id", TASK_IDS)
def test_oracle_resolves_every_builtin_task(env: CodeRepairEnv, instance_id: str) -> None:
    obs, info = env.reset(options={"instance_id": instance_id})
    assert info["task_id"] == instance_id and "<issue>" in obs and "submit" in obs
    reward, terminated, _, info, seen = play(env, env.oracle())
    assert terminated and reward == 1.0, (seen, info)
    assert info["resolved"] and not info["tests"]["FAIL_TO_PASS"]["failure"]
    assert "infra_error" not in info


@pytest.mark.docker
def test_garbage_and_empty_patches_are_not_resolved(env: CodeRepairEnv) -> None:
    env.reset(options={"instance_id": "envfarm__lrucache-get-does-not-refresh"})
    reward, terminated, _, info, _ = play(env, [call("submit")])
    assert terminated and reward == 0.0 and not info["resolved"] and "infra_error" not in info
    env.reset(options={"instance_id": "envfarm__lrucache-get-does-not-refresh"})
    delete = "python3 - <<'EOF'\nimport re,pathlib\np=pathlib.Path('lrucache/cache.py')\n" \
        "p.write_text(re.sub(r'    def resize.*?\\n\\n(?=    def )', '', p.read_text(), flags=re.S))\nEOF"
    reward, terminated, _, info, seen = play(env, [call("bash", command=delete), call("submit")])
    assert "def resize" in info["patch"] and info["patch"].count("\n-") > 3, seen
    assert terminated and reward == 0.0 and not info["resolved"]
    assert info["tests"]["PASS_TO_PASS"]["failure"], "deleting resize must break passing tests"


@pytest.mark.docker
def test_tampering_with_tests_does_not_resolve(env: CodeRepairEnv) -> None:
    env.reset(options={"instance_id": "envfarm__lrucache-resize-off-by-one"})
    conftest = textwrap.dedent("""\
        import pytest

        @pytest.hookimpl(hookwrapper=True)
        def pytest_runtest_makereport(item, call):
            outcome = yield
            report = outcome.get_result()
            if report.failed:
                report.outcome = "passed"
        """)
    reward, terminated, _, info, _ = play(env, [call("create", path="conftest.py", content=conftest),
                                                call("submit")])
    assert terminated and reward == 0.0 and not info["resolved"]
    assert any("conftest" in f for f in info["findings"])


@pytest.mark.docker
def test_tools_and_malformed_arguments(env: CodeRepairEnv) -> None:
    env.reset(options={"instance_id": "envfarm__lrucache-get-does-not-refresh"})
    steps = [
        (call("view", path="."), "lrucache/cache.py"),
        (call("view", path="lrucache/cache.py", start_line=1, end_line=3), "lines 1-3 of"),
        (call("view", path="nope.py"), "Error: /workspace/testbed/nope.py does not exist"),
        (call("search", pattern="def resize"), "lrucache/cache.py:"),
        (call("search", pattern="no_such_text_xyz"), "No matches"),
        (call("str_replace", path="lrucache/cache.py", old_str="return value", new_str="x"), "occurs 3"),
        (call("str_replace", path="lrucache/cache.py", old_str="not there", new_str="x"), "was not found"),
        (call("str_replace", path="nope.py", old_str="a", new_str="b"), "does not exist"),
        (call("bash"), "Error: bad arguments for bash"),
        (call("view", start_line=0), "Error: bad arguments for view"),
        (call("create", path="x.py"), "Error: bad arguments for create"),
        (call("run_tests", paths="tests"), "Error: bad arguments for run_tests"),
        (call("bash", command="sleep 5", timeout_s=1), "[killed: the command ran longer than 1 s]"),
        (call("bash", command="seq 1 100000"), "more characters truncated"),
        (call("run_tests", paths=["tests/test_cache.py"]), "passed"),
    ]
    for action, expected in steps:
        obs, reward, terminated, truncated, info = env.step(action)
        assert expected in obs, (action, obs[:500])
        assert reward == 0.0 and not terminated and not truncated and "infra_error" not in info


@pytest.mark.docker
def test_step_limit_grades_the_workspace() -> None:
    env = CodeRepairEnv(backend="docker", max_episode_steps=2, partial_credit=True,
                        instance_ids=["envfarm__lrucache-get-does-not-refresh"])
    try:
        env.reset(seed=123)
        fix = call("str_replace", path="lrucache/cache.py", old_str="        self._hits += 1\n",
                   new_str="        self._hits += 1\n        self._data.move_to_end(key)\n")
        reward, terminated, truncated, info, seen = play(env, [fix, call("view", path="README")])
        assert truncated and not terminated and reward == 1.0 and info["step_limit"], seen
        assert "step limit reached" in seen[-1]
    finally:
        env.close()


@pytest.mark.docker
def test_seed_maps_to_task_index(env: CodeRepairEnv) -> None:
    n = len(builtin_instances()[0])
    _, a = env.reset(seed=3)
    _, b = env.reset(seed=3 + n)
    assert a["task_id"] == b["task_id"] == TASK_IDS[3 % n]


@pytest.mark.docker
@pytest.mark.slow
def test_conformance() -> None:
    n = len(TASK_IDS)
    report = run_conformance(ENV_ID, backend="docker", seeds=n, leak_episodes=4)
    report.log(log)
    assert not report.failures, report.failures
