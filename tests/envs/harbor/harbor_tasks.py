"""Small Harbor task folders written for tests (modelled on real ones; they run on the envfarm base image)."""

from __future__ import annotations

from pathlib import Path

PASS_IF_DONE = """#!/bin/bash
mkdir -p /logs/verifier
if [ "$(cat /workspace/answer.txt 2>/dev/null)" = "42" ]; then echo 1 > /logs/verifier/reward.txt
else echo 0 > /logs/verifier/reward.txt; fi
"""
SOLVE = """#!/bin/bash
cat /solution/answer.txt > /workspace/answer.txt
"""
TOML = """version = "1.0"

[task]
name = "tests/{name}"

[verifier]
timeout_sec = {verifier_timeout}

[verifier.env]
GREETING = "hello"

[agent]
timeout_sec = 60.0

[environment]
build_timeout_sec = 60.0
cpus = 1
memory_mb = {memory_mb}
storage_mb = 256
gpus = 0
allow_internet = {internet}

[environment.env]
[solution.env]
"""


def write_task(root: Path, name: str, *, test_sh: str = PASS_IF_DONE, solve: bool = True,
               verifier_timeout: float = 60.0, memory_mb: int = 512, internet: bool = False,
               toml: str | None = None, extra_tests: dict[str, str] | None = None) -> Path:
    """A task folder ``root/name``: answer 42 in /workspace/answer.txt."""
    folder = root / name
    (folder / "tests").mkdir(parents=True)
    (folder / "environment").mkdir()
    (folder / "environment" / "Dockerfile").write_text("FROM python:3.11-slim\nWORKDIR /workspace\n")
    (folder / "instruction.md").write_text(f"Task {name}: write 42 into /workspace/answer.txt.\n")
    (folder / "task.toml").write_text(toml if toml is not None else TOML.format(
        name=name, verifier_timeout=verifier_timeout, memory_mb=memory_mb, internet=str(internet).lower()))
    (folder / "tests" / "test.sh").write_text(test_sh)
    for rel, text in (extra_tests or {}).items():
        (folder / "tests" / rel).write_text(text)
    if solve:
        (folder / "solution").mkdir()
        (folder / "solution" / "solve.sh").write_text(SOLVE)
        (folder / "solution" / "answer.txt").write_text("42\n")
    return folder
