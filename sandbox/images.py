"""Image recipes and the images built from them, for both the docker and the bwrap backend.

    images/base/recipe.toml   -> debootstrap rootfs  config.home()/rootfs/base-<hash>  (bwrap)
                              -> docker import       envfarm/base:<hash>, envfarm/base:latest  (docker)
    images/base-<suite>/...   -> the same for another Debian suite: envfarm/base-<suite>:<hash> (on demand)
    images/<name>/Dockerfile  -> docker build FROM envfarm/base:<hash>   envfarm/<name>:<hash>, :latest
                                 (Python packages from a host-side wheelhouse; the build has no network)

``<hash>`` is :func:`content_hash` of the recipe folder (a layered image's hash also covers the base hash),
so editing a recipe makes every image built from it stale. ``resolve_image`` turns a name into a docker
tag, ``rootfs_for`` into a folder bwrap can use; ``list_images`` and ``prune`` manage what was built.
The recipes folder is the repository's top-level ``images/`` (``$ENVFARM_IMAGES_DIR`` overrides it).
"""

from __future__ import annotations

import difflib
import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import requests
from docker.errors import APIError, DockerException
from docker.models.images import Image

from envfarm import config
from envfarm.errors import BackendUnavailable, ImageError, ImageNotFound

from . import dockerutil, imagebuild, rootfs
from .recipes import (
    BUILDER_VERSION,
    REPO,
    BaseRecipe,
    base_for_suite,
    base_names,
    base_recipes,
    content_hash,
    current_hashes,
    images_dir,
    layered_names,
    load_base_recipe,
    recipe_names,
    suite_hashes,
    tag_for,
    unknown_recipe,
)
from .rootfs import ProgressFn

log = logging.getLogger(__name__)

LATEST = "latest"
NAME_LABEL = "envfarm.image"
HASH_LABEL = "envfarm.recipe_hash"
HARBOR_LABEL = "envfarm.harbor"
"""``apt``, ``pip``, ``task``, ``prebuilt`` or ``export``: images of Harbor tasks (:mod:`.harbor_image`)."""
IMAGE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass(frozen=True)
class BuildResult:
    """What one build did."""

    name: str
    tag: str
    hash: str
    image_id: str | None
    """Docker image id; None when docker was not reachable and only the rootfs was built."""
    rootfs_path: Path | None
    """The base rootfs folder (base only)."""
    built: bool
    """False when everything was already present (a cache hit)."""
    docker_skipped: bool
    duration_s: float


@dataclass(frozen=True)
class ImageInfo:
    """One built (or buildable) image, as shown by ``envfarm images list``."""

    name: str
    tag: str
    hash: str
    size_mb: float | None
    created: str | None
    present_in_docker: bool
    rootfs_path: Path | None
    stale: bool
    """True when the recipe changed since this was built (or the recipe is gone)."""


@dataclass(frozen=True)
class PruneResult:
    removed: tuple[str, ...]
    bytes_freed: int


# ----------------------------------------------------------------------------------------------- builds


def build(
    names: Sequence[str] = (),
    force: bool = False,
    progress: ProgressFn | None = None,
    suites: Sequence[str] = (),
) -> list[BuildResult]:
    """Build ``names`` (default: base and every layered recipe, unless only ``suites`` are asked for), base
    first, then the base image of each Debian suite in ``suites``; cached builds are no-ops."""
    wanted = list(names) or ([] if suites else recipe_names())
    for name in wanted:
        if name not in recipe_names():
            raise unknown_recipe(name)
    recipes = [base_for_suite(s) for s in dict.fromkeys(suites)]  # unknown suites fail before any build
    results = []
    if "base" in wanted:
        results.append(build_base(force=force, progress=progress))
    for name in (n for n in dict.fromkeys(wanted) if n != "base"):
        results.append(build_image(name, force=force, progress=progress))
    for recipe in recipes:
        if recipe.name != "base" or "base" not in wanted:
            results.append(build_base(force=force, progress=progress, suite=recipe.suite))
    return results


