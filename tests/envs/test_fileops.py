"""FileOps: the verifier compares the workspace state (not the commands), near misses fail, conformance."""

from __future__ import annotations

import json
import logging
import shlex
from collections.abc import Callable, Iterator
from typing import Any

import gymnasium
import numpy as np
import pytest
from gymnasium.utils.env_checker import check_env

import envfarm.envs  # noqa: F401 - registers the envs
from envfarm.envs.checks import run_conformance
from envfarm.envs.tool_use.fileops import FileOpsEnv, FileTask, state_diff
from envfarm.envs.tool_use.fileops_tasks import OPS

log = logging.getLogger(__name__)
ENV_ID = "envfarm/FileOps-v0"


def call(name: str, **arguments: Any) -> str:
    return json.dumps({"name": name, "arguments": arguments})


def bash(command: str) -> str:
    return call("bash", command=command)


@pytest.fixture
def env() -> Iterator[FileOpsEnv]:
    made = gymnasium.make(ENV_ID, backend="bwrap")
    try:
        yield made.unwrapped  # type: ignore[misc]
    finally:
        made.close()


def seed_with(env: FileOpsEnv, kind: str, start: int = 0) -> int:
    """The first seed from ``start`` whose task includes an operation of ``kind``."""
    for seed in range(start, start + 500):
        task = env.generate(np.random.default_rng(seed))
        if any(op.kind == kind for op in task.ops):
            return seed
    raise AssertionError(f"no task with {kind}")


# ------------------------------------------------------------------------------------- host-side only


def test_tasks_are_deterministic_and_always_change_the_tree() -> None:
    env = FileOpsEnv(backend="bwrap")
    kinds: set[str] = set()
    for seed in range(150):
        task = env.generate(np.random.default_rng(seed))
        assert task == env.generate(np.random.default_rng(seed))
        assert len(task.ops) == task.level and len({op.kind for op in task.ops}) == task.level
        kinds.update(op.kind for op in task.ops)
        initial = {p: ("file", None) for p, _ in task.files}
        assert any(state_diff(task.expected, initial).values())
        assert 15 <= len(task.files) <= 40
    assert kinds == set(OPS)


def test_state_diff_names_missing_extra_and_changed_paths() -> None:
    expected = {"a": ("dir",), "a/x": ("file", "1"), "b.tar.gz": ("tar.gz", (("b/y", "2"),))}
    actual = {"a": ["dir"], "a/x": ["file", "9"], "b.tar.gz": ["tar.gz", [["b/y", "2"]]], "c": ["dir"]}
    assert state_diff(expected, actual) == {"missing": [], "extra": ["c"], "changed": ["a/x"]}
    assert state_diff(expected, {}) == {"missing": ["a", "a/x", "b.tar.gz"], "extra": [], "changed": []}


# ------------------------------------------------------------------------------------------ in bwrap


@pytest.mark.bwrap
@pytest.mark.slow
def test_conformance_suite_passes() -> None:
    """check_env, determinism, the oracle on 200 seeds (>= 99%), malformed actions, leaks, AsyncVectorEnv."""
    report = run_conformance(ENV_ID, backend="bwrap", seeds=200)
    report.log(log)
    assert not report.failures, report.failures


@pytest.mark.bwrap
def test_oracle_solves_every_operation_kind(env: FileOpsEnv) -> None:
    kinds: set[str] = set()
    for seed in range(30):
        env.reset(seed=seed)
        assert env.task is not None
        kinds.update(op.kind for op in env.task.ops)
        for action in env.oracle():
            _, reward, terminated, _, info = env.step(action)
        assert reward == 1.0 and terminated, (seed, info.get("diff"))
    assert kinds == set(OPS)


