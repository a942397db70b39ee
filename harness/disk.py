"""Disk use of the harness's images, per image and per (repo, version): ``envfarm images list|prune
--harness``.

    kind      image                                   own bytes (what removing it frees)
    env       envfarm/sweb.env.<repo>.<version>:<h>   its size minus its Debian base image
    instance  envfarm/sweb.eval.<instance>:<h>        its size minus its env image (the repo + install)
    instance  envfarm/sweb.pulled.<instance>:<h>      the adapter layer over a pulled SWE-bench image
    instance  <registry>/…  (envfarm's layout)        pulled as it is; its size minus its env image if here
    pulled    <registry>/…sweb.eval…                  a pulled SWE-bench image under an adapter: all of it

Sizes come from docker (``Size``: the image with every layer below it). ``by_env`` sums each (repo, version):
its env images and every instance image on them, so the table says what one repo/version costs and the
total what the harness holds. ``prune`` removes instance images (and the pulled images under their
adapters); env images only with ``include_env``, since rebuilding them is the slow part.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import requests
from docker.errors import APIError, DockerException
from docker.models.images import Image

from envfarm.errors import ImageError
from envfarm.sandbox import dockerutil, images
from envfarm.sandbox.recipes import base_recipes

from .layout import KIND_LABEL

log = logging.getLogger(__name__)

PULLED_LABEL = "envfarm.harness.pulled"
KINDS = ("env", "instance", "pulled")


@dataclass(frozen=True)
class HarnessImage:
    """One harness image in docker, as ``envfarm images list --harness`` shows it."""

    tag: str
    kind: str
    """"env", "instance" or "pulled" (a pulled SWE-bench image under an adapter layer)."""
    name: str
    """``repo version`` for env images, the instance id for the others."""
    size_bytes: int
    """The whole image, shared layers included."""
    own_bytes: int
    """What this image adds to its parent (env over base, instance over env); all of a pulled image."""
    created: str
    repo: str = ""
    version: str = ""
    image_id: str = ""
    """Docker's id: one image under several tags is counted once."""


@dataclass(frozen=True)
class EnvDisk:
    """The disk one (repo, version) takes: its env images and the instance images on them."""

    repo: str
    version: str
    env_images: int
    env_bytes: int
    instance_images: int
    instance_bytes: int
    """Instance layers, adapters and pulled images together."""

    @property
    def total_bytes(self) -> int:
        return self.env_bytes + self.instance_bytes


def list_images() -> list[HarnessImage]:
    """Every harness image in docker (env images first), with its own and total size."""
    try:
        found = dockerutil.client().images.list(filters={"label": KIND_LABEL})
    except (DockerException, requests.RequestException) as e:
        raise ImageError(f"cannot list docker images: {e}") from e
    sizes = {tag: int(img.attrs.get("Size", 0)) for img in found for tag in img.tags}
    versions = {
        tag: (img.labels or {}).get("envfarm.harness.version", "")
        for img in found
        if (img.labels or {}).get(KIND_LABEL) == "env"
        for tag in img.tags
    }
    base_names = {r.suite: r.name for r in base_recipes().values()}
    envs = [img for img in found if (img.labels or {}).get(KIND_LABEL) == "env"]
    bases = {tag: _size_of(tag) for tag in {_base_tag(img, base_names) for img in envs}}
    out: list[HarnessImage] = []
    for img in found:
        out.extend(_entries(img, sizes, versions, base_names, bases))
    return sorted(out, key=lambda i: (KINDS.index(i.kind) if i.kind in KINDS else 9, i.name, i.tag))


def _entries(
    img: Image,
    sizes: dict[str, int],
    versions: dict[str, str],
    base_names: dict[str, str],
    bases: dict[str, int],
) -> list[HarnessImage]:
    labels = img.labels or {}
    kind = labels.get(KIND_LABEL, "?")
    total = int(img.attrs.get("Size", 0))
    created = img.attrs.get("Created", "")
    repo = labels.get("envfarm.harness.repo", "")
    extra: list[HarnessImage] = []
    if kind == "env":
        version = labels.get("envfarm.harness.version", "")
        name = f"{repo} {version}"
        parent = bases.get(_base_tag(img, base_names), 0)
    else:
        name = labels.get("envfarm.harness.instance", "?")
        env = labels.get("envfarm.harness.env", "")
        version = labels.get("envfarm.harness.version") or versions.get(env) or _version_of(env, repo)
        parent = sizes.get(env, 0)
        pulled = labels.get(PULLED_LABEL)
        if pulled and (under := dockerutil.get_image(pulled)) is not None:
            parent = int(under.attrs.get("Size", 0))
            extra.append(
                HarnessImage(pulled, "pulled", name, parent, parent, created, repo, version, under.id or "")
            )
    own = max(0, total - parent)
    tags = img.tags or [img.short_id]
    return [
        HarnessImage(t, kind, name, total, own, created, repo, version, img.id or "") for t in tags
    ] + extra


def _base_tag(img: Image, base_names: dict[str, str]) -> str:
    """The tag of the Debian base an env image was built FROM (its labels name the suite and hash)."""
    labels = img.labels or {}
    base = base_names.get(labels.get("envfarm.harness.suite", ""), "base")
    return images.tag_for(base, labels.get("envfarm.base_hash", ""))


def _version_of(env_tag: str, repo: str) -> str:
    """The version in an env tag (``envfarm/sweb.env.<owner__name>.<version>:<hash>``), or "?"."""
    prefix = f"envfarm/sweb.env.{repo.replace('/', '__')}.".lower()
    name = env_tag.split(":", 1)[0]
    return name[len(prefix) :] if repo and name.startswith(prefix) else "?"


def _size_of(tag: str) -> int:
    img = dockerutil.get_image(tag)
    return int(img.attrs.get("Size", 0)) if img is not None else 0


def by_env(found: list[HarnessImage]) -> list[EnvDisk]:
    """Disk per (repo, version), largest first; an image under several tags is counted once."""
    groups: dict[tuple[str, str], list[int]] = {}
    seen: set[str] = set()
    for image in found:
        key = image.image_id or image.tag
        if key in seen:
            continue
        seen.add(key)
        counts = groups.setdefault((image.repo or "?", image.version or "?"), [0, 0, 0, 0])
        slot = 0 if image.kind == "env" else 2
        counts[slot] += image.kind != "pulled"  # a pulled image is part of its adapter's instance
        counts[slot + 1] += image.own_bytes
    rows = [EnvDisk(repo, version, *counts) for (repo, version), counts in groups.items()]
    return sorted(rows, key=lambda r: (-r.total_bytes, r.repo, r.version))


def prune(include_env: bool = False, repos: tuple[str, ...] = ()) -> tuple[list[str], int]:
    """Remove instance images and the pulled images under them (env images too with ``include_env``), of
    every repo or only of ``repos`` (``owner/name``); returns (removed tags, bytes freed)."""
    doomed = [i for i in list_images() if (i.kind != "env" or include_env) and (not repos or i.repo in repos)]
    order = {"instance": 0, "pulled": 1, "env": 2}  # children before parents
    cli = dockerutil.client()
    removed, freed = [], 0
    for img in sorted(doomed, key=lambda i: order.get(i.kind, 0)):
        if img.tag in removed:
            continue
        try:
            cli.images.remove(img.tag)
            removed.append(img.tag)
            freed += img.own_bytes
        except APIError as e:
            log.warning("kept %s: %s", img.tag, e.explanation or e)
    return removed, freed
