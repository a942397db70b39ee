"""``docker build`` of a layered image with no network: Python packages come from a host-side wheelhouse.

    pip download (on the host, for the image's Python and glibc;  ->  config.home()/wheelhouse/<hash>/
                  sdists where a package has no such wheel;
                  torch as the CPU build on pip's find-links)
    temp build context = images/<name>/* + wheelhouse/            ->  docker build, network_mode="none"

Callers go through :func:`envfarm.sandbox.images.build_image`; this module does the two steps.
"""

from __future__ import annotations

import functools
import logging
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import zipfile
from collections import deque
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import requests
from docker.errors import DockerException
from packaging.requirements import InvalidRequirement, Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

from envfarm import config
from envfarm.errors import ImageBuildError, tail

from . import dockerutil, hostproc, rootfs
from .rootfs import ProgressFn

log = logging.getLogger(__name__)

BUILD_TIMEOUT_S = 1800  # HTTP timeout of one docker build (the daemon streams its log while building)
OLDEST_GLIBC_MINOR = 17  # manylinux2014
MAX_DEPENDENCY_ROUNDS = 8
LEGACY_SETUPTOOLS = "setuptools<70"
"""The build requirement an sdist's metadata is retried with when today's setuptools cannot prepare it
(:func:`download_sources`)."""


@dataclass(frozen=True)
class LayerSpec:
    """One layered image to build."""

    folder: Path
    """The recipe folder (Dockerfile, requirements.txt, any files the Dockerfile copies)."""
    tag: str
    base_tag: str
    """Passed as the ``BASE`` build argument (``ARG BASE`` / ``FROM ${BASE}``)."""
    labels: Mapping[str, str]
    recipe_hash: str
    """Names the wheelhouse folder."""
    python: str
    """The image's Python ("3.11"): wheels are downloaded for it."""
    glibc: str
    """The image's glibc ("2.36"): the newest manylinux wheels allowed."""


def build_layer(spec: LayerSpec, nocache: bool = False, progress: ProgressFn | None = None) -> str:
    """Fill the wheelhouse, assemble a build context and run the build; returns the image id.

    A recipe without requirements gets an empty ``wheelhouse/`` in its context and no cached wheelhouse
    folder (the harness builds one such layer per SWE-bench instance)."""
    with tempfile.TemporaryDirectory(prefix="envfarm-build-") as tmp:
        ctx = Path(tmp)
        shutil.copytree(
            spec.folder, ctx, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc")
        )
        if _has_requirements(spec.folder / "requirements.txt"):
            shutil.copytree(wheelhouse(spec, progress), ctx / "wheelhouse", dirs_exist_ok=True)
        else:
            (ctx / "wheelhouse").mkdir(exist_ok=True)
        return _docker_build(ctx, spec, nocache, progress)


# -------------------------------------------------------------------------------------------- wheelhouse


def wheelhouse_dir() -> Path:
    path = config.home() / "wheelhouse"
    path.mkdir(parents=True, exist_ok=True)
    return path


def wheelhouse(spec: LayerSpec, progress: ProgressFn | None = None) -> Path:
    """``wheelhouse/<hash>`` holding wheels for ``requirements.txt`` (empty when there is none); cached."""
    dest = wheelhouse_dir() / spec.recipe_hash
    if dest.is_dir():
        if not missing_requirements(dest, spec.python):
            return dest
        log.warning("wheelhouse %s misses dependencies for Python %s: downloading again", dest, spec.python)
        shutil.rmtree(dest)
    tmp = Path(tempfile.mkdtemp(prefix=f".tmp-{spec.recipe_hash}-", dir=wheelhouse_dir()))
    try:
        req = spec.folder / "requirements.txt"
        if _has_requirements(req):
            _download_preferring_cpu(req, tmp, spec, progress)
        tmp.chmod(0o755)
        try:
            tmp.rename(dest)  # atomic: a wheelhouse folder exists only when complete
        except OSError:
            if not dest.is_dir():
                raise
            log.info("wheelhouse %s was completed by another build meanwhile; using it", dest)
    finally:
        if tmp.exists():
            shutil.rmtree(tmp, ignore_errors=True)
    log.info("wheelhouse %s: %s", dest, ", ".join(sorted(p.name for p in dest.iterdir())) or "empty")
    return dest


def _has_requirements(req: Path) -> bool:
    if not req.is_file():
        return False
    return any(line.strip() and not line.strip().startswith("#") for line in req.read_text().splitlines())


