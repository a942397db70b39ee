"""The envfarm side of the vLLM engine: an aiohttp front on loopback speaking ``envfarm policy serve``'s
protocol.

    front = VLLMFront("http://127.0.0.1:41234", weights_dir=Path("out/engine/weights"), version=0)
    url = await front.start("127.0.0.1", 8000)
    await front.reload(learner.module.state_dict(), version=1)    # or POST {url}/weights (policy serve)

The farm, the evaluations and the learner talk to this front exactly as to the built-in policy server:

- ``/v1/chat/completions`` (and every other ``/v1/...`` route) is forwarded to vLLM; the reply carries
  ``X-Weight-Version``. A chat request gets ``return_token_ids`` (prompt and completion token ids, which
  the farm keeps for the learner) and loses its ``seed``: a per-request seed can kill vLLM's CPU engine
  under load ("CPU Generator does not use offset"); sampling stays random, just not reproducible per call.
- ``POST /weights`` (safetensors of the policy module's state dict, version in ``X-Weight-Version``) and
  :meth:`VLLMFront.reload`: the weights are written as a checkpoint folder (while sampling goes on), new
  requests are held, the requests in flight finish on the old weights, vLLM reloads the folder in place
  (``/collective_rpc reload_weights``) and resets its prefix cache (``reload_weights`` keeps cached
  prefixes, which would give stale tokens), then the held requests go on with the new version. So every
  reply is produced by one version, the one its header names. The answer splits the time:
  ``{"version", "bytes", "seconds", "write_s", "drain_s", "reload_s"}``.
- ``GET /health``: the version, vLLM's own health and counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import shutil
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import torch
from aiohttp import web

from envfarm.errors import ConfigError, EngineError, WeightsError

from .base import VERSION_HEADER, WeightVersion
from .openai_api import error_body
from .weights import decode_state

log = logging.getLogger(__name__)
MAX_BODY = 16 << 30
WRAPPER_PREFIX = "model."
"""``HFCausalLM`` (hf.py) holds the transformers model as ``.model``: its state dict names are the
checkpoint's with this prefix."""
CHAT_PATHS = ("/v1/chat/completions", "/v1/completions")


@dataclass(frozen=True)
class ReloadResult:
    """One in-place weight reload, timed: written to disk, waiting for requests in flight, vLLM's reload +
    prefix-cache reset."""

    version: WeightVersion
    bytes: int
    write_s: float
    drain_s: float
    reload_s: float

    @property
    def seconds(self) -> float:
        return self.write_s + self.drain_s + self.reload_s


@dataclass
class FrontStats:
    """Counters since start (mutable; ``/health`` shows them)."""

    requests: int = 0
    seeds_dropped: int = 0
    reloads: int = 0
    reload_s: list[float] = field(default_factory=list)
    """vLLM's reload + prefix-cache reset, per reload (the last 100)."""


def checkpoint_state(state: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """The tensors of a checkpoint folder from a policy module's state dict: ``HFCausalLM``'s ``model.``
    prefix dropped (when every name has it), contiguous on CPU, every name written. A tensor shared by two
    names (tied embeddings: ``lm_head.weight`` is ``model.embed_tokens.weight``) is written under both, the
    second a copy: vLLM 0.32's in-place reload of a tied model left its output projection on the old weights
    when the file held the embedding alone (logprobs off by ~2e-3 after one optimizer step)."""
    names = list(state)
    strip = bool(names) and all(n.startswith(WRAPPER_PREFIX) for n in names)
    out: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int, tuple[int, ...]]] = set()
    for name, t in state.items():
        key = (int(t.untyped_storage().data_ptr()), int(t.storage_offset()), tuple(t.shape))
        tensor = t.detach().to("cpu").contiguous()
        out[name.removeprefix(WRAPPER_PREFIX) if strip else name] = tensor.clone() if key in seen else tensor
        seen.add(key)
    return out


def write_weights(state: Mapping[str, torch.Tensor], folder: Path) -> tuple[Path, int]:
    """``folder/model.safetensors`` of :func:`checkpoint_state`; (folder, bytes)."""
    from safetensors.torch import save_file

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "model.safetensors"
    save_file(checkpoint_state(state), str(path), metadata={"format": "pt"})
    return folder, path.stat().st_size


