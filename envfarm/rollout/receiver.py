"""A minimal ingest endpoint for trajectories: what ``--learner URL`` talks to.

    receiver = Receiver(store=Path("received.jsonl"), weight_version=0)
    url = await receiver.start(port=8100)          # binds 127.0.0.1 unless told otherwise
    ...                                             # receiver.records(), receiver.weight_version = 3
    await receiver.aclose()

    python -m envfarm.rollout.receiver --port 8100 --store received.jsonl     # or: envfarm farm receive

HTTP interface (the learner reuses it):

- ``POST /trajectories``: NDJSON body, one trajectory per line. Each ``episode_id`` is accepted once; a
  re-sent one counts as a duplicate. With ``max_staleness`` K, a trajectory whose integer weight version is
  more than K behind the receiver's is acknowledged but dropped (``stale``). Answer:
  ``{"accepted": n, "duplicates": n, "stale": n, "weight_version": v}``. Accepted lines are appended (fsync'd)
  to ``store`` before the answer, and the store's ids are reloaded on start: a receiver killed and
  restarted on the same store still accepts each episode once.
- ``GET /version`` → ``{"weight_version": v}``; ``PUT /version`` with ``{"weight_version": v}`` sets it.
- ``GET /stats`` → counters.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

from aiohttp import web

from .openai_policy import parse_version
from .spool import repair_jsonl
from .trajectory import WeightVersion

log = logging.getLogger(__name__)

MAX_BODY = 256 << 20
OnAccept = Callable[[dict[str, Any]], "Awaitable[None] | None"]


class Receiver:
    """See the module docstring."""

    def __init__(self, store: Path | None = None, weight_version: WeightVersion = 0,
                 max_staleness: int | None = None, on_accept: OnAccept | None = None) -> None:
        self.store = Path(store) if store is not None else None
        self.weight_version = weight_version
        self.max_staleness = max_staleness
        self.on_accept = on_accept
        self.seen: set[str] = set()
        self.counts = {"accepted": 0, "duplicates": 0, "stale": 0, "requests": 0}
        self._memory: list[dict[str, Any]] = []
        self._lock = asyncio.Lock()
        self._runner: web.AppRunner | None = None

    def app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY)
        app.add_routes([web.post("/trajectories", self._ingest), web.get("/version", self._get_version),
                        web.put("/version", self._put_version), web.get("/stats", self._stats)])
        return app

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> str:
        """Load the store's ids, listen, and return the base URL."""
        if self.store is not None:
            self.seen = await asyncio.to_thread(_load_ids, self.store)
        self._runner = web.AppRunner(self.app(), access_log=None)
        await self._runner.setup()
        site = web.TCPSite(self._runner, host, port)
        await site.start()
        bound = self._runner.addresses[0]
        return f"http://{host}:{bound[1]}"

    async def aclose(self) -> None:
        runner, self._runner = self._runner, None
        if runner is not None:
            await asyncio.shield(runner.cleanup())

    def records(self) -> list[dict[str, Any]]:
        """Accepted trajectories as dicts (from the store when there is one)."""
        if self.store is None:
            return list(self._memory)
        with self.store.open("rb") as f:
            return [json.loads(line) for line in f if line.strip()]

    # ------------------------------------------------------------------------------------------ handlers

    async def _ingest(self, request: web.Request) -> web.Response:
        body = await request.read()
        try:
            items = [json.loads(line) for line in body.splitlines() if line.strip()]
        except json.JSONDecodeError as e:
            return web.json_response({"error": f"line is not JSON: {e}"}, status=400)
        if not all(isinstance(x, dict) and isinstance(x.get("episode_id"), str) for x in items):
            return web.json_response({"error": "every line needs a string episode_id"}, status=400)
        async with self._lock:
            self.counts["requests"] += 1
            fresh, dup, stale = self._sort(items)
            if fresh and self.store is not None:
                data = b"".join(json.dumps(x, separators=(",", ":")).encode() + b"\n" for x in fresh)
                await asyncio.to_thread(_append, self.store, data)
            elif fresh:
                self._memory.extend(fresh)
            for x in fresh:
                self.seen.add(x["episode_id"])
            self.counts["accepted"] += len(fresh)
        for x in fresh:
            if self.on_accept is not None:
                out = self.on_accept(x)
                if out is not None:
                    await out
        return web.json_response({"accepted": len(fresh), "duplicates": dup, "stale": stale,
                                  "weight_version": self.weight_version})

    def _sort(self, items: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], int, int]:
        fresh, batch_ids, dup, stale = [], set(), 0, 0
        for x in items:
            eid = x["episode_id"]
            if eid in self.seen or eid in batch_ids:
                dup += 1
            elif self._is_stale(x.get("weight_version")):
                stale += 1
                self.seen.add(eid)
            else:
                fresh.append(x)
                batch_ids.add(eid)
        self.counts["duplicates"] += dup
        self.counts["stale"] += stale
        return fresh, dup, stale

    def _is_stale(self, version: Any) -> bool:
        current = self.weight_version
        if self.max_staleness is None or not isinstance(version, int) or not isinstance(current, int):
            return False
        return current - version > self.max_staleness

    async def _get_version(self, request: web.Request) -> web.Response:
        return web.json_response({"weight_version": self.weight_version})

    async def _put_version(self, request: web.Request) -> web.Response:
        data = await request.json()
        self.weight_version = parse_version(data.get("weight_version"))
        return web.json_response({"weight_version": self.weight_version})

    async def _stats(self, request: web.Request) -> web.Response:
        return web.json_response({**self.counts, "weight_version": self.weight_version,
                                  "unique": len(self.seen)})


def _load_ids(store: Path) -> set[str]:
    store.parent.mkdir(parents=True, exist_ok=True)
    repair_jsonl(store)
    store.touch()
    with store.open("rb") as f:
        return {json.loads(line)["episode_id"] for line in f if line.strip()}


def _append(store: Path, data: bytes) -> None:
    with store.open("ab") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


async def serve(host: str, port: int, store: Path | None, weight_version: WeightVersion,
                max_staleness: int | None, ready: Callable[[str], None] = print) -> None:
    """Run a receiver until SIGINT/SIGTERM."""
    receiver = Receiver(store, weight_version, max_staleness)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    try:
        url = await receiver.start(host, port)
        ready(url)
        await stop.wait()
    finally:
        await receiver.aclose()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Receive trajectories over HTTP (NDJSON), deduped by "
                                                 "episode_id.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8100)
    parser.add_argument("--store", type=Path, default=None, help="JSONL file of accepted trajectories")
    parser.add_argument("--weight-version", default="0")
    parser.add_argument("--max-staleness", type=int, default=None)
    args = parser.parse_args(argv)
    version = parse_version(args.weight_version)
    asyncio.run(serve(args.host, args.port, args.store, version, args.max_staleness,
                      ready=lambda url: print(f"listening on {url}", flush=True)))


if __name__ == "__main__":
    main()
