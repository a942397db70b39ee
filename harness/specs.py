"""Environment specs (per repo/version) and the per-instance test plan derived from them.

A spec file is TOML, one per repository, named like SWE-bench's instance prefix::

    # images/swebench/pallets__flask.toml
    repo = "pallets/flask"
    [defaults]                        # every version; a [versions."X"] table overrides field by field
    install = ["python -m pip install --no-deps --no-build-isolation -e ."]
    [versions."2.3"]
    packages = ["pytest==7.4.4", "Werkzeug==2.3.7", "flit_core<4"]

Built-in specs live in ``images/swebench/``; ``--specs DIR|FILE`` adds others (searched first; a repo found
there replaces the built-in file). Without a ``[versions]`` table the defaults cover every version; a version
the table lacks gets the derived spec (``upstream_specs.py``) when the repo is known there.
``repo`` may be a glob (``repo = "envfarm/*"``: one spec for a family of repos); a file naming the repo
exactly wins over any pattern, and among patterns the first file searched wins.

What is derived instead of written: the test command (the v5 ``eval_script`` lines between its
``>>>>> Start Test Output`` / ``>>>>> End Test Output`` markers), its ``export`` lines, the test files (the
paths in ``test_patch``), the log parser and eval type (v5 row fields). ``test_cmd`` in a spec overrides the
derived command; the test files (or Django module labels, ``directives = "django"``) are appended to it.
"""

from __future__ import annotations

import fnmatch
import re
import shlex
import tomllib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from pydantic import BaseModel, ConfigDict, ValidationError

from envfarm.errors import ConfigError, SpecNotFound
from envfarm.sandbox.recipes import images_dir, load_base_recipe

from . import _swebench, patches
from .env_spec import SPECS_FOLDER, Directives, EnvSpec, spec_path
from .instances import Instance
from .upstream_specs import SUITES, derive, suite_for

DEFAULT_INSTALL = "python -m pip install --no-deps --no-build-isolation -e ."
DEFAULT_PARSER = "parse_log_pytest"
NON_TEST_SUFFIXES = (
    ".json",
    ".png",
    ".csv",
    ".txt",
    ".md",
    ".jpg",
    ".jpeg",
    ".pkl",
    ".yml",
    ".yaml",
    ".toml",
)


class SpecTable(BaseModel):
    """One ``[defaults]`` or ``[versions."X"]`` table; every field is optional (unset fields inherit)."""

    model_config = ConfigDict(extra="forbid")

    python: str | None = None
    """Python the environment needs ("3.9"); picks the Debian suite whose base image the env image builds
    FROM (3.9 bullseye, 3.11 bookworm, 3.13 trixie; another the nearest, noted in the plan). Default: the
    default base image's (images/base/recipe.toml)."""
    packages: list[str] | None = None
    """pip requirement lines installed into the env image from the host wheelhouse (no network in builds)."""
    extra_packages: list[str] | None = None
    """pip requirement lines added to the inherited ``packages``; a line naming a project already there
    replaces it (``["cython==0.29.22"]``: one version's build pin)."""
    install: list[str] | None = None
    """Shell commands run in the repo at the base commit when the instance image is built (default: an
    offline editable install). pip runs with PIP_NO_INDEX and PIP_FIND_LINKS=/opt/envfarm/wheelhouse."""
    pre_test: list[str] | None = None
    """Shell commands run in the repo before the tests, in every test run."""
    test_cmd: str | None = None
    """Test command prefix, e.g. "pytest -rA"; the test directives are appended. Overrides the command
    derived from a v5 eval_script; required for classic rows."""
    directives: Directives | None = None
    """What is appended to test_cmd: "paths" (test_patch's files), "django" (module labels), "none"."""
    log_parser: str | None = None
    """swebench PARSER_REGISTRY key used when a row does not name one (default parse_log_pytest)."""
    env: dict[str, str] | None = None
    """Environment variables for the test run (added to the eval_script's exports)."""
    timeout_s: float | None = None
    """Test timeout for this repo/version, overriding --timeout when larger."""
    cpus: float | None = None
    """CPU cores for the test run of this repo/version, overriding --cpus when larger (tests that skip or
    behave differently on one core)."""
    protected: list[str] | None = None
    """Extra path globs a model patch may not change (the repo's own test-runner code); see tamper.py."""
    exact_python: bool | None = None
    """The pins need ``python`` itself (compiled code that no later Python builds): no nearest suite is tried,
    and when no suite ships it the version's rows fail to plan with "needs Python X" (validate:
    python-unavailable)."""
    like: str | None = None
    """Another version of the same file whose table fills this one's unset fields (``like = "4.1"``: four
    sphinx versions share one package set); chains are followed, cycles are an error."""