class VLLMFront:
    """See the module docstring. ``alive`` raises when the engine process has died (names its log)."""

    def __init__(self, upstream: str, weights_dir: Path, version: WeightVersion = 0,
                 alive: Callable[[], None] | None = None) -> None:
        self.upstream = upstream.rstrip("/")
        self.weights_dir = Path(weights_dir)
        self.version: WeightVersion = version
        self.stats = FrontStats()
        self.url = ""
        self._alive = alive or (lambda: None)
        self._open = asyncio.Event()
        self._open.set()
        self._idle = asyncio.Event()
        self._idle.set()
        self._active = 0
        self._swap = asyncio.Lock()
        self._session: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self._folders: list[Path] = []

    # ------------------------------------------------------------------------------------ lifecycle

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY, middlewares=[self._errors])
        app.router.add_get("/health", self._health)
        app.router.add_post("/weights", self._weights)
        app.router.add_post("/v1/weights", self._weights)
        app.router.add_get("/models", self._models)
        app.router.add_get("/v1/models", self._models)
        app.router.add_post("/chat/completions", self._forward)
        app.router.add_route("*", "/v1/{tail:.*}", self._forward)
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        self._session = aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0),
                                              timeout=aiohttp.ClientTimeout(total=None, sock_connect=10))
        self._runner = web.AppRunner(self.app(), access_log=None, handle_signals=False)
        await self._runner.setup()
        try:
            await web.TCPSite(self._runner, host, port).start()
        except OSError as e:
            await self.stop()
            raise ConfigError(f"cannot listen on {host}:{port} ({e}); pick another --port") from e
        assert self._runner is not None
        bound = self._runner.addresses[0][1] if port == 0 else port
        self.url = f"http://{host}:{bound}"
        return self.url

    async def stop(self) -> None:
        runner, self._runner = self._runner, None
        session, self._session = self._session, None
        if runner is not None:
            await asyncio.shield(runner.cleanup())
        if session is not None:
            await asyncio.shield(session.close())

    # ------------------------------------------------------------------------------- version gate

    @contextlib.asynccontextmanager
    async def _serving(self) -> AsyncIterator[WeightVersion]:
        """Hold a request while a reload is under way; yield the version that will produce its reply."""
        while not self._open.is_set():
            await self._open.wait()
        self._active += 1  # no await between the gate check and this: a reload sees it
        self._idle.clear()
        try:
            yield self.version
        finally:
            self._active -= 1
            if self._active == 0:
                self._idle.set()

    async def reload(self, state: Mapping[str, torch.Tensor], version: WeightVersion) -> ReloadResult:
        """Load ``state`` (a policy module's state dict) as ``version``, in place."""
        async with self._swap:
            t0 = time.perf_counter()
            folder, size = await asyncio.to_thread(write_weights, state, self.weights_dir / f"v{version}")
            t1 = time.perf_counter()
            self._open.clear()
            try:
                await self._idle.wait()
                t2 = time.perf_counter()
                await self._rpc("/collective_rpc", {"method": "reload_weights",
                                                    "kwargs": {"weights_path": str(folder)}})
                await self._reset_prefix_cache()
                self.version = version
            finally:
                self._open.set()
            t3 = time.perf_counter()
            self.stats.reloads += 1
            self.stats.reload_s = [*self.stats.reload_s[-99:], round(t3 - t2, 4)]
            await asyncio.to_thread(self._forget_old, folder)
        log.info("vLLM weights v%s: write %.3fs, drain %.3fs, reload %.3fs", version, t1 - t0, t2 - t1,
                 t3 - t2)
        return ReloadResult(version, size, t1 - t0, t2 - t1, t3 - t2)

    def _forget_old(self, current: Path) -> None:
        """Delete the weight folder this front wrote before ``current`` (vLLM has read it)."""
        for old in self._folders:
            if old != current:
                shutil.rmtree(old, ignore_errors=True)
        self._folders = [current]

    async def _reset_prefix_cache(self) -> None:
        for _ in range(50):  # fails while blocks are held (a request a client dropped, being aborted)
            body = await self._rpc("/reset_prefix_cache", None)
            if not isinstance(body, dict) or body.get("success", True):
                return
            await asyncio.sleep(0.02)
        raise EngineError(f"vLLM at {self.upstream} did not reset its prefix cache after a weight reload")

    async def _rpc(self, path: str, payload: Any) -> Any:
        assert self._session is not None
        try:
            async with self._session.post(self.upstream + path, json=payload,
                                          timeout=aiohttp.ClientTimeout(total=600)) as resp:
                text = await resp.text()
                if resp.status != 200:
                    raise EngineError(f"vLLM {path} answered HTTP {resp.status}: {text[-500:]}")
        except (aiohttp.ClientError, TimeoutError) as e:
            self._alive()
            raise EngineError(f"vLLM at {self.upstream} failed on {path}: {type(e).__name__}: {e}") from e
        return json.loads(text) if text.strip() else None

    # ------------------------------------------------------------------------------------- handlers

    def _headers(self, version: WeightVersion) -> dict[str, str]:
        return {VERSION_HEADER: str(version)}

    @web.middleware
    async def _errors(self, request: web.Request,
                      handler: Callable[[web.Request], Awaitable[web.StreamResponse]]) -> web.StreamResponse:
        try:
            return await handler(request)
        except WeightsError as e:
            return web.json_response(error_body(str(e)), status=400, headers=self._headers(self.version))
        except web.HTTPException:
            raise
        except (aiohttp.ClientError, EngineError) as e:  # the engine is down or failed: clients retry 5xx
            error: Exception = e
            try:
                self._alive()
            except EngineError as dead:  # the process is gone: say so, and where its log is
                error = dead
            log.warning("vLLM front: %s %s failed: %s", request.method, request.path, error)
            return web.json_response(error_body(f"engine unavailable: {error}", kind="server_error"),
                                     status=503, headers=self._headers(self.version))

    async def _health(self, _request: web.Request) -> web.Response:
        assert self._session is not None
        upstream = "down"
        with contextlib.suppress(aiohttp.ClientError, TimeoutError):
            async with self._session.get(self.upstream + "/health",
                                         timeout=aiohttp.ClientTimeout(total=5)) as r:
                upstream = "ok" if r.status == 200 else f"HTTP {r.status}"
        return web.json_response({"status": "ok" if upstream == "ok" else "degraded", "engine": "vllm",
                                  "engine_health": upstream, "weight_version": self.version,
                                  "active": self._active, "stats": vars(self.stats)},
                                 headers=self._headers(self.version), status=200 if upstream == "ok" else 503)

    async def _models(self, request: web.Request) -> web.Response:
        assert self._session is not None
        version = self.version
        async with self._session.get(self.upstream + "/v1/models") as up:
            body = await up.json()
        if isinstance(body, dict):
            body["weight_version"] = version
            for card in body.get("data") or []:
                card["weight_version"] = version
        return web.json_response(body, status=up.status, headers=self._headers(version))

    async def _weights(self, request: web.Request) -> web.Response:
        blob = await request.read()
        header = request.headers.get(VERSION_HEADER, "").strip()
        if not header and not isinstance(self.version, int):
            raise WeightsError(f"send the weight version in the {VERSION_HEADER} header")
        version: WeightVersion = (int(header) if header.lstrip("-").isdigit() else header) if header else \
            int(self.version or 0) + 1
        state = await asyncio.to_thread(decode_state, blob)
        result = await self.reload(state, version)
        return web.json_response({"version": version, "bytes": len(blob), "seconds": result.seconds,
                                  "write_s": result.write_s, "drain_s": result.drain_s,
                                  "reload_s": result.reload_s}, headers=self._headers(version))

    async def _forward(self, request: web.Request) -> web.StreamResponse:
        assert self._session is not None
        path = "/v1/chat/completions" if request.path == "/chat/completions" else request.path
        body = await request.read()
        if request.method == "POST" and path in CHAT_PATHS and body:
            body = self._rewrite(body)
        self.stats.requests += 1
        async with self._serving() as version:
            async with self._session.request(request.method, self.upstream + path, data=body or None,
                                             params=request.query,
                                             headers={"Content-Type": "application/json"}) as up:
                return await self._relay(request, up, version)

    def _rewrite(self, body: bytes) -> bytes:
        try:
            data = json.loads(body)
        except json.JSONDecodeError:
            return body  # vLLM answers the 400
        if not isinstance(data, dict):
            return body
        if data.pop("seed", None) is not None:
            self.stats.seeds_dropped += 1
        data.setdefault("return_token_ids", True)
        return json.dumps(data).encode()

    async def _relay(self, request: web.Request, up: aiohttp.ClientResponse,
                     version: WeightVersion) -> web.StreamResponse:
        kind = up.headers.get("Content-Type", "application/json")
        headers = {**self._headers(version), "Content-Type": kind}
        if not headers["Content-Type"].startswith("text/event-stream"):
            return web.Response(body=await up.read(), status=up.status, headers=headers)
        resp = web.StreamResponse(status=up.status, headers=headers)
        await resp.prepare(request)
        async for chunk in up.content.iter_any():
            await resp.write(chunk)
        await resp.write_eof()
        return resp


__all__ = ["FrontStats", "ReloadResult", "VLLMFront", "checkpoint_state", "write_weights"]