def build_base(
    force: bool = False, progress: ProgressFn | None = None, suite: str | None = None
) -> BuildResult:
    """Make a base rootfs folder (debootstrap) and docker image; a no-op when both exist and are current.

    ``suite`` picks the Debian suite's recipe (None: the default ``images/base``). Without a docker daemon the
    rootfs is still built (bwrap runs on it) and the import is skipped.
    """
    start = time.monotonic()
    recipe = base_for_suite(suite)
    name = recipe.name
    tag, folder = tag_for(name, recipe.hash), rootfs.base_dir(recipe.hash)
    with rootfs.build_lock():
        have_docker = dockerutil.ping()
        old = dockerutil.get_image(tag) if have_docker else None
        need_rootfs = force or not rootfs.is_complete(folder)
        need_image = have_docker and (force or old is None)
        if need_rootfs:
            _make_base_rootfs(recipe, folder, None if force or old is None else tag, progress)
        image_id = old.id if old is not None else None
        if need_image:
            _note(progress, f"importing {folder.name} into docker as {tag}")
            image_id = rootfs.import_into_docker(folder, tag, _import_changes(name, recipe.hash))
            _drop_replaced(old, image_id)
        if have_docker:
            _tag_latest(tag, name)
        else:
            log.warning(
                "docker is not reachable: docker import of %s skipped (the rootfs %s is ready for bwrap); "
                "run `make setup`",
                tag,
                folder,
            )
    built = need_rootfs or need_image
    log.info("%s %s %s in %.1fs", name, tag, "built" if built else "is up to date", time.monotonic() - start)
    return BuildResult(
        name, tag, recipe.hash, image_id, folder, built, not have_docker, time.monotonic() - start
    )


def _make_base_rootfs(
    recipe: BaseRecipe, folder: Path, from_image: str | None, progress: ProgressFn | None
) -> None:
    """debootstrap + postprocess into a staging folder (or export ``from_image``), then move into place."""
    with rootfs.staging(folder.name) as tmp:
        if from_image is not None:
            _note(progress, f"exporting {from_image} into {folder}")
            rootfs.export_from_docker(from_image, tmp)
        else:
            _note(progress, f"debootstrap {recipe.suite} ({len(recipe.packages)} packages; 1-2 minutes)")
            rootfs.debootstrap(
                tmp,
                suite=recipe.suite,
                variant=recipe.variant,
                packages=recipe.packages,
                mirror=recipe.mirror,
                progress=progress,
            )
            rootfs.postprocess(tmp)
        size = rootfs.disk_usage(tmp)
        meta = {
            "kind": "base",
            "name": recipe.name,
            "hash": recipe.hash,
            "suite": recipe.suite,
            "size_bytes": size,
        }
        rootfs.place(tmp, folder, meta)
    log.info("base rootfs ready at %s (%.0f MB)", folder, size / 1e6)


def _import_changes(name: str, recipe_hash: str) -> list[str]:
    """Dockerfile instructions applied by ``docker import --change``."""
    return [
        f"LABEL {config.LABEL}=1 {NAME_LABEL}={name} {HASH_LABEL}={recipe_hash}",
        f"ENV PATH={IMAGE_PATH}",
        "ENV LANG=C.UTF-8",
        f"WORKDIR {config.AGENT_HOME}",
        'CMD ["/bin/bash"]',
    ]


def build_image(name: str, force: bool = False, progress: ProgressFn | None = None) -> BuildResult:
    """Build the layered image ``images/<name>`` as ``envfarm/<name>:<hash>`` (+ ``:latest``).

    Builds the base first when needed (never forced from here). Needs the docker daemon.
    """
    if name == "base":
        return build_base(force=force, progress=progress)
    if name not in layered_names():
        raise unknown_recipe(name)
    start = time.monotonic()
    base = build_base(progress=progress)
    if base.image_id is None:
        raise BackendUnavailable(f"{dockerutil.NO_DAEMON} (needed to build envfarm/{name})", dockerutil.FIX)
    folder = images_dir() / name
    recipe_hash = content_hash(folder, extra=base.hash)
    tag = tag_for(name, recipe_hash)
    with rootfs.build_lock():
        old = dockerutil.get_image(tag)
        if old is not None and not force:
            _tag_latest(tag, name)
            log.info("%s is up to date", tag)
            return BuildResult(name, tag, recipe_hash, old.id, None, False, False, time.monotonic() - start)
        labels = {
            config.LABEL: "1",
            NAME_LABEL: name,
            HASH_LABEL: recipe_hash,
            "envfarm.base_hash": base.hash,
        }
        recipe = load_base_recipe()
        spec = imagebuild.LayerSpec(folder, tag, base.tag, labels, recipe_hash, recipe.python, recipe.glibc)
        image_id = imagebuild.build_layer(spec, nocache=force, progress=progress)
        _drop_replaced(old, image_id)
        _tag_latest(tag, name)
    log.info("built %s in %.1fs", tag, time.monotonic() - start)
    return BuildResult(name, tag, recipe_hash, image_id, None, True, False, time.monotonic() - start)


def _note(progress: ProgressFn | None, message: str) -> None:
    log.info("%s", message)
    if progress:
        progress(message)


# ------------------------------------------------------------------------------------------ docker bits


def _tag_latest(tag: str, name: str) -> None:
    image = dockerutil.get_image(tag)
    if image is not None and f"{REPO}/{name}:{LATEST}" not in image.tags:
        image.tag(f"{REPO}/{name}", LATEST)


