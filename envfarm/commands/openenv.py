"""``envfarm envs serve``: any registered env as an OpenEnv server (TRL, SkyRL, torchforge... clients).

    envfarm envs serve --env envfarm/ToolCalc-v0 --backend bwrap --port 8010 --max-sessions 64
    envfarm farm run --env openenv:http://127.0.0.1:8010 --policy oracle --episodes 200 --backend bwrap

The command is registered in the ``envs`` group (``envfarm/commands/envs.py``); ``envfarm openenv serve``, its
old spelling, is a hidden alias for one release.
"""

from __future__ import annotations

import asyncio
import contextlib
from typing import Annotated

import typer
from rich.console import Console

from envfarm.sandbox.values import DEFAULT_BACKEND

from .options import alias

console = Console(stderr=True)

app = typer.Typer(name="openenv", no_args_is_help=True, help="Deprecated: `envfarm envs serve`.")


def serve_command(
    env: Annotated[str, typer.Option("--env", help="Registered env id (`envfarm envs list`).")],
    backend: Annotated[str, typer.Option(help="Sandbox backend of AgentEnvs: bwrap or docker.")] \
        = DEFAULT_BACKEND,
    env_kwargs: Annotated[str | None, typer.Option(
        "--env-kwargs", help='Env constructor arguments as JSON, e.g. \'{"difficulty": 1}\'.')] = None,
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on (0: any free port).")] = 8010,
    max_sessions: Annotated[int, typer.Option(
        min=1, help="Sessions (env instances) at once; one more is refused with CAPACITY_REACHED.")] = 64,
    warm: Annotated[int | None, typer.Option(
        min=0, help="Idle sandboxes kept started (default: min(max-sessions, 32)).")] = None,
    step_slots: Annotated[int | None, typer.Option(
        min=1, help="Env steps at once across sessions (default: no bound); near the core count for "
                    "CPU-bound tools with many sessions.")] = None,
    step_timeout: Annotated[float, typer.Option(
        min=0.001, help="Seconds one step may take; past it the episode ends with infra_error.")] = 600.0,
    expose_oracle: Annotated[bool, typer.Option(
        help="Put the env's reference actions in `state` (tests, benches; never for training).")] = False,
) -> None:
    """Serve ENV over OpenEnv's protocol (/ws reset/step/state, /schema, /health); one env per session."""
    from envfarm.commands.farm import parse_env_kwargs
    from envfarm.openenv.server import OpenEnvServeConfig, serve

    config = OpenEnvServeConfig(env_id=env, backend=backend, host=host, port=port,
                                env_kwargs=parse_env_kwargs(env_kwargs) if env_kwargs else {},
                                max_sessions=max_sessions, warm=warm, step_slots=step_slots,
                                step_timeout_s=step_timeout, expose_oracle=expose_oracle)

    def ready(url: str) -> None:
        console.print(f"serving [bold]{env}[/bold] ({backend}) over OpenEnv at [bold]{url}[/bold] "
                      f"(WebSocket {url.replace('http', 'ws', 1)}/ws), at most {max_sessions} sessions; "
                      "Ctrl-C stops", highlight=False)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve(config, ready))


app.command("serve")(alias(serve_command, "openenv serve", "envs serve"))

__all__ = ["app", "serve_command"]
