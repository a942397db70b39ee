"""Where envfarm keeps its state on the host, and the run identity used to label sandboxes."""

from __future__ import annotations

import os
import socket
import uuid
from functools import cache
from pathlib import Path

LABEL = "envfarm"  # docker label key marking every envfarm container; value "1"
AGENT_UID = 1000  # the unprivileged uid commands run as inside every sandbox
AGENT_HOME = "/workspace"


def home() -> Path:
    """State folder: ``$ENVFARM_HOME`` or ``~/.cache/envfarm`` (rootfs folders, wheelhouse, cgroup names)."""
    root = os.environ.get("ENVFARM_HOME") or Path.home() / ".cache" / "envfarm"
    path = Path(root)
    path.mkdir(parents=True, exist_ok=True)
    return path


@cache
def run_id() -> str:
    """Identity of this process's run: ``$ENVFARM_RUN_ID`` or a fresh short uuid (stable per process)."""
    return os.environ.get("ENVFARM_RUN_ID") or uuid.uuid4().hex[:12]


def owner() -> dict[str, str]:
    """Labels naming the owner process, so an orphan reaper can tell live sandboxes from leftovers."""
    return {"owner_pid": str(os.getpid()), "owner_host": socket.gethostname(), "run_id": run_id()}
