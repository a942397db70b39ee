"""``envfarm doctor``: can this machine run envfarm sandboxes? One row per requirement, with its fix."""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import docker
import typer
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from envfarm import config
from envfarm.errors import FarmError
from envfarm.sandbox import dockerutil, images
from envfarm.sandbox.bwrap import KSM_RUN, ksm_running
from envfarm.sandbox.docker import userns_remapped
from envfarm.sandbox.seccomp import ensure_filter

SETUP = "make setup"
CGROUP_ROOT = Path("/sys/fs/cgroup")
CGROUP_CONTROLLERS = ("pids", "memory", "cpu")
MIN_PYTHON = (3, 11)


@dataclass(frozen=True)
class Check:
    """One requirement and whether this machine meets it."""

    name: str
    ok: bool
    detail: str
    fix: str = ""


def doctor() -> None:
    """Check python, docker (and its userns remap), bubblewrap (and seccomp), cgroups, debootstrap and the
    images; exit 1 if any is missing."""
    checks = run_checks()
    table = Table("check", "status", "detail", "fix", title="envfarm doctor")
    for c in checks:
        status = "[green]OK[/green]" if c.ok else "[bold red]MISSING[/bold red]"
        table.add_row(c.name, status, escape(c.detail), "" if c.ok else escape(c.fix))
    Console().print(table)
    if not all(c.ok for c in checks):
        raise typer.Exit(1)


def run_checks() -> list[Check]:
    """Every check, in the order a fresh machine should fix them."""
    daemon = _daemon()
    return [
        _python(),
        _docker_client(),
        daemon,
        _userns_remap(daemon.ok),
        _bwrap(),
        _seccomp(),
        _agent_pages(),
        *(_cgroup(ctrl) for ctrl in CGROUP_CONTROLLERS),
        _tool("debootstrap", "debootstrap", "--version"),
        *_images(daemon.ok),
    ]


def _python() -> Check:
    version = ".".join(map(str, sys.version_info[:3]))
    ok = sys.version_info[:2] >= MIN_PYTHON
    return Check("python", ok, f"{version} at {sys.executable}", f"{SETUP} (creates .venv with python3.11)")


def _docker_client() -> Check:
    cli = shutil.which("docker")
    detail = f"docker SDK {docker.__version__}; CLI {cli or 'missing'}"
    return Check("docker client", cli is not None, detail, SETUP)


def _daemon() -> Check:
    if not dockerutil.ping():
        return Check("docker daemon", False, dockerutil.NO_DAEMON, SETUP)
    try:
        version = dockerutil.client().version().get("Version", "?")
    except Exception as e:  # the daemon answered ping; any failure here is only cosmetic
        version = f"? ({e})"
    return Check("docker daemon", True, f"answers, version {version}", SETUP)


def _userns_remap(daemon_ok: bool) -> Check:
    """Containers' uids must map to a subordinate range, not to host users (``dockerd --userns-remap``)."""
    fix = f"{SETUP} (restarts an idle dockerd with --userns-remap=default)"
    if not daemon_ok:
        return Check("docker userns remap", False, f"cannot tell: {dockerutil.NO_DAEMON}", fix)
    try:
        remapped = userns_remapped()
    except (FarmError, docker.errors.DockerException) as e:
        return Check("docker userns remap", False, f"cannot tell: {e}", fix)
    uid = config.AGENT_UID
    if not remapped:
        owner = _passwd_name(uid)
        detail = f"off: container uid {uid} is host uid {uid}" + (f" ({owner})" if owner else "")
        return Check("docker userns remap", False, detail, fix)
    ranges = [line.split(":") for line in _read("/etc/subuid").splitlines() if line.startswith("dockremap:")]
    start = int(ranges[0][1]) if ranges and ranges[0][1].isdigit() else None
    where = f"host uid {start + uid}" if start is not None else "a subordinate uid"
    return Check("docker userns remap", True, f"on: container uid {uid} is {where} (dockremap)", fix)


def _seccomp() -> Check:
    try:
        size = ensure_filter()
    except FarmError as e:
        return Check("seccomp (bwrap)", False, str(e), "apt-get install libseccomp2")
    return Check("seccomp (bwrap)", True, f"libseccomp filter compiled ({size // 8} instructions)", SETUP)


def _passwd_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return ""


def _read(path: str) -> str:
    try:
        return Path(path).read_text()
    except OSError:
        return ""


