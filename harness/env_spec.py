"""An environment spec as ``specs.py`` resolves it and ``upstream_specs.py`` derives it: the record both
build, one floor below them, and where a repo's built-in spec file lives."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from envfarm.sandbox.recipes import images_dir

SPECS_FOLDER = "swebench"
Directives = Literal["paths", "django", "none"]


@dataclass(frozen=True)
class EnvSpec:
    """The resolved environment of one repo/version."""

    repo: str
    version: str
    python: str
    packages: tuple[str, ...]
    install: tuple[str, ...]
    pre_test: tuple[str, ...]
    test_cmd: str | None
    directives: Directives
    log_parser: str | None
    env: tuple[tuple[str, str], ...]
    timeout_s: float | None
    protected: tuple[str, ...]
    source: Path
    """The spec file this came from."""
    suite: str = ""
    """The Debian suite whose base image the env image builds FROM ("bullseye"; "" for the default base)."""
    requires_python: str = ""
    """The Python the spec (or SWE-bench) asks for; ``python`` is the suite's ("" when the same)."""
    note: str = ""
    """Why ``python`` differs from ``requires_python`` (no suite ships it; the nearest was chosen)."""
    cpus: float | None = None
    """CPU cores of the test run, raising --cpus (tests that skip on one core: pylint's multiprocessing)."""

    def run_cpus(self, cpus: float) -> float:
        """The cores a test run of this env gets when the harness would give ``cpus``."""
        return max(cpus, self.cpus or 0.0)


def spec_path(repo: str, folder: Path | None = None) -> Path:
    """Where the built-in spec of ``repo`` lives (or would live)."""
    return (folder or images_dir() / SPECS_FOLDER) / f"{repo.replace('/', '__')}.toml"


__all__ = ["SPECS_FOLDER", "Directives", "EnvSpec", "spec_path"]
