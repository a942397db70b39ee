"""Where things are in a harness image, and the record of one that exists: shared by the builder
(images.py), the puller (pull.py), the runner (run.py) and the disk report (disk.py)."""

from __future__ import annotations

from dataclasses import dataclass

from envfarm.errors import ConfigError, ImageBuildError
from envfarm.sandbox.recipes import BaseRecipe, base_for_suite

from .env_spec import EnvSpec

KIND_LABEL = "envfarm.harness"
"""Label of every harness image: ``env`` or ``instance``."""
PRISTINE = "/opt/envfarm/testbed"
"""The repository in an instance image, read-only at run time."""
WORKDIR = "/workspace/testbed"
"""Its copy in the sandbox's tmpfs, where patches apply and tests run (``/testbed`` links here)."""
WHEELHOUSE = "/opt/envfarm/wheelhouse"
ENV_SH = "/opt/envfarm/env.sh"
"""Sourced before the tests when an image has it (pulled SWE-bench images: their conda env on PATH)."""


@dataclass(frozen=True)
class BuiltImage:
    """An env or instance image that exists now."""

    tag: str
    hash: str
    built: bool
    """False for a cache hit."""
    duration_s: float
    repo_bytes: int = 0
    """Instance images: bytes of the checked-out repository (sizes the sandbox's tmpfs)."""


def base_of(env: EnvSpec) -> BaseRecipe:
    """The base recipe of ``env``'s Debian suite; ImageBuildError (read as python-unavailable) without one."""
    try:
        return base_for_suite(env.suite or None)
    except ConfigError as e:
        raise ImageBuildError(
            f"{env.repo} {env.version} needs Python {env.python} (Debian {env.suite}), and there is no base "
            f"recipe for it: {e}"
        ) from e
