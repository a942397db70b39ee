"""Source distributions: parse ``NAME==VERSION``, download the sdist with pip on the host, unpack.

    spec = parse_spec("cachetools==5.3.3")
    sd = download(spec, cache / "sdists")                 # pip download --no-binary NAME --no-deps
    tree = unpack(sd, cache / "src")                      # the sdist's files (top folder stripped)

Downloads are cached by file name and checked against their sha256 when a row names one. Functions here
block (pip, tar); call them through ``asyncio.to_thread`` from async code.
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from envfarm.errors import ConfigError, PackageNotFound, TaskFactoryError, tail

from .recipe import normalize

log = logging.getLogger(__name__)

_SPEC = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*==\s*([A-Za-z0-9][A-Za-z0-9.+!_-]*)\s*$")
SDIST_SUFFIXES = (".tar.gz", ".tgz", ".zip", ".tar.bz2")
SKIPPED_PARTS = ("__pycache__", ".pytest_cache", ".git", ".tox", ".nox", ".mypy_cache")
PIP_TIMEOUT_S = 600


@dataclass(frozen=True)
class PackageSpec:
    """``NAME==VERSION`` from the command line (the name normalized as PyPI does)."""

    name: str
    version: str

    def __str__(self) -> str:
        return f"{self.name}=={self.version}"


@dataclass(frozen=True)
class Sdist:
    """A downloaded source distribution."""

    spec: PackageSpec
    path: Path
    sha256: str


def parse_spec(text: str) -> PackageSpec:
    """``NAME==VERSION``; anything else is a ConfigError saying what to write."""
    m = _SPEC.match(text)
    if not m:
        raise ConfigError(f"--package {text!r} is not NAME==VERSION (e.g. --package cachetools==5.3.3); "
                          "a pinned version keeps the mined tasks reproducible")
    return PackageSpec(normalize(m.group(1)), m.group(2))


def download(spec: PackageSpec, dest: Path, find_links: Sequence[Path] = ()) -> Sdist:
    """The sdist of ``spec`` in ``dest`` (cached); ``find_links`` folders replace the index (tests)."""
    dest.mkdir(parents=True, exist_ok=True)
    if (found := _cached(spec, dest)) is not None:
        return Sdist(spec, found, sha256_of(found))
    with tempfile.TemporaryDirectory(prefix=".dl-", dir=dest) as tmp:
        cmd = [sys.executable, "-m", "pip", "download", "--no-binary", spec.name, "--no-deps", "--quiet",
               "--disable-pip-version-check", "-d", tmp, str(spec)]
        if find_links:
            cmd += ["--no-index", "--no-build-isolation", *(f"--find-links={p}" for p in find_links)]
        env = {**os.environ, "PIP_NO_INPUT": "1"}
        try:
            res = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=PIP_TIMEOUT_S)
        except (OSError, subprocess.TimeoutExpired) as e:
            raise TaskFactoryError(f"`pip download {spec}` failed: {e}") from e
        files = [p for p in Path(tmp).iterdir() if p.name.endswith(SDIST_SUFFIXES)]
        if res.returncode != 0 or not files:
            raise _download_error(spec, res.stdout + res.stderr)
        target = dest / files[0].name
        shutil.move(files[0], target)
    log.info("downloaded %s", target)
    return Sdist(spec, target, sha256_of(target))


def _cached(spec: PackageSpec, dest: Path) -> Path | None:
    stem = re.sub(r"[-_.]+", "_", spec.name).lower()
    for path in sorted(dest.iterdir()):
        name = re.sub(r"[-_.]+", "_", path.name).lower()
        if path.is_file() and path.name.endswith(SDIST_SUFFIXES) and name.startswith(
            f"{stem}_{re.sub(r'[-_.]+', '_', spec.version).lower()}_"
        ):
            return path
    return None


def _download_error(spec: PackageSpec, output: str) -> TaskFactoryError:
    if "No matching distribution" in output or "Could not find a version" in output:
        return PackageNotFound(
            f"no source distribution of {spec} on the package index (unknown name or version, or the "
            f"project publishes wheels only); check `pip index versions {spec.name}` and pick a version "
            f"with an sdist\n{tail(output, 5)}")
    return TaskFactoryError(f"`pip download {spec}` failed:\n{tail(output)}\nfix: check that PyPI answers "
                            "(`pip download --no-deps NAME`) or pass another version")


def sha256_of(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def unpack(sdist: Sdist) -> dict[str, bytes]:
    """Every regular file of the sdist (path -> bytes), its top folder stripped, sorted."""
    try:
        if sdist.path.name.endswith(".zip"):
            with zipfile.ZipFile(sdist.path) as zf:
                raw = {i.filename: zf.read(i) for i in zf.infolist() if not i.is_dir()}
        else:
            with tarfile.open(sdist.path) as tf:
                raw = {}
                for member in tf.getmembers():
                    if member.isfile() and (f := tf.extractfile(member)) is not None:
                        raw[member.name] = f.read()
    except (OSError, tarfile.TarError, zipfile.BadZipFile) as e:
        raise TaskFactoryError(f"cannot unpack {sdist.path}: {e}; delete it and run again") from e
    out = {}
    for name, data in raw.items():
        parts = name.split("/")[1:]
        if not parts or any(p in SKIPPED_PARTS or p in ("", "..") for p in parts) or name.endswith(".pyc"):
            continue
        out["/".join(parts)] = data
    return dict(sorted(out.items()))


def write_tree(files: Mapping[str, bytes], dest: Path) -> Path:
    for rel, data in files.items():
        (dest / rel).parent.mkdir(parents=True, exist_ok=True)
        (dest / rel).write_bytes(data)
    return dest
