"""A minimal envfarm environment plugin: the agent must say a secret word back with the `say` tool.

Installing this package (``pip install ./examples/envfarm-echo``) makes ``gymnasium.make("echo/Echo-v0")``
work after ``import envfarm.envs``, and ``envfarm envs check echo/Echo-v0`` runs the conformance suite on it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from envfarm.envs import AgentEnv, Outcome, register, tool

WORDS = ("apple", "river", "quartz", "violet", "ember", "glacier", "lantern", "meadow")


@dataclass(frozen=True)
class EchoTask:
    task_id: str
    word: str


class SayArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    text: str = Field(description="What to say; it is written to a file in the sandbox and read back.")


class EchoEnv(AgentEnv[EchoTask]):
    """Say the secret word. The `say` tool really runs in the sandbox (it writes and cats a file)."""

    default_max_steps = 4

    def generate(self, rng: np.random.Generator) -> EchoTask:
        word = WORDS[int(rng.integers(len(WORDS)))]
        return EchoTask(f"echo-{word}", word)

    def prompt(self, task: EchoTask) -> str:
        return f"Say the word {task.word!r} with the say tool."

    @tool("Say something. Ends the episode; reward 1 if it was the requested word.")
    async def say(self, args: SayArgs) -> Outcome:
        assert self.sandbox is not None and self.task is not None
        await self.sandbox.write_file("said.txt", args.text)
        heard = (await self.sandbox.exec(["cat", "said.txt"])).stdout
        ok = heard.strip() == self.task.word
        return Outcome(f"You said {heard!r}.", reward=float(ok), done=True)

    def oracle(self) -> list[str]:
        assert self.task is not None
        return [f'{{"name": "say", "arguments": {{"text": "{self.task.word}"}}}}']


def register_envs() -> None:
    """The entry point named in pyproject.toml: called once when envfarm.envs is imported."""
    register("echo/Echo-v0", "envfarm_echo:EchoEnv", description="Say the secret word back")
