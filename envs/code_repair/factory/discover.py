"""Where a project's code and tests are, read from the sdist the way the project itself says.

    layout = find_layout(files, recipe, spec)    # Layout: source files, test paths and files, their origin
    layout.origin                                # "testpaths (pyproject.toml)", "in-package", "tests/", ...

Test paths, first that applies: the recipe's ``tests``; ``testpaths`` of the project's pytest config
(``pytest.ini``, ``pyproject.toml`` ``[tool.pytest.ini_options]``/``[tool.pytest]``, ``tox.ini``,
``setup.cfg``, in pytest's own order); top-level ``tests/``, ``test/`` or ``testing/``; test folders
shipped inside the package (``pkg/tests/``, ``pkg/sub/tests/``, ``pkg/testsuite/``: a folder named like
a test folder that holds test modules; the numpy/networkx/toolz/pint layout, run against the source
tree); top-level ``test_*.py`` files. Test files are those matching the config's
``python_files`` (pytest's default otherwise) plus ``unittest`` modules under the test paths that do not
match it (``tests/tests.py``), which are handed to pytest by name. Modules that hold only doctests are
left out with a reason; a project whose whole suite is doctests, or that ships none, is a
:class:`TaskFactoryError` naming the reason (the catalogue records it and goes on).
"""

from __future__ import annotations

import ast
import configparser
import fnmatch
import re
import shlex
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from envfarm.errors import TaskFactoryError
from envfarm.pyast import parse

from .recipe import Recipe, in_recipe_file
from .sdist import PackageSpec

NOT_SOURCE = {"setup.py", "conftest.py", "noxfile.py", "fabfile.py", "tasks.py", "docs", "tests", "test",
              "examples", "benchmarks", "bench", "tools", "scripts", "typing-examples", "changelog.d"}
TEST_DIRS = ("tests", "test", "testing")
DEFAULT_PYTHON_FILES = ("test_*.py", "*_test.py")
KEPT_ADDOPTS = re.compile(r"^(--import-mode=\S+|-p|--strict-config)$")
"""addopts tokens the factory keeps (the rest, coverage/xdist/doctest flags, go with ``-o addopts=``)."""
CONFIG_PLUGINS = {"asyncio_mode": "pytest-asyncio", "timeout": "pytest-timeout", "mock_use_standalone_module":
                  "pytest-mock", "env": "pytest-env", "django_settings_module": "pytest-django"}
"""pytest config keys that only a plugin reads -> that plugin."""
_TEST_PART = re.compile(r"(^|/)(tests?|testing)(/|$)|(^|/)(test_[^/]*|[^/]*_tests?|conftest)\.py$")
_DOCTEST_FLAGS = ("--doctest-modules", "--doctest-glob")


@dataclass(frozen=True)
class PytestConfig:
    """The parts of a project's pytest configuration the factory follows."""

    file: str = ""
    """Where it was read (``pyproject.toml``, ``setup.cfg``, ...); empty when the project has none."""
    testpaths: tuple[str, ...] = ()
    python_files: tuple[str, ...] = DEFAULT_PYTHON_FILES
    addopts: tuple[str, ...] = ()
    """The project's addopts tokens as written (most are dropped; see :data:`KEPT_ADDOPTS`)."""
    plugins: tuple[str, ...] = ()
    """pytest plugins the config shows it needs (``required_plugins``, ``asyncio_mode`` -> pytest-asyncio)."""

    @property
    def kept_addopts(self) -> tuple[str, ...]:
        out: list[str] = []
        for i, tok in enumerate(self.addopts):
            if KEPT_ADDOPTS.match(tok) and tok != "-p":
                out.append(tok)
            elif tok == "-p" and i + 1 < len(self.addopts) and not self.addopts[i + 1].startswith(
                    ("pytest_cov", "xdist", "no:")):
                out += ["-p", self.addopts[i + 1]]
        return tuple(out)

    @property
    def doctests(self) -> bool:
        return any(t.startswith(_DOCTEST_FLAGS) for t in self.addopts)


@dataclass(frozen=True)
class Layout:
    """Where the code and the tests of an unpacked sdist are."""

    source_files: tuple[str, ...]
    """Repository paths of the Python files that may be mutated (sorted)."""
    test_paths: tuple[str, ...]
    """Test folders/files handed to pytest."""
    pythonpath: str
    """``src`` for a src layout, else ``.``."""
    test_files: tuple[str, ...] = ()
    """The Python test modules found under ``test_paths`` (sorted)."""
    origin: str = ""
    """How the test paths were found: recipe, ``testpaths (setup.cfg)``, ``tests/``, in-package, ..."""
    config: PytestConfig = field(default_factory=PytestConfig)
    skipped: tuple[tuple[str, str], ...] = ()
    """``(path, reason)`` of modules under the test paths that are not used (doctest-only, no tests)."""

    @property
    def in_package(self) -> bool:
        """Tests shipped inside the import package (``pkg/tests/``)."""
        return any(_test_inside_package(p, self.source_files) for p in self.test_files)


