"""Running a long host command (debootstrap, pip) with its output streamed to logging and a progress hook."""

from __future__ import annotations

import logging
import subprocess
from collections import deque
from collections.abc import Callable, Mapping, Sequence

log = logging.getLogger(__name__)

TAIL_LINES = 30


def stream(
    cmd: Sequence[str], env: Mapping[str, str], on_line: Callable[[str], None], timeout: float | None = None
) -> tuple[int, list[str]]:
    """Run ``cmd`` (stderr merged into stdout), calling ``on_line`` for each non-empty output line.

    Returns the exit code and the last output lines. The process is killed if this raises (a timeout,
    an interrupt, or ``on_line`` failing)."""
    log.info("running %s", " ".join(cmd))
    lines: deque[str] = deque(maxlen=TAIL_LINES)
    proc = subprocess.Popen(
        list(cmd), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=dict(env)
    )
    try:
        assert proc.stdout is not None
        for raw in proc.stdout:
            if line := raw.rstrip():
                lines.append(line)
                on_line(line)
        rc = proc.wait(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    return rc, list(lines)
