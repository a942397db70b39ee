"""Mined tasks as git repositories and SWE-bench rows, rebuilt from a row's source reference alone.

    bugs = [Bug(mutation, hidden_tests, f2p, p2p, statement), ...]
    path = materialize(project, bugs, Path("repos"))       # repos/pypi__<name>: a deterministic history
    table = rows(project, bugs, path)                       # SWE-bench rows with "envfarm_source"
    rebuild(table, Path("out"))                             # out/repos + out/specs from PyPI, no mirror

Commit 0 (``main``) is the sdist's files; each bug is a commit whose parent is commit 0 with the mutation
applied and the test files that hold its FAIL_TO_PASS tests removed (they come back with ``test_patch``,
as in SWE-bench: the hidden tests judge the fix). Fixed author, committer, dates and sorted files make the
SHAs a function of the content only, so a row's ``base_commit`` is reproduced from its ``envfarm_source``
(package, version, sdist sha256, the mutation, the hidden files) on any machine.
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from envfarm.errors import DatasetError, TaskFactoryError
from envfarm.harness import patches

from ..builtin import CREATED_AT, IDENTITY, _git
from .difficulty import difficulty
from .mutate import Mutation
from .sdist import PackageSpec, download, unpack

log = logging.getLogger(__name__)

OWNER = "pypi"
SOURCE_KEY = "envfarm_source"
DIFFICULTY_KEY = "envfarm_difficulty"
FORMAT = "envfarm-mined-1"
GITIGNORE = b"__pycache__/\n*.pyc\n.pytest_cache/\n"
DIFF = ["diff", "--no-color", "--no-ext-diff", "--full-index", "--no-renames", "--src-prefix=a/",
        "--dst-prefix=b/"]


@dataclass(frozen=True)
class EnvRecipe:
    """How the test environment of a project is made (written into spec files and rows)."""

    packages: tuple[str, ...]
    test_cmd: str
    pythonpath: str
    timeout_s: float
    variables: tuple[tuple[str, str], ...] = ()
    """Environment variables the suite needs (the recipe's ``env``), beside PYTHONPATH."""

    @property
    def env(self) -> dict[str, str]:
        """Every variable the tests run with."""
        return {"PYTHONDONTWRITEBYTECODE": "1", "PYTHONPATH": self.pythonpath, **dict(self.variables)}

    def to_json(self) -> dict[str, Any]:
        out = {"packages": list(self.packages), "test_cmd": self.test_cmd, "pythonpath": self.pythonpath,
               "timeout_s": self.timeout_s}
        return {**out, "variables": dict(self.variables)} if self.variables else out

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> EnvRecipe:
        return cls(tuple(data["packages"]), data["test_cmd"], data["pythonpath"], float(data["timeout_s"]),
                   tuple(sorted((data.get("variables") or {}).items())))


@dataclass(frozen=True)
class Project:
    """One sdist, unpacked."""

    spec: PackageSpec
    filename: str
    sha256: str
    files: Mapping[str, bytes]
    """The repository at commit 0 (the sdist's files, a .gitignore added when it ships none)."""
    env: EnvRecipe

    @property
    def repo(self) -> str:
        return f"{OWNER}/{self.spec.name}"

    @property
    def key(self) -> str:
        return f"{OWNER}__{self.spec.name}"


@dataclass(frozen=True)
class Bug:
    """One kept mutant."""

    mutation: Mutation
    hidden: tuple[str, ...]
    """Test files removed at the base commit and restored by test_patch."""
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    problem_statement: str

    def instance_id(self, project: Project) -> str:
        return f"{project.key}-{project.spec.version}-{self.mutation.id}"


def make_project(spec: PackageSpec, filename: str, sha256: str, files: Mapping[str, bytes],
                 env: EnvRecipe) -> Project:
    tree = dict(files)
    tree.setdefault(".gitignore", GITIGNORE)
    return Project(spec, filename, sha256, dict(sorted(tree.items())), env)


def _stream(project: Project, bugs: Sequence[Bug]) -> bytes:
    out: list[bytes] = []

    def commit(ref: str, mark: int, message: str, files: Mapping[str, bytes], gone: Sequence[str],
               parent: int | None) -> None:
        msg = message.encode()
        out.append(f"commit {ref}\nmark :{mark}\nauthor {IDENTITY}\ncommitter {IDENTITY}\n".encode())
        out.append(b"data %d\n%s\n" % (len(msg), msg))
        if parent is not None:
            out.append(f"from :{parent}\n".encode())
        for path in sorted(gone):
            out.append(f"D {path}\n".encode())
        for path in sorted(files):
            out.append(f"M 100644 inline {path}\n".encode())
            out.append(b"data %d\n%s\n" % (len(files[path]), files[path]))

    commit("refs/heads/main", 1, f"{project.spec.name} {project.spec.version}\n", project.files, (), None)
    for n, bug in enumerate(bugs):
        m = bug.mutation
        buggy = {m.file: m.apply(project.files[m.file])}
        commit(f"refs/heads/bug/{m.id}", 2 + n, f"{project.spec.name}: {m.id}\n", buggy, bug.hidden, 1)
    out.append(b"done\n")
    return b"".join(out)


def materialize(project: Project, bugs: Sequence[Bug], dest: Path) -> Path:
    """A bare repository ``dest/pypi__<name>`` (replaced if present) with commit 0 and one branch per bug."""
    repo = dest / project.key
    if repo.exists():
        shutil.rmtree(repo)
    repo.mkdir(parents=True)
    _git(["init", "-q", "--bare", "-b", "main"], repo)
    _git(["fast-import", "--quiet", "--done"], repo, stdin=_stream(project, bugs))
    return repo


def rows(project: Project, bugs: Sequence[Bug], repo: Path) -> list[dict[str, Any]]:
    """The SWE-bench rows of ``bugs`` (patch: the fix; test_patch: the hidden test files back)."""
    correct = _git(["rev-parse", "refs/heads/main"], repo).strip()
    out = []
    for bug in bugs:
        m = bug.mutation
        base = _git(["rev-parse", f"refs/heads/bug/{m.id}"], repo).strip()
        out.append({
            "repo": project.repo,
            "instance_id": bug.instance_id(project),
            "base_commit": base,
            "patch": _git([*DIFF, base, correct, "--", m.file], repo),
            "test_patch": _git([*DIFF, base, correct, "--", *bug.hidden], repo),
            "problem_statement": bug.problem_statement,
            "hints_text": "",
            "created_at": CREATED_AT,
            "version": project.spec.version,
            "FAIL_TO_PASS": json.dumps(list(bug.fail_to_pass)),
            "PASS_TO_PASS": json.dumps(list(bug.pass_to_pass)),
            "environment_setup_commit": correct,
            DIFFICULTY_KEY: difficulty(project.files, m, bug.fail_to_pass, bug.hidden),
            SOURCE_KEY: {
                "format": FORMAT,
                "kind": "pypi-sdist",
                "package": project.spec.name,
                "version": project.spec.version,
                "filename": project.filename,
                "sha256": project.sha256,
                "mutation": m.to_json(),
                "hidden_tests": list(bug.hidden),
                "env": project.env.to_json(),
            },
        })
    return out


def spec_text(project: Project) -> str:
    """The harness's environment spec of a mined project (images/swebench/README.md format)."""
    env = project.env
    q = json.dumps
    return (
        f"# Environment spec written by `envfarm tasks mine` for {project.spec} (sdist {project.filename}).\n"
        f"repo = {q(project.repo)}\n\n[defaults]\n"
        f"packages = [{', '.join(q(p) for p in env.packages)}]\n"
        "install = []\n"
        f"test_cmd = {q(env.test_cmd)}\n"
        'directives = "paths"\n'
        f"env = {{ {', '.join(f'{k} = {q(v)}' for k, v in env.env.items())} }}\n"
        f"timeout_s = {env.timeout_s:.0f}\n"
    )


def write_spec(project: Project, folder: Path) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{project.key}.toml"
    path.write_text(spec_text(project), encoding="utf-8")
    return path


# --------------------------------------------------------------------------------------------- rebuild


def source_of(row: Mapping[str, Any]) -> dict[str, Any]:
    src = row.get(SOURCE_KEY)
    if isinstance(src, str):
        src = json.loads(src)
    if not isinstance(src, dict) or src.get("format") != FORMAT:
        raise DatasetError(f"row {row.get('instance_id')!r} has no {SOURCE_KEY} of format {FORMAT}; it was "
                           "not written by `envfarm tasks mine`")
    return src


def rebuild(table: Sequence[Mapping[str, Any]], dest: Path, sdists: Path,
            find_links: Sequence[Path] = ()) -> tuple[Path, Path]:
    """``dest/repos`` and ``dest/specs`` for mined rows, from PyPI sdists; checks every base_commit."""
    groups: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for row in table:
        src = source_of(row)
        groups.setdefault((src["package"], src["version"]), []).append(row)
    for (name, version), members in sorted(groups.items()):
        src = source_of(members[0])
        sd = download(PackageSpec(name, version), sdists, find_links)
        if sd.sha256 != src["sha256"]:
            raise TaskFactoryError(f"the sdist of {name}=={version} has sha256 {sd.sha256}, the rows name "
                                   f"{src['sha256']}; delete {sd.path} and run again (or the index changed)")
        env = EnvRecipe.from_json(src["env"])
        project = make_project(sd.spec, sd.path.name, sd.sha256, unpack(sd), env)
        bugs = [_bug_of(r) for r in members]
        repo = materialize(project, bugs, dest / "repos")
        write_spec(project, dest / "specs")
        for row, bug in zip(members, bugs, strict=True):
            got = _git(["rev-parse", f"refs/heads/bug/{bug.mutation.id}"], repo).strip()
            if got != row["base_commit"]:
                raise TaskFactoryError(f"rebuilding {row['instance_id']} gave commit {got}, the row names "
                                       f"{row['base_commit']}: the sdist or the row differs")
    return dest / "repos", dest / "specs"


def _bug_of(row: Mapping[str, Any]) -> Bug:
    src = source_of(row)
    m = src["mutation"]
    mutation = Mutation(m["file"], m["kind"], int(m["start"]), int(m["end"]), m["text"], int(m["line"]))
    hidden = tuple(src.get("hidden_tests") or patches.touched_paths(str(row["test_patch"])))
    return Bug(mutation, hidden, (), (), "")
