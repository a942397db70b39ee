"""Offline docker images for Harbor task folders (``task.toml``, ``environment/Dockerfile`` + its files).

    environment/Dockerfile --translate--> base suite + apt packages + pip requirements + kept steps
    envfarm/base[-<suite>]:<hash>         the Debian base with the closest Python (built when missing)
    envfarm/harbor-apt:<hash>             base rootfs copy + ``apt-get install`` run on the host side (the
                                          host reaches Debian's mirror, builds have no network), docker
                                          import;
                                          <hash> covers the base hash and the sorted packages; skipped when
                                          the task needs no apt package
    envfarm/harbor-pip:<hash>             docker build (no network) FROM it: the steps through the first
                                          ``pip install`` when none of them reads the task's files, pip
                                          from the host wheelhouse; <hash> covers the layer below, those
                                          steps and their wheels; skipped when there is no such step. Tasks
                                          made from one template share it (TermiGen: 2,022 of 3,404 tasks
                                          share ``pip install pytest pandas scipy``, the slowest step)
    envfarm/harbor-<task>:<hash>          docker build (no network) FROM the layer below: the other pip
                                          steps from the host wheelhouse, COPY/ADD/ENV/WORKDIR/USER/RUN in
                                          the Dockerfile's order; <hash> covers the environment folder, the
                                          translation and the layer below

``ensure_task_image(task_dir)`` returns a :class:`TaskImage` or raises :class:`HarborImageError` whose
``reason`` is ``needs-network``, ``unsupported-base`` (both found before anything is built) or
``build-failed`` (apt or docker build failed; ``detail`` holds the tool's message). ``TaskImage.reasons`` is
therefore empty for a built image. A ``docker_image`` named in ``task.toml``'s ``[environment]`` that docker
has is used as is, plus one cached layer (``envfarm/harbor-prebuilt:<hash>``) that moves what the image
keeps in /workspace and its WORKDIR's top folder to the seed the env copies into the sandbox's workspace.
Images are content-hashed: an unchanged task is a lookup. Builds of the same hash are
serialised by a lock file; a killed build leaves only staging folders and untagged layers, never a tag.
The image keeps the envfarm conventions (user ``agent`` uid 1000, ``/workspace``); the Dockerfile's last
USER and WORKDIR are recorded, not forced, and the env decides. Harbor images carry ``envfarm.harbor``
labels: ``envfarm images list`` shows them, ``prune`` keeps them while their base is current.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import fcntl
import hashlib
import json
import logging
import re
import shlex
import shutil
import subprocess
import tempfile
import time
import tomllib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

from docker.errors import DockerException

from envfarm import config
from envfarm.errors import BackendUnavailable, HarborImageError, ImageBuildError, tail

from . import dockerutil, imagebuild, images, rootfs
from .dockerfile import BUILD_FAILED, Step, Translation, translate_file
from .dockerfile_run import step_requirements
from .harbor_tools import fill_wheelhouse, tools_steps, verifier_requirements
from .recipes import BUILDER_VERSION, base_for_suite, content_hash
from .rootfs import ProgressFn

log = logging.getLogger(__name__)

HARBOR_LABEL = images.HARBOR_LABEL
APT_REPO = "envfarm/harbor-apt"
PIP_REPO = "envfarm/harbor-pip"
APT_TIMEOUT_S = 1800
WHEELHOUSE_IN_IMAGE = "/tmp/envfarm-wheelhouse"


@dataclass(frozen=True)
class TaskImage:
    """The docker image a Harbor task runs in."""

    tag: str
    image_id: str
    python: str
    """The image's python3 ("3.11"); "" for a prebuilt ``docker_image`` from task.toml."""
    suite: str
    """The Debian suite of its envfarm base; "" for a prebuilt image."""
    workdir: str
    """The Dockerfile's last WORKDIR ("/" when none)."""
    user: str | None
    """The Dockerfile's last USER (None when none)."""
    env: tuple[tuple[str, str], ...]
    """The ENV the Dockerfile set, with the values docker resolved."""
    reasons: tuple[tuple[str, str], ...] = ()
    """Empty for a built image (failures raise :class:`HarborImageError`)."""
    built: bool = False
    """False when the image was found by its content hash."""
    apt_layer: str = ""
    """The tag of the shared apt layer it was built on ("" when the task needs no apt package)."""
    pip_layer: str = ""
    """The tag of the shared pip layer it was built on ("" when it has none: :func:`shared_steps`)."""


