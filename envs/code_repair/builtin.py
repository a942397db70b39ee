"""The built-in code-repair task set: small projects in ``builtin/`` turned into git repos and SWE-bench rows.

    projects = load_projects()                   # every builtin/<project>/ with its bugs.toml, validated
    materialize(Path("repos"))                   # repos/envfarm__<project>: a deterministic git history
    rows()                                       # SWE-bench rows (tasks.jsonl, checked against the projects)

The on-disk format is ``builtin/FORMAT.md``. Each project becomes a repository (``git fast-import``, fixed
author, committer and dates, sorted files) whose commit 0 is the correct project; each bug is a commit whose
parent is commit 0 with the bug's edits applied: the bug's ``base_commit``. Same content, same SHAs on any
machine. A row's ``patch`` is ``git diff base -> commit 0`` (the gold fix), its ``test_patch`` adds the
regression test file, and FAIL_TO_PASS / PASS_TO_PASS come from running the suite with pytest on the host
(buggy + regression test vs correct + regression test), as swebench's pytest log parser names the tests.
Running pytest for 40 bugs takes a while, so the rows are cached in ``builtin/tasks.jsonl``; :func:`rows`
reuses a cached row only when everything but its test lists is what the projects give now, and recomputes
(logging that the file is stale) otherwise. Regenerate the file with
``python -m envfarm.envs.code_repair.builtin --write``.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from collections.abc import Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from envfarm import config
from envfarm.errors import DatasetError, HarnessError

log = logging.getLogger(__name__)

ROOT = Path(__file__).with_name("builtin")
TASKS_FILE = ROOT / "tasks.jsonl"
OWNER = "envfarm"
VERSION = "1.0"
CREATED_AT = "2000-01-01T00:00:00Z"
TEST_COMMAND = ("-m", "pytest", "-rA", "-p", "no:cacheprovider")
"""Arguments after the interpreter; the same command as images/swebench/envfarm__builtin.toml."""
PYTEST_TIMEOUT_S = 120.0
GITIGNORE = "__pycache__/\n*.pyc\n.pytest_cache/\n"
"""Added to every project that ships no .gitignore (keeps bytecode out of an agent's diff)."""
HISTORY_FORMAT = "envfarm-builtin-1"
"""Bump when the history layout changes (names the cache folders of materialized repos)."""
IDENTITY = "envfarm <envfarm@localhost> 946684800 +0000"
SKIPPED_PARTS = ("__pycache__", ".pytest_cache")
_PROJECT_NAME = re.compile(r"^[a-z0-9_]+$")
_BUG_ID = re.compile(r"^[a-z0-9]+(-[a-z0-9]+)*$")
_TEST_FILE = re.compile(r"^test_[A-Za-z0-9_]*\.py$")


# ----------------------------------------------------------------------------------------------- format


class EditModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    file: str
    """Path relative to the project folder."""
    find: str = Field(min_length=1)
    """Exact text of the correct file; must occur exactly once."""
    replace: str
    """What it becomes in the buggy version."""


class RegressionModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    file: str
    """A new test file (absent from the project): fails on the buggy code, passes on the correct code."""
    content: str = Field(min_length=1)


class BugModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    id: str
    problem_statement: str = Field(min_length=1)
    edit: list[EditModel] = Field(min_length=1)
    regression_test: RegressionModel


class BugsFile(BaseModel):
    model_config = ConfigDict(extra="forbid")
    bug: list[BugModel] = Field(min_length=1)


@dataclass(frozen=True)
class Bug:
    """One bug of a project, validated."""

    id: str
    problem_statement: str
    files: Mapping[str, bytes]
    """The buggy versions of the files the bug changes."""
    regression_file: str
    regression_content: str


@dataclass(frozen=True)
class Project:
    """One built-in project in its correct state, with its bugs."""

    name: str
    folder: Path
    files: Mapping[str, bytes]
    """Every file of the repository (relative path -> bytes), sorted, bugs.toml excluded."""
    bugs: tuple[Bug, ...]

    @property
    def repo(self) -> str:
        return f"{OWNER}/{self.name}"

    @property
    def key(self) -> str:
        return f"{OWNER}__{self.name}"

    def instance_id(self, bug: Bug) -> str:
        return f"{self.key}-{bug.id}"

    def buggy(self, bug: Bug) -> dict[str, bytes]:
        return {**self.files, **bug.files}


def load_projects(root: Path = ROOT) -> list[Project]:
    """Every project folder under ``root``, sorted by name; DatasetError names the file at fault."""
    folders = sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_")))
    return [load_project(folder) for folder in folders]


def load_project(folder: Path) -> Project:
    """One project folder and its bugs.toml, validated against ``FORMAT.md``."""
    if not _PROJECT_NAME.match(folder.name):
        raise DatasetError(f"{folder}: a project folder name must be lowercase letters, digits and '_'")
    bugs_path = folder / "bugs.toml"
    if not bugs_path.is_file():
        raise DatasetError(f"{folder} has no bugs.toml (see {ROOT / 'FORMAT.md'})")
    files = _read_tree(folder)
    if not any(p.startswith("tests/") or "/tests/" in p for p in files):
        raise DatasetError(f"{folder} has no tests/ folder; the project needs its pytest suite")
    if conftests := [p for p in files if p.rsplit("/", 1)[-1] == "conftest.py"]:
        raise DatasetError(f"{folder}: no conftest.py allowed ({', '.join(conftests)})")
    files.setdefault(".gitignore", GITIGNORE.encode())
    try:
        parsed = BugsFile.model_validate(tomllib.loads(bugs_path.read_text(encoding="utf-8")))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise DatasetError(f"cannot read {bugs_path}: {e}") from e
    except ValidationError as e:
        raise DatasetError(f"{bugs_path} is invalid:\n{e}") from e
    seen: set[str] = set()
    bugs = []
    for n, model in enumerate(parsed.bug):
        where = f"{bugs_path} bug {n} ({model.id!r})"
        if not _BUG_ID.match(model.id):
            raise DatasetError(f"{where}: an id is lowercase letters, digits and dashes")
        if model.id in seen:
            raise DatasetError(f"{where}: id {model.id!r} is used twice in this file; ids must be unique")
        seen.add(model.id)
        bugs.append(_bug(model, files, where))
    return Project(folder.name, folder, dict(sorted(files.items())), tuple(bugs))


def _read_tree(folder: Path) -> dict[str, bytes]:
    out = {}
    for path in sorted(folder.rglob("*")):
        rel = path.relative_to(folder)
        if any(part in SKIPPED_PARTS for part in rel.parts) or path.suffix == ".pyc":
            continue
        if path.is_file() and rel.as_posix() != "bugs.toml":
            out[rel.as_posix()] = path.read_bytes()
    return out


def _bug(model: BugModel, files: Mapping[str, bytes], where: str) -> Bug:
    changed: dict[str, str] = {}
    for edit in model.edit:
        if edit.file not in files:
            raise DatasetError(f"{where}: edit file {edit.file!r} is not in the project")
        text = changed.get(edit.file, files[edit.file].decode("utf-8"))
        count = text.count(edit.find)
        if count != 1:
            raise DatasetError(
                f"{where}: the edit's find text occurs {count} times in {edit.file} (it must occur exactly "
                f"once; add surrounding lines): {edit.find[:80]!r}"
            )
        if edit.find == edit.replace:
            raise DatasetError(f"{where}: an edit of {edit.file} replaces its find text with itself")
        changed[edit.file] = text.replace(edit.find, edit.replace)
    reg = model.regression_test
    parts = reg.file.split("/")
    if reg.file.startswith("/") or ".." in parts or reg.file in files:
        raise DatasetError(
            f"{where}: regression test file {reg.file!r} must be a new relative path (it exists or leaves "
            "the project)"
        )
    if not _TEST_FILE.match(parts[-1]):
        raise DatasetError(f"{where}: regression test file {reg.file!r} must be named test_*.py")
    content = reg.content.lstrip("\n")
    content = content if content.endswith("\n") else content + "\n"
    return Bug(model.id, model.problem_statement.strip() + "\n",
               {k: v.encode("utf-8") for k, v in changed.items()}, reg.file, content)


# ------------------------------------------------------------------------------------------ git history


def _git(args: Sequence[str], cwd: Path, stdin: bytes | None = None) -> str:
    env = {**os.environ, "GIT_CONFIG_NOSYSTEM": "1", "GIT_CONFIG_GLOBAL": os.devnull, "LC_ALL": "C"}
    res = subprocess.run(["git", *args], cwd=cwd, input=stdin, capture_output=True, env=env, timeout=120)
    if res.returncode != 0:
        raise HarnessError(f"`git {' '.join(args[:2])}` in {cwd} exited {res.returncode}: "
                           f"{res.stderr.decode(errors='replace')[-800:]}")
    return res.stdout.decode("utf-8", errors="replace")


def _fast_import_stream(project: Project) -> bytes:
    """Commit 0 (the correct project) on main, one branch per bug, one ref per regression test."""
    out: list[bytes] = []

    def commit(ref: str, mark: int, message: str, files: Mapping[str, bytes], parent: int | None) -> None:
        msg = message.encode()
        out.append(f"commit {ref}\nmark :{mark}\nauthor {IDENTITY}\ncommitter {IDENTITY}\n".encode())
        out.append(b"data %d\n%s\n" % (len(msg), msg))
        if parent is not None:
            out.append(f"from :{parent}\n".encode())
        for path in sorted(files):
            out.append(f"M 100644 inline {path}\n".encode())
            out.append(b"data %d\n%s\n" % (len(files[path]), files[path]))

    commit("refs/heads/main", 1, f"{project.name} {VERSION}\n", project.files, None)
    for n, bug in enumerate(project.bugs):
        commit(f"refs/heads/bug/{bug.id}", 2 + 2 * n, f"{project.name}: {bug.id}\n", bug.files, 1)
        test = {bug.regression_file: bug.regression_content.encode()}
        commit(f"refs/envfarm/tests/{bug.id}", 3 + 2 * n, f"{project.name}: {bug.id} test\n", test, 1)
    out.append(b"done\n")
    return b"".join(out)


def materialize_project(project: Project, dest: Path) -> Path:
    """Write ``dest/envfarm__<project>`` (a bare repository; replaced if present); returns its path."""
    repo = dest / project.key
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    _git(["init", "-q", "--bare", "-b", "main"], repo)
    _git(["fast-import", "--quiet", "--done"], repo, stdin=_fast_import_stream(project))
    return repo


def materialize(dest: Path, projects: Sequence[Project] | None = None) -> Path:
    """One git repository per project at ``dest/envfarm__<project>``; returns ``dest`` (a --repo-source)."""
    dest.mkdir(parents=True, exist_ok=True)
    for project in load_projects() if projects is None else projects:
        materialize_project(project, dest)
    return dest


def content_digest(projects: Sequence[Project]) -> str:
    """A hash of every project's files and bugs (names a cache folder of materialized repos)."""
    h = hashlib.sha256(HISTORY_FORMAT.encode())
    for p in projects:
        h.update(_fast_import_stream(p))
    return h.hexdigest()[:16]


def cached_repos(projects: Sequence[Project] | None = None) -> Path:
    """The materialized repos under ``config.home()/code_repair/repos/<digest>``, made once (atomically)."""
    projects = load_projects() if projects is None else projects
    parent = config.home() / "code_repair" / "repos"
    dest = parent / content_digest(projects)
    if dest.is_dir():
        return dest
    parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=parent))
    try:
        materialize(tmp, projects)
        try:
            tmp.rename(dest)
        except OSError:  # another process finished first: keep its folder
            if not dest.is_dir():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return dest