def platforms(glibc: str, arch: str | None = None) -> list[str]:
    """pip ``--platform`` values for an image with ``glibc``: manylinux_2_<minor>..2_18, 2014, any."""
    arch = arch or platform.machine()
    try:
        newest = int(glibc.split(".")[1])
    except (IndexError, ValueError):
        newest = OLDEST_GLIBC_MINOR
    tags = [f"manylinux_2_{minor}_{arch}" for minor in range(newest, OLDEST_GLIBC_MINOR, -1)]
    return [*tags, f"manylinux2014_{arch}", "any"]


def _download_preferring_cpu(req: Path, dest: Path, spec: LayerSpec, progress: ProgressFn | None) -> None:
    """:func:`_download` with torch held to the CPU build on the host's find-links (:func:`cpu_torch`):
    sandboxes have no GPU, and the default build brings 3 GB of CUDA wheels into every image that installs
    torch. A requirement the CPU build does not satisfy (``torch<2``) fails that download; then torch comes
    as the requirements ask."""
    pin = cpu_torch(spec.python)
    if pin is None:
        _download(req, dest, spec, progress)
        return
    with tempfile.TemporaryDirectory(prefix="envfarm-constraints-") as tmp:
        constraints = Path(tmp) / "cpu-torch.txt"
        constraints.write_text(f"torch=={pin}\n", encoding="utf-8")
        try:
            _download(req, dest, spec, progress, ("-c", str(constraints)))
            return
        except ImageBuildError as e:
            if "torch" not in str(e):
                raise
            log.warning("the CPU build of torch (%s) does not fit %s; downloading torch as asked", pin, req)
    shutil.rmtree(dest)  # what the pinned attempt left
    dest.mkdir()
    _download(req, dest, spec, progress)


@functools.cache
def cpu_torch(python: str) -> str | None:
    """The newest CPU build of torch for CPython ``python`` on this machine's pip find-links (``2.13.0+cpu``
    from ``torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl``), or None."""
    tag = "cp" + python.replace(".", "")
    found = []
    for folder in find_links():
        for wheel in Path(folder).glob(f"torch-*+cpu-{tag}-{tag}-*{platform.machine()}.whl"):
            found.append(Version(wheel.name.split("-")[1]))
    return str(max(found)) if found else None


