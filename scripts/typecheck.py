#!/usr/bin/env python3
"""mypy over the envfarm package as it is installed: ``make lint``, ``make test`` (tests/test_typecheck.py).

The source tree maps folders to packages (``envs/`` is ``envfarm.envs``, see ``[tool.setuptools.package-dir]``
in pyproject.toml), which mypy cannot follow from the checkout; a tree of symlinks under ``.typecheck/``
gives it the installed layout. Settings (strict, and where not) are in ``[tool.mypy]`` of pyproject.toml.
Exit code: mypy's (0 clean, 1 type errors, 2 a crash or bad usage).
"""

from __future__ import annotations

import os
import shutil
import sys
import tomllib
from pathlib import Path

from mypy import api

ROOT = Path(__file__).resolve().parent.parent
TREE = ROOT / ".typecheck"


def build_tree() -> Path:
    """``.typecheck/envfarm/...``: symlinks to the checkout's files, laid out as the installed package."""
    mapping = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-dir"]
    shutil.rmtree(TREE, ignore_errors=True)
    package = TREE / "envfarm"
    package.mkdir(parents=True)
    for item in (ROOT / "envfarm").iterdir():
        if item.name != "__pycache__":
            (package / item.name).symlink_to(item)
    for name, folder in mapping.items():
        parts = name.split(".")
        if parts[0] == "envfarm" and len(parts) == 2 and (ROOT / folder / "__init__.py").exists():
            (package / parts[1]).symlink_to(ROOT / folder)
    return TREE


def main(argv: list[str]) -> int:
    tree = build_tree()
    os.chdir(tree)  # mypy finds `envfarm` in the working folder
    out, err, rc = api.run(["--config-file", str(ROOT / "pyproject.toml"), "--cache-dir",
                            str(ROOT / ".mypy_cache"), "-p", "envfarm", *argv])
    shown = out.replace(str(tree) + "/", "")
    sys.stdout.write(shown)
    sys.stderr.write(err)
    return rc


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
