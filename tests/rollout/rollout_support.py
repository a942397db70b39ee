"""Helpers of the rollout tests. StubServer: a real OpenAI-compatible chat-completions server (aiohttp on
127.0.0.1 only).

It plays scripted tool calls: ``solutions`` maps a piece of the task's prompt to the actions that solve it,
and the n-th assistant turn of a conversation gets the n-th action, as an OpenAI ``tool_calls`` entry with
token ids (spelt ``token_id:N``, as vLLM does) and log-probabilities. ``fail_next`` queues error statuses
(429, 500), ``delay_s`` slows every answer, ``weight_version`` goes out in the ``X-Weight-Version`` header.
"""

from __future__ import annotations

import asyncio
import json
import socket
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import gymnasium
from aiohttp import web

import envfarm.envs  # noqa: F401 - registers the envs


def toolcalc_solutions(seeds: Sequence[int]) -> dict[str, list[dict[str, Any]]]:
    """Problem text -> oracle tool calls, for ToolCalc tasks drawn from ``seeds`` (no sandbox needed)."""
    env = gymnasium.make("envfarm/ToolCalc-v0", backend="bwrap").unwrapped
    out = {}
    for seed in seeds:
        gymnasium.Env.reset(env, seed=seed)
        task = env.generate(env.np_random)
        env.task = task
        out[task.problem.text] = [json.loads(a) for a in env.oracle()]
    return out


class StubServer:
    def __init__(self, solutions: Mapping[str, list[dict[str, Any]]], weight_version: int | None = 0,
                 delay_s: float = 0.0) -> None:
        self.solutions = dict(solutions)
        self.weight_version = weight_version
        self.delay_s = delay_s
        self.fail_next: deque[int] = deque()
        self.requests = 0
        self.completions = 0
        self.bodies: list[dict[str, Any]] = []
        self._runner: web.AppRunner | None = None
        self.url = ""

    async def start(self, port: int = 0) -> str:
        app = web.Application()
        app.add_routes([web.get("/v1/models", self._models), web.post("/v1/chat/completions", self._chat)])
        self._runner = web.AppRunner(app, shutdown_timeout=0.5)
        await self._runner.setup()
        site = web.TCPSite(self._runner, "127.0.0.1", port)
        await site.start()
        self.url = f"http://127.0.0.1:{self._runner.addresses[0][1]}/v1"
        return self.url

    async def stop(self) -> None:
        if self._runner is not None:
            runner, self._runner = self._runner, None
            await runner.cleanup()

    def _headers(self) -> dict[str, str]:
        return {} if self.weight_version is None else {"X-Weight-Version": str(self.weight_version)}

    async def _models(self, request: web.Request) -> web.Response:
        return web.json_response({"object": "list", "data": [{"id": "stub-model", "object": "model"}]},
                                 headers=self._headers())

    async def _chat(self, request: web.Request) -> web.Response:
        self.requests += 1
        body = await request.json()
        self.bodies.append(body)
        if self.delay_s:
            await asyncio.sleep(self.delay_s)
        if self.fail_next:
            status = self.fail_next.popleft()
            return web.json_response({"error": {"message": f"scripted {status}"}}, status=status,
                                     headers={"Retry-After": "0"} if status == 429 else None)
        self.completions += 1
        return web.json_response(self._completion(body["messages"]), headers=self._headers())

    def _completion(self, messages: list[dict[str, Any]]) -> dict[str, Any]:
        prompt = messages[0]["content"]
        plan = next((p for text, p in self.solutions.items() if text in prompt), None)
        turn = sum(1 for m in messages if m["role"] == "assistant")
        message: dict[str, Any] = {"role": "assistant", "content": None}
        if plan is None or turn >= len(plan):
            message["content"] = "I do not know."
        else:
            call = plan[turn]
            message["tool_calls"] = [{"id": f"call_{turn}", "type": "function", "function": {
                "name": call["name"], "arguments": json.dumps(call["arguments"])}}]
        tokens = [{"token": f"token_id:{100 + i}", "logprob": -0.1 * (i + 1), "bytes": None}
                  for i in range(3)]
        return {"id": f"chatcmpl-{self.requests}", "object": "chat.completion", "model": "stub-model",
                "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls",
                             "logprobs": {"content": tokens}}],
                "usage": {"prompt_tokens": 10, "completion_tokens": 3, "total_tokens": 13}}


def read_jsonl(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