def find_links() -> list[str]:
    """The local folders pip's ``find-links`` names (its environment and its config files)."""
    res = subprocess.run([sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True,
                         check=False)
    folders = []
    for line in res.stdout.splitlines():
        key, _, value = line.partition("=")
        if key.endswith(".find-links"):
            folders += [f for f in value.strip("'\"").split() if Path(f).is_dir()]
    return list(dict.fromkeys(folders))


def _download(req: Path, dest: Path, spec: LayerSpec, progress: ProgressFn | None,
              pins: tuple[str, ...] = ()) -> None:
    """Binary wheels for the image's Python and glibc; what has none comes as an sdist built in the image.

    1. ``pip download --only-binary=:all: --python-version X --platform manylinux...`` for the whole file;
    2. when that fails and the host runs the image's Python, ``pip wheel`` on the host (exact wheels), then
       the dependencies the image's markers add (``async-timeout; python_full_version < "3.11.3"``);
    3. otherwise line by line: a line that has wheels (with its dependencies) gets them, a line that does
       not gets its sdist (``--no-deps``), plus setuptools and wheel so ``pip install`` in the image (no
       network, ``--find-links``) can build it there, with the image's Python and compilers.
    """
    strict = ["download", "--only-binary=:all:", "--python-version", spec.python, "--implementation", "cp",
              *pins]
    for tag in platforms(spec.glibc):
        strict += ["--platform", tag]
    strict += ["-d", str(dest)]
    try:
        _pip([*strict, "-r", str(req)], progress)
        _complete(dest, strict, spec, progress)
        return
    except ImageBuildError as e:
        first = e
    host = f"{sys.version_info.major}.{sys.version_info.minor}"
    if host == spec.python:
        log.warning("some requirements in %s have no wheel for Python %s; building them here", req, host)
        try:
            _pip(["wheel", *pins, "-w", str(dest), "-r", str(req)], progress)
        except ImageBuildError as e:
            raise ImageBuildError(f"{first}\nthe fallback failed too:\n{e}") from e
        _complete(dest, strict, spec, progress)  # the host's x.y.z markers are not the image's x.y.0
        return
    sources = []
    for line in _requirement_lines(req):
        try:
            _pip([*strict, line], progress)
        except ImageBuildError:
            sources.append(line)
    _complete(dest, strict, spec, progress)
    if not sources:
        return
    log.warning(
        "no wheel for Python %s (glibc %s) of %s: their sdists are built inside the image",
        spec.python,
        spec.glibc,
        ", ".join(sources),
    )
    try:
        download_sources(sources, dest, progress)
        _pip([*strict, "setuptools", "wheel"], progress)
    except ImageBuildError as e:
        raise ImageBuildError(f"{first}\nthe sdist fallback failed too:\n{e}") from e


def download_sources(sources: list[str], dest: Path, progress: ProgressFn | None = None) -> None:
    """The sdists of ``sources`` (``--no-deps``) into ``dest``. pip prepares each one's metadata on the host
    to check it; an old ``setup.py`` that imports ``pkg_resources`` (astropy-helpers 3.2) fails with a
    setuptools too new to have it, so that failure is retried once through PEP 517 with the build environment
    held to :data:`LEGACY_SETUPTOOLS`. The image still builds the sdist with its own setuptools."""
    args = ["download", "--no-deps", "--no-binary=:all:", "-d", str(dest), *sources]
    try:
        _pip(args, progress)
        return
    except ImageBuildError as e:
        if "pkg_resources" not in str(e) and "metadata-generation-failed" not in str(e):
            raise
        log.warning("preparing the metadata of %s failed; retrying with %s", ", ".join(sources),
                    LEGACY_SETUPTOOLS)
    with tempfile.TemporaryDirectory(prefix="envfarm-constraints-") as tmp:
        constraints = Path(tmp) / "constraints.txt"
        constraints.write_text(f"{LEGACY_SETUPTOOLS}\n", encoding="utf-8")
        _pip(args, progress, {"PIP_USE_PEP517": "1", "PIP_CONSTRAINT": str(constraints)})


def _complete(dest: Path, strict: list[str], spec: LayerSpec, progress: ProgressFn | None) -> None:
    """Download the dependencies pip skipped: ``pip download --python-version`` evaluates markers against
    the host's Python (``tomli; python_version < "3.11"`` is dropped on a 3.11 host for a 3.9 image), so the
    wheels' own requirements are checked with the image's markers until nothing is missing."""
    for _ in range(MAX_DEPENDENCY_ROUNDS):
        missing = missing_requirements(dest, spec.python)
        if not missing:
            return
        log.info("wheelhouse: dependencies for Python %s the host's pip skipped: %s", spec.python, missing)
        _pip([*strict, *missing], progress)
    raise ImageBuildError(
        f"the wheelhouse {dest} still misses dependencies after {MAX_DEPENDENCY_ROUNDS} rounds"
    )


def missing_requirements(folder: Path, python: str) -> list[str]:
    """Requirements of the wheels in ``folder`` that apply on ``python`` (Linux, CPython) and that no wheel or
    sdist in ``folder`` provides, by name."""
    env = {
        "python_version": python,
        "python_full_version": f"{python}.0",
        "implementation_name": "cpython",
        "platform_python_implementation": "CPython",
        "sys_platform": "linux",
        "platform_system": "Linux",
        "os_name": "posix",
        "platform_machine": platform.machine(),
        "extra": "",
    }
    have = {_dist_name(p.name) for p in folder.iterdir()}
    missing: dict[str, str] = {}
    for wheel in sorted(folder.glob("*.whl")):
        for line in _requires_dist(wheel):
            try:
                requirement = Requirement(line)
            except InvalidRequirement:
                continue
            if requirement.marker is not None and not requirement.marker.evaluate(env):
                continue
            name = canonicalize_name(requirement.name)
            if name not in have:
                extras = f"[{','.join(sorted(requirement.extras))}]" if requirement.extras else ""
                missing.setdefault(name, f"{requirement.name}{extras}{requirement.specifier}")
    return sorted(missing.values())


def _dist_name(filename: str) -> str:
    """The normalised project name of a wheel or sdist file name."""
    stem = filename.removesuffix(".tar.gz").removesuffix(".zip").removesuffix(".whl")
    return canonicalize_name(stem.split("-", 1)[0] if filename.endswith(".whl") else stem.rsplit("-", 1)[0])


def _requires_dist(wheel: Path) -> list[str]:
    try:
        with zipfile.ZipFile(wheel) as zf:
            name = next(n for n in zf.namelist() if n.endswith(".dist-info/METADATA") and n.count("/") == 1)
            text = zf.read(name).decode("utf-8", errors="replace")
    except (OSError, zipfile.BadZipFile, StopIteration):
        return []
    return [line.split(":", 1)[1].strip() for line in text.splitlines() if line.startswith("Requires-Dist:")]


def _requirement_lines(req: Path) -> list[str]:
    lines = (line.split(" #", 1)[0].strip() for line in req.read_text().splitlines())
    return [line for line in lines if line and not line.startswith("#")]


def _pip(args: list[str], progress: ProgressFn | None, extra_env: dict[str, str] | None = None) -> None:
    env = {**os.environ, "PIP_DISABLE_PIP_VERSION_CHECK": "1", "PIP_NO_INPUT": "1", **(extra_env or {})}

    def on_line(line: str) -> None:
        log.debug("pip: %s", line)
        if progress and not line.startswith("WARNING: Location"):
            progress(line)

    rc, lines = hostproc.stream([sys.executable, "-m", "pip", *args], env, on_line)
    if rc != 0:
        raise ImageBuildError(
            f"`pip {args[0]}` failed (exit {rc}):\n{tail(chr(10).join(lines))}\n"
            "fix: check the requirements file and that the package index answers (`pip download NAME`)"
        )


def remove_wheelhouse(name: str) -> int:
    """Delete the wheelhouse folder ``name`` (a build that needs it again downloads it again); returns the
    bytes freed, 0 when there is no such folder."""
    folder = wheelhouse_dir() / name
    if not name or folder.parent != wheelhouse_dir() or not folder.is_dir():
        return 0
    freed = rootfs.disk_usage(folder)
    shutil.rmtree(folder, ignore_errors=True)
    return freed


def prune_wheelhouses(keep: set[str]) -> tuple[list[str], int]:
    """Delete wheelhouse folders whose hash is not in ``keep``; returns (removed paths, bytes freed)."""
    removed, freed = [], 0
    for folder in sorted(wheelhouse_dir().iterdir()):
        if folder.is_dir() and folder.name not in keep:
            freed += rootfs.disk_usage(folder)
            shutil.rmtree(folder, ignore_errors=True)
            removed.append(str(folder))
    return removed, freed


# ------------------------------------------------------------------------------------------ docker build


def _docker_build(ctx: Path, spec: LayerSpec, nocache: bool, progress: ProgressFn | None) -> str:
    """Run the classic builder with no network, streaming its log to logging; returns the image id."""
    cli = dockerutil.client()
    lines: deque[str] = deque(maxlen=40)
    image_id = None
    log.info("docker build %s FROM %s (network none)", spec.tag, spec.base_tag)
    try:
        stream = cli.api.build(
            path=str(ctx),
            tag=spec.tag,
            buildargs={"BASE": spec.base_tag},
            labels=dict(spec.labels),
            network_mode="none",
            rm=True,
            forcerm=True,
            pull=False,
            nocache=nocache,
            decode=True,
            use_config_proxy=False,
            timeout=BUILD_TIMEOUT_S,
        )
        for chunk in stream:
            image_id = _consume(chunk, spec.tag, lines, progress) or image_id
        if image_id is None:
            image_id = cli.images.get(spec.tag).id
    except (DockerException, requests.RequestException) as e:
        raise ImageBuildError(f"docker build of {spec.tag} failed: {e}\n{tail(chr(10).join(lines))}") from e
    return image_id


def _consume(chunk: dict[str, Any], tag: str, lines: deque[str], progress: ProgressFn | None) -> str | None:
    """Handle one decoded build-log message; raise on an error message; return the image id when given."""
    for line in str(chunk.get("stream", "")).splitlines():
        if line.strip():
            lines.append(line)
            log.info("build %s: %s", tag, line)
            if progress:
                progress(line)
    if "error" in chunk:
        lines.append(str(chunk["error"]))
        raise ImageBuildError(
            f"docker build of {tag} failed:\n{tail(chr(10).join(lines))}\n"
            "fix: correct the recipe's Dockerfile (builds have no network: install Python packages from "
            "/tmp/wheelhouse), then run `envfarm images build`"
        )
    aux = chunk.get("aux")
    if isinstance(aux, dict) and isinstance(aux.get("ID"), str):
        return str(aux["ID"])
    return None
