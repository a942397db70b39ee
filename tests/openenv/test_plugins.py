"""Plugin envs over the real CLI server: the example plugin (an AgentEnv, examples/envfarm-echo) and a plain
Gymnasium text env that is no AgentEnv, both pip-installed into a private folder like any third-party
package, both played by OpenEnv's own client."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from openenv_support import CliServer, play_oracle
from plugin_support import ECHO, install_plugins, plugin_package

PLAIN_GYM = '''
"""A plain Gymnasium text env (no envfarm base class): say the word back, reward 1."""
import gymnasium
from gymnasium import spaces

WORDS = ("apple", "river", "quartz", "violet")


class WordEnv(gymnasium.Env):
    def __init__(self):
        self.observation_space = spaces.Text(200)
        self.action_space = spaces.Text(200)
        self.word = ""

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.word = WORDS[int(self.np_random.integers(len(WORDS)))]
        return f"Say {self.word}", {"length": len(self.word)}

    def step(self, action):
        ok = action.strip() == self.word
        return ("yes" if ok else "no"), float(ok), True, False, {"said": action}

    def oracle(self):
        return [self.word]


def register_envs():
    from envfarm.envs import register
    register("plain/Word-v0", "plain_word:WordEnv", description="a plain Gymnasium text env")
'''


@pytest.fixture(scope="module")
def plugin_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """pip-install examples/envfarm-echo and the plain Gymnasium plugin; env for the server subprocess."""
    tmp = tmp_path_factory.mktemp("plugins")
    plain = plugin_package(tmp, "plain-word", "plain = plain_word:register_envs",
                           {"plain_word.py": PLAIN_GYM})
    return install_plugins(tmp, ECHO, plain)


@pytest.fixture
def served(request: pytest.FixtureRequest, plugin_env: dict[str, str]) -> Iterator[CliServer]:
    server = CliServer.start([*request.param, "--expose-oracle", "--max-sessions", "2"], env=plugin_env)
    try:
        yield server
    finally:
        log = server.stop()
        assert server.proc.returncode == 0, log


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.parametrize("served", [["--env", "echo/Echo-v0", "--backend", "bwrap"]], indirect=True)
def test_example_plugin_env_over_the_cli_server(served: CliServer) -> None:
    finals = play_oracle(served.url, seeds=[0, 1, 2])
    assert [f["reward"] for f in finals] == [1.0, 1.0, 1.0] and all(f["terminated"] for f in finals)


@pytest.mark.slow
@pytest.mark.parametrize("served", [["--env", "plain/Word-v0"]], indirect=True)
def test_plain_gymnasium_plugin_env_over_the_cli_server(served: CliServer) -> None:
    finals = play_oracle(served.url, seeds=[0, 1, 2, 3], tools=False)
    assert [f["reward"] for f in finals] == [1.0] * 4 and all(f["done"] for f in finals)
    assert all(f["info"]["said"] in ("apple", "river", "quartz", "violet") for f in finals)
