"""Loading Harbor task folders: fields, defaults, sorting, selection, and errors that name the file."""

from __future__ import annotations

from pathlib import Path

import pytest
from harbor_tasks import write_task

from envfarm.envs.harbor.task import load_task, load_tasks
from envfarm.errors import HarborTaskError, HarborTaskNotFound


def test_a_task_loads_every_field(tmp_path: Path) -> None:
    folder = write_task(tmp_path, "alpha", verifier_timeout=12.5, memory_mb=768, internet=True)
    task = load_task(folder)
    assert task.name == "alpha" and task.title == "tests/alpha"
    assert task.instruction.startswith("Task alpha")
    assert task.verifier_timeout_s == 12.5 and task.agent_timeout_s == 60.0
    assert task.verifier_env == (("GREETING", "hello"),)
    assert task.limits.cpus == 1.0 and task.limits.memory_mb == 768 and task.limits.storage_mb == 256
    assert task.allow_internet and task.has_solution and task.docker_image is None


def test_an_old_style_task_without_tables_gets_defaults(tmp_path: Path) -> None:
    task = load_task(write_task(tmp_path, "old", toml='version = "1.0"\n', solve=False))
    assert task.title == "old" and task.verifier_timeout_s == 600.0 and not task.has_solution
    assert task.limits.memory_mb is None and not task.allow_internet


def test_load_tasks_sorts_selects_and_suggests(tmp_path: Path) -> None:
    for name in ("b-task", "a-task", "c-task"):
        write_task(tmp_path, name)
    (tmp_path / "not-a-task").mkdir()
    assert [t.name for t in load_tasks(tmp_path)] == ["a-task", "b-task", "c-task"]
    assert [t.name for t in load_tasks(tmp_path, ["c-task", "a-task"])] == ["a-task", "c-task"]
    assert [t.name for t in load_tasks(tmp_path / "b-task")] == ["b-task"]
    with pytest.raises(HarborTaskNotFound, match="did you mean 'b-task'"):
        load_tasks(tmp_path, ["b-tsak"])


@pytest.mark.parametrize(("toml", "words"), [
    ("[verifier\n", "not valid TOML"),
    ('[verifier]\ntimeout_sec = "soon"\n', "timeout_sec must be a non-negative number"),
    ("[environment]\nmemory_mb = 1.5\n", "memory_mb must be a whole number"),
    ('[environment]\nallow_internet = "yes"\n', "allow_internet must be true or false"),
    ('verifier = "x"\n', "[verifier] must be a table"),
    ("[verifier.env]\nX = [1]\n", "[verifier.env] X must be a string"),
])
def test_malformed_task_toml_names_the_file_and_the_problem(tmp_path: Path, toml: str, words: str) -> None:
    folder = write_task(tmp_path, "bad", toml=toml)
    with pytest.raises(HarborTaskError) as err:
        load_task(folder)
    assert str(folder / "task.toml") in str(err.value) and words in str(err.value)


@pytest.mark.parametrize("missing", ["task.toml", "instruction.md", "tests/test.sh"])
def test_a_missing_file_is_named(tmp_path: Path, missing: str) -> None:
    folder = write_task(tmp_path, "gap")
    (folder / missing).unlink()
    with pytest.raises(HarborTaskError, match=f"{missing} is missing"):
        load_task(folder)


def test_a_folder_without_tasks_says_so(tmp_path: Path) -> None:
    with pytest.raises(HarborTaskError, match="holds no Harbor task folder"):
        load_tasks(tmp_path)
