"""Bounded disk for validating thousands of Harbor tasks (``envfarm harbor validate --prune-images``).

Every task gets its own image, and the bwrap backend its own export of it (about a GB each), so a dataset
of 3,566 tasks would fill any disk. With the janitor:

- tasks run grouped by the apt packages their Dockerfile installs (one shared apt layer per group), and
  within a group by the steps of their shared pip layer (``harbor_image.shared_steps``);
- a task's image and its bwrap export are removed as soon as its row is written (docker removes its build
  cache with it, down to the shared layers, which are tagged);
- when the last task of a pip group is done its pip layer is removed, and when the last of an apt group is
  done its apt layer (the base images stay);
- a wheelhouse folder is removed once no task left in the run installs from it (one with torch's CUDA
  wheels is 3 GB, and TermiGen has a hundred such tasks).

Builds run side by side; an image or layer removal waits until no build is in flight (the removals queue
up meanwhile), so a removal never pulls a layer from under a build, and a long build holds no one up until
:data:`QUEUE_LIMIT` removals wait: then new builds wait for the ones in flight, the queue is emptied, and
they go on (the disk stays bounded however the builds overlap).
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

QUEUE_LIMIT = 8
"""Removals that may wait for builds in flight before new builds wait for them instead."""

Group = tuple[str, ...]
Prefix = tuple[tuple[str, tuple[str, ...]], ...]
"""The (kind, args) of the steps a task's shared pip layer holds; empty when it has none."""
Key = tuple[str, Any]
"""("apt", Group), ("pip", (Group, Prefix)) or ("wheels", name): what is removed after its last task."""
Plan = tuple[tuple[Group, Prefix], tuple[str, ...]]
"""A task's groups and the wheelhouse folders its build fills."""


def apt_group(folder: Path) -> Group:
    """The sorted apt packages of the task in ``folder`` (empty when none, or when it does not translate)."""
    return groups_of(folder)[0]


def groups_of(folder: Path) -> tuple[Group, Prefix]:
    """The task's apt group and the steps of its shared pip layer (both empty when it does not
    translate)."""
    return plan_of(folder)[0]


def plan_of(folder: Path) -> Plan:
    """The task's groups and wheelhouse folders (all empty when it does not translate)."""
    from envfarm.sandbox.dockerfile import translate_file
    from envfarm.sandbox.harbor_image import shared_steps, wheelhouses

    dockerfile = folder / "environment" / "Dockerfile"
    if not dockerfile.is_file():
        return ((), ()), ()
    try:
        t = translate_file(dockerfile)
    except (OSError, ValueError):
        return ((), ()), ()
    prefix = tuple((s.kind, s.args) for s in t.steps[:shared_steps(t)])
    return (tuple(sorted(t.apt_packages)), prefix), (wheelhouses(t) if t.buildable else ())


class Janitor:
    """Removes what a validation run built once no task left in the run needs it."""

    def __init__(self, plans: dict[Path, Plan]) -> None:
        self._group = {f.name: p[0] for f, p in plans.items()}
        self._wheels = {f.name: p[1] for f, p in plans.items()}
        self._left: Counter[Key] = Counter(k for f in plans for k in self._keys(f.name))
        self._images: dict[str, Any] = {}
        self._layers: defaultdict[Key, set[str]] = defaultdict(set)
        self._queued: list[tuple[str, str]] = []
        self._building = 0
        self._turn = asyncio.Condition()

    @classmethod
    async def plan(cls, folders: Sequence[Path]) -> tuple[list[Path], Janitor]:
        """``folders`` in group order (the largest apt groups last, so their shared layers are built once;
        a pip group's tasks one after another), and the janitor that tracks them."""
        plans = {f: await asyncio.to_thread(plan_of, f) for f in folders}
        sizes = Counter(p[0][0] for p in plans.values())
        ordered = sorted(folders, key=lambda f: (sizes[plans[f][0][0]], plans[f][0], f.name))
        return ordered, cls(plans)

    async def build(self, folder: Path) -> Any:
        """The task's image (:func:`envfarm.sandbox.harbor_image.ensure_task_image`), never during a
        removal."""
        from envfarm.sandbox.harbor_image import ensure_task_image

        group = self._group.get(folder.name, ((), ()))

        def on_layer(kind: str, tag: str) -> None:
            self._layers[next(k for k in _keys(group) if k[0] == kind)].add(tag)

        async with self._turn:
            if len(self._queued) >= QUEUE_LIMIT:
                await self._turn.wait_for(lambda: not self._building)
            await self._remove_queued()
            self._building += 1
        try:
            image = await asyncio.to_thread(ensure_task_image, folder, on_layer=on_layer)
        finally:
            async with self._turn:
                self._building -= 1
                self._turn.notify_all()
        self._images[folder.name] = image
        return image

    async def done(self, folder: Path) -> None:
        """The task in ``folder`` has its row: drop its export now, its image and (after a group's last
        task) the group's layer once no build is in flight; a wheelhouse no task left needs."""
        from envfarm.sandbox import imagebuild, rootfs

        keys = self._keys(folder.name)
        self._left.subtract(keys)
        if (image := self._images.pop(folder.name, None)) is not None:
            export = rootfs.export_dir(image.image_id)
            if await asyncio.to_thread(export.exists):
                await asyncio.to_thread(rootfs.remove, export)
            self._queued.append(("task", image.tag))
        for key in keys:  # the pip layer before the apt layer it rests on
            if self._left[key] > 0:
                continue
            if key[0] == "wheels":
                freed = await asyncio.to_thread(imagebuild.remove_wheelhouse, key[1])
                log.info("removed the wheelhouse %s (%d MB)", key[1], freed >> 20)
            self._queued += [(key[0], tag) for tag in sorted(self._layers.pop(key, set()))]
        async with self._turn:
            await self._remove_queued()

    async def _remove_queued(self) -> None:
        """The queued images, in order, when no build is in flight (the caller holds ``_turn``)."""
        from envfarm.sandbox.harbor_image import discard

        while self._queued and not self._building:
            kind, tag = self._queued.pop(0)
            await asyncio.to_thread(discard, tag)
            log.info("removed the %s image %s", kind, tag)

    def _keys(self, name: str) -> list[Key]:
        """The task's pip group, apt group and wheelhouses, as the janitor counts them."""
        return [*_keys(self._group.get(name, ((), ()))), *(("wheels", w) for w in self._wheels.get(name, ()))]


def _keys(group: tuple[Group, Prefix]) -> tuple[Key, Key]:
    """The task's pip group and apt group."""
    return ("pip", group), ("apt", group[0])


__all__ = ["Janitor", "apt_group", "groups_of", "plan_of"]
