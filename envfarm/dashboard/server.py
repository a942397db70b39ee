"""The dashboard's aiohttp server: one page (static/), JSON endpoints and server-sent events.

    GET /                                  the page (index.html; app.js and style.css under /static/)
    GET /api/sources                       every run found under the --run folders (rescanned every few s)
    GET /api/view/{id}                     a run's main view (farm counters, trainer curves, harness table)
    GET /api/events/{id}                   the same view pushed as SSE ``update`` events when it changes
    GET /api/farm/{id}/episodes?env=&task=&status=&infra=&min_reward=&max_reward=&version=&offset=&limit=
    GET /api/farm/{id}/episodes/{index}    one trajectory (messages, tool calls, code-repair diff and tests)
    GET /api/harness/{id}/instances/{iid}  one harness instance: report.json, tamper findings, logs

Everything is read from the run folders the farm, trainer and harness write (readers in this package);
files are read in threads, never on the event loop. Nothing is fetched from elsewhere: the page and its
scripts are package data.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import math
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from aiohttp import web

from envfarm.errors import ConfigError

from .farm_reader import EpisodeFilter, FarmRun
from .harness_reader import HarnessRun
from .sources import Source, discover
from .trainer_reader import TrainerRun

log = logging.getLogger(__name__)

STATIC = Path(__file__).with_name("static")
SSE_INTERVAL_S = 1.0
SSE_PING_S = 15.0
RESCAN_S = 3.0
Reader = FarmRun | TrainerRun | HarnessRun


def make_reader(source: Source) -> Reader:
    if source.kind == "farm":
        return FarmRun(source.path)
    if source.kind == "trainer":
        return TrainerRun(source.path)
    return HarnessRun(source)


def main_view(reader: Reader) -> dict[str, Any]:
    """The run's main view (blocking)."""
    return reader.status() if isinstance(reader, FarmRun) else reader.view()


def dumps(data: Any) -> str:
    """JSON that browsers parse: NaN and infinities (a diverged loss) become null."""
    return json.dumps(_finite(data), default=str, ensure_ascii=False, separators=(",", ":"))