# ------------------------------------------------------------------------------------------------ rows


def base_rows(project: Project, repo: Path) -> list[dict[str, Any]]:
    """The rows of a materialized project, FAIL_TO_PASS / PASS_TO_PASS still empty."""
    diff = ["diff", "--no-color", "--no-ext-diff", "--full-index", "--no-renames", "--src-prefix=a/",
            "--dst-prefix=b/"]
    correct = _git(["rev-parse", "refs/heads/main"], repo).strip()
    out = []
    for bug in project.bugs:
        base = _git(["rev-parse", f"refs/heads/bug/{bug.id}"], repo).strip()
        tests = _git(["rev-parse", f"refs/envfarm/tests/{bug.id}"], repo).strip()
        out.append({
            "repo": project.repo,
            "instance_id": project.instance_id(bug),
            "base_commit": base,
            "patch": _git([*diff, base, correct], repo),
            "test_patch": _git([*diff, correct, tests], repo),
            "problem_statement": bug.problem_statement,
            "hints_text": "",
            "created_at": CREATED_AT,
            "version": VERSION,
            "FAIL_TO_PASS": "[]",
            "PASS_TO_PASS": "[]",
            "environment_setup_commit": correct,
        })
    return out


def run_suite(files: Mapping[str, bytes]) -> dict[str, str]:
    """Run the test command on ``files`` in a temp folder; swebench's pytest parser's {test: status}."""
    from envfarm.harness import _swebench

    with tempfile.TemporaryDirectory(prefix="envfarm-builtin-") as tmp:
        for rel, data in files.items():
            (Path(tmp) / rel).parent.mkdir(parents=True, exist_ok=True)
            (Path(tmp) / rel).write_bytes(data)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "PYTHON"))}
        env["PYTHONDONTWRITEBYTECODE"] = "1"
        res = subprocess.run([sys.executable, *TEST_COMMAND], cwd=tmp, capture_output=True, text=True,
                             env=env, timeout=PYTEST_TIMEOUT_S)
    parser = _swebench.load().log_parsers.PARSER_REGISTRY["parse_log_pytest"]
    return dict(parser(res.stdout + res.stderr, None))


