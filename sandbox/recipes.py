"""Image recipes: where they live, what they say, and the content hash that names their builds.

    images/base/recipe.toml          Debian suite, variant and packages for debootstrap (the default base)
    images/base-<suite>/recipe.toml  the same for another suite (base-bullseye: Python 3.9; base-trixie: 3.13)
                                     built when asked or when a harness spec needs its Python
    images/<name>/Dockerfile         a layered image built FROM the base (+ requirements.txt, files it copies)

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
DEFAULT_BASE = "base"
"""The default base recipe folder (Debian bookworm); other suites live in ``base-<suite>`` folders."""
_IGNORED = ("__pycache__", ".DS_Store")
IMAGES_DIR = Path(__file__).resolve().parents[1] / "images"
"""``images/`` beside this package's folder in both layouts: the source tree (``sandbox/``, ``images/``; what
an editable install imports) and an installed wheel (``envfarm/sandbox/``, ``envfarm/images/``: pyproject maps
``envfarm.images`` to ``images/`` and ships its files as package data)."""


@dataclass(frozen=True)
class BaseRecipe:
    """``images/base[-<suite>]/recipe.toml``: what debootstrap installs."""

    name: str
    """The recipe folder's name and the image name: "base" (the default suite) or "base-<suite>"."""
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
    env_packages: tuple[str, ...] = ()
    """pip requirement lines every harness env image on this base installs first (bullseye: a pip new enough
    for editable installs of pyproject-only projects; its own pip 20.3 is not)."""


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
    return sorted(p.name for p in root.iterdir() if not _is_base(p.name) and (p / "Dockerfile").is_file())


def _is_base(name: str) -> bool:
    return name == DEFAULT_BASE or name.startswith(f"{DEFAULT_BASE}-")


def base_names() -> list[str]:
    """Every base recipe folder: ``["base", "base-bullseye", "base-trixie", ...]`` (the default first)."""
    root = images_dir()
    others = sorted(
        p.name
        for p in root.iterdir()
        if _is_base(p.name) and p.name != DEFAULT_BASE and (p / "recipe.toml").is_file()
    )
    return [DEFAULT_BASE, *others]


def recipe_names() -> list[str]:
    """``["base", *layered_names()]``."""
    return ["base", *layered_names()]


def load_base_recipe(name: str = DEFAULT_BASE) -> BaseRecipe:
    """Parse and check ``images/<name>/recipe.toml`` (``name``: "base" or "base-<suite>")."""
    folder = images_dir() / name
    path = folder / "recipe.toml"
    if not _is_base(name) or not path.is_file():
        known = ", ".join(base_names())
        raise ConfigError(f"no base recipe {name!r} in {images_dir()} (known: {known})")
    try:
        data = tomllib.loads(path.read_text())
    except (OSError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"cannot read {path}: {e}") from e
    keys = {"suite", "variant", "mirror", "python", "glibc", "packages", "env_packages"}
    if unknown := sorted(set(data) - keys):
        raise ConfigError(f"{path}: unknown keys {unknown}; known: {sorted(keys)}")
    packages = data.get("packages", [])
    if "suite" not in data or not isinstance(packages, list) or not all(isinstance(p, str) for p in packages):
        raise ConfigError(f'{path}: needs suite = "..." and packages = ["...", ...]')
    env_packages = data.get("env_packages", [])
    if not isinstance(env_packages, list) or not all(isinstance(p, str) for p in env_packages):
        raise ConfigError(f'{path}: env_packages must be pip requirement lines ["pip==24.3.1", ...]')
    return BaseRecipe(
        name=name,
        folder=folder,
        hash=content_hash(folder),
        suite=str(data["suite"]),
        variant=str(data.get("variant", "minbase")),
        mirror=os.environ.get("ENVFARM_DEBIAN_MIRROR") or str(data.get("mirror", DEFAULT_MIRROR)),
        python=str(data.get("python", "3.11")),
        glibc=str(data.get("glibc", "2.17")),
        packages=tuple(packages),
        env_packages=tuple(env_packages),
    )


def base_recipes() -> dict[str, BaseRecipe]:
    """Every base recipe by Debian suite (``{"bookworm": ..., "bullseye": ..., "trixie": ...}``)."""
    out: dict[str, BaseRecipe] = {}
    for name in base_names():
        recipe = load_base_recipe(name)
        if recipe.suite in out:
            raise ConfigError(f"{recipe.folder} and {out[recipe.suite].folder} both build {recipe.suite}")
        out[recipe.suite] = recipe
    return out


def base_for_suite(suite: str | None = None) -> BaseRecipe:
    """The base recipe of Debian ``suite`` (None: the default base); ConfigError names the known suites."""
    if suite is None:
        return load_base_recipe()
    recipes = base_recipes()
    if suite not in recipes:
        hint = difflib.get_close_matches(suite, list(recipes), n=1)
        did = f"did you mean {hint[0]!r}? " if hint else ""
        raise ConfigError(
            f"no base recipe for Debian {suite!r}; {did}known: {', '.join(recipes)} (add "
            f"{images_dir() / f'base-{suite}' / 'recipe.toml'} to make one)"
        )
    return recipes[suite]


def suite_hashes() -> dict[str, str]:
    """The hash every non-default base recipe would build now: ``{"base-bullseye": ..., ...}``."""
    return {name: content_hash(images_dir() / name) for name in base_names() if name != DEFAULT_BASE}


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
