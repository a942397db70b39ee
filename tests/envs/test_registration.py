"""The registry: built-ins, a real third-party plugin package installed with pip, and a broken plugin."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

import gymnasium
import pytest
from plugin_support import ECHO, install_plugins, plugin_package

import envfarm.envs
from envfarm.errors import ConfigError

BUILTINS = {"envfarm/ToolCalc-v0", "envfarm/SqlQuery-v0", "envfarm/FileOps-v0", "envfarm/OrderDesk-v0"}


def test_builtins_are_registered_with_gymnasium() -> None:
    ids = {e.id for e in envfarm.envs.registered()}
    assert BUILTINS <= ids
    for env_id in BUILTINS:
        assert env_id in gymnasium.registry
    assert all(e.source == "envfarm" for e in envfarm.envs.registered() if e.id in BUILTINS)


def test_unknown_id_suggests_the_closest() -> None:
    with pytest.raises(ConfigError, match="did you mean 'envfarm/ToolCalc-v0'"):
        envfarm.envs.env_info("envfarm/ToolCal-v0")


def test_conflicting_registration_is_refused() -> None:
    with pytest.raises(ConfigError, match="already registered"):
        envfarm.envs.register("envfarm/ToolCalc-v0", "somewhere.else:Env")


def _install(tmp: Path) -> dict[str, str]:
    """pip-install the example plugin and a broken one into a private folder; env for subprocesses."""
    source = "def register():\n    raise RuntimeError('boom')\n"
    broken = plugin_package(tmp, "broken-plugin", "broken = broken_plugin:register",
                            {"broken_plugin/__init__.py": source})
    return install_plugins(tmp, ECHO, broken)


@pytest.mark.bwrap
def test_third_party_plugin_installs_and_runs(tmp_path: Path) -> None:
    env = _install(tmp_path)
    script = textwrap.dedent("""
        import json, gymnasium, envfarm.envs
        env = gymnasium.make("echo/Echo-v0", backend="bwrap")
        obs, info = env.reset(seed=3)
        _, reward, terminated, _, _ = env.step(env.unwrapped.oracle()[0])
        env.close()
        print(json.dumps({"reward": reward, "terminated": terminated,
                          "errors": [e.name for e in envfarm.envs.plugin_errors()],
                          "sources": {e.id: e.source for e in envfarm.envs.registered()}}))
    """)
    out = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    result = json.loads(out.stdout.strip().splitlines()[-1])
    assert result["reward"] == 1.0 and result["terminated"]
    assert result["sources"]["echo/Echo-v0"] == "envfarm-echo"
    assert result["errors"] == ["broken"], "the broken plugin is reported and does not stop the others"
    assert "plugin 'broken'" in out.stderr and "boom" in out.stderr

    listing = subprocess.run([sys.executable, "-m", "envfarm.cli", "envs", "list", "--json"], env=env,
                             capture_output=True, text=True, timeout=60)
    assert "echo/Echo-v0" in {e["id"] for e in json.loads(listing.stdout)}
    check = subprocess.run([sys.executable, "-m", "envfarm.cli", "envs", "check", "echo/Echo-v0",
                            "--seeds", "30", "--leak-episodes", "10"], env=env, capture_output=True,
                           text=True, timeout=300)
    assert check.returncode == 0, check.stdout + check.stderr
    assert "oracle solved 30/30" in check.stdout.replace("\n", " ") or "30/30" in check.stdout