@pytest.mark.bwrap
def test_reset_is_deterministic(env: FileOpsEnv) -> None:
    listing = "find . -printf '%y %p %s\\n' | sort; cat $(find . -type f | sort) | sha256sum"
    first = [(env.reset(seed=s)[0], env.step(bash(listing))[0]) for s in (5, 6)]
    again = [(env.reset(seed=s)[0], env.step(bash(listing))[0]) for s in (5, 6)]
    assert first == again and first[0] != first[1]


@pytest.mark.bwrap
def test_submitting_the_untouched_tree_scores_zero(env: FileOpsEnv) -> None:
    for seed in range(5):
        env.reset(seed=seed)
        _, reward, terminated, _, info = env.step(call("submit"))
        assert reward == 0.0 and terminated and info["correct"] is False and any(info["diff"].values())


@pytest.mark.bwrap
def test_bad_actions_and_failing_commands_are_observations(env: FileOpsEnv) -> None:
    env.reset(seed=0)
    cases = [
        ("please do it", "No tool call"),
        (call("rm"), "unknown tool"),
        (call("bash"), "command: Field required"),
        (call("bash", command=""), "at least 1 character"),
        (call("bash", command=["ls"]), "valid string"),
        (call("submit", force=True), "Extra inputs"),
        (bash("cat no-such-file"), "[exit code 1]"),
        (bash("echo out; echo err >&2; exit 7"), "out\n[stderr]\nerr\n[exit code 7]"),
        (bash("seq 1 100000"), "more characters truncated"),
        (bash("true"), "(no output)"),
    ]
    for action, expected in cases:
        obs, reward, terminated, truncated, info = env.step(action)
        assert expected in obs, (action, obs)
        assert reward == 0.0 and not terminated and not truncated and "infra_error" not in info


@pytest.mark.bwrap
def test_a_command_past_its_timeout_is_killed_not_fatal() -> None:
    made = gymnasium.make(ENV_ID, backend="bwrap", command_timeout_s=0.5)
    try:
        made.reset(seed=0)
        obs, _, terminated, truncated, info = made.step(bash("sleep 30"))
        assert "ran longer than 0.5 s" in obs and "infra_error" not in info
        assert not terminated and not truncated
        assert made.step(bash("echo still here"))[0] == "still here"
    finally:
        made.close()


@pytest.mark.bwrap
def test_near_misses_score_zero_with_a_diff(env: FileOpsEnv) -> None:
    env.reset(seed=0)
    for action in env.oracle()[:-1]:
        env.step(action)
    env.step(bash("cp README.md README.md.orig"))  # one file left behind
    _, reward, _, _, info = env.step(call("submit"))
    assert reward == 0.0 and info["diff"] == {"missing": [], "extra": ["README.md.orig"], "changed": []}

    env.reset(seed=seed_with(env, "archive_dir"))
    assert env.task is not None
    folder = env.task.layout.logs_dir
    for action in env.oracle()[:-1]:
        env.step(action.replace(f" && rm -r {folder}", ""))  # archived, but the folder is still there
    _, reward, _, _, info = env.step(call("submit"))
    assert reward == 0.0 and folder in info["diff"]["extra"] and not info["diff"]["missing"]

    wrong_archives = [f"cd {folder} && tar -czf ../{folder}.tar.gz . && cd .. && rm -r {folder}",  # no prefix
                      f"tar -cf {folder}.tar.gz {folder} && rm -r {folder}"]  # not gzip-compressed
    for wrong in wrong_archives:
        env.reset(seed=seed_with(env, "archive_dir"))
        assert env.task is not None
        for op in env.task.ops:
            env.step(bash(wrong if op.kind == "archive_dir" else op.command))
        _, reward, _, _, info = env.step(call("submit"))
        assert reward == 0.0 and info["diff"] == {"missing": [], "extra": [], "changed": [f"{folder}.tar.gz"]}

    env.reset(seed=seed_with(env, "set_config"))
    assert env.task is not None
    config = env.task.layout.config
    old, new = (dict(env.task.files)[config].decode().splitlines(),
                env.task.target.files[config].decode().splitlines())
    (was, wanted), = [(a, b) for a, b in zip(old, new, strict=True) if a != b]
    for op in env.task.ops:
        if op.kind != "set_config":
            env.step(bash(op.command))
    env.step(bash(f"sed -i 's|^{was}$|{wanted.replace(' = ', '=')}|' {config}"))  # the value, not the format
    assert wanted.split(" = ")[1] in env.step(bash(f"cat {config}"))[0]
    _, reward, _, _, info = env.step(call("submit"))
    assert reward == 0.0 and info["diff"] == {"missing": [], "extra": [], "changed": [config]}


