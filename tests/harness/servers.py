"""Real servers on 127.0.0.1 for the harness's network-facing tests: ``git daemon`` and Debian's
``docker-registry`` (distribution). Each runs as a child of the test process, on a free loopback port, and
is stopped by its pid in ``finally``."""

from __future__ import annotations

import contextlib
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

REGISTRY_BIN = "docker-registry"
REGISTRY_CONFIG = """\
version: 0.1
log:
  level: warn
storage:
  filesystem:
    rootdirectory: {root}
  delete:
    enabled: true
http:
  addr: 127.0.0.1:{port}
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, proc: subprocess.Popen[bytes], what: str, timeout_s: float = 20) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited {proc.returncode}")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on 127.0.0.1:{port} within {timeout_s}s")


def _stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(timeout=10)


@contextlib.contextmanager
def git_daemon(root: Path) -> Iterator[str]:
    """``git daemon`` exporting every repository under ``root``; yields the URL prefix ``git://…/``."""
    port = free_port()
    proc = subprocess.Popen(
        ["git", "daemon", "--reuseaddr", "--export-all", "--informative-errors", f"--base-path={root}",
         "--listen=127.0.0.1", f"--port={port}", str(root)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        _wait_port(port, proc, "git daemon")
        yield f"git://127.0.0.1:{port}/"
    finally:
        _stop(proc)


@contextlib.contextmanager
def registry(root: Path) -> Iterator[str]:
    """Debian's ``docker-registry`` storing under ``root``; yields ``127.0.0.1:PORT``."""
    binary = shutil.which(REGISTRY_BIN)
    if binary is None:
        pytest.fail(f"{REGISTRY_BIN} is missing; `make setup` installs Debian's docker-registry package")
    port = free_port()
    config = root / "config.yml"
    root.mkdir(parents=True, exist_ok=True)
    config.write_text(REGISTRY_CONFIG.format(root=root / "data", port=port))
    quiet = {"stdout": subprocess.DEVNULL, "stderr": subprocess.DEVNULL}
    proc = subprocess.Popen([binary, "serve", str(config)], **quiet)  # type: ignore[call-overload]
    try:
        _wait_port(port, proc, "docker-registry")
        assert requests.get(f"http://127.0.0.1:{port}/v2/", timeout=5).status_code == 200
        yield f"127.0.0.1:{port}"
    finally:
        _stop(proc)
