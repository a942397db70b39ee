"""A small repository in SWE-bench format, built by the tests (and bench/harness.py, bench/canary.py) in a
temp folder.

    envfarm-tests/calc at a fixed base commit: calc/ops.py with two bugs (mul adds, div multiplies),
    tests/test_ops.py with passing add tests; test_patch adds test_mul and test_div (FAIL_TO_PASS).

Commits have fixed authors and dates, so the base commit (and with it every image hash) is the same in every
test run: the env and instance images are built once per machine and found again afterwards.
"""

from __future__ import annotations

import json
import os
import subprocess
import textwrap
from pathlib import Path

# SWE-bench Lite as shared/ lays it out beside the checkout (CI copies it there too; an installed envfarm has
# no checkout, so only tests and benches that run from one use it)
LITE = Path(__file__).resolve().parents[3] / "shared" / "data" / "swe-bench-lite"
REPO = "envfarm-tests/calc"
KEY = "envfarm-tests__calc"
PYTEST = "pytest==9.2.0"
PYTEST_39 = "pytest==8.4.2"  # the last pytest for Python 3.9
GIT_ENV = {
    "GIT_AUTHOR_NAME": "toy",
    "GIT_AUTHOR_EMAIL": "toy@localhost",
    "GIT_COMMITTER_NAME": "toy",
    "GIT_COMMITTER_EMAIL": "toy@localhost",
    "GIT_AUTHOR_DATE": "2001-02-03T04:05:06+0000",
    "GIT_COMMITTER_DATE": "2001-02-03T04:05:06+0000",
    "GIT_CONFIG_NOSYSTEM": "1",
}

FILES = {
    "calc/__init__.py": "from .ops import add, div, mul\n",
    "calc/ops.py": "def add(a, b):\n    return a + b\n\n\ndef mul(a, b):\n    return a + b\n\n\n"
    "def div(a, b):\n    return a * b\n",
    "tests/test_ops.py": "from calc import add\n\n\ndef test_add():\n    assert add(2, 3) == 5\n\n\n"
    "def test_add_negative():\n    assert add(-1, 1) == 0\n",
    "pyproject.toml": textwrap.dedent("""\
        [build-system]
        requires = ["setuptools>=61"]
        build-backend = "setuptools.build_meta"

        [project]
        name = "calc"
        version = "0.1"

        [tool.setuptools]
        packages = ["calc"]

        [tool.pytest.ini_options]
        addopts = "-p no:cacheprovider"
        """),
    "README.md": "calc: a toy repository for envfarm's harness tests\n",
}


def _ctx(text: str) -> str:
    """A diff written with empty lines for blank context lines (" " in a real diff)."""
    return "".join(" \n" if line == "\n" else line for line in text.splitlines(keepends=True))


TEST_PATCH = _ctx("""\
diff --git a/tests/test_ops.py b/tests/test_ops.py
--- a/tests/test_ops.py
+++ b/tests/test_ops.py
@@ -1,4 +1,4 @@
-from calc import add
+from calc import add, div, mul


 def test_add():
@@ -7,3 +7,11 @@ def test_add():

 def test_add_negative():
     assert add(-1, 1) == 0
+
+
+def test_mul():
+    assert mul(3, 4) == 12
+
+
+def test_div():
+    assert div(8, 2) == 4
""")

_MUL_FIX = _ctx("""\
@@ -3,7 +3,7 @@ def add(a, b):


 def mul(a, b):
-    return a + b
+    return a * b


 def div(a, b):
""")
_DIV_FIX = _ctx("""\
@@ -7,4 +7,4 @@ def mul(a, b):


 def div(a, b):
-    return a * b
+    return a / b
""")
_HEAD = "diff --git a/calc/ops.py b/calc/ops.py\n--- a/calc/ops.py\n+++ b/calc/ops.py\n"

