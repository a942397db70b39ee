"""Mined rows rebuild their own repositories: no ``--repo-source`` / ``--specs`` needed for them.

    instances = catalogue_tasks("catalogue/")   # a mined catalogue folder's rows (None: not a catalogue)
    repos, specs = rebuilt(instances)     # None when no row carries envfarm_source

A row written by ``envfarm tasks mine`` carries ``envfarm_source`` (package, version, sdist sha256, the
mutation). The first use rebuilds the repos and specs from PyPI (``factory.repo.rebuild``, which checks every
``base_commit``) into ``$ENVFARM_HOME/mined/<hash of the rows>/``; later uses find them there. A file lock
keeps parallel workers (``AsyncVectorEnv``, the harness's processes) from building the same folder twice.
"""

from __future__ import annotations

import fcntl
import hashlib
import logging
import shutil
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from envfarm import config
from envfarm.errors import DatasetError
from envfarm.harness import Instance, load_instances

from .repo import OWNER, SOURCE_KEY, rebuild

log = logging.getLogger(__name__)
DONE = ".done"
CATALOGUE = "catalogue.json"


def catalogue_tasks(path: str | Path) -> list[Instance] | None:
    """The rows of a catalogue folder (``envfarm tasks mine --packages-file``: every ``*.jsonl`` directly in
    it, by name; its ``.work`` state folders and ``catalogue.json`` are not rows); None for any other path
    (a file or a datasets folder: ``load_instances`` reads those)."""
    folder = Path(path)
    files = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
    mined_here = (folder / CATALOGUE).is_file() or any(f.name.startswith(f"{OWNER}__") for f in files)
    if not files or not mined_here:
        return None
    out: list[Instance] = []
    seen: set[str] = set()
    for f in files:
        for inst in load_instances(f) if f.stat().st_size else []:
            if inst.instance_id in seen:
                raise DatasetError(f"{folder}: instance_id {inst.instance_id!r} is in two of its JSONL files")
            seen.add(inst.instance_id)
            out.append(inst)
    return out


def mined(instances: Sequence[Instance]) -> list[Mapping[str, Any]]:
    """The rows among ``instances`` that ``envfarm tasks mine`` wrote."""
    return [i.to_row() for i in instances if SOURCE_KEY in i.extra]


def rebuilt(instances: Sequence[Instance], root: Path | None = None,
            sdists: Path | None = None) -> tuple[Path, Path] | None:
    """``(repos, specs)`` folders for the mined rows among ``instances``, rebuilt once and cached under
    ``root``; sdists are downloaded to (or found in) ``sdists``."""
    rows = mined(instances)
    if not rows:
        return None
    key = hashlib.sha256("\n".join(sorted(f"{r['instance_id']} {r['base_commit']}" for r in rows)).encode())
    dest = (root or config.home() / "mined") / key.hexdigest()[:16]
    dest.parent.mkdir(parents=True, exist_ok=True)
    with open(dest.parent / f"{dest.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (dest / DONE).exists():
            log.info("rebuilding the repos of %d mined rows in %s (from PyPI sdists)", len(rows), dest)
            shutil.rmtree(dest, ignore_errors=True)
            rebuild(rows, dest, sdists or config.home() / "sdists")
            (dest / DONE).touch()
    return dest / "repos", dest / "specs"


__all__ = ["catalogue_tasks", "mined", "rebuilt"]