def read_pytest_config(files: Mapping[str, bytes]) -> PytestConfig:
    """The project's pytest config, from the first file pytest itself would read it from."""
    for name in ("pytest.ini", ".pytest.ini", "pyproject.toml", "tox.ini", "setup.cfg"):
        raw = files.get(name)
        if raw is None:
            continue
        text = raw.decode("utf-8", errors="replace")
        found = _toml_section(text) if name == "pyproject.toml" else _ini_section(text, name)
        if found is not None:
            return _config(name, found)
    return PytestConfig()


def _toml_section(text: str) -> dict[str, object] | None:
    try:
        tool = tomllib.loads(text).get("tool", {})
    except tomllib.TOMLDecodeError:
        return None
    pytest = tool.get("pytest") if isinstance(tool, dict) else None
    if not isinstance(pytest, dict):
        return None
    legacy = pytest.get("ini_options")
    return legacy if isinstance(legacy, dict) else pytest


def _ini_section(text: str, name: str) -> dict[str, object] | None:
    parser = configparser.ConfigParser(interpolation=None, strict=False)
    try:
        parser.read_string(text)
    except configparser.Error:
        return None
    section = "tool:pytest" if name == "setup.cfg" else "pytest"
    return dict(parser[section]) if parser.has_section(section) else None


def _config(name: str, data: Mapping[str, object]) -> PytestConfig:
    def words(key: str, default: tuple[str, ...] = ()) -> tuple[str, ...]:
        value = data.get(key)
        if isinstance(value, str):
            try:
                return tuple(shlex.split(value))
            except ValueError:
                return tuple(value.split())
        if isinstance(value, list):
            return tuple(w for v in value if isinstance(v, str) for w in (v.split() if key != "addopts"
                                                                          else shlex.split(v)))
        return default

    plugins = [re.split(r"[<>=!~ ]", p, maxsplit=1)[0] for p in words("required_plugins")]
    plugins += [dist for key, dist in CONFIG_PLUGINS.items() if key in data]
    return PytestConfig(name, words("testpaths"), words("python_files", DEFAULT_PYTHON_FILES) or
                        DEFAULT_PYTHON_FILES, words("addopts"), tuple(dict.fromkeys(plugins)))


def find_layout(files: Mapping[str, bytes], recipe: Recipe, spec: PackageSpec) -> Layout:
    """The source files to mutate and the tests that judge them; TaskFactoryError (with the reason) when
    the project has no usable suite."""
    src = any(p.startswith("src/") and p.endswith(".py") for p in files)
    prefix = "src/" if src else ""
    roots = recipe.source or import_roots(files, prefix)
    config = read_pytest_config(files)
    paths, origin = _test_paths(files, recipe, config, roots)
    tests, skipped = _test_files(files, paths, config)
    sources = tuple(sorted(
        p for p in files if p.endswith(".py") and any(_under(p, r) for r in roots) and p not in tests
        and not any(fnmatch.fnmatchcase(p, g) for g in recipe.skip_source) and not _TEST_PART.search(p)
        and _inner_test_dir(p) is None))  # helpers in a test folder (pint/testsuite) are no code
    if not tests:
        raise TaskFactoryError(_no_suite(spec, files, config, paths, skipped))
    if not sources:
        raise TaskFactoryError(f"{spec}: no Python package found in the sdist to mutate; set source = [...] "
                               f"{in_recipe_file(spec.name)}")
    # a unittest module pytest's python_files would not collect from a folder is passed by name
    extra = tuple(t for t in tests if not _matches(t, config.python_files) and not any(t == p for p in paths))
    return Layout(sources, (*paths, *extra), "src" if src else ".", tests, origin, config, tuple(skipped))


def _test_paths(files: Mapping[str, bytes], recipe: Recipe, config: PytestConfig,
                roots: Sequence[str]) -> tuple[tuple[str, ...], str]:
    if recipe.tests:
        return tuple(recipe.tests), "recipe"
    if config.testpaths:
        found = tuple(sorted({p for pat in config.testpaths for p in _expand(files, pat.rstrip("/"))}))
        if found:
            return found, f"testpaths ({config.file})"
    top = tuple(t for t in TEST_DIRS if any(p.startswith(f"{t}/") and p.endswith(".py") for p in files))
    if top:
        return top, f"{top[0]}/"
    # a test folder inside the package: named like one (tests/, test/, testing/, testsuite/, unit_tests/)
    # and holding test modules by the project's python_files (absl/testing, a test framework, holds none)
    inside = sorted({d for p in files if _matches(p, config.python_files) and any(_under(p, r) for r in roots)
                     and (d := _inner_test_dir(p)) is not None})
    outermost = tuple(d for d in inside if not any(d != o and _under(d, o) for o in inside))
    if outermost:
        return outermost, "in-package"
    loose = tuple(p for p in files if "/" not in p and (_matches(p, config.python_files) or p == "tests.py"))
    return loose, "top-level test files" if loose else ""