def _drop_replaced(old: Image | None, new_id: str) -> None:
    """After a forced rebuild, delete the image the tag pointed to before (if nothing else uses it)."""
    if old is None or old.id == new_id:
        return
    try:
        dockerutil.client().images.remove(old.id)
        log.info("removed replaced image %s", old.short_id)
    except (DockerException, requests.RequestException) as e:
        log.info("kept replaced image %s: %s", old.short_id, e)


def _envfarm_images() -> list[Image]:
    try:
        found: list[Image] = dockerutil.client().images.list(filters={"label": f"{config.LABEL}=1"})
        return found
    except (DockerException, requests.RequestException) as e:
        raise ImageError(f"cannot list docker images: {e}") from e


# -------------------------------------------------------------------------------------- using images


def resolve_image(name: str | None) -> str:
    """The docker tag for ``name``: None/"base", a recipe name ("pytest"), or any tag ("envfarm/pytest:abc").

    Raises :class:`ImageNotFound` (with the build command) when docker does not have it.
    """
    name = name or "base"
    if name in recipe_names():
        tag = tag_for(name, current_hashes()[name])
        fix = "run `envfarm images build`" if name == "base" else f"run `envfarm images build {name}`"
    else:
        tag = name
        hint = difflib.get_close_matches(name, recipe_names(), n=1)
        fix = (
            f"did you mean {hint[0]!r}? run `envfarm images build {hint[0]}`"
            if hint
            else f"no registry is reachable here: build it (`envfarm images build NAME` for a recipe in "
            f"images/: {', '.join(recipe_names())})"
        )
    if dockerutil.get_image(tag) is None:
        raise ImageNotFound(tag, fix)
    return tag


def rootfs_for(image: str | None) -> Path:
    """A root filesystem folder for the bwrap backend running ``image``.

    None/"base" is the debootstrap folder (no docker needed). Any other image is exported from docker
    once (a created, never started container) into ``rootfs/img-<id12>`` and cached by image id.
    """
    name = image or "base"
    if name == "base":
        folder = rootfs.base_dir(content_hash(images_dir() / "base"))
        if not rootfs.is_complete(folder):
            raise ImageNotFound("base", "run `envfarm images build`")
        return folder
    current = current_hashes()
    if not dockerutil.ping() and name in current and (found := _exported(name, current[name])):
        return found  # bwrap keeps working on an earlier export while the daemon is down
    tag = resolve_image(name)
    img = dockerutil.get_image(tag)
    assert img is not None
    labels = img.labels or {}
    if labels.get(NAME_LABEL) == "base" and rootfs.is_complete(
        base := rootfs.base_dir(labels.get(HASH_LABEL, ""))
    ):
        return base
    folder = rootfs.export_dir(img.id)
    if rootfs.is_complete(folder):
        return folder
    with rootfs.build_lock():
        if not rootfs.is_complete(folder):
            with rootfs.staging(folder.name) as tmp:
                log.info("exporting %s (%s) into %s for bwrap", tag, img.short_id, folder)
                rootfs.export_from_docker(img.id, tmp)
                meta = {
                    "kind": "export",
                    "name": labels.get(NAME_LABEL, tag),
                    "hash": labels.get(HASH_LABEL, ""),
                    "image_id": img.id,
                    "size_bytes": rootfs.disk_usage(tmp),
                }
                rootfs.place(tmp, folder, meta)
    return folder


def _exported(name: str, recipe_hash: str) -> Path | None:
    """An already exported rootfs of recipe ``name`` at ``recipe_hash`` (found without asking docker)."""
    for folder in rootfs.complete_folders():
        meta = rootfs.read_marker(folder) or {}
        if meta.get("kind") == "export" and meta.get("name") == name and meta.get("hash") == recipe_hash:
            return folder
    return None


# --------------------------------------------------------------------------------------- list, prune


def list_images() -> list[ImageInfo]:
    """Every envfarm image in docker, every rootfs folder, and every recipe not built yet."""
    current = {**current_hashes(), **suite_hashes()}
    markers = {p: rootfs.read_marker(p) or {} for p in rootfs.complete_folders()}
    by_id = {m.get("image_id"): p for p, m in markers.items() if m.get("image_id")}
    entries: dict[tuple[str, str], ImageInfo] = {}
    have_docker = dockerutil.ping()
    if not have_docker:
        log.warning("docker is not reachable: listing rootfs folders only; run `make setup`")
    for img in _envfarm_images() if have_docker else []:
        name, h = img.labels.get(NAME_LABEL, "?"), img.labels.get(HASH_LABEL, "")
        path = by_id.get(img.id)
        if path is None and name == "base" and rootfs.is_complete(rootfs.base_dir(h)):
            path = rootfs.base_dir(h)
        size = round(img.attrs.get("Size", 0) / 1e6, 1)
        stale = _stale(img.labels, current)
        entries[(name, h)] = ImageInfo(
            name, tag_for(name, h), h, size, img.attrs.get("Created"), True, path, stale
        )
    for path, meta in markers.items():
        name, h = str(meta.get("name", path.name)), str(meta.get("hash", ""))
        if (name, h) not in entries:
            size = round(meta.get("size_bytes", 0) / 1e6, 1)
            tag = tag_for(name, h) if name in current else name
            info = ImageInfo(name, tag, h, size, meta.get("created"), False, path, current.get(name) != h)
            entries[(name, h)] = info
    for name, h in current.items():
        if (name, h) not in entries:
            entries[(name, h)] = ImageInfo(name, tag_for(name, h), h, None, None, False, None, False)
    order = {name: i for i, name in enumerate(current)}
    return sorted(entries.values(), key=lambda i: (order.get(i.name, len(order)), i.name, i.stale, i.hash))


