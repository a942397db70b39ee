"""``envfarm sandbox exec|gc|list``: run one command in a fresh sandbox, reap leftovers, list live containers.

``exec`` runs on the default backend of every run (``DEFAULT_BACKEND``, bwrap) unless ``--backend`` says
otherwise; ``sandbox ls`` and ``sandbox gc --backend NAME`` are hidden aliases of ``sandbox list`` and
``sandbox gc NAME`` for one release.

Registered in ``envfarm/cli.py`` with ``app.add_typer(sandbox_app, name="sandbox")``. A FarmError raised
here (no daemon, unknown image, bad limit) is printed by the root app as one clean ``error:`` line.
"""

from __future__ import annotations

import asyncio
import os
import socket
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Annotated, Any

import requests
import typer
from docker.errors import DockerException
from rich.console import Console
from rich.markup import escape
from rich.table import Table

from envfarm.config import LABEL
from envfarm.errors import BackendUnavailable, ConfigError, FarmError, ImageError
from envfarm.sandbox import BACKENDS, DEFAULT_BACKEND, ExecResult, Limits, dockerutil, get_backend

from .options import alias, deprecated

EXIT_TIMEOUT = 124  # like coreutils `timeout`

sandbox_app = typer.Typer(
    name="sandbox",
    help="Run commands in sandboxes, reap leftover sandboxes, list live ones.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app = sandbox_app  # the name every other sub-app module exports

console = Console()
err_console = Console(stderr=True)


class GcBackend(StrEnum):
    """The backends that leave sandboxes behind (``local`` runs none)."""

    docker = "docker"
    bwrap = "bwrap"


# ------------------------------------------------------------------------------------------------- exec

CMD_HELP = "The command. One argument runs through `bash -c` (so pipes work); several are an argv."


@sandbox_app.command("exec", context_settings={"allow_interspersed_args": False})
def exec_command(
    cmd: Annotated[list[str], typer.Argument(help=CMD_HELP)],
    backend: Annotated[str, typer.Option(
        help=f"Sandbox backend: {', '.join(BACKENDS)} (`local`: no isolation).")] = DEFAULT_BACKEND,
    image: Annotated[str | None, typer.Option(help="Docker image tag or bwrap rootfs; default base.")] = None,
    timeout: Annotated[float | None, typer.Option(help="Seconds before the command is killed.")] = None,
    memory_mb: Annotated[int | None, typer.Option(help="Memory cap of the sandbox in MiB.")] = None,
) -> None:
    """Start a sandbox, run CMD in it, print its output and exit with its exit code (124 on timeout)."""
    limits = Limits()
    if timeout is not None:
        limits = replace(limits, timeout_s=timeout)
    if memory_mb is not None:
        limits = replace(limits, memory_mb=memory_mb)
    command: str | list[str] = cmd[0] if len(cmd) == 1 else list(cmd)
    res = asyncio.run(run_in_sandbox(backend, command, image=image, limits=limits))
    typer.echo(res.stdout, nl=False)
    typer.echo(res.stderr, nl=False, err=True)
    if res.truncated:
        err_console.print(f"[yellow]output truncated at {limits.output_bytes} bytes per stream[/yellow]")
    if res.timed_out:
        err_console.print(f"[yellow]timed out after {limits.timeout_s:g}s; killed[/yellow]")
        raise typer.Exit(EXIT_TIMEOUT)
    raise typer.Exit(shell_exit_code(res.exit_code))


async def run_in_sandbox(
    backend_name: str, cmd: str | list[str], image: str | None = None, limits: Limits | None = None
) -> ExecResult:
    """Start one sandbox, run ``cmd`` and destroy the sandbox, whatever happens."""
    limits = limits or Limits()
    backend = get_backend(backend_name)
    await backend.check()
    try:
        async with backend.open(image=image, limits=limits) as sb:
            return await sb.exec(cmd, timeout_s=limits.timeout_s)
    finally:
        await backend.aclose()


def shell_exit_code(code: int) -> int:
    """A process exit status for ``code``: killed by signal N (-N) becomes 128 + N, as in a shell."""
    return 128 - code if code < 0 else min(code, 255)


# --------------------------------------------------------------------------------------------------- gc


@dataclass(frozen=True)
class GcOutcome:
    """What ``gc`` did on one backend."""

    backend: str
    removed: int | None
    """Sandboxes removed; None when the backend was skipped or failed."""
    note: str = ""
    """Why it was skipped or how it failed."""
    failed: bool = False


@sandbox_app.command("gc")
def gc_command(
    backends: Annotated[list[GcBackend] | None, typer.Argument(
        help="Backends to clean (default: every one).", show_default=False)] = None,
    all_runs: Annotated[
        bool, typer.Option("--all", help="Remove every envfarm sandbox, also those of live processes.")
    ] = False,
    backend: Annotated[str | None, typer.Option(
        "--backend", hidden=True, help="Deprecated: `sandbox gc BACKEND`; `all`: every one.")] = None,
) -> None:
    """Remove sandboxes left behind by dead envfarm processes (all of them with --all)."""
    if backend is not None:
        named = [] if backend == "all" else [backend]
        deprecated(f"sandbox gc --backend {backend}", " ".join(["sandbox gc", *named]))
        if any(b not in GcBackend.__members__ for b in named):
            raise ConfigError(f"unknown backend {backend!r}: choose {', '.join(GcBackend)} (none: every one)")
        backends = [*(backends or ()), *(GcBackend(b) for b in named)]
    names = [b.value for b in dict.fromkeys(backends or GcBackend)]
    outcomes = asyncio.run(gc_backends(names, all_runs))
    for o in outcomes:
        if o.removed is not None:
            console.print(f"{o.backend}: removed {o.removed} sandbox{'es' if o.removed != 1 else ''}")
        elif o.failed:
            err_console.print(f"[red]{o.backend}: failed[/red]: {escape(o.note)}")
        else:
            console.print(f"[dim]{o.backend}: skipped ({escape(o.note)})[/dim]")
    if any(o.failed for o in outcomes):
        raise typer.Exit(1)


async def gc_backends(names: list[str], all_runs: bool) -> list[GcOutcome]:
    return [await gc_backend(name, all_runs) for name in names]


async def gc_backend(name: str, all_runs: bool) -> GcOutcome:
    """``gc`` on one backend; one that cannot run here (BackendUnavailable) is skipped, not an error.
    A missing image does not matter: removing leftovers needs none."""
    backend = get_backend(name)
    try:
        try:
            await backend.check()
        except BackendUnavailable as e:
            return GcOutcome(name, None, str(e))
        except ImageError:
            pass
        try:
            return GcOutcome(name, await backend.gc(all_runs))
        except FarmError as e:
            return GcOutcome(name, None, str(e), failed=True)
    finally:
        await backend.aclose()


# ------------------------------------------------------------------------------------------------- list


@dataclass(frozen=True)
class ContainerInfo:
    """One envfarm docker container."""

    id: str
    name: str
    image: str
    state: str
    run_id: str
    owner_pid: str
    owner: str
    """alive, dead, "other host" (cannot tell from here) or unknown."""
    parent: str = ""
    """Container name of the sandbox this one was forked from (``sandbox.fork()``); empty if opened."""


@sandbox_app.command("list")
def list_command() -> None:
    """List envfarm sandboxes: bwrap ones from the layer store, then docker containers, with their run id,
    owner pid, whether the owner still runs, and the sandbox a forked one came from."""
    _print_bwrap(list_bwrap())
    rows = list_containers()
    if not rows:
        console.print("no envfarm containers")
        return
    table = Table("id", "name", "image", "state", "run_id", "owner_pid", "owner", "parent",
                  title="envfarm containers")
    colour = {"alive": "green", "dead": "red"}
    for r in rows:
        owner = f"[{colour[r.owner]}]{r.owner}[/]" if r.owner in colour else r.owner
        table.add_row(r.id, escape(r.name), escape(r.image), r.state, r.run_id, r.owner_pid, owner,
                      escape(r.parent))
    console.print(table)


sandbox_app.command("ls", hidden=True)(alias(list_command, "sandbox ls", "sandbox list"))


def _print_bwrap(rows: list[ContainerInfo]) -> None:
    if not rows:
        return
    table = Table("id", "state", "image", "run_id", "owner_pid", "owner", "parent",
                  title="envfarm bwrap sandboxes")
    for r in rows:
        table.add_row(escape(r.name), r.state, escape(r.image), r.run_id, r.owner_pid, r.owner,
                      escape(r.parent))
    console.print(table)


def list_bwrap() -> list[ContainerInfo]:
    """bwrap sandboxes of this host, from the layer store that holds their writable paths (docker's are
    listed from the daemon)."""
    from envfarm.sandbox.fork import store

    try:
        entries = store().listing()
    except OSError:
        return []
    return [ContainerInfo(id=e["id"][-12:], name=e["id"], image=e.get("image") or "base",
                          state="running" if owner_state(e) == "alive" else "leftover",
                          run_id=e.get("run_id", ""), owner_pid=e.get("owner_pid", ""), owner=owner_state(e),
                          parent=e.get("parent", ""))
            for e in entries if e.get("backend") == "bwrap"]


def list_containers() -> list[ContainerInfo]:
    """Every container labelled ``envfarm=1`` (running or not). Raises BackendUnavailable without a daemon."""
    try:
        raw: list[dict[str, Any]] = dockerutil.client().api.containers(
            all=True, filters={"label": f"{LABEL}=1"}
        )
    except (DockerException, requests.RequestException) as e:
        raise BackendUnavailable(f"listing envfarm containers failed: {e}", dockerutil.FIX) from e
    return [_container_info(c) for c in raw]


def _container_info(c: dict[str, Any]) -> ContainerInfo:
    labels: dict[str, str] = c.get("Labels") or {}
    names = c.get("Names") or ["?"]
    return ContainerInfo(
        id=str(c.get("Id", ""))[:12],
        name=names[0].lstrip("/"),
        image=str(c.get("Image", "")),
        state=str(c.get("State", "")),
        run_id=_label(labels, "run_id"),
        owner_pid=_label(labels, "owner_pid"),
        owner=owner_state(labels),
        parent=f"envfarm-{parent}" if (parent := _label(labels, "parent")) else "",
    )


def _label(labels: dict[str, str], key: str) -> str:
    return labels.get(f"{LABEL}.{key}") or labels.get(key) or ""


def owner_state(labels: dict[str, str]) -> str:
    """Whether the process that created a container still runs: alive, dead, other host or unknown."""
    host = _label(labels, "owner_host")
    if host and host != socket.gethostname():
        return "other host"
    try:
        pid = int(_label(labels, "owner_pid"))
    except ValueError:
        return "unknown"
    if pid <= 0:
        return "unknown"
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return "dead"
    except PermissionError:
        return "alive"
    return "alive"


__all__ = [
    "ContainerInfo",
    "GcOutcome",
    "app",
    "gc_backend",
    "list_containers",
    "owner_state",
    "run_in_sandbox",
    "sandbox_app",
    "shell_exit_code",
]
