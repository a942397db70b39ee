"""``envfarm tasks export --format harbor``: the built-in tasks as Harbor task directories.

Every exported folder is loaded by Harbor's own task loader (``harbor.models.task.task.Task``) from
.venv-harbor (Python >= 3.12, made by `make setup`); without it the loader test skips, unless
ENVFARM_REQUIRE_HARBOR=1 (CI, .ci/run) makes that a failure. One exported task is then run by hand the way
Harbor runs it: its environment/Dockerfile built, tests/test.sh on the untouched repository (reward 0) and
after solution/solve.sh (reward 1).
"""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest

from envfarm.envs.code_repair import harbor_grade
from envfarm.envs.code_repair.env import CodeRepairEnv
from envfarm.envs.code_repair.harbor_export import Exported, export_harbor

REQUIRE = "ENVFARM_REQUIRE_HARBOR"
HARBOR_PYTHON = Path(__file__).resolve().parents[2] / ".venv-harbor" / "bin" / "python"
LOADER = """
import json, sys
from pathlib import Path
from harbor.models.task.task import Task
out = []
for d in sys.argv[1:]:
    t = Task(Path(d))
    out.append({"dir": d, "name": t.config.task.name, "image": t.config.environment.docker_image,
                "network": t.config.environment.network_mode.value, "instruction": len(t.instruction)})
print(json.dumps(out))
"""


def harbor_python() -> Path:
    if HARBOR_PYTHON.is_file():
        return HARBOR_PYTHON
    why = f"{HARBOR_PYTHON} is missing (`make setup` creates .venv-harbor with Harbor's loader)"
    if os.environ.get(REQUIRE, "") not in ("", "0"):
        pytest.fail(f"{REQUIRE} is set and {why}")
    pytest.skip(f"{why}; {REQUIRE}=1 makes this a failure")


@pytest.fixture(scope="module")
def exported(tmp_path_factory: pytest.TempPathFactory) -> list[Exported]:
    out = tmp_path_factory.mktemp("harbor")
    return asyncio.run(export_harbor(CodeRepairEnv(), out))


@pytest.mark.docker
def test_every_builtin_task_loads_in_harbor(exported: list[Exported]) -> None:
    python = harbor_python()
    assert len(exported) == len(CodeRepairEnv().plans) >= 40
    res = subprocess.run([str(python), "-c", LOADER, *(str(e.folder) for e in exported)],
                         capture_output=True, text=True, timeout=300)
    assert res.returncode == 0, res.stderr[-3000:]
    loaded = {row["dir"]: row for row in json.loads(res.stdout)}
    for e in exported:
        row = loaded[str(e.folder)]
        assert row["image"] == e.image and row["network"] == "no-network" and row["instruction"] > 100
        assert e.canaries >= 1  # the harness's canary count, drawn per task
        for path in ("tests/test.sh", "solution/solve.sh", "environment/Dockerfile"):
            assert (e.folder / path).is_file()


def _docker(*args: str, timeout: float = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["docker", *args], capture_output=True, text=True, timeout=timeout, check=False)


def _verify(folder: Path, tag: str, gold: bool) -> tuple[str, dict[str, object]]:
    solve = "bash /solution/solve.sh && " if gold else ""
    res = _docker("run", "--rm", "--network", "none", "-v", f"{folder / 'tests'}:/tests:ro",
                  "-v", f"{folder / 'solution'}:/solution:ro", tag, "bash", "-c",
                  f"{solve}bash /tests/test.sh >/dev/null && cat /logs/verifier/reward.txt && "
                  "cat /logs/verifier/report.json")
    assert res.returncode == 0, res.stderr[-2000:]
    reward, _, report = res.stdout.partition("\n")
    return reward.strip(), json.loads(report)


@pytest.mark.docker
def test_an_exported_task_grades_gold_one_and_the_bug_zero(exported: list[Exported]) -> None:
    e = exported[0]
    tag = f"envfarm-test/harbor-export-{uuid.uuid4().hex[:8]}"
    built = _docker("build", "-q", "--network", "none", "-t", tag, str(e.folder / "environment"))
    assert built.returncode == 0, built.stderr[-2000:]
    try:
        reward, report = _verify(e.folder, tag, gold=False)
        assert reward == "0" and report[e.instance_id]["resolved"] is False  # type: ignore[index]
        reward, report = _verify(e.folder, tag, gold=True)
        assert reward == "1" and report[e.instance_id]["resolved"] is True  # type: ignore[index]
    finally:
        _docker("rmi", "-f", tag)


def test_the_verifier_fails_a_run_that_drops_or_flips_canaries(tmp_path: Path) -> None:
    config = {"instance_id": "x", "FAIL_TO_PASS": ["t.py::a"], "PASS_TO_PASS": ["t.py::b"],
              "canaries": [{"name": "test_keep_1", "must_pass": True, "module": "t.py"},
                           {"name": "test_drop_2", "must_pass": False, "module": "t.py"}]}
    (tmp_path / "config.json").write_text(json.dumps(config))
    good = "PASSED t.py::a\nPASSED t.py::b\nPASSED t.py::test_keep_1\nFAILED t.py::test_drop_2 - boom\n"
    flipped = good.replace("FAILED t.py::test_drop_2", "PASSED t.py::test_drop_2")
    dropped = "PASSED t.py::a\nPASSED t.py::b\n"
    unfixed = good.replace("PASSED t.py::a", "FAILED t.py::a")
    for log, want in ((good, "1"), (flipped, "0"), (dropped, "0"), (unfixed, "0")):
        (tmp_path / "raw").write_text(log)
        out = tmp_path / "out"
        shutil.rmtree(out, ignore_errors=True)
        harbor_grade.main(str(tmp_path / "config.json"), str(tmp_path / "raw"), "0", str(out))
        assert (out / "reward.txt").read_text().strip() == want, log
        assert (out / "test_output.txt").read_text().startswith(">>>>> Start Test Output")


@pytest.mark.docker
def test_the_cli_exports_the_named_builtin_tasks(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from envfarm.cli import app

    ids = [p.instance.instance_id for p in CodeRepairEnv().plans[:2]]
    res = CliRunner().invoke(app, ["tasks", "export", "--format", "harbor", "--out", str(tmp_path),
                                   "--instance-ids", *ids])
    assert res.exit_code == 0, res.output
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(ids)
    bad = CliRunner().invoke(app, ["tasks", "export", "--format", "zip", "--out", str(tmp_path)])
    assert bad.exit_code != 0 and "harbor" in bad.output


@pytest.mark.docker
@pytest.mark.parametrize("backend", ["bwrap", "docker"])
def test_an_exported_task_runs_again_as_a_harbor_env(exported: list[Exported], backend: str) -> None:
    """The round trip: the exported folder through ``envfarm/Harbor-v0`` on its ``docker_image`` (the
    repository at /testbed moved to the seed the sandbox's workspace starts from): the oracle scores 1,
    an agent that submits at once 0."""
    from envfarm.envs.harbor.validate import run_episode

    folder = exported[-1].folder
    oracle, _ = asyncio.run(run_episode(folder, backend, "oracle"))
    noop, info = asyncio.run(run_episode(folder, backend, "noop"))
    assert (oracle, noop) == (1.0, 0.0), info