LayerFn = Callable[[str, str], None]
"""Told ``(kind, tag)`` of each shared layer ("apt", "pip") a build rests on, as soon as it exists."""


def ensure_task_image(task_dir: Path, *, force: bool = False, progress: ProgressFn | None = None,
                      on_layer: LayerFn | None = None) -> TaskImage:
    """Build (or find) the image of the Harbor task in ``task_dir``; blocking: from async code use
    :func:`aensure_task_image`. ``force``: the task's layer and its pip layer built again without docker's
    cache (the apt layer stays). ``on_layer`` hears of the shared layers even when the task's own build then
    fails (``harbor validate --prune-images`` removes them)."""
    task_dir = Path(task_dir)
    name = task_dir.resolve().name
    prebuilt = _prebuilt(task_dir)
    if prebuilt is not None:
        return prebuilt
    translation = translate_task(task_dir)
    test_sh = task_dir / "tests" / "test.sh"
    tools = verifier_requirements(test_sh.read_text(errors="replace")) if test_sh.is_file() else ()
    try:
        return _build(task_dir, name, translation, force, progress, tools, on_layer)
    except HarborImageError:
        raise
    except ImageBuildError as e:
        raise HarborImageError(name, BUILD_FAILED, str(e), "read the build log above; fix the Dockerfile "
                               "or the package names (Debian's, not Ubuntu's)") from e


def translate_task(task_dir: Path) -> Translation:
    """The task's ``environment/Dockerfile`` as the offline builder makes it; HarborImageError with the
    reason when it cannot be built here (no Dockerfile; the first issue of its translation). The checks
    :func:`ensure_task_image` makes before any build, and all of ``envfarm harbor check``."""
    name = Path(task_dir).resolve().name
    dockerfile = Path(task_dir) / "environment" / "Dockerfile"
    if not dockerfile.is_file():
        raise HarborImageError(name, BUILD_FAILED, f"{dockerfile} is missing",
                               "a Harbor task folder needs environment/Dockerfile")
    translation = translate_file(dockerfile)
    if translation.issues:
        first = translation.issues[0]
        raise HarborImageError(name, first.reason, f"line {first.line}: {first.detail}",
                               _fix(first.reason), translation.reasons)
    return translation


async def aensure_task_image(task_dir: Path, *, force: bool = False,
                             progress: ProgressFn | None = None) -> TaskImage:
    """:func:`ensure_task_image` in a worker thread."""
    return await asyncio.to_thread(ensure_task_image, task_dir, force=force, progress=progress)


def _fix(reason: str) -> str:
    if reason == "needs-network":
        return ("builds have no network: vendor the download into environment/ and COPY it, or name a "
                "prebuilt docker_image in task.toml")
    return "use a supported FROM (python, debian, ubuntu, gcc, golang, eclipse-temurin:17-jdk, t-bench) " \
           "or name a prebuilt docker_image in task.toml"


def _prebuilt(task_dir: Path) -> TaskImage | None:
    """task.toml's ``[environment] docker_image`` when docker has it."""
    try:
        data = tomllib.loads((task_dir / "task.toml").read_text(encoding="utf-8"))
    except (OSError, tomllib.TOMLDecodeError):
        return None
    section = data.get("environment")
    ref = section.get("docker_image") if isinstance(section, dict) else None
    if not isinstance(ref, str) or not ref or (img := dockerutil.get_image(ref)) is None:
        return None
    cfg = img.attrs.get("Config") or {}
    env = tuple((e.split("=", 1)[0], e.split("=", 1)[1]) for e in cfg.get("Env") or [] if "=" in e)
    workdir, user = cfg.get("WorkingDir") or "/", cfg.get("User") or None
    tag, image_id, built = _seeded(ref, img.id, workdir, user)
    return TaskImage(tag, image_id, "", "", workdir, user, env, (), built)


PREBUILT_REPO = "envfarm/harbor-prebuilt"


