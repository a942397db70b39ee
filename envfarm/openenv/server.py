"""An OpenEnv-compatible server for any registered envfarm env (``envfarm envs serve``).

    config = OpenEnvServeConfig(env_id="envfarm/ToolCalc-v0", backend="bwrap", port=8010, max_sessions=64)
    await serve(config, ready=print)           # until cancelled (Ctrl-C in the CLI)

The app is OpenEnv's own: :class:`~openenv.core.env_server.http_server.HTTPEnvServer` registers
``/ws`` (the WebSocket every OpenEnv client speaks: ``reset``/``step``/``state``/``close`` messages),
``/reset``, ``/step``, ``/state``, ``/schema``, ``/metadata`` and the MCP routes, over envfarm's wire types
(``types.py``) and sessions (``adapter.py``). envfarm adds the lifespan that owns the warm sandbox pool, a
``GET /health`` that also reports sessions and the pool, and a refusal past ``--max-sessions`` that says what
to do. One WebSocket is one session is one env instance; a session that disconnects closes its env, and its
sandbox goes back to the pool.
"""

from __future__ import annotations

import asyncio
import functools
import logging
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from envfarm.errors import ConfigError, FarmError
from envfarm.sandbox.values import DEFAULT_BACKEND

log = logging.getLogger(__name__)

SHUTDOWN_S = 30.0
"""How long a cancelled ``serve()`` waits for uvicorn to stop (5 s for connections, then the pool)."""


class OpenEnvServeConfig(BaseModel):
    """What ``envfarm envs serve`` serves, and how."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    env_id: str
    """A registered env id (``envfarm envs list``): built in, from a plugin, AgentEnv or plain Gymnasium."""
    backend: str = DEFAULT_BACKEND
    """Sandbox backend of AgentEnvs: bwrap or docker (plain Gymnasium envs use none)."""
    env_kwargs: dict[str, Any] = Field(default_factory=dict)
    """Constructor arguments of every session's env (e.g. ``{"difficulty": 1, "tool_help": false}``)."""
    host: str = "127.0.0.1"
    """Address to bind (loopback by default)."""
    port: int = Field(default=8010, ge=0, le=65535)
    """Port to listen on (0: any free port; ``ready`` gets the URL)."""
    max_sessions: int = Field(default=64, ge=1)
    """WebSocket sessions (env instances) at once; one more is refused with CAPACITY_REACHED."""
    warm: int | None = Field(default=None, ge=0)
    """Started sandboxes kept idle for new episodes (default: min(max_sessions, 32))."""
    step_slots: int | None = Field(default=None, ge=1)
    """Env steps running at once across sessions (None: no bound); near the core count when tools are
    CPU-bound and sessions far outnumber the cores, so commands do not starve past their timeouts."""
    step_timeout_s: float | None = Field(default=600.0, gt=0)
    """Wall-time limit of one step; past it the episode ends truncated with info.infra_error."""
    expose_oracle: bool = False
    """Put the env's reference actions in ``state`` (tests, benches): never when training a policy that
    could read them."""
    log_level: str = "warning"
    """uvicorn's log level."""


