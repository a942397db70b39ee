"""Third-party env plugins in tests: write a one-module plugin package, pip-install packages into a private
folder, and the environment that makes a subprocess see them (as a user's ``pip install`` would)."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ECHO = ROOT / "examples" / "envfarm-echo"
"""The example plugin package (``echo/Echo-v0``)."""

PYPROJECT = """\
[build-system]
requires = ["setuptools>=61"]
build-backend = "setuptools.build_meta"
[project]
name = "{name}"
version = "0.0.1"
[project.entry-points."envfarm.envs"]
{entry_name} = "{target}"
"""


def plugin_package(folder: Path, name: str, entry: str, files: dict[str, str]) -> Path:
    """A plugin package in ``folder / name``: ``files`` (relative path -> source) and a pyproject whose
    ``envfarm.envs`` entry point is ``entry`` ("NAME = module:function"). Top-level modules only are
    declared as such; otherwise setuptools finds the packages."""
    src = folder / name
    for rel, text in files.items():
        (src / rel).parent.mkdir(parents=True, exist_ok=True)
        (src / rel).write_text(textwrap.dedent(text))
    entry_name, target = (part.strip() for part in entry.split("=", 1))
    pyproject = PYPROJECT.format(name=name, entry_name=entry_name, target=target)
    modules = [rel.removesuffix(".py") for rel in files if "/" not in rel and rel.endswith(".py")]
    if len(modules) == len(files):
        pyproject += f"[tool.setuptools]\npy-modules = {modules!r}\n"
    (src / "pyproject.toml").write_text(pyproject)
    return src


def install_plugins(folder: Path, *packages: Path, **env: str) -> dict[str, str]:
    """pip-install ``packages`` (copied first: builds leave files behind) into ``folder / "site"``; the
    environment of a subprocess that sees them, with ``env`` added."""
    site = folder / "site"
    for pkg in packages:
        copy = shutil.copytree(pkg, folder / "build" / pkg.name)
        subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                        "--target", str(site), str(copy)], check=True, timeout=300)
    return {**os.environ, **env, "PYTHONPATH": str(site)}
