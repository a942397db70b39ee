"""A tiny PyPI-style project written by the tests, packed as an sdist into a local --find-links folder."""

from __future__ import annotations

import gzip
import io
import tarfile
from pathlib import Path

NAME = "envfarm-tinycalc"
VERSION = "1.0.0"

FILES = {
    "pyproject.toml": (
        '[build-system]\nrequires = ["setuptools"]\nbuild-backend = "setuptools.build_meta"\n\n'
        f'[project]\nname = "{NAME}"\nversion = "{VERSION}"\n\n'
        '[project.optional-dependencies]\ntest = ["pytest"]\n\n'
        '[tool.setuptools]\npackages = ["tinycalc"]\n'
    ),
    "tinycalc/__init__.py": '"""Tiny calculator helpers."""\n',
    "tinycalc/clamp.py": (
        "def clamp(x, lo, hi):\n"
        "    if x < lo:\n"
        "        return lo\n"
        "    if x > hi:\n"
        "        return hi\n"
        "    return x\n"
    ),
    "tinycalc/stats.py": (
        "def total(xs):\n"
        "    s = 0\n"
        "    for x in xs:\n"
        "        s += x\n"
        "    return s\n\n\n"
        "def mean(xs):\n"
        "    if not xs:\n"
        "        raise ValueError('mean of nothing')\n"
        "    return total(xs) / len(xs)\n"
    ),
    "tests/test_clamp.py": (
        "from tinycalc.clamp import clamp\n\n\n"
        "def test_inside():\n    assert clamp(5, 0, 10) == 5\n\n\n"
        "def test_below():\n    assert clamp(-3, 0, 10) == 0\n\n\n"
        "def test_above():\n    assert clamp(30, 0, 10) == 10\n\n\n"
        "def test_type():\n    assert isinstance(clamp(1, 0, 2), int)\n"
    ),
    "tests/test_stats.py": (
        "import pytest\n\nfrom tinycalc.stats import mean, total\n\n\n"
        "def test_total():\n    assert total([1, 2, 3]) == 6\n\n\n"
        "def test_mean():\n    assert mean([2, 4]) == 3\n\n\n"
        "def test_mean_empty():\n    with pytest.raises(ValueError):\n        mean([])\n\n\n"
        "def test_callable():\n    assert callable(mean)\n"
    ),
}


def pkg_info(name: str = NAME, version: str = VERSION) -> str:
    return (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\nProvides-Extra: test\n"
            'Requires-Dist: pytest; extra == "test"\n')


def write_sdist(folder: Path, files: dict[str, str] | None = None, name: str = NAME,
                version: str = VERSION) -> Path:
    """``folder/<name>-<version>.tar.gz`` with fixed mtimes (the same bytes every time)."""
    folder.mkdir(parents=True, exist_ok=True)
    stem = f"{name.replace('-', '_')}-{version}"
    content = {**(FILES if files is None else files), "PKG-INFO": pkg_info(name, version)}
    path = folder / f"{stem}.tar.gz"
    buf = io.BytesIO()
    with gzip.GzipFile(fileobj=buf, mode="wb", mtime=0) as gz, tarfile.open(
            fileobj=gz, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for rel, text in sorted(content.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"{stem}/{rel}")
            info.size, info.mtime, info.mode = len(data), 946684800, 0o644
            tar.addfile(info, io.BytesIO(data))
    path.write_bytes(buf.getvalue())
    return path
