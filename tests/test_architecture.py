"""Architecture rules, checked by walking every module's imports (AST; imports inside functions and under
``TYPE_CHECKING`` count too, so a cycle cannot hide behind a lazy import):

- no import cycle between files (a helper two files share lives one floor down, in a module both import);
- an env knows no orchestrator: nothing under ``envs/`` imports the farm, the trainer or the CLI;
- ``sandbox/`` imports nothing above it; ``harness/`` imports no env, farm or trainer;
- the product never imports its test and red-team support: nothing under ``harness/``, ``envs/``,
  ``sandbox/``, ``trainer/`` or ``envfarm/rollout/`` imports ``envfarm.testing`` (a grader that imported its
  own attacks could be steered by them);
- a default backend is named once (``sandbox/values.py``): no ``backend = "docker"`` default anywhere else.

Modules are named as installed (``envs/core.py`` is ``envfarm.envs.core``), from pyproject's package-dir.
"""

from __future__ import annotations

import ast
import tomllib
from collections.abc import Iterator
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DATA = ("envs/code_repair/builtin",)  # task data: projects with their own imports, not envfarm code
ABOVE_ENVS = ("envfarm.rollout", "envfarm.trainer", "envfarm.commands", "envfarm.cli", "envfarm.dashboard")
ABOVE_HARNESS = ("envfarm.envs", *ABOVE_ENVS)
ABOVE_SANDBOX = ("envfarm.harness", *ABOVE_HARNESS)
TEST_SUPPORT = "envfarm.testing"
PRODUCT = ("envfarm.harness", "envfarm.envs", "envfarm.sandbox", "envfarm.trainer", "envfarm.rollout")


@cache
def modules() -> dict[str, Path]:
    """Every envfarm module (dotted name -> file)."""
    setuptools = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    folders = {"envfarm": "envfarm", **setuptools["package-dir"]}
    found: dict[str, Path] = {}
    for package, folder in folders.items():
        for path in sorted((ROOT / folder).rglob("*.py")):
            if any(path.is_relative_to(ROOT / d) for d in DATA):
                continue
            parts = [*package.split("."), *path.relative_to(ROOT / folder).with_suffix("").parts]
            found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return found


def _imported(name: str, path: Path) -> Iterator[str]:
    """Dotted names ``name``'s file imports, anywhere in it; relative imports resolved."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
                base = f"{anchor}.{base}" if base else anchor
            yield from (f"{base}.{alias.name}" for alias in node.names)  # a module, or a name in ``base``


@cache
def graph() -> dict[str, frozenset[str]]:
    """Module -> the envfarm modules (files) it imports."""
    known = modules()
    edges: dict[str, frozenset[str]] = {}
    for name, path in known.items():
        targets = set()
        for imported in _imported(name, path):
            while imported and imported not in known:
                imported = imported.rpartition(".")[0]
            if imported and imported != name:
                targets.add(imported)
        edges[name] = frozenset(targets)
    return edges


def cycles(edges: dict[str, frozenset[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    top = stack.pop()
                    on_stack.discard(top)
                    component.append(top)
                    if top == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def _violations(layer: str, above: tuple[str, ...]) -> list[str]:
    return [f"{name} imports {target}" for name, targets in sorted(graph().items())
            if name == layer or name.startswith(layer + ".")
            for target in sorted(targets) if target.startswith(above)]


def test_the_walk_sees_every_package_and_lazy_imports() -> None:
    names = modules()
    assert {"envfarm.envs.core", "envfarm.sandbox.base", "envfarm.harness.grading", "envfarm.trainer.base",
            "envfarm.rollout.farm", "envfarm.cli"} <= set(names)
    assert not any(".builtin." in n for n in names)
    assert cycles({"a": frozenset({"b"}), "b": frozenset({"a"}), "c": frozenset()}) == [["a", "b"]]
    assert "envfarm.sandbox.docker" in graph()["envfarm.sandbox"]  # get_backend imports it inside a function


def test_no_import_cycle_between_files() -> None:
    found = cycles(graph())
    assert not found, "import cycles (move the shared helper into a module both import):\n" + "\n".join(
        " <-> ".join(c) for c in found)


@pytest.mark.parametrize(("layer", "above"), [
    ("envfarm.envs", ABOVE_ENVS),
    ("envfarm.harness", ABOVE_HARNESS),
    ("envfarm.sandbox", ABOVE_SANDBOX),
], ids=["envs-know-no-orchestrator", "harness", "sandbox"])
def test_layers_import_nothing_above_them(layer: str, above: tuple[str, ...]) -> None:
    assert not _violations(layer, above)


@pytest.mark.parametrize("layer", PRODUCT)
def test_the_product_imports_no_test_support(layer: str) -> None:
    assert f"{TEST_SUPPORT}.exploits" in modules()  # the rule looks at a package that exists
    assert not _violations(layer, (TEST_SUPPORT,)), f"{layer} imports {TEST_SUPPORT}: move what it needs down"


def _backend_defaults(tree: ast.AST) -> Iterator[int]:
    """Lines where a parameter, field or ``--backend`` option named backend defaults to a literal."""
    for node in ast.walk(tree):
        if isinstance(node, ast.arguments):
            params = [*node.posonlyargs, *node.args][-len(node.defaults):] if node.defaults else []
            pairs = [*zip(params, node.defaults, strict=True),
                     *zip(node.kwonlyargs, node.kw_defaults, strict=True)]
            yield from (d.lineno for a, d in pairs if a.arg == "backend" and isinstance(d, ast.Constant)
                        and isinstance(d.value, str))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            if node.target.id == "backend" and isinstance(node.value, ast.Constant) and node.value.value:
                yield node.lineno
        elif isinstance(node, ast.Call) and any(isinstance(a, ast.Constant) and a.value == "--backend"
                                                for a in node.args):
            yield from (k.value.lineno for k in node.keywords
                        if k.arg == "default" and isinstance(k.value, ast.Constant))


def test_the_default_backend_is_named_once() -> None:
    files = [*modules().values(), *sorted((ROOT / "bench").glob("*.py"))]
    found = [f"{path.relative_to(ROOT)}:{line}" for path in files
             for line in _backend_defaults(ast.parse(path.read_text()))]
    assert not found, f"use envfarm.sandbox.DEFAULT_BACKEND (or IMAGE_BACKEND) instead of a literal: {found}"


def test_test_module_names_are_unique() -> None:
    """Test folders have no __init__.py (pytest's rootdir imports): two test modules with one basename make
    the whole collection fail, on the machine that has both."""
    names: dict[str, list[str]] = {}
    for path in sorted((ROOT / "tests").rglob("test_*.py")):
        names.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    clashes = {name: paths for name, paths in names.items() if len(paths) > 1}
    assert not clashes, f"rename one of each: {clashes}"
