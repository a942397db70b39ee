"""Root filesystem folders on the host: debootstrap, post-processing, docker import/export, removal.

Layout under ``config.home()/rootfs``::

    base-<hash>/          the base image made by debootstrap (the bwrap backend runs on it)
    base-<hash>.json      completion marker: written after the folder was renamed into place
    img-<id12>/           ``docker export`` of a created (never started) container of a layered image
    img-<id12>.json
    .tmp-*                staging folders; renamed into place when complete, removed on failure

A folder without its marker is incomplete and is never used. Builds hold :func:`build_lock`.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import requests
from docker.errors import DockerException

from envfarm import config
from envfarm.errors import BackendUnavailable, ImageBuildError, tail

from . import dockerutil, hostproc

log = logging.getLogger(__name__)

ProgressFn = Callable[[str], None]

DEBOOTSTRAP_TIMEOUT_S = 1800
IMPORT_TIMEOUT_S = 900
# debootstrap prints one of these per package; everything else is a phase worth an INFO line
_PER_PACKAGE = ("I: Retrieving ", "I: Validating ", "I: Extracting ", "I: Unpacking ", "I: Configuring ")


def rootfs_dir() -> Path:
    """``config.home()/rootfs``, created on first use."""
    path = config.home() / "rootfs"
    path.mkdir(parents=True, exist_ok=True)
    return path


def base_dir(recipe_hash: str) -> Path:
    """Where the base rootfs for ``recipe_hash`` lives (whether or not it exists)."""
    return rootfs_dir() / f"base-{recipe_hash}"


def export_dir(image_id: str) -> Path:
    """Where the exported rootfs of docker image ``image_id`` lives (whether or not it exists)."""
    return rootfs_dir() / f"img-{image_id.removeprefix('sha256:')[:12]}"


def marker_path(folder: Path) -> Path:
    return folder.with_name(folder.name + ".json")


def is_complete(folder: Path) -> bool:
    """True when ``folder`` exists and its completion marker was written."""
    return folder.is_dir() and marker_path(folder).is_file()


def read_marker(folder: Path) -> dict[str, Any] | None:
    """The metadata written when ``folder`` was completed, or None when incomplete or unreadable."""
    try:
        data = json.loads(marker_path(folder).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and folder.is_dir() else None


def complete_folders() -> list[Path]:
    """Every complete rootfs folder (base-* and img-*)."""
    return sorted(p for p in rootfs_dir().iterdir() if not p.name.startswith(".") and is_complete(p))


@contextlib.contextmanager
def build_lock() -> Iterator[None]:
    """An exclusive lock (``flock`` on ``config.home()/.build.lock``) held while building or pruning."""
    with open(config.home() / ".build.lock", "a") as fh:
        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            log.info("waiting for another envfarm build or prune to finish")
            fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


@contextlib.contextmanager
def staging(name: str) -> Iterator[Path]:
    """A fresh empty folder next to the final ones (same filesystem, so rename is atomic).

    Removed on exit unless it was moved into place with :func:`place`.
    """
    path = Path(tempfile.mkdtemp(prefix=f".tmp-{name}-", dir=rootfs_dir()))
    try:
        yield path
    finally:
        if path.exists():
            remove(path)


def place(staged: Path, final: Path, meta: dict[str, Any]) -> None:
    """Atomically move ``staged`` to ``final`` (replacing an older one), then write the marker."""
    marker = marker_path(final)
    marker.unlink(missing_ok=True)
    old = None
    if final.exists():
        old = final.with_name(f".tmp-old-{final.name}-{os.getpid()}")
        final.rename(old)
    staged.rename(final)
    meta = {**meta, "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    tmp = marker.with_name(f".tmp-{marker.name}")
    tmp.write_text(json.dumps(meta, indent=2) + "\n")
    tmp.rename(marker)
    if old is not None:
        remove(old)


def remove(folder: Path) -> int:
    """Delete a rootfs folder (or staging folder) and its marker; returns the bytes freed."""
    root = rootfs_dir().resolve()
    folder = folder.parent.resolve() / folder.name
    if root not in folder.parents:
        raise ValueError(f"refusing to delete {folder}: not inside {root}")
    _unmount_under(folder)
    size = disk_usage(folder)
    shutil.rmtree(folder, ignore_errors=True)
    marker_path(folder).unlink(missing_ok=True)
    return size


def disk_usage(path: Path) -> int:
    """Bytes allocated under ``path`` (hard links counted once, symlinks not followed)."""
    seen: set[tuple[int, int]] = set()
    total = 0
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            try:
                st = os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue
            if (st.st_dev, st.st_ino) not in seen:
                seen.add((st.st_dev, st.st_ino))
                total += st.st_blocks * 512
    return total


def _unmount_under(folder: Path) -> None:
    """Lazily unmount anything mounted below ``folder`` (an interrupted debootstrap leaves /proc there)."""
    prefix = str(folder) + "/"
    try:
        lines = Path("/proc/self/mountinfo").read_text().splitlines()
    except OSError:
        return
    points = []
    for line in lines:
        fields = line.split()
        if len(fields) > 4:
            point = fields[4].replace("\\040", " ").replace("\\011", "\t").replace("\\134", "\\")
            if point.startswith(prefix):
                points.append(point)
    for point in sorted(points, key=len, reverse=True):
        log.warning("unmounting leftover mount %s", point)
        subprocess.run(["umount", "-l", point], check=False, capture_output=True)


def debootstrap(
    dest: Path, *, suite: str, variant: str, packages: Sequence[str], mirror: str, progress: ProgressFn | None
) -> None:
    """Run ``debootstrap`` into the empty folder ``dest``; its output goes to logging and ``progress``."""
    exe = shutil.which("debootstrap")
    if exe is None:
        raise BackendUnavailable("debootstrap is not installed", "run `make setup`")
    cmd = [exe, f"--variant={variant}", f"--include={','.join(packages)}", suite, str(dest), mirror]
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive", "LC_ALL": "C"}

    def on_line(line: str) -> None:
        log.log(logging.DEBUG if line.startswith(_PER_PACKAGE) else logging.INFO, "debootstrap: %s", line)
        if progress:
            progress(line)

    rc, lines = hostproc.stream(cmd, env, on_line, timeout=DEBOOTSTRAP_TIMEOUT_S)
    if rc != 0:
        detail = "\n".join(lines) or _read_tail(dest / "debootstrap" / "debootstrap.log")
        raise ImageBuildError(
            f"debootstrap {suite} into {dest} failed (exit {rc}):\n{tail(detail)}\n"
            f"fix: check that {mirror} answers (apt-get update works), then run `envfarm images build`"
        )


def _read_tail(path: Path) -> str:
    try:
        return tail(path.read_text(errors="replace"))
    except OSError:
        return ""


def postprocess(root: Path) -> None:
    """Turn a fresh debootstrap tree into an envfarm rootfs: user agent, /workspace, /opt/envfarm."""
    uid = config.AGENT_UID
    root.chmod(0o755)  # mkdtemp made it 0700; "/" must be traversable by the agent uid
    home = config.AGENT_HOME
    _add_entry(root / "etc/passwd", "agent", f"agent:x:{uid}:{uid}:envfarm agent:{home}:/bin/bash")
    _add_entry(root / "etc/group", "agent", f"agent:x:{uid}:")
    _add_entry(root / "etc/shadow", "agent", "agent:*:19000:0:99999:7:::")
    _add_entry(root / "etc/gshadow", "agent", "agent:*::")
    workspace = root / home.lstrip("/")
    workspace.mkdir(parents=True, exist_ok=True)
    os.chown(workspace, uid, uid)
    workspace.chmod(0o755)
    (root / "opt/envfarm").mkdir(parents=True, exist_ok=True)
    (root / "opt/envfarm").chmod(0o755)
    for deb in (root / "var/cache/apt/archives").glob("*.deb"):
        deb.unlink()
    lists = root / "var/lib/apt/lists"
    for entry in lists.glob("*") if lists.is_dir() else ():
        if entry.is_dir() and not entry.is_symlink():
            shutil.rmtree(entry)
        else:
            entry.unlink()
    for name, text in (("etc/hostname", "envfarm\n"), ("etc/resolv.conf", "")):
        path = root / name
        if not path.is_symlink():  # debootstrap copied the host's files; the sandbox has no network
            path.write_text(text)


def _add_entry(path: Path, name: str, line: str) -> None:
    """Append ``line`` to a passwd-style file unless an entry for ``name`` is there already."""
    if not path.exists():
        if path.name in ("shadow", "gshadow"):
            return
        raise ImageBuildError(f"{path} is missing: the debootstrap tree is incomplete; rebuild with --force")
    text = path.read_text()
    if any(existing.split(":", 1)[0] == name for existing in text.splitlines()):
        return
    if text and not text.endswith("\n"):
        text += "\n"
    path.write_text(text + line + "\n")


def import_into_docker(root: Path, tag: str, changes: Sequence[str]) -> str:
    """``tar -C root -c . | docker import --change ... - tag``; returns the new image id."""
    if shutil.which("docker") is None:
        raise BackendUnavailable("the docker command-line client is not installed", "run `make setup`")
    log.info("importing %s into docker as %s", root, tag)
    tar = subprocess.Popen(
        ["tar", "--numeric-owner", "-C", str(root), "-c", "."], stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        cmd = ["docker", "import", *(f"--change={c}" for c in changes), "-", tag]
        done = subprocess.run(cmd, stdin=tar.stdout, capture_output=True, text=True, timeout=IMPORT_TIMEOUT_S)
    finally:
        assert tar.stdout is not None and tar.stderr is not None
        tar.stdout.close()
        tar_err = tar.stderr.read().decode(errors="replace")
        tar_rc = tar.wait()
    if done.returncode != 0 or tar_rc != 0:
        raise ImageBuildError(
            f"docker import of {root} as {tag} failed (docker exit {done.returncode}, tar exit {tar_rc}):\n"
            f"{tail(done.stderr + tar_err)}\nfix: check `docker info`, or run `make setup`"
        )
    return done.stdout.strip()


def export_from_docker(image: str, dest: Path) -> None:
    """Untar the filesystem of a created (never started) container of ``image`` into empty ``dest``."""
    cli = dockerutil.client()
    owner = {f"envfarm.{key}": value for key, value in config.owner().items()}
    labels = {config.LABEL: "1", "envfarm.purpose": "export", **owner}
    try:
        container = cli.containers.create(image, command=["/bin/true"], network_mode="none", labels=labels)
    except (DockerException, requests.RequestException) as e:
        raise ImageBuildError(f"cannot create a container of {image} to export it: {e}") from e
    try:
        _untar_stream(container.export(chunk_size=1 << 20), dest, what=image)
    except (DockerException, requests.RequestException) as e:
        raise ImageBuildError(f"docker export of {image} failed: {e}") from e
    finally:
        with contextlib.suppress(DockerException, requests.RequestException):
            container.remove(force=True)
    (dest / ".dockerenv").unlink(missing_ok=True)
    dest.chmod(0o755)


def _untar_stream(chunks: Iterator[bytes], dest: Path, what: str) -> None:
    tar = subprocess.Popen(
        ["tar", "--numeric-owner", "-x", "-C", str(dest)], stdin=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert tar.stdin is not None and tar.stderr is not None
    try:
        for chunk in chunks:
            tar.stdin.write(chunk)
    except BrokenPipeError:
        pass  # tar died; its exit code and stderr tell why
    finally:
        with contextlib.suppress(BrokenPipeError):
            tar.stdin.close()
        err = tar.stderr.read().decode(errors="replace")
        rc = tar.wait()
    if rc != 0:
        raise ImageBuildError(
            f"unpacking the filesystem of {what} into {dest} failed (tar exit {rc}):\n{tail(err)}"
        )
