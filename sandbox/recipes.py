"""Image recipes: where they live, what they say, and the content hash that names their builds.

    images/base/recipe.toml   Debian suite, variant and packages for debootstrap (the base image)
    images/<name>/Dockerfile  a layered image built FROM the base (+ requirements.txt, any files it copies)

The recipes folder is the repository's top-level ``images/`` (``envfarm/images/`` in an installed wheel, see
:data:`IMAGES_DIR`); ``$ENVFARM_IMAGES_DIR`` overrides it.
Nothing here talks to docker.
"""

from __future__ import annotations

import difflib
import hashlib
import os
import tomllib
from dataclasses import dataclass
from pathlib import Path

from envfarm.errors import ConfigError

BUILDER_VERSION = "1"  # bump when the build steps change in a way the recipe files do not show
REPO = "envfarm"
DEFAULT_MIRROR = "http://deb.debian.org/debian"
_IGNORED = ("__pycache__", ".DS_Store")
IMAGES_DIR = Path(__file__).resolve().parents[1] / "images"
"""``images/`` beside this package's folder in both layouts: the source tree (``sandbox/``, ``images/``; what
an editable install imports) and an installed wheel (``envfarm/sandbox/``, ``envfarm/images/``: pyproject maps
``envfarm.images`` to ``images/`` and ships its files as package data)."""


@dataclass(frozen=True)
class BaseRecipe:
    """``images/base/recipe.toml``: what debootstrap installs."""

    folder: Path
    hash: str
    suite: str
    variant: str
    mirror: str
    python: str
    """The suite's python3 version ("3.11"); layered images download wheels for it."""
    glibc: str
    """The suite's glibc version ("2.36"); bounds the manylinux wheels layered images may use."""
    packages: tuple[str, ...]


def images_dir() -> Path:
    """The recipes folder: ``$ENVFARM_IMAGES_DIR``, else :data:`IMAGES_DIR`."""
    env = os.environ.get("ENVFARM_IMAGES_DIR")
    folder = Path(env) if env else IMAGES_DIR
    if not (folder / "base" / "recipe.toml").is_file():
        raise ConfigError(
            f"no image recipes at {folder} (base/recipe.toml is missing); set $ENVFARM_IMAGES_DIR to a "
            "folder holding base/recipe.toml, or reinstall envfarm (`pip install -e .` or its wheel)"
        )
    return folder


def content_hash(folder: Path, extra: str = "") -> str:
    """12 hex chars of sha256 over the files in ``folder`` (sorted relative paths and bytes),
    ``extra`` (a parent image's hash) and :data:`BUILDER_VERSION`."""
    digest = hashlib.sha256(f"envfarm-builder {BUILDER_VERSION}\0{extra}\0".encode())
    files = [p for p in folder.rglob("*") if p.is_file() and not _ignored(p.relative_to(folder))]
    for path in sorted(files, key=lambda p: p.relative_to(folder).as_posix()):
        data = path.read_bytes()
        digest.update(f"{path.relative_to(folder).as_posix()}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:12]


def _ignored(rel: Path) -> bool:
    return any(part in _IGNORED for part in rel.parts) or rel.suffix == ".pyc" or rel.name.endswith("~")


def layered_names() -> list[str]:
    """Names of the layered image recipes (folders of ``images/`` holding a Dockerfile)."""
    root = images_dir()
    return sorted(p.name for p in root.iterdir() if p.name != "base" and (p / "Dockerfile").is_file())


def recipe_names() -> list[str]:
    """``["base", *layered_names()]``."""
    return ["base", *layered_names()]


def load_base_recipe() -> BaseRecipe:
    """Parse and check ``images/base/recipe.toml``."""
    folder = images_dir() / "base"
    path = folder / "recipe.toml"
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read {path}: {e}") from e
    known = {"suite", "variant", "mirror", "python", "glibc", "packages"}
    if unknown := sorted(set(data) - known):
        raise ConfigError(f"{path}: unknown keys {unknown}; known: {sorted(known)}")
    packages = data.get("packages", [])
    if "suite" not in data or not isinstance(packages, list) or not all(isinstance(p, str) for p in packages):
        raise ConfigError(f'{path}: needs suite = "..." and packages = ["...", ...]')
    return BaseRecipe(
        folder=folder,
        hash=content_hash(folder),
        suite=str(data["suite"]),
        variant=str(data.get("variant", "minbase")),
        mirror=os.environ.get("ENVFARM_DEBIAN_MIRROR") or str(data.get("mirror", DEFAULT_MIRROR)),
        python=str(data.get("python", "3.11")),
        glibc=str(data.get("glibc", "2.17")),
        packages=tuple(packages),
    )


def current_hashes() -> dict[str, str]:
    """The hash every recipe would build now: ``{"base": ..., "pytest": ..., ...}``."""
    base = content_hash(images_dir() / "base")
    hashes = {"base": base}
    for name in layered_names():
        hashes[name] = content_hash(images_dir() / name, extra=base)
    return hashes


def tag_for(name: str, recipe_hash: str) -> str:
    return f"{REPO}/{name}:{recipe_hash}"


def unknown_recipe(name: str) -> ConfigError:
    """The error for a recipe name that does not exist, with a did-you-mean."""
    known = recipe_names()
    hint = difflib.get_close_matches(name, known, n=1)
    did = f"did you mean {hint[0]!r}? " if hint else ""
    return ConfigError(f"no image recipe {name!r} in {images_dir()}; {did}known: {', '.join(known)}")