def _seeded(ref: str, image_id: str, workdir: str, user: str | None) -> tuple[str, str, bool]:
    """A prebuilt image as it is, plus one layer that moves what it keeps in /workspace and its WORKDIR's
    top folder to ``SEED_DIR`` (the sandbox mounts a fresh workspace over /workspace and keeps the root
    read-only; the env seeds the workspace from there). Cached by the image's id: (tag, id, built)."""
    text = render_seed_layer(workdir, user)
    key = hashlib.sha256(f"{BUILDER_VERSION}\0{image_id}\0{text}".encode()).hexdigest()[:12]
    tag = f"{PREBUILT_REPO}:{key}"
    with _hash_lock(f"prebuilt-{key}"):
        img = dockerutil.get_image(tag)
        if img is not None:
            return tag, img.id, False
        with tempfile.TemporaryDirectory(prefix="envfarm-harbor-") as tmp:
            (Path(tmp) / "Dockerfile").write_text(text, encoding="utf-8")
            labels = {config.LABEL: "1", images.NAME_LABEL: "harbor-prebuilt", images.HASH_LABEL: key,
                      HARBOR_LABEL: "prebuilt", "envfarm.harbor.prebuilt": ref}
            spec = imagebuild.LayerSpec(Path(tmp), tag, ref, labels, "harbor-prebuilt", "", "")
            return tag, imagebuild.build_layer(spec), True


def render_seed_layer(workdir: str, user: str | None) -> str:
    """The Dockerfile of :func:`_seeded` (``ARG BASE``: the prebuilt image)."""
    top = _top(workdir)
    moves = (f'for e in /workspace/* /workspace/.[!.]*; do if [ -e "$e" ] || [ -L "$e" ]; then '
             f'mkdir -p {SEED_DIR} && mv "$e" {SEED_DIR}/; fi; done; '
             f'if [ -d {SEED_DIR} ]; then chmod -R a+rX {SEED_DIR}; fi')
    lines = ["ARG BASE", "FROM ${BASE}", "USER root", "WORKDIR /", f"RUN {moves}"]
    lines += _relocate((top,) if top and not _system(top) else ())[2:]
    return "\n".join([*lines, *([f"USER {user}"] if user else []), f"WORKDIR {workdir}"]) + "\n"


def _build(task_dir: Path, name: str, t: Translation, force: bool, progress: ProgressFn | None,
           tools: tuple[str, ...] = (), on_layer: LayerFn | None = None) -> TaskImage:
    start = time.monotonic()
    base = images.build_base(progress=progress, suite=t.base.suite)
    if base.image_id is None:
        raise BackendUnavailable(f"{dockerutil.NO_DAEMON} (needed to build the image of {name})",
                                 dockerutil.FIX)
    recipe = base_for_suite(t.base.suite)
    apt = ensure_apt_layer(base.tag, base.hash, t.apt_packages, progress) if t.apt_packages else ""
    if apt and on_layer:
        on_layer("apt", apt)
    skip = shared_steps(t)
    pip = ensure_pip_layer(apt or base.tag, base.hash, t, skip, progress, force) if skip else ""
    if pip and on_layer:
        on_layer("pip", pip)
    below = pip or apt or base.tag
    text = render(t, tools, skip)
    digest = content_hash(task_dir / "environment", extra=f"{BUILDER_VERSION}\0{below}\0{text}")
    tag = f"envfarm/harbor-{_repo_name(name)}:{digest}"
    with _hash_lock(f"task-{digest}"):
        img = None if force else dockerutil.get_image(tag)
        built = img is None
        if img is None:
            with tempfile.TemporaryDirectory(prefix="envfarm-harbor-") as tmp:
                folder = _context(Path(tmp), task_dir, text, requirements(t.steps[skip:]))
                labels = {config.LABEL: "1", images.NAME_LABEL: f"harbor-{_repo_name(name)}",
                          images.HASH_LABEL: digest, "envfarm.base_hash": base.hash, HARBOR_LABEL: "task",
                          "envfarm.harbor.task": name, "envfarm.harbor.python": recipe.python}
                spec = imagebuild.LayerSpec(folder, tag, below, labels,
                                            _wheels(recipe.python, recipe.glibc, t.steps[skip:]),
                                            recipe.python, recipe.glibc)
                if tools:
                    fill_wheelhouse(folder, tools, spec, progress)
                imagebuild.build_layer(spec, nocache=force, progress=progress)
            img = dockerutil.get_image(tag)
            if img is None:
                raise ImageBuildError(f"docker build of {tag} reported success but docker has no such image")
            log.info("built %s in %.1fs", tag, time.monotonic() - start)
    cfg = img.attrs.get("Config") or {}
    resolved = dict(e.split("=", 1) for e in cfg.get("Env") or [] if "=" in e)
    env = tuple((k, resolved.get(k, v)) for k, v in t.env)
    return TaskImage(tag, img.id, recipe.python, recipe.suite, t.workdir, t.user, env, (), built, apt, pip)


