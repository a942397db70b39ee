"""Any OpenEnv server as an envfarm env: ``--env openenv:URL`` (the registered ``openenv/Remote-v0`` with
``base_url=URL``), so the farm, its spool, ``envfarm eval`` and the trainer play environments written for
OpenEnv.

    envfarm farm run --env openenv:http://127.0.0.1:8010 --policy openai:http://127.0.0.1:8000/v1 \\
        --episodes 200 --backend bwrap --out rollouts.jsonl

Each env instance holds one WebSocket session (OpenEnv's own ``GenericEnvClient``), reused episode after
episode: ``areset`` sends ``reset`` (with the farm's seed), ``astep`` sends ``step``. Two kinds of server:

- envfarm's own (``envfarm envs serve``): observations carry ``text``, ``tools``, ``info``,
  ``terminated``/``truncated``; the action text goes through unchanged (``{"action": ...}``), the tools
  are the served env's, and with ``--expose-oracle`` the oracle policy works too (from the session's
  ``state``).
- any other OpenEnv server: one tool, ``step``, whose arguments are the server's action (its JSON schema from
  ``GET /schema``); the observation is shown as JSON.

A server that cannot be reached, refuses the session (CAPACITY_REACHED) or fails a message is an
infrastructure error (the farm retries the episode, then records ``infra_error``), never a reward of 0.
No sandbox is used: the remote server owns its own.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import logging
from collections.abc import Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass
from typing import Any, ClassVar

import gymnasium
import numpy as np

from envfarm.envs.actions import Action, read_action
from envfarm.envs.core import AgentEnv, truncate
from envfarm.envs.registration import register, register_scheme
from envfarm.errors import ConfigError, PolicyError, SandboxCrashed, SandboxStartError

log = logging.getLogger(__name__)

ENV_ID = "openenv/Remote-v0"
SCHEME = "openenv"
STEP_TOOL = "step"
WIRE_KEYS = frozenset({"text", "tools", "terminated", "truncated"})
_SCHEMAS: dict[str, dict[str, Any]] = {}


@dataclass(frozen=True)
class RemoteTask:
    task_id: str
    seed: int | None


class OpenEnvRemoteEnv(AgentEnv[RemoteTask]):
    """An episode of a remote OpenEnv server (see the module docstring)."""

    default_max_steps: ClassVar[int] = 50
    sandboxes = "none"  # the remote server runs the sandboxes: a farm of this env starts no backend

    def __init__(self, base_url: str | None = None, *, connect_timeout_s: float = 10.0,
                 message_timeout_s: float = 900.0, **kwargs: Any) -> None:
        if not base_url or not base_url.startswith(("http://", "https://", "ws://", "wss://")):
            raise ConfigError(f"{ENV_ID} needs base_url, the OpenEnv server's URL (http://HOST:PORT); got "
                              f"{base_url!r}: use --env openenv:http://127.0.0.1:8010")
        super().__init__(**kwargs)
        self.base_url = base_url.rstrip("/")
        self.connect_timeout_s, self.message_timeout_s = connect_timeout_s, message_timeout_s
        self._client: Any = None
        self._session = AsyncExitStack()
        self._envfarm_wire = False
        self._remote_tools: list[dict[str, Any]] = []
        self._oracle: list[str] | None = None

    # AgentEnv's abstract hooks: the remote server generates, prompts and grades
    def generate(self, rng: np.random.Generator) -> RemoteTask:
        return RemoteTask(self.base_url, None)

    def prompt(self, task: RemoteTask) -> str:
        return ""

    def oracle(self) -> list[str]:
        if self._oracle is None:
            raise PolicyError(f"the OpenEnv server at {self.base_url} shows no oracle; serve it with "
                              "`envfarm envs serve --expose-oracle` (envfarm envs only)")
        return list(self._oracle)

    # --------------------------------------------------------------------------------------- async core

    async def areset(self, *, seed: int | None = None,
                     options: dict[str, Any] | None = None) -> tuple[str, dict[str, Any]]:
        """Start an episode on the remote server (a new session if none is open)."""
        self.done = True
        gymnasium.Env.reset(self, seed=seed)
        kwargs = {"seed": seed} if seed is not None else {}
        try:
            client = await self._connect()
            result = await client.reset(**kwargs)
            state = await client.state() if self._envfarm_wire_of(result.observation) else {}
        except (ConnectionError, OSError, RuntimeError, TimeoutError) as e:
            await self._disconnect()
            raise SandboxStartError(self._explain("reset", e)) from e
        self._read_wire(result.observation)
        if not self._envfarm_wire and not self._remote_tools:
            self._remote_tools = [await self._step_tool()]
        self._oracle = state.get("oracle") if isinstance(state, Mapping) else None
        task_id = state.get("task_id") if isinstance(state, Mapping) else None
        self.task = RemoteTask(task_id or f"{self.base_url}#{seed}", seed)
        self.steps, self.done = 0, bool(result.done)
        text = self._text(result.observation)
        self.transcript = [text]
        return text, self._remote_info(result.observation)

    async def astep(self, action: Action) -> tuple[str, float, bool, bool, dict[str, Any]]:
        """Send one action. Bad actions give an error observation; a failing server raises SandboxCrashed."""
        if self.done or self._client is None:
            return "The episode is over; call reset() to start a new one.", 0.0, True, False, self._info()
        self.steps += 1
        payload = self._payload(action)
        if isinstance(payload, str):
            return payload, 0.0, False, self._out_of_steps(False), {**self._info(), "action_error": "parse"}
        try:
            result = await self._client.step(payload)
        except (ConnectionError, OSError, RuntimeError, TimeoutError) as e:
            await self._disconnect()
            self.done = True
            raise SandboxCrashed(self._explain("step", e)) from e
        obs = result.observation if isinstance(result.observation, Mapping) else {}
        terminated = bool(obs.get("terminated", result.done))
        truncated = bool(obs.get("truncated", False)) or self._out_of_steps(terminated)
        self.done = terminated or truncated or bool(result.done)
        text = truncate(self._text(obs), 1 << 20)
        self.transcript.append(text)
        return text, float(result.reward or 0.0), terminated, truncated, self._remote_info(obs)

    async def aclose(self) -> None:
        """Close the WebSocket session (the remote server releases its env). Idempotent."""
        self.done = True
        await asyncio.shield(self._disconnect())

    # ------------------------------------------------------------------------------------------ helpers

    async def _connect(self) -> Any:
        if self._client is None:
            module = await asyncio.to_thread(importlib.import_module, "openenv.core.generic_client")
            client = module.GenericEnvClient(base_url=self.base_url, connect_timeout_s=self.connect_timeout_s,
                                             message_timeout_s=self.message_timeout_s)
            await self._session.enter_async_context(client)
            self._client = client
        return self._client

    async def _disconnect(self) -> None:
        self._client = None
        session, self._session = self._session, AsyncExitStack()
        try:
            await session.aclose()
        except Exception as e:  # the socket may be gone already
            log.debug("closing the session with %s: %s", self.base_url, e)

    def _envfarm_wire_of(self, observation: Any) -> bool:
        return isinstance(observation, Mapping) and WIRE_KEYS <= set(observation)

    def _read_wire(self, observation: Any) -> None:
        self._envfarm_wire = self._envfarm_wire_of(observation)
        if self._envfarm_wire:
            self._remote_tools = list(observation.get("tools") or [])

    def _payload(self, action: Action) -> dict[str, Any] | str:
        """What ``step`` sends, or an error observation for an action that names no usable call."""
        parsed = read_action(action)
        if self._envfarm_wire:
            return {"action": parsed.raw if isinstance(parsed.raw, str) else dict(parsed.raw)}
        call = parsed.call
        if call is None:
            return f"Error: {parsed.error}"
        if call.name != STEP_TOOL:
            return f"Error: unknown tool {call.name!r}. Available tools: {STEP_TOOL}."
        return dict(call.arguments)

    async def _step_tool(self) -> dict[str, Any]:
        schema = _SCHEMAS.get(self.base_url)
        if schema is None:
            schema = _SCHEMAS[self.base_url] = await _action_schema(self.base_url)
        return {"type": "function", "function": {
            "name": STEP_TOOL, "parameters": schema,
            "description": "Send one action to the environment; its fields are the action."}}

    def _text(self, observation: Any) -> str:
        if self._envfarm_wire and isinstance(observation, Mapping):
            return str(observation.get("text", ""))
        shown = {k: v for k, v in observation.items() if k != "metadata" or v} \
            if isinstance(observation, Mapping) else observation
        return json.dumps(shown, ensure_ascii=False, default=str)

    def _remote_info(self, observation: Any) -> dict[str, Any]:
        info = self._info()
        remote = observation.get("info") if self._envfarm_wire and isinstance(observation, Mapping) else None
        info.update({k: v for k, v in (remote or {}).items() if k not in ("tools", "step")})
        return info

    def _info(self) -> dict[str, Any]:
        info: dict[str, Any] = {"tools": [dict(t) for t in self._remote_tools], "step": self.steps}
        if self.task is not None:
            info["task_id"] = self.task.task_id
        return info

    def _out_of_steps(self, terminated: bool) -> bool:
        return not terminated and self.steps >= self.max_episode_steps

    def _explain(self, what: str, e: BaseException) -> str:
        text = f"{type(e).__name__}: {e}"
        if "CAPACITY_REACHED" in text:
            return (f"the OpenEnv server at {self.base_url} refused a session ({text}); lower --concurrency "
                    "or raise the server's --max-sessions")
        return (f"{what} on the OpenEnv server at {self.base_url} failed ({text}); is it running? "
                f"(`curl {self.base_url}/health`)")


async def _action_schema(base_url: str) -> dict[str, Any]:
    """The server's action JSON schema (``GET /schema``), without OpenEnv's ``metadata`` field."""
    import aiohttp

    url = base_url.replace("ws://", "http://", 1).replace("wss://", "https://", 1) + "/schema"
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=30)) as http, \
                http.get(url) as resp:
            resp.raise_for_status()
            schema = dict((await resp.json())["action"])
    except (aiohttp.ClientError, KeyError, TimeoutError, ValueError) as e:
        raise SandboxCrashed(f"GET {url} failed ({type(e).__name__}: {e}); is an OpenEnv server "
                             "there?") from e
    schema.get("properties", {}).pop("metadata", None)
    schema.pop("title", None)
    return schema


def register_envs() -> None:
    """Entry point (group ``envfarm.envs``): ``openenv/Remote-v0`` and the ``openenv:URL`` id scheme."""
    register(ENV_ID, "envfarm.openenv.remote:OpenEnvRemoteEnv",
             description="Any OpenEnv server (--env openenv:URL); needs envfarm[openenv]")
    register_scheme(SCHEME, ENV_ID, "base_url")


__all__ = ["ENV_ID", "OpenEnvRemoteEnv", "register_envs"]