def prune(all: bool = False) -> PruneResult:
    """Remove envfarm images, rootfs folders and wheelhouses not built from the current recipes
    (``all=True``: everything). Images still used by a container are kept (logged). Base images of other
    Debian suites (``base-<suite>``) count as current while their recipe is.

    Docker images are shared by every ``$ENVFARM_HOME`` on this daemon: ``all=True`` removes them for all.
    """
    current = {**current_hashes(), **suite_hashes()}
    removed: list[str] = []
    freed = 0
    with rootfs.build_lock():
        live_ids: set[str] | None = None
        if dockerutil.ping():
            gone, docker_freed, live_ids = _prune_docker(current, all)
            removed += gone
            freed += docker_freed
        else:
            log.warning("docker is not reachable: docker images were not pruned")
        for folder in sorted(rootfs.rootfs_dir().iterdir()):
            if folder.is_dir() and _doomed_rootfs(folder, current, all, live_ids):
                freed += rootfs.remove(folder)
                removed.append(str(folder))
        gone, wheel_freed = imagebuild.prune_wheelhouses(set() if all else set(current.values()))
        removed += gone
        freed += wheel_freed
    return PruneResult(tuple(removed), freed)


def _doomed_rootfs(folder: Path, current: dict[str, str], all: bool, live_ids: set[str] | None) -> bool:
    meta = rootfs.read_marker(folder)
    if all or meta is None:  # incomplete or a leftover staging folder
        return True
    name, h = meta.get("name"), meta.get("hash")
    if name in current and h != current[name]:
        return True
    return meta.get("kind") == "export" and live_ids is not None and meta.get("image_id") not in live_ids


def _prune_docker(current: dict[str, str], all: bool) -> tuple[list[str], int, set[str]]:
    """Remove stale (or all) envfarm images, children before the base; returns (removed, bytes, live ids)."""
    cli = dockerutil.client()
    before = _layers_size()
    removed = []
    doomed = [
        img
        for img in _envfarm_images()
        if all or _stale(img.labels, current)
    ]
    def parents_last(img: Image) -> tuple[bool, bool, bool]:
        name = str(img.labels.get(NAME_LABEL, ""))
        return name.startswith("base"), name == "harbor-apt", name == "harbor-pip"

    for img in sorted(doomed, key=parents_last):
        for ref in img.tags or [img.id]:
            try:
                cli.images.remove(ref)
                removed.append(ref)
            except APIError as e:
                log.warning("kept %s: %s", ref, e.explanation or e)
    live = {img.id for img in _envfarm_images()}
    return removed, max(0, before - _layers_size()), live


def _stale(labels: dict[str, str], current: dict[str, str]) -> bool:
    """A recipe image is stale when its recipe changed; a Harbor task image (label ``envfarm.harbor``, made
    by :mod:`.harbor_image` from a task folder, not a recipe) when the base it was built on did."""
    if labels.get(HARBOR_LABEL):
        return labels.get("envfarm.base_hash") not in current.values()
    return current.get(labels.get(NAME_LABEL, "")) != labels.get(HASH_LABEL)


def _layers_size() -> int:
    try:
        return int(dockerutil.client().df().get("LayersSize") or 0)
    except (DockerException, requests.RequestException) as e:
        log.debug("docker df failed: %s", e)
        return 0


__all__ = [
    "BUILDER_VERSION",
    "BaseRecipe",
    "BuildResult",
    "ImageInfo",
    "PruneResult",
    "base_for_suite",
    "base_names",
    "base_recipes",
    "build",
    "build_base",
    "build_image",
    "content_hash",
    "current_hashes",
    "images_dir",
    "layered_names",
    "list_images",
    "load_base_recipe",
    "prune",
    "recipe_names",
    "resolve_image",
    "rootfs_for",
    "suite_hashes",
    "tag_for",
]