def build_app(config: OpenEnvServeConfig) -> Any:
    """The FastAPI app (OpenEnv's routes over envfarm sessions); its lifespan starts and closes the pool."""
    from fastapi import FastAPI
    from openenv.core.env_server.exceptions import SessionCapacityError
    from openenv.core.env_server.http_server import HTTPEnvServer

    from .adapter import EnvHost
    from .types import EnvfarmAction, EnvfarmObservation, EnvfarmState

    host = EnvHost(config.env_id, config.backend, config.env_kwargs, max_sessions=config.max_sessions,
                   warm=config.warm, step_slots=config.step_slots, step_timeout_s=config.step_timeout_s,
                   expose_oracle=config.expose_oracle)

    class EnvfarmHTTPServer(HTTPEnvServer):
        async def _create_session(self) -> Any:  # the one refusal message, with its fix
            if self.active_sessions >= self.max_concurrent_envs:
                raise SessionCapacityError(
                    self.active_sessions, self.max_concurrent_envs,
                    message=f"envfarm OpenEnv server for {config.env_id} is full: {self.active_sessions} of "
                            f"--max-sessions {self.max_concurrent_envs} sessions are open; close one (or "
                            "wait for one to end) or restart the server with a larger --max-sessions")
            return await super()._create_session()

    @asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        try:
            await host.start()
        except FarmError as e:  # uvicorn only logs it; serve() raises it
            app.state.start_error = e
            raise
        try:
            log.info("serving %s (%s), at most %d sessions", config.env_id, config.backend,
                     config.max_sessions)
            yield
        finally:
            await host.aclose()

    app = FastAPI(title=f"envfarm {config.env_id} (OpenEnv)", lifespan=lifespan)
    server = EnvfarmHTTPServer(functools.partial(host.session_class(), host), EnvfarmAction,
                               EnvfarmObservation, max_concurrent_envs=config.max_sessions,
                               env_name=config.env_id.replace("/", "_"), state_cls=EnvfarmState)

    @app.get("/health", tags=["Health"])
    async def health() -> dict[str, Any]:
        return {"status": "healthy", "sessions": server.active_sessions, "max_sessions": config.max_sessions,
                **host.health()}

    server.register_routes(app)
    app.state.envfarm_host, app.state.openenv_server = host, server
    return app


async def serve(config: OpenEnvServeConfig, ready: Callable[[str], None] | None = None) -> None:
    """Serve until cancelled. ``ready(url)`` is called once the pool is up and the socket listens; a start
    that fails (no backend, no image, a port in use) raises its FarmError or ConfigError here.

    Cancelling stops uvicorn the graceful way (``should_exit``), so its lifespan closes the pool before this
    returns: a cancel that reached uvicorn's task directly skipped the lifespan's shutdown, which then ran
    under ``asyncio.run``'s final cancel of every task, where a sandbox start cancelled while asyncio
    connects its pipes never finishes (Python 3.11) and the loop never closes."""
    import uvicorn

    app = build_app(config)
    server = uvicorn.Server(uvicorn.Config(
        app, host=config.host, port=config.port, log_level=config.log_level, lifespan="on",
        timeout_graceful_shutdown=5, backlog=4096))
    task = asyncio.create_task(server.serve(), name="envfarm envs server")
    try:
        while not server.started and not task.done():
            await asyncio.wait([task], timeout=0.05)
        if server.started and ready is not None:
            ready(_url(server, config.host))
        await asyncio.wait([task])  # not ``await task``: a cancel here must not reach uvicorn's task
        task.result()
    except SystemExit as e:  # uvicorn exits when it cannot bind
        raise ConfigError(f"the OpenEnv server for {config.env_id} cannot listen on {config.host}:"
                          f"{config.port} (in use? pick another --port)") from e
    finally:
        await _stop(server, task)
    error = getattr(app.state, "start_error", None)
    if error is not None:
        raise error
    if not server.started:
        raise ConfigError(f"the OpenEnv server for {config.env_id} did not start on {config.host}:"
                          f"{config.port}; see the log above")


async def _stop(server: Any, task: asyncio.Task[None]) -> None:
    """Ask uvicorn to exit and wait for its shutdown (connections, then the lifespan that closes the pool),
    even if cancelled again meanwhile; past ``SHUTDOWN_S`` its task is cancelled."""
    if task.done():
        return
    server.should_exit = True
    await asyncio.shield(asyncio.wait([task], timeout=SHUTDOWN_S))
    if not task.done():
        log.warning("the OpenEnv server did not stop in %.0f s; cancelling it", SHUTDOWN_S)
        task.cancel()
        await asyncio.wait([task], timeout=5)


def _url(server: Any, host: str) -> str:
    for s in server.servers:
        for sock in s.sockets:
            port = sock.getsockname()[1]
            return f"http://{host}:{port}"
    raise ConfigError("the OpenEnv server has no listening socket")


__all__ = ["OpenEnvServeConfig", "build_app", "serve"]
