"""Responses of ``POST /v1/chat/completions``: one JSON body, or server-sent events as tokens are sampled.

Streaming (``stream: true``): the sampling thread hands each new token to the event loop; each becomes one
``chat.completion.chunk`` (its text as ``delta.content``, its logprob when asked, its id in ``token_ids``).
Text from ``<tool_call>`` on is held back; when the sample ends, its parsed tool calls go out as one
``delta.tool_calls`` chunk (held text that is no well-formed call goes out as content), then a chunk with
``finish_reason``, an optional usage chunk (``stream_options.include_usage``) and ``data: [DONE]``.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import logging
import time
from dataclasses import dataclass, field
from typing import Any, Protocol

from aiohttp import web

from .base import VERSION_HEADER, Policy, Tokenizer, WeightVersion
from .chat import TOOL_OPEN
from .generate import Generation, GenRequest
from .openai_api import (
    ChatRequest,
    Choice,
    chunk_body,
    completion_body,
    error_body,
    finish_reason,
    logprob_entries,
    new_id,
    tool_calls_json,
    usage,
)

log = logging.getLogger(__name__)

@dataclass
class Pending:
    """One queued request: what to sample and the future its handler awaits."""

    gen: GenRequest
    future: asyncio.Future[tuple[Generation, int, WeightVersion]]
    chat: ChatRequest
    prompt: list[int] = field(default_factory=list)
    version: WeightVersion = None
    """Set when its batch starts: the weights that sample it."""
    events: asyncio.Queue[Any] | None = None
    """Streaming: tokens arrive here, then None when the batch is over."""


class Server(Protocol):
    """What a response needs of ``server.PolicyServer`` (this module sits below it)."""

    policy: Policy

    @property
    def model_name(self) -> str: ...

    def enqueue(self, pending: Pending) -> None: ...


def complete_response(server: Server, result: tuple[Generation, int, WeightVersion], chat: ChatRequest,
                      prompt: list[int]) -> web.Response:
    gen, i, version = result
    policy = server.policy
    choices = [Choice(s, policy.parse_completion(s.token_ids)) for s in gen.samples[i]]
    body = completion_body(cid=new_id("chatcmpl"), model=server.model_name, choices=choices,
                           prompt_ids=prompt, version=version, logprobs=chat.logprobs,
                           tokenizer=policy.tokenizer)
    return web.json_response(body, headers={VERSION_HEADER: str(version)})


def _safe_end(text: str) -> int:
    """How much of ``text`` can go out as content: up to a ``<tool_call>`` (or a prefix of one at the end),
    and not a trailing half-decoded UTF-8 character."""
    at = text.find(TOOL_OPEN)
    if at >= 0:
        return at
    end = len(text)
    for k in range(min(len(TOOL_OPEN) - 1, end), 0, -1):
        if text.endswith(TOOL_OPEN[:k]):
            end -= k
            break
    while end and text[end - 1] == "\ufffd":
        end -= 1
    return end


class _ChoiceStream:
    """Text state of one streamed sample."""

    def __init__(self, tokenizer: Tokenizer, eos: int) -> None:
        self.tokenizer, self.eos = tokenizer, eos
        self.ids: list[int] = []
        self.sent = 0  # characters of content already sent

    def push(self, token: int) -> str:
        """The new content the token makes safe to send ("" when held back)."""
        self.ids.append(token)
        text = self.tokenizer.decode([t for t in self.ids if t != self.eos])
        end = _safe_end(text)
        if end <= self.sent:
            return ""
        delta, self.sent = text[self.sent:end], end
        return delta


class _SSE:
    """Writes ``data: ...`` events for one response."""

    def __init__(self, server: Server, chat: ChatRequest, prompt: list[int]) -> None:
        self.server, self.chat, self.prompt = server, chat, prompt
        self.cid, self.created = new_id("chatcmpl"), int(time.time())
        self.resp: web.StreamResponse | None = None
        self.version: Any = None

    async def open(self, request: web.Request, version: Any) -> None:
        self.version = version
        self.resp = web.StreamResponse(headers={"Content-Type": "text/event-stream",
                                                "Cache-Control": "no-cache", VERSION_HEADER: str(version)})
        await self.resp.prepare(request)
        for k in range(self.chat.n):
            await self.chunk(k, {"role": "assistant", "content": ""},
                             extra={"prompt_token_ids": self.prompt} if k == 0 else None)

    async def chunk(self, index: int, delta: dict[str, Any], *, finish: str | None = None,
                    logprobs: list[dict[str, Any]] | None = None,
                    extra: dict[str, Any] | None = None) -> None:
        body = chunk_body(cid=self.cid, model=self.server.model_name, created=self.created,
                          version=self.version, index=index, delta=delta, finish=finish, logprobs=logprobs,
                          extra=extra)
        await self.send(body)

    async def send(self, body: Any) -> None:
        assert self.resp is not None
        text = body if isinstance(body, str) else json.dumps(body)
        await self.resp.write(f"data: {text}\n\n".encode())


async def stream_response(server: Server, request: web.Request, pending: Pending) -> web.StreamResponse:
    loop = asyncio.get_running_loop()
    events: asyncio.Queue[tuple[int, int, float, list[tuple[int, float]]] | None] = asyncio.Queue()

    def on_token(k: int, token: int, logprob: float, top: list[tuple[int, float]]) -> None:
        loop.call_soon_threadsafe(events.put_nowait, (k, token, logprob, top))

    pending.gen = dataclasses.replace(pending.gen, on_token=on_token)
    pending.events = events
    server.enqueue(pending)
    tok, chat = server.policy.tokenizer, pending.chat
    sse = _SSE(server, chat, pending.prompt)
    choices = [_ChoiceStream(tok, tok.eos_id) for _ in range(chat.n)]
    try:
        while (event := await events.get()) is not None:
            if sse.resp is None:
                await sse.open(request, pending.version)
            k, token, logprob, top = event
            delta = choices[k].push(token)
            lp = logprob_entries(tok, [token], [logprob], [top] if top else ()) if chat.logprobs else None
            await sse.chunk(k, {"content": delta} if delta else {}, logprobs=lp, extra={"token_ids": [token]})
    except ConnectionError:  # the client went away mid-stream: its rows finish with the batch, unread
        log.info("stream %s: client disconnected", sse.cid)
        return sse.resp if sse.resp is not None else web.Response(status=499)
    try:
        gen, i, version = await pending.future
    except Exception as e:
        if sse.resp is None:
            raise
        await sse.send(error_body(f"generation failed: {e}", kind="server_error"))
        await sse.send("[DONE]")
        return sse.resp
    if sse.resp is None:
        await sse.open(request, version)
    await _finish(sse, server, gen.samples[i], choices)
    assert sse.resp is not None
    return sse.resp


async def _finish(sse: _SSE, server: Server, samples: list[Any], streams: list[_ChoiceStream]) -> None:
    policy = server.policy
    finished = []
    for k, (sample, st) in enumerate(zip(samples, streams, strict=True)):
        parsed = policy.parse_completion(sample.token_ids)
        finished.append(Choice(sample, parsed))
        if parsed.tool_calls:
            calls = [{"index": j, **c} for j, c in enumerate(tool_calls_json(parsed))]
            sent = policy.decode_completion(sample.token_ids)[:st.sent]
            rest = parsed.content[len(sent):] if parsed.content.startswith(sent) else ""
            await sse.chunk(k, {"content": rest or None, "tool_calls": calls})
        else:
            rest = policy.decode_completion(sample.token_ids)[st.sent:]
            if rest:
                await sse.chunk(k, {"content": rest})
        await sse.chunk(k, {}, finish=finish_reason(sample, parsed))
    if sse.chat.include_usage:
        body = chunk_body(cid=sse.cid, model=server.model_name, created=sse.created, version=sse.version,
                          index=0, delta={})
        body["choices"] = []
        body["usage"] = usage(len(sse.prompt), finished)
        await sse.send(body)
    await sse.send("[DONE]")


__all__ = ["Pending", "Server", "complete_response", "stream_response"]
