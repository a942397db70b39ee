"""Helpers of the OpenEnv tests: envfarm's OpenEnv server in a thread of this process (fast: OpenEnv is
imported once) or as the real CLI in a subprocess, and oracle episodes played with OpenEnv's own client."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from openenv.core.generic_client import GenericEnvClient

from envfarm.openenv.server import OpenEnvServeConfig, serve


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def get_json(url: str, timeout: float = 10.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:  # loopback only
        return json.loads(resp.read())


def wait_until(check: Any, timeout: float = 30.0, what: str = "condition") -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:g}s waiting for {what}")
        time.sleep(0.05)


class ServerThread:
    """``serve(config)`` on an event loop in a background thread; ``stop()`` cancels it and waits."""

    def __init__(self, config: OpenEnvServeConfig) -> None:
        self.config = config
        self.url = ""
        self.error: BaseException | None = None
        self._ready = threading.Event()
        self._loop: asyncio.AbstractEventLoop | None = None
        self._task: asyncio.Task[None] | None = None
        self._thread = threading.Thread(target=self._main, daemon=True, name="openenv server")

    def start(self, timeout: float = 120.0) -> ServerThread:
        self._thread.start()
        if not self._ready.wait(timeout) or self.error is not None:
            raise AssertionError(f"server did not start: {self.error!r}")
        return self

    def stop(self) -> None:
        if self._loop is not None and self._task is not None:
            self._loop.call_soon_threadsafe(self._task.cancel)
        self._thread.join(60)
        assert not self._thread.is_alive(), "the server thread did not stop"

    def health(self) -> dict[str, Any]:
        return dict(get_json(self.url + "/health"))

    def _main(self) -> None:
        asyncio.run(self._run())

    async def _run(self) -> None:
        self._loop = asyncio.get_running_loop()

        def ready(url: str) -> None:
            self.url = url
            self._ready.set()

        self._task = asyncio.current_task()
        try:
            await serve(self.config, ready)
        except asyncio.CancelledError:
            pass
        except BaseException as e:
            self.error = e
        finally:
            self._ready.set()


@dataclass
class CliServer:
    """``envfarm envs serve ...`` as a subprocess (the real CLI); ``stop()`` sends Ctrl-C."""

    proc: subprocess.Popen[str]
    url: str

    @classmethod
    def start(cls, args: Sequence[str], env: Mapping[str, str] | None = None,
              timeout: float = 120.0) -> CliServer:
        port = free_port()
        argv = [sys.executable, "-m", "envfarm.cli", "envs", "serve", *args, "--port", str(port)]
        proc = subprocess.Popen(argv, env=dict(env or os.environ), stdout=subprocess.PIPE,
                                stderr=subprocess.STDOUT, text=True)
        server = cls(proc, f"http://127.0.0.1:{port}")

        def up() -> bool:
            if proc.poll() is not None:
                out = proc.stdout.read() if proc.stdout else ""
                raise AssertionError(f"server exited {proc.returncode}: {out}")
            try:
                return get_json(server.url + "/health", timeout=2)["status"] == "healthy"
            except OSError:
                return False

        try:
            wait_until(up, timeout, "the CLI server's /health")
        except BaseException:
            server.stop()
            raise
        return server

    def stop(self) -> str:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(10)
        return self.proc.stdout.read() if self.proc.stdout else ""


def play_oracle(url: str, seeds: Sequence[int], options: Mapping[str, Any] | None = None,
                tools: bool = True) -> list[dict[str, Any]]:
    """One oracle episode per seed with OpenEnv's own GenericEnvClient; the last step result of each."""
    finals = []
    with GenericEnvClient(base_url=url).sync() as client:
        for seed in seeds:
            kwargs: dict[str, Any] = {"seed": seed}
            if options:
                kwargs["options"] = dict(options)
            first = client.reset(**kwargs)
            assert not first.done and first.observation["text"], first
            assert bool(first.observation["tools"]) == tools, "the observation carries the env's tool schema"
            plan = client.state()["oracle"]
            assert plan, "the server runs with --expose-oracle"
            result = first
            for action in plan:
                result = client.step({"action": action})
                if result.done:
                    break
            finals.append({"reward": result.reward, "done": result.done, **result.observation})
    return finals
