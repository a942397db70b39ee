"""The catalogue run: packages file, one JSONL per project, catalogue.json, failures isolated, resume."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest

from envfarm.envs.code_repair.factory import catalogue as cat
from envfarm.envs.code_repair.factory.mine import MineConfig, MineReport, PackageReport
from envfarm.errors import ConfigError, PackageNotFound, TaskFactoryError


def test_packages_file_lines_comments_and_errors(tmp_path: Path) -> None:
    f = tmp_path / "p.txt"
    f.write_text("# a list\ntoolz==1.0.0   # in-package tests\n\nPython_Slugify==9.2.0\n")
    assert cat.read_packages_file(f) == ("toolz==1.0.0", "python-slugify==9.2.0")
    f.write_text("toolz==1.0.0\nattrs\n")
    with pytest.raises(ConfigError, match=r"p\.txt:2: .*NAME==VERSION"):
        cat.read_packages_file(f)
    f.write_text("# nothing\n")
    with pytest.raises(ConfigError, match="names no package"):
        cat.read_packages_file(f)


@pytest.mark.parametrize(("error", "code"), [
    (TaskFactoryError("x==1: doctest-only suite (its tests are ...): skipped"), "doctest-only"),
    (TaskFactoryError("x==1: the sdist ships no tests (tests)"), "no-tests"),
    (PackageNotFound("no source distribution of x==1"), "no-sdist"),
    (TaskFactoryError("x==1: the test environment did not build (ImageError: ...)"), "env-build"),
    (TaskFactoryError("x==1: no test of the sdist passes in its environment"), "no-passing-tests"),
    (TaskFactoryError("x==1: the baseline test run did not finish within 600s"), "baseline-timeout"),
    (TaskFactoryError("something new"), "error"),
])
def test_reason_codes(error: Exception, code: str) -> None:
    assert cat.reason_code(error) == code


def _report(config: MineConfig, rows: int) -> MineReport:
    pkg = PackageReport(config.packages[0], 30, 20, 20, rows, rows, rows, 8, 0.5, 3.0, 9.0, {"kept": rows},
                        "in-package", True, 2)
    return MineReport(config.out, rows, (pkg,), 12.0, 2.0, ())


def test_one_failure_never_stops_the_others_and_a_rerun_resumes(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    calls: list[str] = []
    broken = {"b": True}

    async def fake_mine(config: MineConfig, progress: object = None) -> MineReport:
        name = config.packages[0].split("==")[0]
        calls.append(name)
        assert config.jobs == 1 and config.out == tmp_path / "cat" / f"pypi__{name}.jsonl"
        if name == "notests":
            raise TaskFactoryError("notests==1: the sdist ships no tests (none)")
        if name == "crashy" and broken["b"]:
            raise RuntimeError("daemon went away")
        config.out.write_text('{"instance_id": "x"}\n' * 3)
        return _report(config, 3)

    monkeypatch.setattr(cat, "mine", fake_mine)
    packages = ("good==1.0", "notests==1", "crashy==2")
    config = MineConfig(packages=packages, out=tmp_path / "cat", jobs=2, max_tasks=3)
    events: list[str] = []
    report = asyncio.run(cat.catalogue(config, on_project=lambda e: events.append(e.package)))
    assert [(p.package, p.status, p.tasks, p.reason) for p in report.projects] == [
        ("good==1.0", "done", 3, ""), ("notests==1", "skipped", 0, "no-tests"),
        ("crashy==2", "failed", 0, "error")]
    assert sorted(events) == sorted(packages) and report.tasks == 3
    data = json.loads((tmp_path / "cat" / "catalogue.json").read_text())
    assert data["summary"]["tasks"] == 3 and data["summary"]["skipped"] == {"notests==1": "no-tests"}
    assert "daemon went away" in data["summary"]["failed"]["crashy==2"]
    assert data["projects"][0]["report"]["origin"] == "in-package" and data["projects"][0]["file"] == \
        "pypi__good.jsonl"

    calls.clear()
    broken["b"] = False
    again = asyncio.run(cat.catalogue(config))
    assert calls == ["crashy"]  # done and skipped projects are reused; the failed one runs again
    assert [p.status for p in again.projects] == ["done", "skipped", "done"] and again.tasks == 6

    calls.clear()
    asyncio.run(cat.catalogue(config, retry_skipped=True))  # after an upgrade: the skipped project again
    assert calls == ["notests"]

    calls.clear()
    asyncio.run(cat.catalogue(config.model_copy(update={"max_tasks": 5})))
    assert sorted(calls) == ["crashy", "good", "notests"]  # other settings: every project again


def test_out_must_be_a_folder(tmp_path: Path) -> None:
    config = MineConfig(packages=("a==1",), out=tmp_path / "tasks.jsonl")
    with pytest.raises(ConfigError, match="is a folder"):
        asyncio.run(cat.catalogue(config))


def _row(iid: str) -> dict[str, object]:
    return {"instance_id": iid, "repo": "pypi/x", "base_commit": "a" * 40, "patch": "", "test_patch": "t",
            "problem_statement": "p", "version": "1", "FAIL_TO_PASS": "[]", "PASS_TO_PASS": "[]",
            "environment_setup_commit": "b" * 40, "created_at": "2024-01-01"}


def test_catalogue_tasks_reads_a_catalogue_folder_not_its_state(tmp_path: Path) -> None:
    from envfarm.envs.code_repair.factory.sources import catalogue_tasks
    from envfarm.errors import DatasetError

    folder = tmp_path / "cat"
    (folder / "pypi__b.jsonl.work" / "pypi__b").mkdir(parents=True)
    (folder / "pypi__b.jsonl.work" / "pypi__b" / "mutants.jsonl").write_text('{"id": "x"}\n')
    (folder / "pypi__a.jsonl").write_text(json.dumps(_row("a-1")) + "\n" + json.dumps(_row("a-2")) + "\n")
    (folder / "pypi__b.jsonl").write_text(json.dumps(_row("b-1")) + "\n")
    (folder / "pypi__c.jsonl").write_text("")  # a project that gave no task
    (folder / "catalogue.json").write_text('{"summary": {}, "projects": []}')
    found = catalogue_tasks(folder)
    assert found is not None and [i.instance_id for i in found] == ["a-1", "a-2", "b-1"]
    assert catalogue_tasks(folder / "pypi__b.jsonl") is None  # a file: load_instances reads it
    (folder / "pypi__d.jsonl").write_text(json.dumps(_row("a-1")) + "\n")
    with pytest.raises(DatasetError, match="in two of its JSONL files"):
        catalogue_tasks(folder)


def test_a_recipe_override_is_part_of_its_projects_settings(tmp_path: Path) -> None:
    """A project skipped before its recipe table was written is tried again once it has one."""
    recipes = tmp_path / "recipes.toml"
    recipes.write_text('[defaults]\n\n[packages.foo-bar]\nignore = ["tests/test_slow.py"]\n')
    config = MineConfig(packages=("Foo_Bar==1", "other==2"), out=tmp_path / "cat", recipes=recipes)
    assert cat.settings_of(config, "Foo_Bar==1")["recipe"] == {"ignore": ["tests/test_slow.py"]}
    assert "recipe" not in cat.settings_of(config, "other==2")
    assert cat.settings_of(config, "other==2") == cat.settings_of(config)