def wheelhouses(t: Translation) -> tuple[str, ...]:
    """The wheelhouse folders a build of ``t`` fills (its pip layer's, its own's), named as in the
    wheelhouse cache; ``harbor validate --prune-images`` removes each once no task left needs it."""
    recipe = base_for_suite(t.base.suite)
    skip = shared_steps(t)
    parts = (t.steps[:skip], t.steps[skip:]) if skip else (t.steps,)
    return tuple(_wheels(recipe.python, recipe.glibc, p) for p in parts if requirements(p))


def _wheels(python: str, glibc: str, steps: tuple[Step, ...]) -> str:
    """The wheelhouse folder's name for the pip steps among ``steps`` (and the CPU build of torch it takes,
    ``imagebuild.cpu_torch``)."""
    torch = imagebuild.cpu_torch(python)
    digest = hashlib.sha256(f"{python}\0{glibc}\0{requirements(steps)}\0{torch}".encode())
    return f"harbor-{digest.hexdigest()[:12]}"


def _repo_name(name: str) -> str:
    return re.sub(r"[^a-z0-9._-]+", "-", name.lower()).strip("-._") or "task"


@contextlib.contextmanager
def _hash_lock(key: str) -> Iterator[None]:
    """An exclusive ``flock`` per content hash: builds of different tasks run in parallel."""
    folder = config.home() / "locks"
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / f"harbor-{key}.lock", "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# ---------------------------------------------------------------------------------------------- pip layer

SHAREABLE = ("run", "env", "workdir", "user")
"""Steps a shared pip layer may hold: none of them reads the task's files."""


def shared_steps(t: Translation) -> int:
    """How many of ``t.steps`` go to the shared pip layer: those through the first pip step when every one
    before it is :data:`SHAREABLE`; else 0."""
    for i, step in enumerate(t.steps):
        if step.kind == "pip":
            return i + 1
        if step.kind not in SHAREABLE:
            return 0
    return 0


def requirements(steps: tuple[Step, ...]) -> tuple[str, ...]:
    """The wheelhouse's requirement lines for the pip steps among ``steps``, in order, once each (all the
    steps: ``Translation.pip_requirements``)."""
    return tuple(dict.fromkeys(r for s in steps if s.kind == "pip" for r in step_requirements(s.args)))


def ensure_pip_layer(below: str, base_hash: str, t: Translation, skip: int,
                     progress: ProgressFn | None = None, force: bool = False) -> str:
    """``envfarm/harbor-pip:<hash>``: ``below`` plus the first ``skip`` steps of ``t`` (through its first
    pip step); cached, so the tasks that start alike build it once (``force``: built again, no cache)."""
    recipe = base_for_suite(t.base.suite)
    text = render_pip_layer(t, skip)
    wheels = _wheels(recipe.python, recipe.glibc, t.steps[:skip])
    key = hashlib.sha256(f"{BUILDER_VERSION}\0{below}\0{wheels}\0{text}".encode()).hexdigest()[:12]
    tag = f"{PIP_REPO}:{key}"
    with _hash_lock(f"pip-{key}"):
        if not force and dockerutil.get_image(tag) is not None:
            return tag
        with tempfile.TemporaryDirectory(prefix="envfarm-harbor-") as tmp:
            folder = Path(tmp)
            (folder / "Dockerfile").write_text(text, encoding="utf-8")
            (folder / "requirements.txt").write_text(_lines(requirements(t.steps[:skip])), encoding="utf-8")
            labels = {config.LABEL: "1", images.NAME_LABEL: "harbor-pip", images.HASH_LABEL: key,
                      "envfarm.base_hash": base_hash, HARBOR_LABEL: "pip"}
            spec = imagebuild.LayerSpec(folder, tag, below, labels, wheels, recipe.python, recipe.glibc)
            imagebuild.build_layer(spec, nocache=force, progress=progress)
    return tag


