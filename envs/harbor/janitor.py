"""Bounded disk for validating thousands of Harbor tasks (``envfarm harbor validate --prune-images``).

Every task gets its own image, and the bwrap backend its own export of it (about a GB each), so a dataset
of 3,566 tasks would fill any disk. With the janitor:

- tasks run grouped by the apt packages their Dockerfile installs (one shared apt layer per group), and
  within a group by the steps of their shared pip layer (``harbor_image.shared_steps``);
- a task's image and its bwrap export are removed as soon as its row is written (docker removes its build
  cache with it, down to the shared layers, which are tagged);
- when the last task of a pip group is done its pip layer is removed, and when the last of an apt group is
  done its apt layer (the base images and the wheelhouse stay).

Builds and removals do not overlap (one lock), so a removal never pulls a layer from under a build.
"""

from __future__ import annotations

import asyncio
import logging
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)

Group = tuple[str, ...]
Prefix = tuple[tuple[str, tuple[str, ...]], ...]
"""The (kind, args) of the steps a task's shared pip layer holds; empty when it has none."""
Key = tuple[str, Any]
"""("apt", Group) or ("pip", (Group, Prefix)): what a shared layer is removed after."""


def apt_group(folder: Path) -> Group:
    """The sorted apt packages of the task in ``folder`` (empty when none, or when it does not translate)."""
    return groups_of(folder)[0]


def groups_of(folder: Path) -> tuple[Group, Prefix]:
    """The task's apt group and the steps of its shared pip layer (both empty when it does not
    translate)."""
    from envfarm.sandbox.dockerfile import translate_file
    from envfarm.sandbox.harbor_image import shared_steps

    dockerfile = folder / "environment" / "Dockerfile"
    if not dockerfile.is_file():
        return (), ()
    try:
        t = translate_file(dockerfile)
    except (OSError, ValueError):
        return (), ()
    return tuple(sorted(t.apt_packages)), tuple((s.kind, s.args) for s in t.steps[:shared_steps(t)])


class Janitor:
    """Removes what a validation run built once no task left in the run needs it."""

    def __init__(self, groups: dict[Path, tuple[Group, Prefix]]) -> None:
        self._group = {f.name: g for f, g in groups.items()}
        self._left: Counter[Key] = Counter(k for g in groups.values() for k in _keys(g))
        self._images: dict[str, Any] = {}
        self._layers: defaultdict[Key, set[str]] = defaultdict(set)
        self._lock = asyncio.Lock()

    @classmethod
    async def plan(cls, folders: Sequence[Path]) -> tuple[list[Path], Janitor]:
        """``folders`` in group order (the largest apt groups last, so their shared layers are built once;
        a pip group's tasks one after another), and the janitor that tracks them."""
        groups = {f: await asyncio.to_thread(groups_of, f) for f in folders}
        sizes = Counter(g[0] for g in groups.values())
        ordered = sorted(folders, key=lambda f: (sizes[groups[f][0]], groups[f], f.name))
        return ordered, cls(groups)

    async def build(self, folder: Path) -> Any:
        """The task's image (:func:`envfarm.sandbox.harbor_image.ensure_task_image`), never during a
        removal."""
        from envfarm.sandbox.harbor_image import ensure_task_image

        group = self._group.get(folder.name, ((), ()))

        def on_layer(kind: str, tag: str) -> None:
            self._layers[next(k for k in _keys(group) if k[0] == kind)].add(tag)

        async with self._lock:
            image = await asyncio.to_thread(ensure_task_image, folder, on_layer=on_layer)
        self._images[folder.name] = image
        return image

    async def done(self, folder: Path) -> None:
        """The task in ``folder`` has its row: drop its image and export; a group's layer after its last
        task."""
        from envfarm.sandbox import rootfs
        from envfarm.sandbox.harbor_image import discard

        keys = _keys(self._group.get(folder.name, ((), ())))
        self._left.subtract(keys)
        async with self._lock:
            if (image := self._images.pop(folder.name, None)) is not None:
                export = rootfs.export_dir(image.image_id)
                if await asyncio.to_thread(export.exists):
                    await asyncio.to_thread(rootfs.remove, export)
                await asyncio.to_thread(discard, image.tag)
            for key in keys:  # the pip layer before the apt layer it rests on
                if self._left[key] <= 0:
                    for tag in sorted(self._layers.pop(key, set())):
                        await asyncio.to_thread(discard, tag)
                        log.info("removed the %s layer %s", key[0], tag)


def _keys(group: tuple[Group, Prefix]) -> tuple[Key, Key]:
    """The task's pip group and apt group, as the janitor counts them."""
    return ("pip", group), ("apt", group[0])


__all__ = ["Janitor", "apt_group", "groups_of"]
