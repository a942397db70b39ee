"""Bounded disk for validating thousands of Harbor tasks (``envfarm harbor validate --prune-images``).

Every task gets its own image, and the bwrap backend its own export of it (about a GB each), so a dataset
of 3,566 tasks would fill any disk. With the janitor:

- tasks run grouped by the apt packages their Dockerfile installs (one shared apt layer per group);
- a task's bwrap export is removed as soon as its row is written;
- when the last task of a group is done, the group's task images and its apt layer are removed (docker
  removes their build cache with them; the base images and the wheelhouse stay).

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


def apt_group(folder: Path) -> Group:
    """The sorted apt packages of the task in ``folder`` (empty when none, or when it does not translate)."""
    from envfarm.sandbox.dockerfile import translate_file

    dockerfile = folder / "environment" / "Dockerfile"
    if not dockerfile.is_file():
        return ()
    try:
        return tuple(sorted(translate_file(dockerfile).apt_packages))
    except (OSError, ValueError):
        return ()


class Janitor:
    """Removes what a validation run built once no task left in the run needs it."""

    def __init__(self, groups: dict[Path, Group]) -> None:
        self._group = {f.name: g for f, g in groups.items()}
        self._left: Counter[Group] = Counter(groups.values())
        self._images: dict[str, Any] = {}
        self._tags: defaultdict[Group, set[str]] = defaultdict(set)
        self._apt: dict[Group, str] = {}
        self._lock = asyncio.Lock()

    @classmethod
    async def plan(cls, folders: Sequence[Path]) -> tuple[list[Path], Janitor]:
        """``folders`` in group order (the largest groups last, so their shared layers are built once),
        and the janitor that tracks them."""
        groups = {f: await asyncio.to_thread(apt_group, f) for f in folders}
        sizes = Counter(groups.values())
        ordered = sorted(folders, key=lambda f: (sizes[groups[f]], groups[f], f.name))
        return ordered, cls(groups)

    async def build(self, folder: Path) -> Any:
        """The task's image (:func:`envfarm.sandbox.harbor_image.ensure_task_image`), never during a
        removal."""
        from envfarm.sandbox.harbor_image import ensure_task_image

        async with self._lock:
            image = await asyncio.to_thread(ensure_task_image, folder)
        self._images[folder.name] = image
        group = self._group.get(folder.name, ())
        self._tags[group].add(image.tag)
        if image.apt_layer:
            self._apt[group] = image.apt_layer
        return image

    async def done(self, folder: Path) -> None:
        """The task in ``folder`` has its row: drop its export; the group's images after its last task."""
        from envfarm.sandbox import rootfs
        from envfarm.sandbox.harbor_image import discard

        if (image := self._images.pop(folder.name, None)) is not None:
            export = rootfs.export_dir(image.image_id)
            if await asyncio.to_thread(export.exists):
                await asyncio.to_thread(rootfs.remove, export)
        group = self._group.get(folder.name, ())
        self._left[group] -= 1
        if self._left[group] > 0:
            return
        async with self._lock:
            for tag in sorted(self._tags.pop(group, set())):
                await asyncio.to_thread(discard, tag)
            if apt := self._apt.pop(group, ""):
                await asyncio.to_thread(discard, apt)
        log.info("removed the images of apt group %s", " ".join(group) or "(none)")


__all__ = ["Janitor", "apt_group"]