def render_pip_layer(t: Translation, skip: int) -> str:
    """The Dockerfile of :func:`ensure_pip_layer`; it ends with the USER and WORKDIR its steps left, so the
    task's layer goes on from there."""
    steps = t.steps[:skip]
    users = [s.args[0] for s in steps if s.kind == "user"]
    workdir = next((s.args[0] for s in reversed(steps) if s.kind == "workdir"), "/")
    lines = ["ARG BASE", "FROM ${BASE}", *_head(t), f"COPY wheelhouse {WHEELHOUSE_IN_IMAGE}"]
    lines += [_render_step(s.kind, s.args) for s in steps]
    lines += ["USER root", f"RUN rm -rf {WHEELHOUSE_IN_IMAGE}", f"USER {users[-1] if users else 'root'}",
              f"WORKDIR {workdir}"]
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------------------------------- apt layer


def ensure_apt_layer(base_tag: str, base_hash: str, packages: tuple[str, ...],
                     progress: ProgressFn | None = None) -> str:
    """``envfarm/harbor-apt:<hash>``: the base plus ``packages``, installed on the host side; cached."""
    digest = hashlib.sha256(f"{BUILDER_VERSION}\0{base_hash}\0{' '.join(sorted(packages))}".encode())
    key = digest.hexdigest()[:12]
    tag = f"{APT_REPO}:{key}"
    with _hash_lock(f"apt-{key}"):
        if dockerutil.get_image(tag) is not None:
            return tag
        source = rootfs.base_dir(base_hash)
        if not rootfs.is_complete(source):
            raise ImageBuildError(f"the base rootfs {source} is missing; run `envfarm images build`")
        with rootfs.staging(f"harbor-apt-{key}") as tmp:
            _note(progress, f"copying {source.name} to install {len(packages)} apt packages")
            subprocess.run(["cp", "-a", "--reflink=auto", f"{source}/.", str(tmp)], check=True)
            _apt_install(tmp, packages, progress)
            rootfs.postprocess(tmp)  # clears apt caches and lists, resolv.conf; agent stays
            labels = f"{config.LABEL}=1 {images.NAME_LABEL}=harbor-apt {images.HASH_LABEL}={key} " \
                     f"envfarm.base_hash={base_hash} {HARBOR_LABEL}=apt"
            changes = [f"LABEL {labels}", f"ENV PATH={images.IMAGE_PATH}", "ENV LANG=C.UTF-8",
                       f"WORKDIR {config.AGENT_HOME}", 'CMD ["/bin/bash"]']
            rootfs.import_into_docker(tmp, tag, changes)
    return tag


def _apt_install(root: Path, packages: tuple[str, ...], progress: ProgressFn | None) -> None:
    """``apt-get update && apt-get install`` inside ``root`` with the host's network (bwrap as root)."""
    if shutil.which("bwrap") is None:
        raise ImageBuildError("bwrap is not installed (it runs apt in the task's rootfs); run `make setup`")
    script = ("apt-get update -qq && apt-get install -y -q --no-install-recommends "
              f"{' '.join(shlex.quote(p) for p in packages)} && apt-get clean")
    cmd = ["bwrap", "--bind", str(root), "/", "--dev", "/dev", "--proc", "/proc",
           "--perms", "1777", "--tmpfs", "/tmp",  # apt's _apt user writes there
           "--share-net", "--ro-bind", "/etc/resolv.conf", "/etc/resolv.conf", "--die-with-parent",
           "/usr/bin/env", "-i", f"PATH={images.IMAGE_PATH}", "DEBIAN_FRONTEND=noninteractive",
           "LANG=C.UTF-8", "HOME=/root", "/bin/sh", "-c", script]
    _note(progress, f"apt-get install {' '.join(packages)}")
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=APT_TIMEOUT_S)
    except subprocess.TimeoutExpired as e:
        raise ImageBuildError(f"apt-get install of {' '.join(packages)} ran past {APT_TIMEOUT_S}s") from e
    for line in done.stdout.splitlines()[-20:]:
        log.debug("apt: %s", line)
    if done.returncode != 0:
        missing = missing_packages(done.stdout + done.stderr)
        why = f": {NO_PACKAGE} {', '.join(missing)}" if missing else ""
        raise ImageBuildError(
            f"apt-get install {' '.join(packages)} failed (exit {done.returncode}){why}:\n"
            f"{tail(done.stdout + done.stderr)}\nfix: use Debian's package names (apt-cache search NAME)"
        )


