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
    """State folder (rootfs folders, wheelhouse): ``$ENVFARM_HOME``, else ``/var/lib/envfarm`` for root and
    ``~/.cache/envfarm`` for others. Root's default sits outside /root (mode 0700) because bwrap sandboxes
    run as an unprivileged host uid that must traverse the folders above their rootfs."""
    default = Path("/var/lib/envfarm") if os.geteuid() == 0 else Path.home() / ".cache" / "envfarm"
    path = Path(os.environ.get("ENVFARM_HOME") or default)
    path.mkdir(parents=True, exist_ok=True)
    return path


@cache
def run_id() -> str:
    """Identity of this process's run: ``$ENVFARM_RUN_ID`` or a fresh short uuid (stable per process)."""
    return os.environ.get("ENVFARM_RUN_ID") or uuid.uuid4().hex[:12]


def owner() -> dict[str, str]:
    """Labels naming the owner process, so an orphan reaper can tell live sandboxes from leftovers."""
    return {"owner_pid": str(os.getpid()), "owner_host": socket.gethostname(), "run_id": run_id()}
