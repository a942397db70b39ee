"""Streaming host commands (debootstrap, pip) to logging and progress."""

from __future__ import annotations

import os
import subprocess

import pytest

from envfarm.errors import ImageBuildError
from envfarm.sandbox import hostproc
from envfarm.sandbox.imagebuild import _pip


def test_stream_passes_lines_and_keeps_the_tail() -> None:
    seen: list[str] = []
    script = "for i in $(seq 1 40); do echo line$i; echo; done; echo err >&2; exit 3"
    rc, lines = hostproc.stream(["bash", "-c", script], os.environ, seen.append)
    assert rc == 3
    assert seen[:2] == ["line1", "line2"] and seen[-1] == "err" and len(seen) == 41
    assert lines == seen[-hostproc.TAIL_LINES :]


def test_stream_kills_the_command_on_timeout() -> None:
    with pytest.raises(subprocess.TimeoutExpired):
        quiet_sleep = ["bash", "-c", "exec sleep 30 >/dev/null 2>&1"]
        hostproc.stream(quiet_sleep, os.environ, lambda _: None, timeout=0.5)


def test_pip_failure_is_an_image_build_error_with_the_fix() -> None:
    with pytest.raises(ImageBuildError, match=r"(?s)pip install. failed.*fix: check the requirements"):
        _pip(["install", "--no-index", "--find-links", "/nonexistent", "no-such-package-xyz"], None)
