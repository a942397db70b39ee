"""envfarm envs as OpenEnv ``Environment`` objects: one per OpenEnv session, all sharing one :class:`EnvHost`.

    host = EnvHost(env_id="envfarm/ToolCalc-v0", backend="bwrap", env_kwargs={}, max_sessions=64)
    async with host:                                   # the shared warm sandbox pool
        session = host.session_class()(host)           # what OpenEnv's HTTPEnvServer calls per session
        obs = await session.reset_async(seed=3)        # EnvfarmObservation(text=..., tools=[...], ...)

Two kinds of session:

- :class:`AgentEnvSession` for envfarm ``AgentEnv`` s: async ``reset_async``/``step_async`` run the env's
  ``areset``/``astep`` on the server's event loop; each session leases its sandbox from the host's pool.
- :class:`GymEnvSession` for plain Gymnasium envs (a plugin's text env that is not an AgentEnv): sync
  ``reset``/``step``, which OpenEnv's server runs in the session's own worker thread.

OpenEnv's server builds sessions in a worker thread and closes them with the sync ``close()`` (in a worker
thread for a WebSocket that went away, on the event loop for its stateless HTTP routes): ``close`` hands the
env's async ``aclose`` to the host's loop either way, so the sandbox goes back to the pool. The host closes
whatever is still open when the server stops, shielded from cancellation.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Awaitable, Mapping
from contextlib import AsyncExitStack
from typing import Any

import gymnasium
from gymnasium.envs.registration import load_env_creator
from openenv.core.env_server.interfaces import Environment
from openenv.core.env_server.types import EnvironmentMetadata

from envfarm.envs import env_info
from envfarm.envs.core import AgentEnv
from envfarm.envs.registration import resolve
from envfarm.errors import ConfigError, InfraError
from envfarm.rollout.environments import make_env, start_pools
from envfarm.sandbox import get_backend
from envfarm.sandbox.pool import Pools, SandboxPool

from .types import EnvfarmAction, EnvfarmObservation, EnvfarmState, jsonable

log = logging.getLogger(__name__)

CLOSE_TIMEOUT_S = 60.0


class EnvHost:
    """What every session of one server shares: the env id and arguments, the sandbox pool, the event
    loop, the bound on steps in flight, and the set of open envs (closed at shutdown)."""

    def __init__(self, env_id: str, backend: str, env_kwargs: Mapping[str, Any], *, max_sessions: int,
                 warm: int | None = None, step_slots: int | None = None, step_timeout_s: float | None = None,
                 expose_oracle: bool = False) -> None:
        env_id, kwargs = resolve(env_id, env_kwargs)  # openenv:URL names openenv/Remote-v0 (a proxy)
        env_info(env_id)  # ConfigError with a suggestion for an unknown id
        self.env_id, self.backend_name, self.env_kwargs = env_id, backend, kwargs
        self.max_sessions, self.step_timeout_s = max_sessions, step_timeout_s
        self.expose_oracle = expose_oracle
        self.warm = min(max_sessions, 32) if warm is None else warm
        self.agent = _is_agent_env(env_id)
        self.pools: Pools | None = None
        self.pool: SandboxPool | None = None
        """The warm pool (None for per-task images and envs without sandboxes)."""
        self.loop: asyncio.AbstractEventLoop | None = None
        self._slots = asyncio.Semaphore(step_slots) if step_slots else None
        self._stack = AsyncExitStack()
        self._open: set[Any] = set()
        self._open_lock = threading.Lock()
        self._closing: set[asyncio.Task[None]] = set()
        if self.agent:  # check the arguments now (starts nothing), not in the first session
            make_env(env_id, backend, None, self.env_kwargs)

    def session_class(self) -> type[AgentEnvSession | GymEnvSession]:
        return AgentEnvSession if self.agent else GymEnvSession

    # ------------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Start the warm pool (AgentEnvs only) and check one sandbox comes up, so a missing image or a
        broken backend fails the server at start, not the first client."""
        self.loop = asyncio.get_running_loop()
        if not self.agent:
            return
        try:
            backend = get_backend(self.backend_name)
            self._stack.push_async_callback(backend.aclose)
            self.pools, self.pool = await start_pools(
                self.env_id, self.env_kwargs, backend, warm=self.warm,
                max_live=self.max_sessions + self.warm + max(8, self.max_sessions // 4))
            self._stack.push_async_callback(self.pools.aclose)
        except BaseException:
            await asyncio.shield(self._stack.aclose())
            raise

    async def aclose(self) -> None:
        """Close every env still open (their sandboxes go back), then the pool and the backend."""
        await asyncio.shield(self._shutdown())

    async def _shutdown(self) -> None:
        with self._open_lock:
            envs, self._open = list(self._open), set()
        await asyncio.gather(*(_aclose(e) for e in envs), *self._closing, return_exceptions=True)
        await self._stack.aclose()

    async def __aenter__(self) -> EnvHost:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    # ---------------------------------------------------------------------------------------------- envs

    def make(self) -> Any:
        """A new env for one session (called from OpenEnv's worker thread; starts nothing)."""
        if self.agent:
            if self.pools is None:
                raise ConfigError(f"the OpenEnv server for {self.env_id} is not started; use `async with "
                                  "EnvHost(...)` or `envfarm envs serve`")
            env: Any = make_env(self.env_id, self.backend_name, self.pools, self.env_kwargs)
        else:
            env = gymnasium.make(self.env_id, **self.env_kwargs)
        with self._open_lock:
            self._open.add(env)
        return env

    def release(self, env: Any) -> None:
        """Close ``env`` from any thread: on the loop's thread in a tracked task, else by waiting for it."""
        with self._open_lock:
            if env not in self._open:
                return  # closed already (or by the shutdown)
            self._open.discard(env)
        loop = self.loop
        if loop is None or loop.is_closed():
            return
        if _on_loop(loop):
            task = loop.create_task(_aclose(env), name=f"close {self.env_id} session")
            self._closing.add(task)
            task.add_done_callback(self._closing.discard)
            return
        try:
            asyncio.run_coroutine_threadsafe(_aclose(env), loop).result(timeout=CLOSE_TIMEOUT_S)
        except Exception as e:  # the loop stopped under us: the shutdown closes what is left
            log.warning("closing a %s session: %s: %s", self.env_id, type(e).__name__, e)

    def forget(self, env: Any) -> None:
        """``env`` was closed by its session (a Gymnasium env, in its own thread)."""
        with self._open_lock:
            self._open.discard(env)

    def step_slot(self) -> Any:
        return self._slots if self._slots is not None else _NoSlot()

    def health(self) -> dict[str, Any]:
        stats = self.pool.stats() if self.pool is not None else None
        return {"env_id": self.env_id, "backend": self.backend_name if self.agent else None,
                "open_envs": len(self._open),
                "pool": None if stats is None else {"idle": stats.idle, "leased": stats.leased,
                                                    "starting": stats.starting, "live": stats.live}}


class AgentEnvSession(Environment[EnvfarmAction, EnvfarmObservation, EnvfarmState]):
    """One OpenEnv session over one envfarm AgentEnv (async; runs on the server's event loop)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, host: EnvHost) -> None:
        super().__init__()
        self.host = host
        self.env: AgentEnv[Any] = host.make()
        self.episode_id: str | None = None

    async def reset_async(self, seed: int | None = None, episode_id: str | None = None,
                          **kwargs: Any) -> EnvfarmObservation:
        options = kwargs.pop("options", None)
        if kwargs:
            log.debug("%s: reset ignores %s", self.host.env_id, sorted(kwargs))
        self.episode_id = episode_id or uuid.uuid4().hex
        obs, info = await self.env.areset(seed=seed, options=options)
        return observation(obs, 0.0, False, False, info)

    async def step_async(self, action: EnvfarmAction, timeout_s: float | None = None,
                         **kwargs: Any) -> EnvfarmObservation:
        limit = timeout_s or self.host.step_timeout_s
        async with self.host.step_slot():
            try:
                async with asyncio.timeout(limit):
                    result = await self.env.astep(action.action)
            except TimeoutError:
                await self.env.aclose()  # ends the episode; the sandbox goes back to the pool
                return self._infra(f"the step ran longer than {limit:g} s")
            except InfraError as e:  # the env ended the episode; the wire reports it as Gymnasium's step does
                return self._infra(f"{type(e).__name__}: {e}")
        return observation(*result)

    def _infra(self, why: str) -> EnvfarmObservation:
        return observation(*self.env.infra_result(why))

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              **kwargs: Any) -> EnvfarmObservation:
        return self._blocking(self.reset_async(seed=seed, episode_id=episode_id, **kwargs))

    def step(self, action: EnvfarmAction, timeout_s: float | None = None,
             **kwargs: Any) -> EnvfarmObservation:
        return self._blocking(self.step_async(action, timeout_s=timeout_s))

    def _blocking(self, coro: Awaitable[EnvfarmObservation]) -> EnvfarmObservation:
        loop = self.host.loop
        if loop is None or _on_loop(loop):
            raise RuntimeError("call reset_async/step_async on the server's loop (OpenEnv's server does)")
        return asyncio.run_coroutine_threadsafe(coro, loop).result()  # type: ignore[arg-type]

    @property
    def state(self) -> EnvfarmState:
        env = self.env
        oracle = env.oracle() if self.host.expose_oracle and env.task is not None and not env.done else None
        return EnvfarmState(episode_id=self.episode_id, step_count=env.steps, env_id=self.host.env_id,
                            task_id=env.task_id(env.task) if env.task is not None else None, done=env.done,
                            oracle=oracle)

    def get_metadata(self) -> EnvironmentMetadata:
        return _metadata(self.host.env_id)

    def close(self) -> None:
        self.host.release(self.env)


class GymEnvSession(Environment[EnvfarmAction, EnvfarmObservation, EnvfarmState]):
    """One OpenEnv session over a plain Gymnasium env (sync; OpenEnv runs it in the session's thread)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self, host: EnvHost) -> None:
        super().__init__()
        self.host = host
        self.env: gymnasium.Env[Any, Any] = host.make()
        self.episode_id: str | None = None
        self.steps, self.done = 0, True

    def reset(self, seed: int | None = None, episode_id: str | None = None,
              **kwargs: Any) -> EnvfarmObservation:
        self.episode_id = episode_id or uuid.uuid4().hex
        obs, info = self.env.reset(seed=seed, options=kwargs.pop("options", None))
        self.steps, self.done = 0, False
        return observation(obs, 0.0, False, False, info, tools=_gym_tools(self.env, info))

    def step(self, action: EnvfarmAction, timeout_s: float | None = None,
             **kwargs: Any) -> EnvfarmObservation:
        if self.done:
            return observation("The episode is over; call reset() to start a new one.", 0.0, True, False, {})
        obs, reward, terminated, truncated, info = self.env.step(action.action)
        self.steps += 1
        self.done = bool(terminated or truncated)
        return observation(obs, reward, terminated, truncated, info, tools=_gym_tools(self.env, info))

    @property
    def state(self) -> EnvfarmState:
        oracle_fn = getattr(self.env.unwrapped, "oracle", None)
        shown = self.host.expose_oracle and callable(oracle_fn) and not self.done
        oracle = list(oracle_fn()) if shown else None  # type: ignore[misc]
        return EnvfarmState(episode_id=self.episode_id, step_count=self.steps, env_id=self.host.env_id,
                            done=self.done, oracle=oracle)

    def get_metadata(self) -> EnvironmentMetadata:
        return _metadata(self.host.env_id)

    def close(self) -> None:
        self.host.forget(self.env)
        self.env.close()


def observation(obs: Any, reward: Any, terminated: Any, truncated: Any, info: Mapping[str, Any],
                tools: list[dict[str, Any]] | None = None) -> EnvfarmObservation:
    """An env's ``(obs, reward, terminated, truncated, info)`` as an :class:`EnvfarmObservation`."""
    rest = {k: v for k, v in info.items() if k != "tools"}
    schema = info.get("tools") if tools is None else tools
    return EnvfarmObservation(text=obs if isinstance(obs, str) else str(jsonable(obs)),
                              tools=jsonable(list(schema or [])), info=jsonable(rest),
                              reward=float(reward), terminated=bool(terminated), truncated=bool(truncated),
                              done=bool(terminated or truncated))


def _gym_tools(env: gymnasium.Env[Any, Any], info: Mapping[str, Any]) -> list[dict[str, Any]]:
    if "tools" in info:
        return list(info["tools"])
    return list(getattr(env.unwrapped, "tool_schemas", None) or [])


def _is_agent_env(env_id: str) -> bool:
    entry = gymnasium.spec(env_id).entry_point
    try:
        target = load_env_creator(entry) if isinstance(entry, str) else entry
    except (ImportError, AttributeError) as e:
        raise ConfigError(f"{env_id}: its entry point {entry!r} does not load ({type(e).__name__}: {e}); "
                          "install the package that registers it") from e
    return isinstance(target, type) and issubclass(target, AgentEnv)


def _metadata(env_id: str) -> EnvironmentMetadata:
    info = env_info(env_id)
    return EnvironmentMetadata(name=env_id, description=info.description or f"{env_id} (envfarm)",
                               version="envfarm", author=info.source)


def _on_loop(loop: asyncio.AbstractEventLoop) -> bool:
    try:
        return asyncio.get_running_loop() is loop
    except RuntimeError:
        return False


async def _aclose(env: Any) -> None:
    t0 = time.monotonic()
    try:
        if isinstance(env, AgentEnv):
            await env.aclose()
        else:
            await asyncio.to_thread(env.close)
    except Exception as e:  # a broken sandbox must not stop the other closes
        log.warning("closing %s: %s: %s", type(env).__name__, type(e).__name__, e)
    log.debug("closed %s in %.3f s", type(env).__name__, time.monotonic() - t0)


class _NoSlot:
    async def __aenter__(self) -> None:
        return None

    async def __aexit__(self, *exc: object) -> None:
        return None


__all__ = ["AgentEnvSession", "EnvHost", "GymEnvSession", "observation"]