NO_PACKAGE = "Debian has no package"
"""Begins the detail of an apt failure over names the suite lacks (Ubuntu-only, newer, or not a name):
such a task needs more than Debian and PyPI packages (``validate.markdown``'s build rate leaves it out)."""
_APT_MISSING = re.compile(r"^E: (?:Unable to locate package (\S+)|Package '([^']+)' has no installation "
                          r"candidate|Couldn't find any package by (?:regex|glob) '([^']+)')", re.MULTILINE)


def missing_packages(output: str) -> list[str]:
    """The package names apt said it has none of, in order, once each."""
    names = ("".join(m.groups(default="")) for m in _APT_MISSING.finditer(output))
    return list(dict.fromkeys(names))


# ------------------------------------------------------------------------------------------- task layer


SEED_DIR = "/opt/envfarm-seed"
"""Where the image keeps the contents of the task's writable folders (see :func:`writable_dirs`)."""
SYSTEM_DIRS = ("/bin", "/boot", "/dev", "/etc", "/lib", "/lib32", "/lib64", "/libx32", "/opt", "/proc",
               "/root", "/run", "/sbin", "/sys", "/tmp", "/usr", "/var", "/workspace")
_MKDIR = re.compile(r"\bmkdir\s+(?:-\w+\s+)*((?:/[^\s;&|]+\s*)+)")


def writable_dirs(t: Translation) -> tuple[str, ...]:
    """The folders a task's own files live in and its solution writes to (every WORKDIR, the top folder of
    each COPY/ADD destination and of each absolute ``mkdir``), outside the system folders.

    Sandboxes have a read-only root with a capped tmpfs at /workspace, so the image moves each such folder
    to ``SEED_DIR`` and leaves a symlink ``/app -> /workspace/app``; the env copies the seed into the
    sandbox's /workspace when an episode starts (``seed_command``). Writes to /app land in the capped
    workspace, the image is never changed, and a fork copies them with the workspace."""
    found: list[str] = []
    for step in t.steps:
        if step.kind == "workdir":
            found.append(step.args[0])
        elif step.kind in ("copy", "add"):
            found.append([a for a in step.args if not a.startswith("--")][-1])
        elif step.kind == "run":
            found += [w for m in _MKDIR.finditer(step.args[0]) for w in m.group(1).split()]
    found.append(t.workdir)
    tops = {_top(p) for p in found if p.startswith("/")}
    return tuple(sorted(p for p in tops if p and not _system(p)))


def _top(path: str) -> str:
    parts = [p for p in path.split("/") if p and p != "."]
    depth = 2 if parts[:1] == ["home"] else 1
    return "/" + "/".join(parts[:depth]) if len(parts) >= depth else ""


def _system(path: str) -> bool:
    return any(path == d or path.startswith(d + "/") for d in SYSTEM_DIRS)


def _relocate(dirs: tuple[str, ...]) -> list[str]:
    if not dirs:
        return []
    # the seed folder first: a task whose own paths are all files (COPY x /x.py) moves nothing into it
    script = (f"set -e; mkdir -p {SEED_DIR}; for d in " + " ".join(shlex.quote(d) for d in dirs) + "; do "
              'if [ -L "$d" ] || { [ -e "$d" ] && [ ! -d "$d" ]; }; then continue; fi; '
              f'mkdir -p "{SEED_DIR}$(dirname "$d")" "$d"; mv "$d" "{SEED_DIR}$d"; '
              'ln -s "/workspace$d" "$d"; done; '
              f"chmod -R a+rX {SEED_DIR}")
    return ["USER root", "WORKDIR /", f"RUN {script}"]


def seed_command() -> str:
    """Shell run as the sandbox's user when an episode starts: the image's seed into /workspace."""
    return (f"if [ -d {SEED_DIR} ]; then cp -a {SEED_DIR}/. /workspace/ 2>/dev/null; "
            "chmod -R u+w /workspace 2>/dev/null; fi; true")


