"""Build the env image of every repo/version a set of rows needs, ahead of a run (``envfarm harness images
build``): one image per (repo, version), at most ``max_workers`` docker builds at once, each failure recorded
with its reason and the others going on. Rows without a spec are reported (``python-unavailable`` when no
Debian suite ships their Python) instead of silently left out.

    outcome = asyncio.run(build_envs(plan_envs(rows, SpecCatalog()), max_workers=2))
    [b for b in outcome.builds if b.error]
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from .env_spec import EnvSpec
from .images import ImageBuilder, base_of
from .instances import Instance
from .specs import SpecCatalog, plan_all
from .validate import python_unavailable


@dataclass(frozen=True)
class EnvTarget:
    """One repo/version to build, and the rows that need it."""

    env: EnvSpec
    instance_ids: tuple[str, ...]


@dataclass(frozen=True)
class Unplanned:
    """A repo/version whose rows have no buildable spec."""

    repo: str
    version: str
    instance_ids: tuple[str, ...]
    reason: str
    """``python-unavailable`` (no Debian suite ships the Python its pins need) or ``no-spec``."""
    detail: str


@dataclass(frozen=True)
class EnvBuild:
    """What building one env image did."""

    repo: str
    version: str
    python: str
    suite: str
    rows: int
    tag: str
    built: bool
    """False when the image was already there (found by its content hash)."""
    seconds: float
    error: str = ""
    """Empty on success; else the build's error (the other images still build)."""


@dataclass(frozen=True)
class EnvBuildOutcome:
    builds: tuple[EnvBuild, ...]
    unplanned: tuple[Unplanned, ...]
    seconds: float

    @property
    def failed(self) -> tuple[EnvBuild, ...]:
        return tuple(b for b in self.builds if b.error)


def plan_envs(rows: Iterable[Instance], catalog: SpecCatalog) -> tuple[list[EnvTarget], list[Unplanned]]:
    """The distinct environments of ``rows`` (in repo/version order) and the repo/versions without one."""
    rows = list(rows)
    plans, errors = plan_all(rows, catalog)
    targets: dict[tuple[str, str], tuple[EnvSpec, list[str]]] = {}
    for p in plans:
        key = (p.env.repo, p.env.version)
        targets.setdefault(key, (p.env, []))[1].append(p.instance.instance_id)
    missing: dict[tuple[str, str], list[str]] = {}
    for inst in rows:
        if inst.instance_id in errors:
            missing.setdefault((inst.repo, inst.version), []).append(inst.instance_id)
    unplanned = []
    for (repo, version), ids in sorted(missing.items()):
        detail = str(errors[ids[0]])
        reason = "python-unavailable" if python_unavailable(detail) else "no-spec"
        unplanned.append(Unplanned(repo, version, tuple(ids), reason, detail))
    ordered = sorted(targets.items(), key=lambda kv: (kv[0][0], _version_key(kv[0][1])))
    return [EnvTarget(env, tuple(ids)) for _, (env, ids) in ordered], unplanned


def _version_key(version: str) -> tuple[int, ...]:
    return tuple(int(p) if p.isdigit() else -1 for p in version.split("."))


async def build_envs(
    targets: Iterable[EnvTarget],
    unplanned: Iterable[Unplanned] = (),
    max_workers: int = 2,
    force: bool = False,
    progress: Callable[[EnvBuild], None] | None = None,
) -> EnvBuildOutcome:
    """Build (or find) every target's env image; ``force`` rebuilds without docker's layer cache."""
    start = time.monotonic()
    builder = ImageBuilder(repo_source=None, max_workers=max_workers, force=force)

    async def one(target: EnvTarget) -> EnvBuild:
        result = await _build_one(builder, target)
        if progress is not None:
            progress(result)
        return result

    builds = await asyncio.gather(*(one(t) for t in targets))
    return EnvBuildOutcome(tuple(builds), tuple(unplanned), time.monotonic() - start)


async def _build_one(builder: ImageBuilder, target: EnvTarget) -> EnvBuild:
    env, rows = target.env, len(target.instance_ids)
    started = time.monotonic()
    try:
        suite = base_of(env).suite
        image = await builder.env(env)
    except Exception as e:  # one image's failure is recorded; the others still build
        seconds = time.monotonic() - started
        error = f"{type(e).__name__}: {e}"
        return EnvBuild(env.repo, env.version, env.python, env.suite, rows, "", False, seconds, error)
    return EnvBuild(env.repo, env.version, env.python, suite, rows, image.tag, image.built, image.duration_s)


__all__ = ["EnvBuild", "EnvBuildOutcome", "EnvTarget", "Unplanned", "build_envs", "plan_envs"]