_BOTH_FIX = _ctx("""\
@@ -3,8 +3,8 @@ def add(a, b):


 def mul(a, b):
-    return a + b
+    return a * b


 def div(a, b):
-    return a * b
+    return a / b
""")

PATCHES = {
    "gold": _HEAD + _BOTH_FIX,
    # two overlapping hunks: git apply refuses them, `patch --fuzz` (the last fallback) applies them
    "fuzzy": _HEAD + _MUL_FIX + _DIV_FIX,
    "half": _HEAD + _MUL_FIX,
    "bad": "diff --git a/calc/missing.py b/calc/missing.py\n--- a/calc/missing.py\n+++ b/calc/missing.py\n"
    "@@ -1,2 +1,2 @@\n-nothing here\n+something else\n context\n",
    "loop": _HEAD
    + _MUL_FIX.replace("+    return a * b", "+    while True:\n+        pass").replace(
        "@@ -3,7 +3,7 @@", "@@ -3,7 +3,8 @@"
    ),
    "oom": _HEAD + _MUL_FIX.replace("+    return a * b", "+    return len(b'x' * (4 << 30))"),
    # upstream swebench issue 631: only a conftest.py that turns every failed test into a pass
    "conftest": textwrap.dedent("""\
        diff --git a/conftest.py b/conftest.py
        new file mode 100644
        --- /dev/null
        +++ b/conftest.py
        @@ -0,0 +1,9 @@
        +import pytest
        +
        +
        +@pytest.hookimpl(hookwrapper=True)
        +def pytest_runtest_makereport(item, call):
        +    outcome = yield
        +    report = outcome.get_result()
        +    if report.failed:
        +        report.outcome = "passed"
        """),
    "empty": "",
}


def git(repo: Path, *args: str) -> str:
    env = {**os.environ, **GIT_ENV}
    out = subprocess.run(["git", *args], cwd=repo, env=env, check=True, capture_output=True, text=True)
    return out.stdout.strip()


def make_repo(source: Path) -> tuple[Path, str]:
    """Create ``source/envfarm-tests__calc`` (a normal clone) with the base commit and one later commit."""
    repo = source / KEY
    repo.mkdir(parents=True)
    git(repo, "init", "-q", "-b", "main")
    for rel, text in FILES.items():
        (repo / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "base")
    base = git(repo, "rev-parse", "HEAD")
    (repo / "FUTURE.md").write_text("a later commit the harness must not expose\n")
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "future")
    return repo, base


def row(instance_id: str, base: str) -> dict[str, object]:
    """A classic 12-field SWE-bench row of the toy repo."""
    return {
        "repo": REPO,
        "instance_id": instance_id,
        "base_commit": base,
        "patch": PATCHES["gold"],
        "test_patch": TEST_PATCH,
        "problem_statement": "mul adds and div multiplies",
        "hints_text": "",
        "created_at": "2001-02-03T04:05:06Z",
        "version": "0.1",
        "FAIL_TO_PASS": json.dumps(["tests/test_ops.py::test_mul", "tests/test_ops.py::test_div"]),
        "PASS_TO_PASS": json.dumps(["tests/test_ops.py::test_add", "tests/test_ops.py::test_add_negative"]),
        "environment_setup_commit": base,
    }


def write_spec(folder: Path, python: str | None = None) -> Path:
    """The toy repo's environment spec (pytest from the wheelhouse, an editable install by default).

    ``python="3.9"`` makes a spec for the Debian bullseye base: pytest 9 needs 3.10, so it pins the last
    pytest for 3.9, and the pyproject-only editable install needs a setuptools newer than bullseye's."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{KEY}.toml"
    if python is None:
        packages, head = f'"{PYTEST}"', ""
    else:
        packages, head = f'"{PYTEST_39}", "setuptools==75.3.0", "wheel==0.45.1"', f'python = "{python}"\n'
    path.write_text(
        f'repo = "{REPO}"\n\n[defaults]\n{head}packages = [{packages}]\ntest_cmd = "pytest -rA"\n'
    )
    return path
