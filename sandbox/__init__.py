"""Sandboxes: isolated places to run untrusted commands. Contract: ``sandbox/base.py``."""

from __future__ import annotations

from typing import Any

from envfarm.errors import ConfigError

from .base import Backend, ExecResult, Limits, Sandbox
from .values import DEFAULT_BACKEND, IMAGE_BACKEND, TIMEOUTS, Timeouts

BACKENDS = ("docker", "bwrap", "local")


def get_backend(name: str, **config: Any) -> Backend:
    """The backend called ``name`` ("docker", "bwrap" or "local"), configured with ``config``."""
    if name == "docker":
        from .docker import DockerBackend

        return DockerBackend(**config)
    if name == "bwrap":
        from .bwrap import BwrapBackend

        return BwrapBackend(**config)
    if name == "local":
        from .local import LocalBackend

        return LocalBackend(**config)
    import difflib

    hint = difflib.get_close_matches(name, BACKENDS, n=1)
    did = f"; did you mean {hint[0]!r}?" if hint else ""
    raise ConfigError(f"unknown sandbox backend {name!r}: choose one of {', '.join(BACKENDS)}{did}")


__all__ = ["BACKENDS", "DEFAULT_BACKEND", "IMAGE_BACKEND", "TIMEOUTS", "Backend", "ExecResult", "Limits",
           "Sandbox", "Timeouts", "get_backend"]
