"""A failing oracle blamed on the task itself (envs/harbor/defects.py): files its verifier reads that the task
does not ship, and a setuid helper the sandbox ignores by design; on real builds, the reason in the row."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
from harbor_tasks import write_task

from envfarm.envs.harbor.defects import missing_test_files, setuid_lines, task_defect
from envfarm.envs.harbor.validate import REASONS, ValidateConfig

READS_DATA = 'import pathlib\nEXPECTED = "/tests/data/heldout_1.bin"\nFALLBACK = "/tests/data/other.json"\n'
FAILED = "FAILED VERIFY/tests/test_outputs.py::test_heldout[VERIFY/tests/data/heldout_1.bin]"


def test_missing_verifier_files_count_only_when_the_failure_names_them(tmp_path: Path) -> None:
    task = write_task(tmp_path, "t", extra_tests={"test_outputs.py": READS_DATA})
    assert missing_test_files(task) == ["/tests/data/heldout_1.bin", "/tests/data/other.json"]
    reason, detail = task_defect(task, FAILED) or ("", "")
    assert reason == "task-incomplete" and "/tests/data/heldout_1.bin" in detail and "other" not in detail
    assert task_defect(task, "FAILED test_outputs.py::test_area - assert 3 == 4") is None
    (task / "tests" / "data").mkdir()
    (task / "tests" / "data" / "heldout_1.bin").write_bytes(b"x")
    assert task_defect(task, FAILED) is None  # shipped: the oracle failed for another reason


def test_a_folder_test_sh_names_may_be_made_at_run_time(tmp_path: Path) -> None:
    make = "#!/bin/bash\npython3 /tests/gen.py /tests/data\npython3 -m pytest /tests/test_outputs.py\n"
    task = write_task(tmp_path, "t", test_sh=make, extra_tests={"test_outputs.py": READS_DATA})
    assert missing_test_files(task) == [] and task_defect(task, FAILED) is None


@pytest.mark.parametrize(("run", "found"), [
    ("RUN chmod 4755 /usr/local/bin/helper", True),
    ("RUN chown root /x && chmod u+s /x", True),
    ("RUN chmod -R g+rws /srv/shared ", True),
    ("RUN chmod 2755 /usr/bin/wall", True),
    ("RUN chmod 5755 /usr/local/bin/helper", True),
    ("RUN chmod 1777 /scratch", False),
    ("RUN chmod 755 /usr/local/bin/helper", False),
    ("RUN chmod +x /usr/local/bin/helper", False),
    ("RUN chmod 0644 /etc/motd", False),
])
def test_setuid_and_setgid_bits_are_found(tmp_path: Path, run: str, found: bool) -> None:
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text(f"FROM python:3.11-slim\n{run}\nWORKDIR /app\n")
    assert bool(setuid_lines(dockerfile)) is found


ROOT_ONLY = """FROM python:3.11-slim
RUN echo 42 > /root-answer && chmod 600 /root-answer && cp /bin/cat /usr/local/bin/rootcat \\
    && chmod 4755 /usr/local/bin/rootcat
WORKDIR /workspace
"""
ROOTCAT = "#!/bin/bash\nrootcat /root-answer > /workspace/answer.txt\n"
DATA_CHECK = """#!/bin/bash
mkdir -p /logs/verifier
if [ -s /workspace/answer.txt ] && grep -qxF "$(cat /workspace/answer.txt)" "/tests/data/expected.txt"
then echo 1 > /logs/verifier/reward.txt
else echo "FAILED check: /tests/data/expected.txt differs"; echo 0 > /logs/verifier/reward.txt; fi
"""


@pytest.mark.docker
def test_real_oracles_that_fail_on_the_tasks_own_defects(tmp_path: Path) -> None:
    """Built and run for real: a setuid helper gives no privilege in the sandbox (the oracle cannot read the
    root-only answer), and a verifier's data file that the task does not ship; both rows carry the task's
    defect as the reason, and a plainly wrong oracle stays oracle-failed."""
    from envfarm.envs.harbor.validate import validate_tasks

    tasks = tmp_path / "tasks"
    setuid = write_task(tasks, "setuid")
    (setuid / "environment" / "Dockerfile").write_text(ROOT_ONLY)
    (setuid / "solution" / "solve.sh").write_text(ROOTCAT)
    write_task(tasks, "no-data", test_sh=DATA_CHECK)
    wrong = write_task(tasks, "wrong")
    (wrong / "solution" / "answer.txt").write_text("41\n")
    config = ValidateConfig(tasks=tasks, report_dir=tmp_path / "r", run_id="d", max_workers=2)
    rows = {r.task: r for r in asyncio.run(validate_tasks(config)).rows}
    assert {name: (r.oracle_reward, r.reason) for name, r in rows.items()} == {
        "setuid": (0.0, "needs-privileges"), "no-data": (0.0, "task-incomplete"),
        "wrong": (0.0, "oracle-failed")}
    assert "chmod 4755" in rows["setuid"].detail and "/tests/data/expected.txt" in rows["no-data"].detail
    assert {r.reason for r in rows.values()} <= set(REASONS)