class SpecFile(BaseModel):
    """A whole spec file."""

    model_config = ConfigDict(extra="forbid")

    repo: str
    """``owner/name``; the file is named ``owner__name.toml``. A glob (``owner/*``) covers many repos."""
    defaults: SpecTable = SpecTable()
    """Fields shared by every version."""
    versions: dict[str, SpecTable] | None = None
    """Per-version tables; when absent, the defaults cover every version."""


@dataclass(frozen=True)
class Plan:
    """Everything needed to build the images for and run one instance."""

    instance: Instance
    env: EnvSpec
    test_command: str
    """Shell text run in the repo; its output is the test log."""
    test_files: tuple[str, ...]
    """Files ``test_patch`` touches: reset to the base commit before it is applied."""
    log_parser: str
    eval_type: str
    env_vars: tuple[tuple[str, str], ...]
    command_source: Literal["spec", "eval_script"]


class SpecCatalog:
    """Spec files from ``extra`` folders/files first, then the built-in ``images/swebench/``."""

    def __init__(self, extra: Sequence[str | Path] = ()) -> None:
        self.builtin = images_dir() / SPECS_FOLDER
        self.files: dict[str, tuple[Path, SpecFile]] = {}
        for item in [*map(Path, extra), self.builtin]:
            for path in _spec_files(item):
                spec = _read(path)
                self.files.setdefault(spec.repo, (path, spec))
        self._base_python = load_base_recipe().python

    def env(self, repo: str, version: str, instance_id: str = "") -> EnvSpec:
        """The spec of ``repo`` at ``version``; SpecNotFound names the file and table to write."""
        who = f" (instance {instance_id})" if instance_id else ""
        found = self.files.get(repo) or next(
            (f for pattern, f in self.files.items() if fnmatch.fnmatchcase(repo, pattern)), None
        )
        missing = found is not None and found[1].versions is not None and version not in found[1].versions
        if found is None or missing:
            if (derived := derive(repo, version)) is not None:  # swebench's table or envfarm's FACTS
                return derived
        if found is None:
            raise SpecNotFound(
                f"no environment spec for {repo} {version}{who}: write {spec_path(repo, self.builtin)} "
                f'with repo = "{repo}" and a [versions."{version}"] table (python, packages, install; '
                f"see {self.builtin / 'README.md'}), or pass --specs DIR"
            )
        path, spec = found
        if spec.versions is not None and version not in spec.versions:
            have = ", ".join(sorted(spec.versions)) or "none"
            raise SpecNotFound(
                f'{path} has no [versions."{version}"] table for {repo}{who} (it has {have}): add one '
                "(python, packages, install)"
            )
        table = _resolve_like(spec.versions or {}, version, path)
        return self._merge(repo, version, spec.defaults, table, path)

    def _merge(self, repo: str, version: str, base: SpecTable, over: SpecTable, path: Path) -> EnvSpec:
        m = {**base.model_dump(exclude_none=True), **over.model_dump(exclude_none=True, exclude={"like"})}
        asked = str(m.get("python", self._base_python))
        suite = suite_for(asked, asked_by=path.name)
        if suite.note and m.get("exact_python"):
            raise SpecNotFound(
                f"{repo} {version} needs Python {asked} exactly ({path.name}: exact_python), and no Debian "
                f"suite ships it (known: {', '.join(py for _, py in SUITES)}): add a base recipe for a suite "
                "that does, or pins that build on a Python one ships"
            )
        return EnvSpec(
            repo=repo,
            version=version,
            python=suite.python,
            packages=_with_extra(m.get("packages", ()), m.get("extra_packages", ())),
            install=tuple(m.get("install", (DEFAULT_INSTALL,))),
            pre_test=tuple(m.get("pre_test", ())),
            test_cmd=m.get("test_cmd"),
            directives=m.get("directives", "paths"),
            log_parser=m.get("log_parser"),
            env=tuple(sorted(m.get("env", {}).items())),
            timeout_s=m.get("timeout_s"),
            cpus=m.get("cpus"),
            protected=tuple(m.get("protected", ())),
            source=path,
            suite=suite.name,
            requires_python=asked,
            note=suite.note,
        )

    def plan(self, instance: Instance) -> Plan:
        """The test plan of one instance; raises SpecNotFound when no spec or no test command is known."""
        env = self.env(instance.repo, instance.version, instance.instance_id)
        return make_plan(instance, env)