def _tool(name: str, exe: str, *version_args: str) -> Check:
    path = shutil.which(exe)
    if path is None:
        return Check(name, False, f"{exe} not on PATH", SETUP)
    out = _run([path, *version_args])
    return Check(name, True, f"{path} {out.splitlines()[0] if out else ''}".strip(), SETUP)


def _bwrap() -> Check:
    check = _tool("bubblewrap", "bwrap", "--version")
    if not check.ok:
        return check
    probe = ["bwrap", "--unshare-all", "--die-with-parent", "--ro-bind", "/", "/", "--proc", "/proc", "true"]
    try:
        done = subprocess.run(probe, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as e:
        return Check(check.name, False, f"{check.detail}; cannot start a sandbox: {e}", SETUP)
    if done.returncode != 0:
        why = done.stderr.strip().splitlines()[-1:] or [f"exit {done.returncode}"]
        return Check(check.name, False, f"{check.detail}; cannot start a sandbox: {why[0]}", "run as root")
    return Check(check.name, True, f"{check.detail}; starts sandboxes", SETUP)


def _agent_pages() -> Check:
    """Whether idle bwrap agents share their pages (``BwrapConfig.share_agent_pages``); optional, so OK
    either way, with how to turn it on."""
    name = "bwrap agent pages"
    if not KSM_RUN.exists():
        return Check(name, True, "private: this kernel has no same-page merging (KSM)")
    if ksm_running():
        return Check(name, True, "shared: ksmd runs, so idle bwrap agents hold ~0.3 MiB each, not ~2.8")
    return Check(name, True, f"private (~2.8 MiB per idle bwrap sandbox): ksmd is off; `echo 1 > {KSM_RUN}` "
                 "lets thousands of idle agents share most of theirs")


def _cgroup(ctrl: str) -> Check:
    """Usable when a v1 hierarchy for ``ctrl`` is mounted writable, or the v2 root delegates it."""
    v1 = CGROUP_ROOT / ctrl
    if (v1 / "cgroup.procs").is_file():
        ok = os.access(v1, os.W_OK)
        return Check(f"cgroup {ctrl}", ok, f"v1 at {v1}{'' if ok else ' (not writable)'}", "run as root")
    controllers = CGROUP_ROOT / "cgroup.controllers"
    if controllers.is_file():
        available = controllers.read_text().split()
        ok = ctrl in available and os.access(CGROUP_ROOT, os.W_OK)
        fix = f"echo +{ctrl} > {CGROUP_ROOT}/cgroup.subtree_control (as root)"
        return Check(f"cgroup {ctrl}", ok, f"v2 unified; controllers: {' '.join(available)}", fix)
    fix = f"mkdir -p {v1} && mount -t cgroup -o {ctrl} cgroup {v1} (as root)"
    return Check(f"cgroup {ctrl}", False, f"no {ctrl} controller under {CGROUP_ROOT}", fix)


def _images(daemon_ok: bool) -> list[Check]:
    try:
        infos = images.list_images()
        hashes = images.current_hashes()
    except FarmError as e:
        return [Check("images", False, str(e).splitlines()[0], "envfarm images build")]
    checks = []
    for name, current in hashes.items():
        mine = [i for i in infos if i.name == name]
        fix = "envfarm images build" if name == "base" else f"envfarm images build {name}"
        if name == "base":
            rootfs = next((i.rootfs_path for i in mine if i.hash == current and i.rootfs_path), None)
            detail = str(rootfs) if rootfs else _missing(mine, current, "no rootfs folder")
            checks.append(Check("base rootfs (bwrap)", rootfs is not None, detail, fix))
        present = any(i.hash == current and i.present_in_docker for i in mine)
        tag = images.tag_for(name, current)
        if present:
            detail = tag
        elif not daemon_ok:
            detail = f"{tag}: cannot tell, {dockerutil.NO_DAEMON}"
            fix = f"{SETUP}, then {fix}"
        else:
            detail = _missing(mine, current, f"{tag} not in docker")
        checks.append(Check(f"image {name}", present, detail, fix))
    return checks


def _missing(infos: list[images.ImageInfo], current: str, what: str) -> str:
    stale = sorted({i.hash for i in infos if i.stale})
    return f"{what}; only stale builds {', '.join(stale)}" if stale else what


def _run(cmd: list[str]) -> str:
    try:
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return (done.stdout or done.stderr).strip()
