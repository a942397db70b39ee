"""Image recipes: where they live, what they say, and the content hash that names their builds.

    images/base/recipe.toml   Debian suite, variant and packages for debootstrap (the base image)
    images/<name>/Dockerfile  a layered image built FROM the base (+ requirements.txt, any files it copies)

The recipes folder is the repository's top-level ``images/``; ``$ENVFARM_IMAGES_DIR`` overrides it.
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
    """The recipes folder: ``$ENVFARM_IMAGES_DIR``, else the source tree's top-level ``images/``."""
    env = os.environ.get("ENVFARM_IMAGES_DIR")
    candidates = [Path(env)] if env else [Path(__file__).resolve().parents[1] / "images"]
    if not env:
        import envfarm

        candidates.append(Path(envfarm.__file__).resolve().parent / "images")  # a non-editable install
    for folder in candidates:
        if (folder / "base" / "recipe.toml").is_file():
            return folder
    raise ConfigError(
        f"no image recipes at {candidates[0]} (base/recipe.toml is missing); "
        "set $ENVFARM_IMAGES_DIR or install envfarm from its source tree with `pip install -e .`"
    )


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
