"""Why a task's oracle failed when the task itself, not this machine's build or run, is the cause.

Consulted only after an oracle scored below 1 (a task that validates is never given one of these):

``task-incomplete``   the verifier's output names files under ``/tests/`` that its code reads and the task's
                      ``tests/`` folder does not ship (nor ``tests/test.sh`` makes): it fails in any harness
``needs-privileges``  the Dockerfile marks a program setuid or setgid; sandboxes here run every process
                      with ``no_new_privs`` and no capabilities, so the bit is ignored by design

    defect = task_defect(Path("tasks/git-bisect-flaky-test"), verifier_output)   # (reason, detail) or None
"""

from __future__ import annotations

import re
from pathlib import Path

TASK_INCOMPLETE = "task-incomplete"
NEEDS_PRIVILEGES = "needs-privileges"
DEFECTS = (TASK_INCOMPLETE, NEEDS_PRIVILEGES)

_TESTS_PATH = re.compile(r"""["'](/tests/[\w./-]+)["']""")
"""A string literal naming a file in the verifier's folder (``/tests`` in a Harbor container)."""
_SETUID = re.compile(r"\bchmod\s+(?:-\S+\s+)*(?:[ugoa]*\+[rwx]*s[rwx]*|0?[2-7][0-7]{3})\s")
"""``chmod u+s`` / ``g+s`` / ``+s`` or a four-digit mode with the setuid or setgid bit."""


def task_defect(task_dir: Path, output: str) -> tuple[str, str] | None:
    """The task's own defect behind a failing oracle (a reason of :data:`DEFECTS` and a detail), or None.
    ``output``: the failing verifier's output; a missing file counts only when it names it (many verifiers
    try several paths, or skip data they lack)."""
    missing = [p for p in missing_test_files(task_dir) if p.lstrip("/") in output]
    if missing:
        shown = ", ".join(missing[:3]) + (f" and {len(missing) - 3} more" if len(missing) > 3 else "")
        return TASK_INCOMPLETE, f"the verifier reads {shown}, which the task's tests/ folder does not ship"
    setuid = setuid_lines(task_dir / "environment" / "Dockerfile")
    if setuid:
        return NEEDS_PRIVILEGES, (f"the Dockerfile sets a setuid/setgid bit ({setuid[0]}); sandboxes here "
                                  "run with no_new_privs, so the program runs without the privilege")
    return None


def missing_test_files(task_dir: Path) -> list[str]:
    """``/tests/...`` paths named in the verifier's Python and shell files that exist neither in ``tests/``
    nor in a folder that ``tests/test.sh`` names by itself (a script that may generate them there)."""
    tests = task_dir / "tests"
    if not tests.is_dir():
        return []
    script = _read(tests / "test.sh")
    found: set[str] = set()
    for source in sorted(p for p in tests.rglob("*") if p.suffix in (".py", ".sh") and p.is_file()):
        for path in _TESTS_PATH.findall(_read(source)):
            relative = path.removeprefix("/tests/").rstrip("/")
            if not relative or (tests / relative).exists():
                continue
            parent = str(Path(path).parent)
            if parent != "/tests" and re.search(re.escape(parent) + r"(?![\w./-])", script):
                continue  # test.sh names the folder itself: it may make the files
            found.add(path)
    return sorted(found)


def setuid_lines(dockerfile: Path) -> list[str]:
    """The Dockerfile's ``chmod`` commands that set a setuid or setgid bit, shortened."""
    return [m.group(0).strip() for m in _SETUID.finditer(_read(dockerfile) + "\n")]


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8", errors="replace")
    except OSError:
        return ""


__all__ = ["DEFECTS", "NEEDS_PRIVILEGES", "TASK_INCOMPLETE", "missing_test_files", "setuid_lines",
           "task_defect"]
