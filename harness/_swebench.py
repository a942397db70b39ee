"""swebench's own grading code, imported without ``swebench/harness/__init__.py``.

That ``__init__`` imports ``docker_utils``, ``reporting`` and ``modal_eval``, which pull in docker, datasets
and modal (about 2 s, and an ImportError without those heavy dependencies). envfarm needs four leaf modules:
``constants``, ``log_parsers``, ``grading`` and ``infra_failure`` (plus ``swebench.types`` and
``swebench.utils``, which need only ``unidiff``). So swebench is installed with ``pip install --no-deps``
(see ``scripts/setup.sh``), and :func:`load` registers a bare package object for ``swebench.harness`` whose
``__path__`` points at the installed folder: ``import swebench.harness.grading`` then finds the real module
files while the package ``__init__`` never runs. ``swebench/__init__.py`` itself is imported normally; in
5.0.2 it is lazy (a name table, no imports).

If the real ``swebench.harness`` was imported earlier in the process, it is used as it is.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.metadata
import logging
import sys
import threading
import types
from dataclasses import dataclass
from pathlib import Path

from envfarm.errors import HarnessError

log = logging.getLogger(__name__)

SUPPORTED = "5.0.2"
INSTALL = f"pip install --no-deps swebench=={SUPPORTED} unidiff"
_lock = threading.Lock()
_loaded: Swebench | None = None


@dataclass(frozen=True)
class Swebench:
    """The swebench modules envfarm grades with."""

    version: str
    grading: types.ModuleType
    """``swebench.harness.grading``: ``get_eval_report``, ``get_resolution_status``, ``get_logs_eval``."""
    constants: types.ModuleType
    """``swebench.harness.constants``: log markers, ``ResolvedStatus``, ``EvalType``, ``FAIL_ONLY_REPOS``."""
    log_parsers: types.ModuleType
    """``swebench.harness.log_parsers``: ``PARSER_REGISTRY``."""
    infra_failure: types.ModuleType
    """``swebench.harness.infra_failure``: ``classify_logs`` (advisory environment-fault signatures)."""
    types: types.ModuleType
    """``swebench.types``: ``TestSpec``."""


def load() -> Swebench:
    """Import (once) and return swebench's grading modules; raises HarnessError with the install command."""
    global _loaded
    with _lock:
        if _loaded is None:
            _loaded = _import()
        return _loaded


def _import() -> Swebench:
    try:
        swebench = _package()
    except ImportError as e:
        raise HarnessError(f"swebench is not installed ({e}); run `{INSTALL}` (or `make setup`)") from e
    version = _version()
    if version != SUPPORTED:
        log.warning("swebench %s is installed; envfarm is tested with %s (`%s`)", version, SUPPORTED, INSTALL)
    _register_bare_package(Path(swebench.__file__ or ".").resolve().parent / "harness")
    try:
        mods = {
            name: importlib.import_module(f"swebench.harness.{name}")
            for name in ("constants", "log_parsers", "grading", "infra_failure")
        }
        stypes = importlib.import_module("swebench.types")
    except ImportError as e:
        raise HarnessError(f"cannot import swebench {version}'s grading modules: {e}; run `{INSTALL}`") from e
    return Swebench(
        version, mods["grading"], mods["constants"], mods["log_parsers"], mods["infra_failure"], stypes
    )


def _package() -> types.ModuleType:
    """The installed ``swebench`` package, even when a plain module of that name comes first on sys.path
    (``python bench/exploits.py`` puts bench/ first, and bench/swebench.py is a script, not the package)."""
    swebench = importlib.import_module("swebench")
    if hasattr(swebench, "__path__"):
        return swebench
    shadow = Path(swebench.__file__ or ".").resolve().parent
    del sys.modules["swebench"]
    saved = sys.path[:]
    sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != shadow]
    try:
        return importlib.import_module("swebench")
    finally:
        sys.path[:] = saved


def _version() -> str:
    try:
        return importlib.metadata.version("swebench")
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def _register_bare_package(folder: Path) -> None:
    """Put a package object for ``swebench.harness`` in ``sys.modules`` without running its ``__init__``."""
    if "swebench.harness" in sys.modules:
        return
    if not (folder / "grading.py").is_file():
        raise HarnessError(f"{folder} has no grading.py: an unexpected swebench layout; run `{INSTALL}`")
    spec = importlib.machinery.ModuleSpec("swebench.harness", None, is_package=True)
    spec.submodule_search_locations = [str(folder)]
    module = types.ModuleType("swebench.harness")
    module.__spec__ = spec
    module.__path__ = [str(folder)]
    module.__package__ = "swebench.harness"
    sys.modules["swebench.harness"] = module
    sys.modules["swebench"].harness = module  # type: ignore[attr-defined]