def make_plan(instance: Instance, env: EnvSpec) -> Plan:
    """Combine a row and its environment spec into a :class:`Plan`."""
    files = tuple(patches.touched_paths(instance.test_patch))
    derived = eval_script_command(instance.eval_script)
    if env.test_cmd:
        args = directives_for(files, env.directives)
        command = " ".join([env.test_cmd, *map(shlex.quote, args)])
        source: Literal["spec", "eval_script"] = "spec"
    elif derived:
        command, source = derived, "eval_script"
    else:
        raise SpecNotFound(
            f"no test command for {instance.instance_id}: the row has no v5 eval_script; add "
            f'test_cmd = "pytest -rA" (for example) to {env.source} [versions."{instance.version}"]'
        )
    sw = _swebench.load()
    parser = instance.log_parser or env.log_parser or DEFAULT_PARSER
    if parser not in sw.log_parsers.PARSER_REGISTRY:
        raise SpecNotFound(f"{instance.instance_id}: unknown log parser {parser!r} (swebench {sw.version})")
    fail_only = instance.repo in sw.constants.FAIL_ONLY_REPOS
    eval_type = instance.eval_type or ("fail_only" if fail_only else "pass_and_fail")
    env_vars = dict(eval_script_exports(instance.eval_script))
    env_vars.update(env.env)
    return Plan(instance, env, command, files, parser, eval_type, tuple(env_vars.items()), source)


def plan_all(
    instances: Iterable[Instance], catalog: SpecCatalog
) -> tuple[list[Plan], dict[str, SpecNotFound]]:
    """Plans for every instance that has a spec, and the SpecNotFound of every other one."""
    plans, errors = [], {}
    for inst in instances:
        try:
            plans.append(catalog.plan(inst))
        except SpecNotFound as e:
            errors[inst.instance_id] = e
    return plans, errors


# ----------------------------------------------------------------------------------------- derivation


def eval_script_command(script: str) -> str | None:
    """The test command of a v5 eval_script: its lines between the start and end markers."""
    if not script:
        return None
    consts = _swebench.load().constants
    lines = script.splitlines()
    start = next((i for i, line in enumerate(lines) if consts.START_TEST_OUTPUT in line), None)
    if start is None:
        return None
    body = []
    for line in lines[start + 1 :]:
        if consts.END_TEST_OUTPUT in line:
            break
        if line.strip() and not line.lstrip().startswith(":"):
            body.append(line)
    return "\n".join(body) or None


def eval_script_exports(script: str) -> list[tuple[str, str]]:
    """``export K=V`` lines of an eval_script before its start marker (Django's locale settings)."""
    out = []
    for line in script.splitlines():
        if ">>>>> Start Test Output" in line:
            break
        m = re.match(r"^export ([A-Za-z_][A-Za-z0-9_]*)=(.*)$", line.strip())
        if m:
            value = shlex.split(m.group(2))
            out.append((m.group(1), value[0] if value else ""))
    return out


def directives_for(files: Sequence[str], style: Directives) -> list[str]:
    """What a spec's test_cmd gets appended (swebench's get_test_directives, for pytest and Django)."""
    if style == "none":
        return []
    tests = [f for f in files if not f.endswith(NON_TEST_SUFFIXES)]
    if style == "django":
        out = []
        for f in tests:
            f = f.removesuffix(".py").removeprefix("tests/")
            out.append(f.replace("/", "."))
        return out
    return tests


# ---------------------------------------------------------------------------------------------- files


def _spec_files(item: Path) -> list[Path]:
    if item.is_file():
        return [item]
    if item.is_dir():
        return sorted(item.glob("*.toml"))
    if item.exists() or item == images_dir() / SPECS_FOLDER:
        return []
    raise ConfigError(f"spec path {item} does not exist (pass a folder of *.toml spec files or one file)")


def _with_extra(packages: Sequence[str], extra: Sequence[str]) -> tuple[str, ...]:
    """``packages`` with ``extra`` appended, each extra line replacing the line of the same project."""
    if not extra:
        return tuple(packages)
    replaced = {_project(line) for line in extra}
    return (*(line for line in packages if _project(line) not in replaced), *extra)


def _project(line: str) -> str:
    try:
        return canonicalize_name(Requirement(line).name)
    except InvalidRequirement as e:
        raise ConfigError(f"not a pip requirement line: {line!r} ({e})") from e


def _resolve_like(versions: dict[str, SpecTable], version: str, path: Path) -> SpecTable:
    """The table of ``version`` with the unset fields filled from the tables its ``like`` chain names."""
    table, seen = versions.get(version, SpecTable()), [version]
    while table.like is not None:
        if table.like in seen or table.like not in versions:
            why = "a cycle" if table.like in seen else f'no [versions."{table.like}"] table'
            raise ConfigError(f'{path}: like = {table.like!r} in [versions."{seen[-1]}"] names {why}')
        seen.append(table.like)
        parent = versions[table.like]
        fields = {**parent.model_dump(exclude_none=True), **table.model_dump(exclude_none=True)}
        fields["like"] = parent.like
        table = SpecTable(**fields)
    return table


def _read(path: Path) -> SpecFile:
    try:
        return SpecFile.model_validate(tomllib.loads(path.read_text()))
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read spec {path}: {e}") from e
    except ValidationError as e:
        raise ConfigError(f"spec {path} is invalid:\n{e}") from e
