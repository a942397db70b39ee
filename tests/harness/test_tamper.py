"""Tamper rules: each fires on what it names, and none fires on a real gold patch."""

from __future__ import annotations

import pytest

from envfarm.harness import RULES, Instance
from envfarm.harness.patches import parse
from envfarm.harness.specs import eval_script_command
from envfarm.harness.tamper import Context, scan, scan_patch


def edit(path: str, old: str = "a = 1", new: str = "a = 2") -> str:
    return f"diff --git a/{path} b/{path}\n--- a/{path}\n+++ b/{path}\n@@ -1 +1 @@\n-{old}\n+{new}\n"


def add(path: str, text: str = "x = 1", mode: str = "100644") -> str:
    return (
        f"diff --git a/{path} b/{path}\nnew file mode {mode}\n--- /dev/null\n+++ b/{path}\n"
        f"@@ -0,0 +1 @@\n+{text}\n"
    )


def rules(patch: str, ctx: Context | None = None) -> set[tuple[str, str]]:
    return {(f.rule, f.path) for f in scan_patch(patch, ctx or Context())}


def test_no_rule_fires_on_any_lite_gold_patch(lite: list[Instance]) -> None:
    for inst in lite:
        ctx = Context(
            tuple(p for c in parse(inst.test_patch) for p in c.paths),
            eval_script_command(inst.eval_script) or "",
        )
        assert scan_patch(inst.patch, ctx) == [], inst.instance_id


@pytest.mark.parametrize(
    ("patch", "expected"),
    [
        (add("conftest.py"), {("conftest", "conftest.py")}),
        (edit("src/pkg/sub/conftest.py"), {("conftest", "src/pkg/sub/conftest.py")}),
        (edit("pytest.ini", "[pytest]", "[pytest]\naddopts = -p evil"), {("pytest-config", "pytest.ini")}),
        (edit("tox.ini"), {("pytest-config", "tox.ini")}),
        (
            edit("setup.cfg", "[tool:pytest]", "[tool:pytest]\naddopts = -p evil"),
            {("pytest-config", "setup.cfg")},
        ),
        (
            edit(
                "pyproject.toml", "[tool.pytest.ini_options]", "[tool.pytest.ini_options]\naddopts = '-p x'"
            ),
            {("pytest-config", "pyproject.toml")},
        ),
        (
            edit("setup.py", "entry_points={}", "entry_points={'pytest11': ['x = evil']}"),
            {("pytest-plugin", "setup.py")},
        ),
        (
            add("src/pkg.egg-info/entry_points.txt", "[pytest11]"),
            {("pytest-plugin", "src/pkg.egg-info/entry_points.txt")},
        ),
        (add("sitecustomize.py"), {("startup-hook", "sitecustomize.py")}),
        (add("src/usercustomize.py"), {("startup-hook", "src/usercustomize.py")}),
        (add("evil.pth", "import os"), {("startup-hook", "evil.pth")}),
        (add("pytest.py"), {("shadow-module", "pytest.py")}),
        (add("src/_pytest/__init__.py"), {("shadow-module", "src/_pytest/__init__.py")}),
        (add("pluggy/__init__.py"), {("shadow-module", "pluggy/__init__.py")}),
        (edit("tests/test_views.py"), {("test-files", "tests/test_views.py")}),
        (edit("pkg/testing/util.py"), {("test-files", "pkg/testing/util.py")}),
        (edit("test_requests.py"), {("test-files", "test_requests.py")}),
        (add("link", "tests", mode="120000"), {("symlink", "link")}),
        (edit(".git/config"), {("unsafe-path", ".git/config")}),
        (edit("../escape.py"), {("unsafe-path", "../escape.py")}),
    ],
)
def test_each_rule_fires(patch: str, expected: set[tuple[str, str]]) -> None:
    assert rules(patch) == expected
    assert {r for r, _ in expected} <= set(RULES)


def test_context_rules_and_what_stays_allowed() -> None:
    ctx = Context(
        test_files=("sympy/core/tests/test_basic.py", "lib/spec/data.txt"),
        test_command="./tests/runtests.py --settings=test_sqlite x.tests",
        protected=("bin/*",),
    )
    assert rules(edit("tests/runtests.py"), ctx) == {("test-runner", "tests/runtests.py")}
    assert rules(edit("lib/spec/helper.py"), ctx) == {("test-files", "lib/spec/helper.py")}
    assert rules(edit("bin/test"), ctx) == {("test-files", "bin/test")}
    allowed = [
        edit("django/test/runner.py"),
        edit("src/flask/app.py"),
        edit("src/_pytest/terminal.py"),
        edit("setup.cfg", "version = 1", "version = 2"),
        edit("pyproject.toml", "version = '1'", "v = 2"),
        edit("docs/conf.py"),
        edit("setup.py", "version='1'", "version='2'"),
    ]
    for patch in allowed:
        assert rules(patch, ctx) == set(), patch


def test_config_sections_are_compared_exactly_when_contents_are_known() -> None:
    cfg_old = "[metadata]\nname = x\n\n[tool:pytest]\naddopts = -rA\n"
    changes = parse(edit("setup.cfg", "name = x", "name = y"))
    same_section = {"setup.cfg": (cfg_old, cfg_old.replace("name = x", "name = y"))}
    assert scan(changes, (), Context(), same_section) == []
    new_section = {"setup.cfg": (cfg_old, cfg_old.replace("-rA", "-rA -p evil"))}
    assert [f.rule for f in scan(changes, (), Context(), new_section)] == ["pytest-config"]
    py_old = '[project]\nname = "x"\n[tool.pytest.ini_options]\nxfail_strict = true\n'
    assert (
        scan(
            parse(edit("pyproject.toml")),
            (),
            Context(),
            {"pyproject.toml": (py_old, py_old.replace("true", "false"))},
        )[0].rule
        == "pytest-config"
    )
    # a path git status saw change but the patch never named (patch(1) fuzz, an ignored file)
    assert [
        (f.rule, f.path, f.action) for f in scan([], ["tests/conftest.py"], Context(), {}, "reverted")
    ] == [("conftest", "tests/conftest.py", "reverted")]
