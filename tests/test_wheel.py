"""The built wheel is a complete envfarm: installed (not editable) into a fresh venv, it finds its image
recipes and SWE-bench specs, builds the images and farms oracle episodes, with the source tree nowhere on
its path.

The new venv borrows the dependencies from the test venv's site-packages through a ``.pth`` line (no index is
needed); a plain path line does not run that folder's own ``.pth`` files, so the editable install's finder
stays out, and the test asserts that ``envfarm`` is imported from the new venv.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.docker, pytest.mark.bwrap]

ROOT = Path(__file__).resolve().parents[1]
SOURCES = ("pyproject.toml", "README.md", "envfarm", "envs", "sandbox", "harness", "trainer", "images")
SKIP = shutil.ignore_patterns("__pycache__", "*.pyc", "*.egg-info")


def _run(args: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(args, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    tail = f"{done.stdout[-3000:]}\n{done.stderr[-3000:]}"
    assert done.returncode == 0, f"{args} exited {done.returncode}:\n{tail}"
    return done


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The wheel, built from a copy of the sources (setuptools writes build/ next to pyproject.toml)."""
    src = tmp_path_factory.mktemp("src")
    for name in SOURCES:
        item = ROOT / name
        if item.is_dir():
            shutil.copytree(item, src / name, ignore=SKIP)
        else:
            shutil.copy2(item, src / name)
    dist = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
          str(src)], cwd=src)
    (built,) = dist.glob("envfarm-*.whl")
    return built


@pytest.fixture(scope="module")
def venv(wheel: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A fresh venv with the wheel installed, dependencies borrowed from this venv's site-packages."""
    folder = tmp_path_factory.mktemp("venv")
    python = str(folder / "bin" / "python")
    _run([sys.executable, "-m", "venv", "--without-pip", str(folder)], cwd=folder)
    purelib = _run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"], cwd=folder)
    deps = Path(purelib.stdout.strip()) / "zz_envfarm_test_deps.pth"
    deps.write_text(sysconfig.get_path("purelib") + "\n")
    _run([sys.executable, "-m", "pip", "--python", python, "install", "--no-deps", "-q", str(wheel)],
         cwd=folder)
    return folder


def test_wheel_ships_recipes_specs_and_markers(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    tracked = [p.relative_to(ROOT).as_posix() for p in (ROOT / "images").rglob("*") if p.is_file()]
    assert tracked and {f"envfarm/{p}" for p in tracked} <= names
    assert {"envfarm/py.typed", "envfarm/images/swebench/sympy__sympy.toml",
            "envfarm/envs/code_repair/factory/recipes.toml", "envfarm/envs/code_repair/builtin/tasks.jsonl",
            "envfarm/dashboard/static/index.html"} <= names


def test_installed_wheel_builds_images_and_farms(venv: Path, tmp_path: Path) -> None:
    python, cli = str(venv / "bin" / "python"), str(venv / "bin" / "envfarm")
    probe = ("import json, envfarm; from envfarm.sandbox.recipes import images_dir; "
             "from envfarm.harness.specs import SpecCatalog; spec = SpecCatalog().files['sympy/sympy'][0]; "
             "print(json.dumps([envfarm.__file__, str(images_dir()), str(spec)]))")
    where = json.loads(_run([python, "-c", probe], cwd=tmp_path).stdout)
    for path in where:
        assert Path(path).resolve().is_relative_to(venv.resolve()), f"{path} is not the installed wheel's"
    assert Path(where[2]).is_file()

    _run([cli, "doctor"], cwd=tmp_path)
    _run([cli, "images", "build"], cwd=tmp_path, timeout=600)
    out = tmp_path / "trajectories.jsonl"
    farm = ["farm", "run", "--env", "envfarm/ToolCalc-v0", "--episodes", "20", "--policy", "oracle"]
    _run([cli, *farm, "--backend", "bwrap", "--quiet", "--run-dir", str(tmp_path / "run"), "--trajectories",
          str(out)], cwd=tmp_path)
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 20 and all(row["reward"] == 1.0 for row in rows), rows[:2]