def render(t: Translation, tools: tuple[str, ...] = (), skip: int = 0) -> str:
    """The Dockerfile built FROM the apt layer (``ARG BASE``), context files under ``context/``; then the
    tools the task's tests fetch (``harbor_tools``); it ends by moving the task's writable folders to
    ``SEED_DIR`` (:func:`writable_dirs`). ``skip``: the first steps are in the pip layer it is built FROM
    (:func:`render_pip_layer`), which also set the user and folder they go on in."""
    lines = ["ARG BASE", "FROM ${BASE}", *([] if skip else _head(t))]
    rest = t.steps[skip:]
    pip = bool(requirements(rest))
    if pip:
        lines.append(f"COPY wheelhouse {WHEELHOUSE_IN_IMAGE}")
    for step in rest:
        lines.append(_render_step(step.kind, step.args))
    if pip:
        lines += ["USER root", f"RUN rm -rf {WHEELHOUSE_IN_IMAGE}"]
        if t.user:
            lines.append(f"USER {t.user}")
        lines.append(f"WORKDIR {t.workdir}")
    tail = _relocate(writable_dirs(t))
    if tools:
        tail = ["USER root", *tools_steps(tools), *tail]
    if tail:  # the Dockerfile's own USER and WORKDIR stay the image's (WORKDIR follows the seed's symlink)
        lines += [*tail, *([f"USER {t.user}"] if t.user else []), f"WORKDIR {t.workdir}"]
    return "\n".join(lines) + "\n"


def _head(t: Translation) -> list[str]:
    lines = ["USER root", "WORKDIR /"]
    if t.base.image.split(":")[0].endswith("python"):
        lines.append("ENV PIP_BREAK_SYSTEM_PACKAGES=1")  # python:* images have no EXTERNALLY-MANAGED pip
    return lines


def _lines(items: tuple[str, ...]) -> str:
    return "".join(f"{r}\n" for r in items)


def _render_step(kind: str, args: tuple[str, ...]) -> str:
    if kind == "run":
        if "\n" in args[0]:  # a heredoc: the classic builder takes one line, so the script travels encoded
            script = base64.b64encode(args[0].encode()).decode()
            return f'RUN sh -c "$(echo {script} | base64 -d)"'
        return f"RUN {args[0]}"
    if kind == "pip":
        words = " ".join(shlex.quote(a) for a in args)
        return (f"RUN PIP_BREAK_SYSTEM_PACKAGES=1 PIP_ROOT_USER_ACTION=ignore python3 -m pip install "
                f"--no-index --find-links {WHEELHOUSE_IN_IMAGE} {words}")
    if kind in ("copy", "add"):
        flags = [a for a in args if a.startswith("--")]
        paths = [a for a in args if not a.startswith("--")]
        sources = [f"context/{p.lstrip('/')}" for p in paths[:-1]]
        return f"{kind.upper()} {' '.join(flags)} {json.dumps([*sources, paths[-1]])}".replace("  ", " ")
    if kind == "env":
        return f"ENV {args[0]}={json.dumps(args[1])}"
    return f"{kind.upper()} {args[0]}"


def _context(tmp: Path, task_dir: Path, dockerfile: str, pip: tuple[str, ...]) -> Path:
    folder = tmp / "recipe"
    shutil.copytree(task_dir / "environment", folder / "context", symlinks=True)
    (folder / "Dockerfile").write_text(dockerfile, encoding="utf-8")
    (folder / "requirements.txt").write_text(_lines(pip), encoding="utf-8")
    return folder


def _note(progress: ProgressFn | None, message: str) -> None:
    log.info("%s", message)
    if progress:
        progress(message)


# ------------------------------------------------------------------------------------------------ discard


def discard(ref: str) -> int:
    """Remove the image ``ref``, the build layers below it that no other image uses, and its bwrap export
    (large runs: ``harbor validate --prune-images``); returns the export's bytes freed. Never raises for an
    image that is gone or still used."""
    img = dockerutil.get_image(ref)
    if img is None:
        return 0
    export = rootfs.export_dir(img.id)
    freed = rootfs.remove(export) if export.exists() else 0
    try:
        dockerutil.client().images.remove(ref)
    except DockerException as e:
        log.info("kept %s: %s", ref, e)
    return freed


__all__ = [
    "HARBOR_LABEL",
    "NO_PACKAGE",
    "SEED_DIR",
    "TaskImage",
    "aensure_task_image",
    "discard",
    "ensure_apt_layer",
    "ensure_pip_layer",
    "ensure_task_image",
    "missing_packages",
    "render",
    "render_pip_layer",
    "render_seed_layer",
    "requirements",
    "seed_command",
    "shared_steps",
    "translate_task",
    "wheelhouses",
    "writable_dirs",
]