def _finite(x: Any) -> Any:
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: _finite(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [_finite(v) for v in x]
    return x


def _json(data: Any, status: int = 200) -> web.Response:
    return web.Response(text=dumps(data), status=status, content_type="application/json",
                        headers={"Cache-Control": "no-store"})


class Dashboard:
    """The sources found under ``paths`` and their readers; :meth:`app` is the aiohttp application."""

    def __init__(self, paths: Sequence[Path]) -> None:
        self.paths = [Path(p) for p in paths]
        self.sources: dict[str, Source] = {}
        self.readers: dict[str, Reader] = {}
        self.closing = asyncio.Event()
        self._scanned = 0.0

    def scan(self) -> None:
        """Find the runs (blocking). ConfigError when a --run folder holds none."""
        for src in discover(self.paths):
            if src.id not in self.sources:
                self.sources[src.id] = src
                self.readers[src.id] = make_reader(src)
        self._scanned = time.monotonic()

    async def _rescan(self) -> None:
        if time.monotonic() - self._scanned < RESCAN_S:
            return
        try:
            await asyncio.to_thread(self.scan)
        except ConfigError as e:  # a folder emptied while we run: keep what we have
            self._scanned = time.monotonic()
            log.warning("%s", e)

    def app(self) -> web.Application:
        app = web.Application()
        app.router.add_get("/", self._index)
        app.router.add_get("/favicon.ico", self._favicon)
        app.router.add_static("/static/", STATIC, show_index=False)
        app.router.add_get("/api/sources", self._sources)
        app.router.add_get("/api/view/{id}", self._view)
        app.router.add_get("/api/events/{id}", self._events)
        app.router.add_get("/api/farm/{id}/episodes", self._episodes)
        app.router.add_get("/api/farm/{id}/episodes/{index}", self._episode)
        app.router.add_get("/api/harness/{id}/instances/{iid}", self._instance)
        app.on_shutdown.append(self._on_shutdown)
        return app

    async def _on_shutdown(self, app: web.Application) -> None:
        self.closing.set()

    def _reader(self, request: web.Request, kind: type | None = None) -> Reader:
        reader = self.readers.get(request.match_info["id"])
        if reader is None or (kind is not None and not isinstance(reader, kind)):
            raise web.HTTPNotFound(text=dumps({"error": f"no such run: {request.match_info['id']}"}),
                                   content_type="application/json")
        return reader

    # ---------------------------------------------------------------------------------------- handlers

    async def _index(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "index.html", headers={"Cache-Control": "no-store"})

    async def _favicon(self, request: web.Request) -> web.StreamResponse:
        return web.FileResponse(STATIC / "favicon.svg", headers={"Content-Type": "image/svg+xml"})

    async def _sources(self, request: web.Request) -> web.Response:
        await self._rescan()
        return _json([{"id": s.id, "kind": s.kind, "name": s.name, "path": str(s.path), "run_id": s.run_id,
                       "model": s.model} for s in self.sources.values()])

    async def _view(self, request: web.Request) -> web.Response:
        return _json(await asyncio.to_thread(main_view, self._reader(request)))

    async def _events(self, request: web.Request) -> web.StreamResponse:
        reader = self._reader(request)
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream", "Cache-Control": "no-cache",
                                           "X-Accel-Buffering": "no"})
        await resp.prepare(request)
        last, pinged = "", time.monotonic()
        try:
            while not self.closing.is_set():
                text = dumps(await asyncio.to_thread(main_view, reader))
                if text != last:
                    await resp.write(f"event: update\ndata: {text}\n\n".encode())
                    last, pinged = text, time.monotonic()
                elif time.monotonic() - pinged > SSE_PING_S:
                    await resp.write(b": ping\n\n")
                    pinged = time.monotonic()
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self.closing.wait(), SSE_INTERVAL_S)
        except (ConnectionError, RuntimeError):  # the browser went away (aiohttp raises either)
            pass
        return resp

    async def _episodes(self, request: web.Request) -> web.Response:
        reader = self._reader(request, FarmRun)
        assert isinstance(reader, FarmRun)
        q = request.query
        try:
            flt = EpisodeFilter(
                env=q.get("env") or None, task=q.get("task") or None, status=q.get("status") or None,
                infra={"yes": True, "no": False}.get(q.get("infra", "")),
                min_reward=_float(q.get("min_reward")), max_reward=_float(q.get("max_reward")),
                version=q.get("version") or None)
            offset, limit = int(q.get("offset", 0)), min(int(q.get("limit", 200)), 2000)
        except ValueError as e:
            return _json({"error": f"bad query: {e}"}, status=400)
        return _json(await asyncio.to_thread(reader.episodes, flt, offset, limit))

    async def _episode(self, request: web.Request) -> web.Response:
        reader = self._reader(request, FarmRun)
        assert isinstance(reader, FarmRun)
        try:
            index = int(request.match_info["index"])
        except ValueError:
            return _json({"error": "the episode index is a number"}, status=400)
        data = await asyncio.to_thread(reader.episode, index)
        return _json(data) if data is not None else _json({"error": f"no episode {index}"}, status=404)

    async def _instance(self, request: web.Request) -> web.Response:
        reader = self._reader(request, HarnessRun)
        assert isinstance(reader, HarnessRun)
        iid = request.match_info["iid"]
        data = await asyncio.to_thread(reader.instance, iid)
        return _json(data) if data is not None else _json({"error": f"no instance {iid}"}, status=404)


def _float(text: str | None) -> float | None:
    return float(text) if text not in (None, "") else None


class DashboardServer:
    """``async with DashboardServer(paths, port=0) as srv:`` serves the dashboard at ``srv.url``."""

    def __init__(self, paths: Sequence[Path], host: str = "127.0.0.1", port: int = 8050) -> None:
        self.dashboard = Dashboard(paths)
        self.host, self.port = host, port
        self.url = ""
        self._runner: web.AppRunner | None = None

    async def start(self) -> str:
        await asyncio.to_thread(self.dashboard.scan)  # ConfigError for a folder without runs, before binding
        runner = web.AppRunner(self.dashboard.app(), shutdown_timeout=1.0, access_log=None)
        await runner.setup()
        try:
            await web.TCPSite(runner, self.host, self.port).start()
        except OSError as e:
            await runner.cleanup()
            raise ConfigError(f"cannot listen on {self.host}:{self.port} ({e.strerror or e}); pick another "
                              "--port, or stop what holds it") from e
        self._runner = runner
        port = runner.addresses[0][1]
        self.url = f"http://{self.host if ':' not in self.host else f'[{self.host}]'}:{port}/"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            self.dashboard.closing.set()
            await runner.cleanup()

    async def __aenter__(self) -> DashboardServer:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.stop()


async def serve(paths: Sequence[Path], host: str, port: int,
                ready: Callable[[str, Sequence[Source]], None]) -> None:
    """Serve until cancelled; ``ready(url, runs found)`` once listening."""
    async with DashboardServer(paths, host, port) as srv:
        ready(srv.url, list(srv.dashboard.sources.values()))
        await asyncio.Event().wait()


__all__ = ["Dashboard", "DashboardServer", "dumps", "serve"]
