"""``envfarm sandbox exec|gc|list`` through typer's CliRunner (exec on the real ``local`` backend)."""

from __future__ import annotations

import os
import socket
import subprocess
from dataclasses import dataclass
from typing import Any

import pytest
from typer.testing import CliRunner, Result

from envfarm.commands import sandbox as cmd
from envfarm.commands.sandbox import sandbox_app, shell_exit_code
from envfarm.errors import BackendUnavailable, ConfigError, FarmError
from envfarm.sandbox import DEFAULT_BACKEND, Backend

pytestmark = pytest.mark.timeout(60)


def invoke(*args: str) -> Result:
    return CliRunner().invoke(sandbox_app, list(args))


def test_exec_echo() -> None:
    res = invoke("exec", "--backend", "local", "--", "echo", "hi")
    assert res.exit_code == 0, res.output
    assert res.stdout == "hi\n"


def test_exec_propagates_the_exit_code() -> None:
    res = invoke("exec", "--backend", "local", "--", "bash", "-c", "exit 3")
    assert res.exit_code == 3


def test_exec_one_argument_is_a_shell_command() -> None:
    res = invoke("exec", "--backend", "local", "echo out; echo err >&2; exit 7")
    assert (res.exit_code, res.stdout, res.stderr) == (7, "out\n", "err\n")


def test_exec_killed_by_a_signal_exits_128_plus_n() -> None:
    res = invoke("exec", "--backend", "local", "--", "kill -9 $$")
    assert res.exit_code == 128 + 9


def test_exec_timeout_exits_124() -> None:
    res = invoke("exec", "--backend", "local", "--timeout", "0.5", "--", "sleep", "30")
    assert res.exit_code == 124
    assert "timed out" in res.stderr


def test_exec_bad_limit_is_a_config_error() -> None:
    res = invoke("exec", "--backend", "local", "--memory-mb", "8", "--", "true")
    assert isinstance(res.exception, ConfigError)  # the root app prints it as a clean error line


def test_exec_unknown_backend_is_one_error_line() -> None:
    from envfarm.cli import app

    res = CliRunner().invoke(app, ["sandbox", "exec", "--backend", "nope", "--", "true"])
    assert res.exit_code == 2 and "unknown sandbox backend 'nope'" in res.output, res.output


def test_exec_runs_on_the_default_backend_of_every_run(monkeypatch: pytest.MonkeyPatch) -> None:
    used: list[str] = []
    real = cmd.run_in_sandbox

    async def run(backend: str, command: Any, image: Any = None, limits: Any = None) -> Any:
        used.append(backend)
        return await real("local", command, image, limits)

    monkeypatch.setattr(cmd, "run_in_sandbox", run)
    assert invoke("exec", "true").exit_code == 0
    assert used == [DEFAULT_BACKEND]


def test_shell_exit_code() -> None:
    assert [shell_exit_code(c) for c in (0, 1, 255, -9, -15)] == [0, 1, 255, 137, 143]


# ------------------------------------------------------------------------------------------------ gc


class FakeBackend(Backend):
    name = "fake"

    def __init__(self, check_error: FarmError | None = None, removed: int = 0,
                 gc_error: FarmError | None = None) -> None:
        super().__init__()
        self.check_error, self.removed, self.gc_error = check_error, removed, gc_error
        self.calls: list[bool] = []

    async def _open(self, spec: Any) -> Any:
        raise AssertionError("the gc/list commands must never start a sandbox")

    async def check(self) -> None:
        if self.check_error:
            raise self.check_error

    async def gc(self, all_runs: bool = False) -> int:
        self.calls.append(all_runs)
        if self.gc_error:
            raise self.gc_error
        return self.removed


def test_gc_reports_removed_and_skips_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    missing = BackendUnavailable("bwrap is not installed")
    fakes = {"docker": FakeBackend(removed=2), "bwrap": FakeBackend(check_error=missing)}
    monkeypatch.setattr(cmd, "get_backend", lambda name: fakes[name])
    res = invoke("gc", "--all")
    assert res.exit_code == 0, res.output
    assert "docker: removed 2 sandboxes" in res.stdout
    assert "bwrap: skipped" in res.stdout and "bwrap is not installed" in res.stdout
    assert fakes["docker"].calls == [True] and fakes["bwrap"].calls == []


def test_gc_one_backend_and_failure_exit_code(monkeypatch: pytest.MonkeyPatch) -> None:
    fakes = {"docker": FakeBackend(gc_error=FarmError("daemon went away")), "bwrap": FakeBackend(removed=1)}
    monkeypatch.setattr(cmd, "get_backend", lambda name: fakes[name])
    ok = invoke("gc", "bwrap")
    assert ok.exit_code == 0 and "bwrap: removed 1 sandbox\n" in ok.stdout
    assert fakes["bwrap"].calls == [False] and fakes["docker"].calls == []
    bad = invoke("gc", "docker")
    assert bad.exit_code == 1 and "daemon went away" in bad.stderr


# ---------------------------------------------------------------------------------------------- list


@dataclass
class FakeApi:
    rows: list[dict[str, Any]]

    def containers(self, all: bool = False, filters: dict[str, str] | None = None) -> list[dict[str, Any]]:
        assert all and filters == {"label": "envfarm=1"}
        return self.rows


@dataclass
class FakeClient:
    api: FakeApi


def dead_pid() -> int:
    child = subprocess.Popen(["true"])
    child.wait()
    return child.pid


def container(name: str, pid: int, host: str) -> dict[str, Any]:
    labels = {"envfarm": "1", "envfarm.owner_pid": str(pid), "envfarm.owner_host": host,
              "envfarm.run_id": f"run-{name}"}
    return {"Id": f"{name}0123456789abcdef", "Names": [f"/{name}"], "Image": "envfarm/base:x",
            "State": "running", "Labels": labels}


def test_list_shows_owner_liveness(monkeypatch: pytest.MonkeyPatch) -> None:
    here = socket.gethostname()
    rows = [container("mine", os.getpid(), here), container("orphan", dead_pid(), here),
            container("remote", 1, "elsewhere")]
    monkeypatch.setattr(cmd.dockerutil, "client", lambda: FakeClient(FakeApi(rows)))
    infos = {i.name: i for i in cmd.list_containers()}
    owners = {n: i.owner for n, i in infos.items()}
    assert owners == {"mine": "alive", "orphan": "dead", "remote": "other host"}
    assert infos["mine"].run_id == "run-mine" and infos["mine"].owner_pid == str(os.getpid())
    res = CliRunner(env={"COLUMNS": "200"}).invoke(sandbox_app, ["list"])
    assert res.exit_code == 0, res.output
    for word in ("mine", "orphan", "remote", "alive", "dead", "run-orphan"):
        assert word in res.stdout


def test_list_without_a_daemon_raises_backend_unavailable(monkeypatch: pytest.MonkeyPatch) -> None:
    def no_daemon() -> None:
        raise BackendUnavailable("the Docker daemon does not answer")

    monkeypatch.setattr(cmd.dockerutil, "client", no_daemon)
    res = invoke("list")
    assert isinstance(res.exception, BackendUnavailable)