def suite_lists(project: Project, bug: Bug) -> tuple[list[str], list[str]]:
    """(FAIL_TO_PASS, PASS_TO_PASS) of one bug; DatasetError when the bug breaks the format's rules."""
    reg = {bug.regression_file: bug.regression_content.encode()}
    buggy = run_suite({**project.buggy(bug), **reg})
    correct = run_suite({**project.files, **reg})
    where = f"{project.folder / 'bugs.toml'} bug {bug.id!r}"
    if not correct or any(s != "PASSED" for s in correct.values()):
        bad = sorted(t for t, s in correct.items() if s != "PASSED") or ["(no test ran)"]
        raise DatasetError(f"{where}: the correct project + regression test must pass every test; not: {bad}")
    f2p = sorted(t for t in correct if buggy.get(t) != "PASSED")
    p2p = sorted(t for t in correct if buggy.get(t) == "PASSED")
    if not any(t.startswith(bug.regression_file + "::") for t in f2p):
        raise DatasetError(f"{where}: no test in {bug.regression_file} fails on the buggy code")
    return f2p, p2p


def compute_rows(projects: Sequence[Project], repos: Path, workers: int = 8) -> list[dict[str, Any]]:
    """Every row, with FAIL_TO_PASS / PASS_TO_PASS from real pytest runs (slow: two suites per bug)."""
    jobs = [(p, b, row) for p in projects for b, row in zip(p.bugs, base_rows(p, repos / p.key), strict=True)]
    with ThreadPoolExecutor(max_workers=workers) as pool:
        lists = list(pool.map(lambda job: suite_lists(job[0], job[1]), jobs))
    return [{**row, "FAIL_TO_PASS": json.dumps(f2p), "PASS_TO_PASS": json.dumps(p2p)}
            for (_, _, row), (f2p, p2p) in zip(jobs, lists, strict=True)]


