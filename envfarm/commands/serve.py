"""``envfarm policy serve``: the OpenAI-compatible policy server (``trainer/server.py``) for a built-in
preset, an envfarm checkpoint or a Hugging Face folder; or, with ``--engine vllm``, a managed vLLM server
behind the same protocol (``trainer/vllm_engine.py``: weight version on every reply, ``POST /weights``
reloads in place).

    envfarm policy serve --preset tiny-cpu --port 8000
    envfarm policy serve --engine vllm --checkpoint models/qwen-tiny --port 8000
    envfarm farm run --env envfarm/ToolCalc-v0 --policy openai:http://127.0.0.1:8000/v1 --episodes 10

``envfarm serve``, its old spelling, is a hidden alias for one release (registered in ``envfarm/cli.py``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

log = logging.getLogger(__name__)
console = Console(stderr=True)

app = typer.Typer(name="policy", no_args_is_help=True,
                  help="Policies: serve one over OpenAI-compatible HTTP (what `--policy openai:URL` of "
                  "`farm run` and `eval` talks to).")


def serve(
    preset: Annotated[str, typer.Option(help="Built-in model preset (random init): tiny-cpu, small, base.")]
    = "tiny-cpu",
    checkpoint: Annotated[Path | None, typer.Option(
        help="Serve this folder instead: an envfarm checkpoint (spec.json + model.safetensors) or a Hugging "
             "Face model folder (config.json; needs envfarm[hf]).")] = None,
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = "127.0.0.1",
    port: Annotated[int, typer.Option(min=0, max=65535, help="Port to listen on (0: any free port).")] = 8000,
    device: Annotated[str | None, typer.Option(help="cpu, cuda or cuda:N \\[default: cuda when available].")]
    = None,
    max_batch: Annotated[int, typer.Option(min=1, help="Most rows (requests x n) per forward batch.")] = 32,
    batch_window_ms: Annotated[float, typer.Option(min=0, help="Wait this long for requests to batch.")]
    = 5.0,
    max_tokens: Annotated[int, typer.Option(min=1, help="Default completion length (clipped to context).")]
    = 512,
    watch: Annotated[Path | None, typer.Option(
        help="Poll this folder and hot-swap in the newest policy saved under it (spec.json + "
             "model.safetensors, e.g. the learner's checkpoints).")] = None,
    prefix_cache_mb: Annotated[int, typer.Option(
        min=0, help="MiB of keys/values kept for prompts that extend earlier ones (0: off).")] = 1024,
    seed: Annotated[int, typer.Option(help="Seed of the preset's initial weights and of sampling.")] = 0,
    threads: Annotated[int | None, typer.Option(
        min=1, help="torch CPU threads of the model thread \\[default: torch's]; 1 is fastest on a busy "
                    "machine.")] = None,
    engine: Annotated[str, typer.Option(
        help="builtin (envfarm's server, in this process) or vllm (a vLLM server on loopback, started from "
             ".venv-vllm, for a Hugging Face --checkpoint; --max-batch is its --max-num-seqs).")] = "builtin",
    engine_dir: Annotated[Path | None, typer.Option(
        help="--engine vllm: folder for its log (vllm.log) and published weights \\[default: a new temporary "
             "folder].")] = None,
) -> None:
    """Serve a policy over OpenAI-compatible HTTP: /v1/models, /v1/chat/completions, POST /weights."""
    if engine != "builtin":
        serve_engine(engine, checkpoint, host, port, max_batch=max_batch, seed=seed, threads=threads,
                     engine_dir=engine_dir, watch=watch)
        return
    import torch

    from envfarm.trainer.policy import load_policy
    from envfarm.trainer.server import ServerConfig, serve_forever

    if threads:
        torch.set_num_threads(threads)
    policy = load_policy(preset=None if checkpoint else preset, path=checkpoint, device=device, seed=seed)
    config = ServerConfig(max_batch=max_batch, batch_window_ms=batch_window_ms, max_tokens=max_tokens,
                          seed=seed, watch=str(watch) if watch else None, threads=threads,
                          prefix_cache_mb=prefix_cache_mb)

    def ready(url: str) -> None:
        console.print(f"serving [bold]{policy.name}[/bold] ({policy.num_params() / 1e6:.2f}M params, "
                      f"{policy.device}, weights v{policy.version}) at [bold]{url}/v1[/bold]; Ctrl-C stops",
                      highlight=False)

    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(serve_forever(policy, config, host, port, ready))


app.command("serve")(serve)


def serve_engine(engine: str, checkpoint: Path | None, host: str, port: int, *, max_batch: int, seed: int,
                 threads: int | None, engine_dir: Path | None, watch: Path | None) -> None:
    """``--engine vllm``: start the engine on the checkpoint's Hugging Face folder, serve until Ctrl-C."""
    import signal
    import tempfile

    from envfarm.errors import ConfigError
    from envfarm.trainer.engines import ENGINES
    from envfarm.trainer.vllm_engine import VLLMEngine
    from envfarm.trainer.vllm_process import VLLMConfig

    if engine not in ENGINES:
        raise ConfigError(f"unknown --engine {engine!r}; choose one of {', '.join(ENGINES)}")
    if checkpoint is None:
        raise ConfigError(f"--engine {engine} serves a Hugging Face model: give --checkpoint HF_DIR")
    if watch is not None:
        raise ConfigError(f"--watch is for the built-in engine; with --engine {engine}, POST the weights to "
                          "/weights (envfarm train does)")
    folder, version = hf_folder(checkpoint)
    workdir = engine_dir or Path(tempfile.mkdtemp(prefix="envfarm-vllm-"))
    config = VLLMConfig(max_num_seqs=max_batch, seed=seed, threads=threads)
    server = VLLMEngine(folder, config, workdir, version=version)
    console.print(f"starting vLLM on {folder} (log: {workdir / 'vllm.log'}) ...", highlight=False)

    async def run() -> None:
        main = asyncio.current_task()
        assert main is not None
        for sig in (signal.SIGTERM, signal.SIGINT):  # stop the engine's process tree on either
            asyncio.get_running_loop().add_signal_handler(sig, main.cancel)
        url = await server.start(host, port)
        console.print(f"serving [bold]{server.process.name}[/bold] with vLLM (weights v{server.version}, "
                      f"ready in {server.process.start_s:.0f}s) at [bold]{url}/v1[/bold]; Ctrl-C stops",
                      highlight=False)
        try:
            await asyncio.Event().wait()
        finally:
            await server.stop()

    with contextlib.suppress(KeyboardInterrupt, asyncio.CancelledError):
        asyncio.run(run())


def hf_folder(checkpoint: Path) -> tuple[Path, int | str]:
    """The Hugging Face folder of ``checkpoint`` (itself, or a learner checkpoint's ``policy/``) and the
    weight version its spec.json names (0 without one)."""
    import json

    from envfarm.trainer.policy import SPEC_FILE

    folder = checkpoint / "policy" if (checkpoint / "policy" / "config.json").is_file() else checkpoint
    spec = folder / SPEC_FILE
    version = json.loads(spec.read_text()).get("weight_version", 0) if spec.is_file() else 0
    return folder, version