def _alternatives(task: FileTask) -> dict[str, Callable[[], str]]:
    """For each operation kind, a command reaching the same state another way than the oracle."""
    lay, before, after = task.layout, dict(task.files), task.target.files

    def created() -> str:
        path = next(p for p in after if p.startswith(lay.new_dir + "/"))
        return f"mkdir {lay.new_dir} && cat > {path} <<'EOF'\n{after[path].decode()}EOF"

    def edited() -> str:
        old, new = before[lay.config].decode(), after[lay.config].decode()
        script = (f"import pathlib; p = pathlib.Path({lay.config!r}); "
                  f"p.write_text({new!r}) if p.read_text() == {old!r} else None")
        return f"python3 -c {shlex.quote(script)}"

    gone = sorted(set(before) - set(after) - {p for p in before if p.startswith(lay.logs_dir + "/")})
    sub = next(iter({p.rsplit("/", 1)[0] for p in after if p.endswith(".csv")}), "")
    logs = lay.logs_dir
    archive = f"import tarfile\nwith tarfile.open('{logs}.tar.gz', 'w:gz') as t: t.add('{logs}', './{logs}')"
    line = after[lay.changelog].decode().splitlines()[-1] if lay.changelog in after else ""
    return {
        "create": created,
        "rename_ext": lambda: f"find {lay.text_dir} -maxdepth 1 -name '*.txt' -exec sh -c "
                              "'for f; do mv \"$f\" \"${f%.txt}.md\"; done' _ {} +",
        "move_glob": lambda: f"mkdir {sub} && find {lay.data_dir} -maxdepth 1 -name '*.csv' "
                             f"-exec mv -t {sub} {{}} +",
        "delete_match": lambda: "rm -f " + " ".join(p for p in gone if p.startswith(lay.scratch_dir + "/")),
        "set_config": edited,
        "append_line": lambda: f"echo {shlex.quote(line)} | tee -a {lay.changelog} > /dev/null",
        "archive_dir": lambda: f"python3 -c {shlex.quote(archive)} && rm -rf {lay.logs_dir}",
        "sort_unique": lambda: f"sort {lay.word_list} | uniq > /tmp/w && cat /tmp/w > {lay.word_list} "
                               "&& rm /tmp/w",
    }


@pytest.mark.bwrap
def test_other_commands_reaching_the_target_state_are_accepted() -> None:
    made = gymnasium.make(ENV_ID, backend="bwrap", difficulty=3)
    env: FileOpsEnv = made.unwrapped  # type: ignore[assignment]
    try:
        kinds: set[str] = set()
        for seed in range(12):
            env.reset(seed=seed)
            assert env.task is not None
            alternatives = _alternatives(env.task)
            for op in reversed(env.task.ops):  # another order, too
                obs = env.step(bash(alternatives[op.kind]()))[0]
                assert "[exit code" not in obs, (op.kind, obs)
                kinds.add(op.kind)
            _, reward, _, _, info = env.step(call("submit"))
            assert reward == 1.0, (seed, [op.kind for op in env.task.ops], info["diff"])
        assert kinds == set(OPS)
    finally:
        made.close()


@pytest.mark.bwrap
@pytest.mark.filterwarnings("ignore:.*render fps")  # AgentEnv.metadata declares no render_fps (text env)
def test_check_env_passes(env: FileOpsEnv) -> None:
    check_env(env)
