"""``envfarm policy serve``: an OpenAI-compatible server for a :class:`Policy`, with batching and hot swaps.

    server = PolicyServer(load_policy("tiny-cpu"), ServerConfig(max_batch=32))
    await server.start("127.0.0.1", 8000)          # server.url == "http://127.0.0.1:8000"
    ...                                            # openai.OpenAI(base_url=server.url + "/v1", api_key="x")
    await server.stop()

Routes: ``GET /v1/models``, ``POST /v1/chat/completions`` (tools, n, logprobs, temperature/top_p/max_tokens,
seed, stream), ``POST /weights`` (or ``/v1/weights``; safetensors body, ``X-Weight-Version`` header),
``GET /health``. Every response names the weight version (``X-Weight-Version`` header, ``weight_version``
field). Bad requests get an OpenAI-style error object with status 400, never a traceback.

Prefix cache: see ``prefix.py`` (the next turn of an episode prefills only its new tokens).

Batching: requests land in a queue; one scheduler task waits ``batch_window_ms`` after the first, takes up
to ``max_batch`` rows (a request with ``n`` samples is n rows) and runs prefill + decode for all of them in
one call of :func:`generate_batch`, in a worker thread so the event loop keeps accepting requests. Requests
arriving meanwhile form the next batch. A weight swap takes the same lock as a batch: it lands between
batches, no request is dropped, and each response reports the version that produced all of its tokens.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

import torch
from aiohttp import web
from torch import nn

from envfarm.errors import ConfigError, FarmError, WeightsError

from .base import VERSION_HEADER
from .generate import Generation, GenRequest, check_request, generate_batch
from .model import Transformer
from .openai_api import RequestError, error_body, parse_chat_request
from .policy import SPEC_FILE, WEIGHTS_FILE, Policy, WeightVersion
from .prefix import PrefixCache
from .streaming import Pending, complete_response, stream_response
from .weights import decode_state, load_into

log = logging.getLogger(__name__)
T = TypeVar("T")
MAX_BODY = 16 << 30


@dataclass(frozen=True)
class ServerConfig:
    """How the server batches and samples."""

    max_batch: int = 32
    """Most rows (prompts x n) in one forward batch."""
    batch_window_ms: float = 5.0
    """How long the scheduler waits after the first queued request for others to join its batch."""
    max_tokens: int = 512
    """Completion length when a request gives no ``max_tokens`` (always clipped to the context left)."""
    seed: int = 0
    """Seed of the shared random source of requests without their own ``seed``."""
    watch: str | None = None
    """A folder to poll for new weights: the newest ``spec.json`` + ``model.safetensors`` under it (as
    :func:`~envfarm.trainer.policy.save_policy` writes them) is swapped in, with its ``weight_version``."""
    watch_interval_s: float = 2.0
    """Seconds between polls of ``watch``."""
    prefix_cache_mb: int = 1024
    """Memory for keys/values of recent conversations, reused when a prompt extends one (the next turn of
    an episode); built-in model only; 0 turns it off."""
    threads: int | None = None
    """torch CPU threads of the model thread (None: torch's default for a new thread). On a loaded shared
    machine 1 is fastest: OpenMP threads that wait for a descheduled sibling burn the time they save."""


@dataclass
class ServerStats:
    """Counters since start (mutable, read by tests and ``/health``)."""

    requests: int = 0
    batches: int = 0
    rows: int = 0
    forward_passes: int = 0
    """Prefill + decode steps, over all batches."""
    completion_tokens: int = 0
    prompt_tokens: int = 0
    cached_tokens: int = 0
    """Prompt tokens taken from the prefix cache instead of being prefilled."""
    swaps: int = 0
    max_batch_rows: int = 0
    generate_s: float = 0.0


class PolicyServer:
    """The aiohttp app around one :class:`Policy`; usable in-process (``start``/``stop``) or via the CLI."""

    def __init__(self, policy: Policy, config: ServerConfig | None = None) -> None:
        self.policy = policy
        self.config = config or ServerConfig()
        if self.config.max_batch < 1:
            raise ConfigError(f"max_batch must be >= 1, got {self.config.max_batch}")
        self.stats = ServerStats()
        self.url = ""
        self._queue: deque[Pending] = deque()
        self._wake = asyncio.Event()
        self._lock = asyncio.Lock()
        self._generator = torch.Generator(policy.device).manual_seed(self.config.seed)
        self._tasks: list[asyncio.Task[None]] = []
        self._executor = self._new_executor()
        mb = self.config.prefix_cache_mb
        self.prefix = PrefixCache(mb << 20) if mb > 0 and isinstance(policy.module, Transformer) else None
        self._runner: web.AppRunner | None = None
        self.app = self._build_app()

    @property
    def model_name(self) -> str:
        return self.policy.name

    @property
    def version(self) -> WeightVersion:
        return self.policy.version

    # ------------------------------------------------------------------------------------ lifecycle

    def _build_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY, middlewares=[self._errors])
        app.router.add_get("/v1/models", self._models)
        app.router.add_get("/models", self._models)
        app.router.add_post("/v1/chat/completions", self._chat)
        app.router.add_post("/chat/completions", self._chat)
        app.router.add_post("/weights", self._weights)
        app.router.add_post("/v1/weights", self._weights)
        app.router.add_get("/health", self._health)
        app.on_startup.append(self._on_startup)
        app.on_cleanup.append(self._on_cleanup)
        return app

    def _new_executor(self) -> ThreadPoolExecutor:
        threads = self.config.threads
        return ThreadPoolExecutor(1, thread_name_prefix="policy-model", initializer=(
            (lambda: torch.set_num_threads(threads)) if threads else None))

    async def _on_startup(self, _app: web.Application) -> None:
        self._tasks.append(asyncio.create_task(self._schedule(), name="policy-server-scheduler"))
        if self.config.watch:
            watch = self._watch(Path(self.config.watch))
            self._tasks.append(asyncio.create_task(watch, name="policy-server-watch"))

    async def _on_cleanup(self, _app: web.Application) -> None:
        tasks, self._tasks = self._tasks, []
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        executor, self._executor = self._executor, self._new_executor()  # threads start lazily
        await asyncio.to_thread(executor.shutdown, wait=True)
        while self._queue:
            pending = self._queue.popleft()
            if not pending.future.done():
                pending.future.set_exception(ConnectionError("policy server stopped"))

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Listen on ``host:port`` (0: a free port); returns and sets :attr:`url` (no ``/v1``)."""
        self._runner = web.AppRunner(self.app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        try:
            await site.start()
        except OSError as e:
            await self._runner.cleanup()
            self._runner = None
            raise ConfigError(f"cannot listen on {host}:{port} ({e}); pick another --port") from e
        bound = self._runner.addresses[0][1] if port == 0 else port
        self.url = f"http://{host}:{bound}"
        log.info("serving %s (weights %r) at %s/v1", self.model_name, self.version, self.url)
        return self.url

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await asyncio.shield(runner.cleanup())

    async def __aenter__(self) -> PolicyServer:
        if self._runner is None:
            await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()

    # ------------------------------------------------------------------------------------- handlers

    def _headers(self, version: WeightVersion | None = None) -> dict[str, str]:
        return {VERSION_HEADER: str(self.version if version is None else version)}

    @web.middleware
    async def _errors(self, request: web.Request,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        try:
            return await handler(request)
        except RequestError as e:
            return web.json_response(error_body(str(e), param=e.param, code=e.code), status=400,
                                     headers=self._headers())
        except (ConfigError, WeightsError) as e:
            return web.json_response(error_body(str(e)), status=400, headers=self._headers())
        except web.HTTPException as e:
            if e.status < 400:
                raise
            return web.json_response(error_body(f"{request.method} {request.path}: {e.reason}",
                                                kind="not_found_error" if e.status == 404 else
                                                "invalid_request_error"), status=e.status,
                                     headers=self._headers())
        except Exception as e:  # a bug or a failed batch: an OpenAI-style 500, logged here, never a traceback
            log.exception("policy server failed on %s %s", request.method, request.path)
            body = error_body(f"internal error: {type(e).__name__}: {e}", kind="server_error")
            return web.json_response(body, status=500, headers=self._headers())

    async def _models(self, _request: web.Request) -> web.Response:
        card = {"id": self.model_name, "object": "model", "created": 0, "owned_by": "envfarm",
                "max_model_len": self.policy.max_context, "weight_version": self.version}
        return web.json_response({"object": "list", "data": [card], "weight_version": self.version},
                                 headers=self._headers())

    async def _health(self, _request: web.Request) -> web.Response:
        stats = dict(vars(self.stats))
        return web.json_response({"status": "ok", "model": self.model_name, "weight_version": self.version,
                                  "queued": len(self._queue), "stats": stats}, headers=self._headers())

    async def _chat(self, request: web.Request) -> web.StreamResponse:
        try:
            body = await request.json()
        except json.JSONDecodeError as e:
            raise RequestError(f"the body is not JSON ({e})") from e
        chat = parse_chat_request(body, self.model_name)
        try:
            prompt = self.policy.encode_prompt(chat.messages, chat.tools)
        except Exception as e:  # a HF chat template's raise_exception (jinja2), odd contents: the caller's
            raise RequestError(f"the chat template cannot render these messages: {type(e).__name__}: {e}",
                               param="messages") from e
        gen = GenRequest(prompt, n=chat.n, temperature=chat.temperature, top_p=chat.top_p,
                         max_tokens=chat.max_tokens or self.config.max_tokens, top_logprobs=chat.top_logprobs,
                         generator=None if chat.seed is None else
                         torch.Generator(self.policy.device).manual_seed(chat.seed))
        try:
            check_request(self.policy, gen)
        except ConfigError as e:
            raise RequestError(str(e), param="messages", code="context_length_exceeded") from e
        self.stats.requests += 1
        if chat.stream:
            return await stream_response(self, request, Pending(gen, self._future(), chat, prompt))
        result = await self.submit(Pending(gen, self._future(), chat, prompt))
        return complete_response(self, result, chat, prompt)

    def _future(self) -> asyncio.Future[Any]:
        return asyncio.get_running_loop().create_future()

    def enqueue(self, pending: Pending) -> None:
        """Queue ``pending`` for the next batch; its future gets (generation, its index, weight version)."""
        self._queue.append(pending)
        self._wake.set()

    async def submit(self, pending: Pending) -> tuple[Generation, int, WeightVersion]:
        self.enqueue(pending)
        return await pending.future

    async def _weights(self, request: web.Request) -> web.Response:
        t0 = time.perf_counter()
        blob = await request.read()
        version = self._next_version(request.headers.get(VERSION_HEADER))
        state = await asyncio.to_thread(decode_state, blob)
        await self.swap(state, version)
        seconds = time.perf_counter() - t0
        log.info("weights v%s loaded (%d bytes, %.3fs)", version, len(blob), seconds)
        return web.json_response({"version": version, "bytes": len(blob), "seconds": seconds},
                                 headers=self._headers(version))

    async def swap(self, state: Mapping[str, torch.Tensor] | nn.Module, version: WeightVersion) -> None:
        """Load ``state`` (a state dict, or a module whose weights to copy) as ``version``, between batches;
        the in-process twin of ``POST /weights`` (no serialisation). Copies: the caller may keep training."""
        if isinstance(state, nn.Module):
            state = state.state_dict()
        async with self._lock:  # between batches: no batch sees two versions
            await self._in_model_thread(self._load, state, version)
            self.stats.swaps += 1

    def _load(self, state: Mapping[str, torch.Tensor], version: WeightVersion) -> None:
        load_into(self.policy, state, version)
        if self.prefix is not None:
            self.prefix.clear()

    def _next_version(self, header: str | None) -> WeightVersion:
        if header is None or not header.strip():
            current = self.version
            if isinstance(current, int):
                return current + 1
            raise RequestError(f"send the weight version in the {VERSION_HEADER} header")
        text = header.strip()
        return int(text) if text.lstrip("-").isdigit() else text

    async def _watch(self, folder: Path) -> None:
        """Poll ``folder`` and swap in each newer saved policy (see :attr:`ServerConfig.watch`)."""
        seen: tuple[Path, int] | None = None
        while True:
            found = await asyncio.to_thread(newest_saved_policy, folder)
            if found is not None and found != seen:
                try:
                    state, version = await asyncio.to_thread(read_saved_policy, found[0])
                    if version is None and isinstance(self.version, int):
                        version = self.version + 1
                    if version != self.version:
                        await self.swap(state, version)
                        log.info("weights v%s from %s", version, found[0])
                    seen = found
                except (FarmError, OSError, ValueError) as e:  # half-written or foreign: try the next poll
                    log.warning("cannot load weights from %s: %s", found[0], e)
            await asyncio.sleep(self.config.watch_interval_s)

    async def _in_model_thread(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn`` in the one thread that touches the model (the event loop keeps serving)."""
        loop = asyncio.get_running_loop()
        return await loop.run_in_executor(self._executor, functools.partial(fn, *args, **kwargs))

    # ------------------------------------------------------------------------------------ scheduler

    async def _schedule(self) -> None:
        while True:
            batch = await self._next_batch()
            if batch:
                await self._run(batch)

    async def _next_batch(self) -> list[Pending]:
        while not self._queue:
            self._wake.clear()
            await self._wake.wait()
        if sum(p.gen.n for p in self._queue) < self.config.max_batch and self.config.batch_window_ms > 0:
            await asyncio.sleep(self.config.batch_window_ms / 1000)
        batch: list[Pending] = []
        rows = 0
        while self._queue:
            nxt = self._queue[0]
            if nxt.future.done():  # the client went away
                self._queue.popleft()
                continue
            if batch and rows + nxt.gen.n > self.config.max_batch:
                break
            batch.append(self._queue.popleft())
            rows += nxt.gen.n
        return batch

    async def _run(self, batch: list[Pending]) -> None:
        try:
            async with self._lock:
                version = self.version
                for p in batch:
                    p.version = version
                gen = await self._in_model_thread(generate_batch, self.policy, [p.gen for p in batch],
                                                  generator=self._generator, prefix_cache=self.prefix)
        except Exception as e:
            log.exception("batch of %d requests failed", len(batch))
            for p in batch:
                if not p.future.done():
                    p.future.set_exception(RuntimeError(f"generation failed: {type(e).__name__}: {e}"))
                if p.events is not None:
                    p.events.put_nowait(None)
            return
        s = self.stats
        s.batches, s.rows = s.batches + 1, s.rows + gen.rows
        s.max_batch_rows = max(s.max_batch_rows, gen.rows)
        s.forward_passes += 1 + gen.steps
        s.completion_tokens += gen.completion_tokens
        s.prompt_tokens += gen.prompt_tokens
        s.cached_tokens += gen.cached_tokens
        s.generate_s += gen.seconds
        for i, p in enumerate(batch):
            if not p.future.done():
                p.future.set_result((gen, i, version))
            if p.events is not None:
                p.events.put_nowait(None)


def newest_saved_policy(folder: Path) -> tuple[Path, int] | None:
    """(folder, mtime) of the newest complete saved policy under ``folder`` (itself included); one whose
    weights are newer than its spec is still being written and is skipped."""
    best: tuple[Path, int] | None = None
    for spec in folder.rglob(SPEC_FILE):
        weights = spec.with_name(WEIGHTS_FILE)
        if any(".tmp" in part for part in spec.relative_to(folder).parts) or not weights.is_file():
            continue
        spec_t, weights_t = spec.stat().st_mtime_ns, weights.stat().st_mtime_ns
        if weights_t <= spec_t and (best is None or spec_t > best[1]):
            best = (spec.parent, spec_t)
    return best


def read_saved_policy(folder: Path) -> tuple[dict[str, torch.Tensor], WeightVersion]:
    spec = json.loads((folder / SPEC_FILE).read_text())
    return decode_state((folder / WEIGHTS_FILE).read_bytes()), spec.get("weight_version")


async def serve_forever(policy: Policy, config: ServerConfig, host: str, port: int,
                        ready: Callable[[str], None] | None = None) -> None:
    """Run a server until cancelled (Ctrl-C in the CLI)."""
    server = PolicyServer(policy, config)
    url = await server.start(host, port)
    if ready is not None:
        ready(url)
    try:
        await asyncio.Event().wait()
    finally:
        await server.stop()


__all__ = ["Pending", "PolicyServer", "ServerConfig", "ServerStats", "newest_saved_policy",
           "read_saved_policy", "serve_forever"]