def read_cache(path: Path = TASKS_FILE) -> dict[str, dict[str, Any]]:
    if not path.is_file():
        return {}
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return {r["instance_id"]: r for r in rows}


def rows(projects: Sequence[Project] | None = None, cache: Path = TASKS_FILE) -> list[dict[str, Any]]:
    """The SWE-bench rows of the built-in set: cached rows where they still match, computed otherwise."""
    projects = load_projects() if projects is None else projects
    repos = cached_repos(projects)
    cached = read_cache(cache)
    out, stale = [], []
    for project in projects:
        for bug, row in zip(project.bugs, base_rows(project, repos / project.key), strict=True):
            old = cached.get(row["instance_id"])
            lists = ("FAIL_TO_PASS", "PASS_TO_PASS")
            if old is not None and {k: v for k, v in old.items() if k not in lists} == {
                k: v for k, v in row.items() if k not in lists
            }:
                out.append(old)
            else:
                stale.append((project, bug, len(out)))
                out.append(row)
    if stale:
        log.warning("%s is stale for %d tasks (%s); computing their tests now. Regenerate it with "
                    "`python -m envfarm.envs.code_repair.builtin --write`", cache, len(stale),
                    ", ".join(p.instance_id(b) for p, b, _ in stale[:5]))
        with ThreadPoolExecutor(max_workers=8) as pool:
            lists_ = list(pool.map(lambda s: suite_lists(s[0], s[1]), stale))
        for (_, _, i), (f2p, p2p) in zip(stale, lists_, strict=True):
            out[i] = {**out[i], "FAIL_TO_PASS": json.dumps(f2p), "PASS_TO_PASS": json.dumps(p2p)}
    return out


def write_rows(path: Path, table: Sequence[Mapping[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in table),
                    encoding="utf-8")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m envfarm.envs.code_repair.builtin [--write]``: recompute the rows (and write the cache)."""
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help=f"write {TASKS_FILE}")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    projects = load_projects()
    with tempfile.TemporaryDirectory() as tmp:
        table = compute_rows(projects, materialize(Path(tmp), projects))
    same = [r["instance_id"] for r in table if read_cache().get(r["instance_id"]) == r]
    log.info("%d projects, %d tasks (%d unchanged in %s)", len(projects), len(table), len(same), TASKS_FILE)
    if args.write:
        write_rows(TASKS_FILE, table)
        log.info("wrote %s", TASKS_FILE)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