def _inner_test_dir(path: str) -> str | None:
    """The outermost folder of ``path`` below its top folder named like a test folder, if any."""
    parts = path.split("/")[:-1]
    for i, name in enumerate(parts[1:], 1):
        if name in TEST_DIRS or name.startswith("test") or name.endswith("tests"):
            return "/".join(parts[: i + 1])
    return None


def _expand(files: Mapping[str, bytes], pattern: str) -> set[str]:
    """A testpaths entry (a folder, a file or a glob) as the sdist paths it names."""
    out = set()
    for p in files:
        parts = p.split("/")
        for i in range(1, len(parts) + 1):
            head = "/".join(parts[:i])
            if head == pattern or fnmatch.fnmatchcase(head, pattern):
                out.add(head)
                break
    return {p for p in out if p.endswith(".py") or any(f.startswith(f"{p}/") and f.endswith(".py")
                                                       for f in files)}


def _test_files(files: Mapping[str, bytes], paths: Sequence[str],
                config: PytestConfig) -> tuple[tuple[str, ...], list[tuple[str, str]]]:
    tests, skipped = [], []
    for p in sorted(files):
        if not p.endswith(".py") or not any(_under(p, t) for t in paths) or p.endswith("conftest.py"):
            continue
        named = p in paths or _matches(p, config.python_files)
        kind = _module_kind(files[p])
        if kind == "tests" and (named or _is_unittest(files[p])):
            tests.append(p)
        elif named and kind == "doctest":
            skipped.append((p, "doctest-only module (its examples run with --doctest-modules, not as tests)"))
        elif named:
            skipped.append((p, "no test functions or classes"))
    return tuple(tests), skipped


def _module_kind(data: bytes) -> str:
    """``tests`` (test functions or classes), ``doctest`` (only ``>>>`` examples) or ``none``."""
    try:
        tree = parse(data)
    except (SyntaxError, ValueError):
        return "none"
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            return "tests"
        if isinstance(node, ast.ClassDef) and (node.name.startswith("Test") or any(
                ast.unparse(b).endswith("TestCase") for b in node.bases)):
            return "tests"
    return "doctest" if b">>>" in data else "none"


def _is_unittest(data: bytes | str) -> bool:
    text = data.decode("utf-8", errors="replace") if isinstance(data, bytes) else data
    return bool(re.search(r"class \w+\((unittest\.)?\w*TestCase\b", text))


def _no_suite(spec: PackageSpec, files: Mapping[str, bytes], config: PytestConfig, paths: Sequence[str],
              skipped: Sequence[tuple[str, str]]) -> str:
    fix = f"set tests = [...] {in_recipe_file(spec.name)}, or pick another package"
    doctest_files = any(p.endswith((".txt", ".rst")) and any(_under(p, t) for t in paths)
                        and b">>>" in files[p] for p in files)
    if config.doctests or doctest_files or any("doctest" in why for _, why in skipped):
        return (f"{spec}: doctest-only suite (its tests are examples in docstrings or text files, which "
                f"change with the code they test): skipped; {fix}")
    where = ", ".join(paths) if paths else ("no tests/, test/, testing/ folder, no test folder inside the "
                                            "package (pkg/tests/, pkg/testsuite/), no test_*.py")
    return f"{spec}: the sdist ships no tests ({where}); the factory needs the project's test suite: {fix}"


def import_roots(files: Mapping[str, bytes], prefix: str) -> tuple[str, ...]:
    """Top-level modules and packages (folders with ``__init__.py``) under ``prefix``."""
    roots = set()
    for path in files:
        if not path.startswith(prefix) or not path.endswith(".py"):
            continue
        rest = path[len(prefix):].split("/")
        top = rest[0]
        if top in NOT_SOURCE or top.startswith((".", "_", "test")) or "-" in top:
            continue
        if len(rest) == 1 or f"{prefix}{top}/__init__.py" in files:
            roots.add(prefix + top)
    return tuple(sorted(roots))


def _matches(path: str, patterns: Sequence[str]) -> bool:
    name = path.rsplit("/", 1)[-1]
    return any(fnmatch.fnmatchcase(name, g) or fnmatch.fnmatchcase(path, g) for g in patterns)


def _test_inside_package(test: str, sources: Sequence[str]) -> bool:
    folder = test.rsplit("/", 2)[0] if test.count("/") >= 2 else ""
    return bool(folder) and any(s.startswith(f"{folder}/") for s in sources)


def _under(path: str, root: str) -> bool:
    return path == root or path.startswith(root.rstrip("/") + "/")
