"""``openai:URL``: a policy served by any OpenAI-compatible chat-completions server (vLLM, SGLang, ``envfarm
serve``), spoken to over aiohttp.

    policy = OpenAIPolicy("http://127.0.0.1:8000/v1", model=None)   # None: the first model of GET /v1/models
    async with policy:
        reply = await policy.act(view)       # POST /v1/chat/completions with the env's tools

- At most ``max_connections`` requests in flight (a semaphore and the connector's pool); waiting for a slot
  does not count against ``timeout_s``, which bounds each request.
- 429, 5xx, timeouts and connection errors are retried with exponential backoff and full jitter (honouring
  ``Retry-After``); after ``max_retries`` the call raises :class:`PolicyUnavailable`, as do 401/403/404 (a
  wrong URL, model or key). Other 4xx (a prompt too long for the context) raise :class:`PolicyError`: that
  episode is recorded as a policy error and the run goes on.
- Token ids and log-probabilities are kept when the reply has them: ``choices[0].logprobs.content[*]``
  (``logprobs: true``; tokens spelt ``token_id:N`` as vLLM's ``return_tokens_as_token_ids`` gives them),
  ``choices[0].token_ids`` and ``prompt_token_ids`` (vLLM's ``return_token_ids``).
- The weight version comes from the reply: the ``X-Weight-Version`` header, else a ``weight_version`` field
  at the top level or under ``metadata`` (SGLang). Numbers (``"7"``) become ints; other labels stay text.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import random
import re
import time
from collections.abc import Mapping
from typing import Any
from urllib.parse import SplitResult, urlsplit

import aiohttp

from envfarm.errors import ConfigError, PolicyError, PolicyUnavailable, tail
from envfarm.sandbox.values import TIMEOUTS

from .policies import EpisodeView, Policy, Reply
from .trajectory import WeightVersion
from .trajectory import WeightVersion as Version

log = logging.getLogger(__name__)

VERSION_HEADER = "X-Weight-Version"
FATAL_STATUS = {401: "the server wants an API key (set OPENAI_API_KEY)", 403: "the API key is refused",
                404: "wrong URL or model (the base URL usually ends in /v1)"}
TOKEN_ID = re.compile(r"^token_id:(\d+)$")


def check_http_url(url: str, what: str, example: str) -> SplitResult:
    """``url`` split; else a ConfigError naming ``what``, with ``example``, when it is no http(s) URL."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ConfigError(f"{what} {url!r} is not an http(s) URL; use e.g. {example}")
    try:
        parts.port  # noqa: B018 - raises ValueError for a port that is not a number in 0..65535
    except ValueError as e:
        raise ConfigError(f"{what} {url!r}: {e}; use e.g. {example}") from e
    return parts


def normalise_base_url(url: str) -> str:
    """``http://host:port`` → ``http://host:port/v1``; a URL with a path is kept (without trailing slash)."""
    parts = check_http_url(url, "policy URL", "openai:http://127.0.0.1:8000/v1")
    path = parts.path.rstrip("/")
    return f"{parts.scheme}://{parts.netloc}{path or '/v1'}"


def parse_version(value: Any) -> WeightVersion:
    """``7``, ``"7"`` → 7; other non-empty labels stay text; None/"" → None."""
    if value is None or value == "":
        return None
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return value
    text = str(value).strip()
    return int(text) if text.lstrip("-").isdigit() else text


def version_of(headers: Mapping[str, str], body: Any) -> WeightVersion:
    if VERSION_HEADER in headers:
        return parse_version(headers[VERSION_HEADER])
    if isinstance(body, Mapping):
        meta = body.get("metadata")
        if "weight_version" in body:
            return parse_version(body["weight_version"])
        if isinstance(meta, Mapping) and "weight_version" in meta:
            return parse_version(meta["weight_version"])
    return None


class OpenAIPolicy(Policy):
    """Chat completions with tools over aiohttp; see the module docstring for retries and capture."""

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        api_key: str | None = None,
        temperature: float = 1.0,
        max_tokens: int | None = 1024,
        timeout_s: float = TIMEOUTS.request_s,
        max_retries: int = 6,
        backoff_s: float = 0.5,
        backoff_max_s: float = 10.0,
        max_connections: int = 64,
        logprobs: bool = True,
        extra_body: Mapping[str, Any] | None = None,
    ) -> None:
        if max_connections < 1 or max_retries < 0 or timeout_s <= 0:
            raise ConfigError(f"OpenAIPolicy needs max_connections >= 1, max_retries >= 0 and timeout_s > 0; "
                              f"got {max_connections}, {max_retries}, {timeout_s}")
        self.base_url = normalise_base_url(base_url)
        self.name = f"openai:{self.base_url}"
        self.model = model
        self.api_key = api_key if api_key is not None else os.environ.get("OPENAI_API_KEY")
        self.temperature, self.max_tokens = temperature, max_tokens
        self.timeout_s, self.max_retries = timeout_s, max_retries
        self.backoff_s, self.backoff_max_s = backoff_s, backoff_max_s
        self.max_connections = max_connections
        self.logprobs = logprobs
        self.extra_body = dict(extra_body or {})
        self.requests = 0
        self.retries = 0
        self._session: aiohttp.ClientSession | None = None
        self._slots = asyncio.Semaphore(max_connections)

    # ------------------------------------------------------------------------------------------ lifecycle

    async def start(self) -> None:
        """Open the connection pool and ask ``GET /models`` (the model name when none was given)."""
        if self._session is None:
            connector = aiohttp.TCPConnector(limit=self.max_connections, limit_per_host=self.max_connections,
                                             keepalive_timeout=30)
            headers = {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}
            self._session = aiohttp.ClientSession(connector=connector, headers=headers)
        body, _ = await self._request("GET", "/models")
        ids = [m.get("id") for m in body.get("data", []) if isinstance(m, Mapping)]
        if self.model is None:
            if not ids:
                raise PolicyUnavailable(f"policy server {self.base_url} lists no model at /models; start it "
                                        "with a model, or give the model name")
            self.model = ids[0]
        elif ids and self.model not in ids:
            log.warning("model %r is not among %s at %s/models; asking for it anyway", self.model, ids,
                        self.base_url)
        log.info("policy %s: model %r, weight version %r", self.base_url, self.model, self.weight_version)

    async def aclose(self) -> None:
        session, self._session = self._session, None
        if session is not None:
            await asyncio.shield(session.close())

    async def refresh_version(self) -> WeightVersion:
        await self._request("GET", "/models")
        return self.weight_version

    # ------------------------------------------------------------------------------------------------ act

    async def act(self, view: EpisodeView) -> Reply:
        payload: dict[str, Any] = {"model": self.model, "messages": view.messages,
                                   "temperature": self.temperature}
        if view.tools:
            payload["tools"] = view.tools
        if self.max_tokens is not None:
            payload["max_tokens"] = self.max_tokens
        if self.logprobs:
            payload["logprobs"] = True
        payload.update(self.extra_body)
        body, version = await self._request("POST", "/chat/completions", payload)
        return self._reply(body, version)

    def _reply(self, body: Mapping[str, Any], version: WeightVersion) -> Reply:
        try:
            choice = body["choices"][0]
            msg = choice["message"]
        except (KeyError, IndexError, TypeError) as e:
            raise PolicyError(f"policy server {self.base_url} sent a reply without choices[0].message: "
                              f"{tail(json.dumps(body), chars=300)}") from e
        calls = msg.get("tool_calls") or []
        message: dict[str, Any] = {"role": "assistant", "content": msg.get("content")}
        if calls:
            message["tool_calls"] = calls
        if msg.get("reasoning_content"):
            message["reasoning_content"] = msg["reasoning_content"]
        action: str | dict[str, Any] = message if calls else (msg.get("content") or "")
        token_ids, logprobs = _tokens(choice)
        prompt_ids = choice.get("prompt_token_ids") or body.get("prompt_token_ids")
        return Reply(action, message, weight_version=version,
                     prompt_token_ids=tuple(prompt_ids) if prompt_ids else None, token_ids=token_ids,
                     logprobs=logprobs, finish_reason=choice.get("finish_reason"))

    # --------------------------------------------------------------------------------------- transport

    async def _request(self, method: str, path: str, payload: Any = None) -> tuple[dict[str, Any], Version]:
        """One call with the retry budget: (JSON body, the weight version it reported)."""
        if self._session is None:
            raise PolicyUnavailable(f"policy {self.base_url} is not started; use `async with policy:`")
        url, t0, last = self.base_url + path, time.monotonic(), ""
        for attempt in range(self.max_retries + 1):
            if attempt:
                self.retries += 1
            retry_after: float | None = None
            try:
                async with self._slots, asyncio.timeout(self.timeout_s):
                    self.requests += 1
                    async with self._session.request(method, url, json=payload) as resp:
                        text = await resp.text()
                        if resp.status == 200:
                            return self._accept(url, resp.headers, text)
                        last = f"HTTP {resp.status}: {tail(text, chars=300)}"
                        self._raise_unretryable(url, resp.status, last)
                        retry_after = _retry_after(resp.headers)
            except aiohttp.InvalidURL as e:
                raise ConfigError(f"policy URL {url!r} is not valid ({e}); check --policy openai:URL") from e
            except aiohttp.ClientError as e:  # refused, reset, a broken or malformed reply: all worth a retry
                last = f"{type(e).__name__}: {e}"
            except TimeoutError:
                last = f"no answer within {self.timeout_s:g}s"
            if attempt < self.max_retries:
                delay = self._delay(attempt, retry_after)
                log.info("policy %s %s failed (%s); retry %d/%d in %.2fs", method, url, last, attempt + 1,
                         self.max_retries, delay)
                await asyncio.sleep(delay)
        raise PolicyUnavailable(
            f"policy server {url} failed {self.max_retries + 1} times in {time.monotonic() - t0:.1f}s; last: "
            f"{last}. Is the server running and reachable? Check the URL of --policy openai:URL")

    def _accept(self, url: str, headers: Mapping[str, str], text: str) -> tuple[dict[str, Any], Version]:
        try:
            body = json.loads(text)
        except json.JSONDecodeError as e:
            raise PolicyError(f"policy server {url} answered 200 with non-JSON: {tail(text, chars=300)}") \
                from e
        if not isinstance(body, dict):
            raise PolicyError(f"policy server {url} answered 200 with {type(body).__name__}, not an object")
        version = version_of(headers, body)
        if isinstance(version, int) and isinstance(self.weight_version, int):
            self.weight_version = max(version, self.weight_version)  # replies can arrive out of order
        elif version is not None:
            self.weight_version = version
        return body, version

    def _raise_unretryable(self, url: str, status: int, last: str) -> None:
        if status == 429 or status >= 500:
            return
        if status in FATAL_STATUS:
            raise PolicyUnavailable(f"policy server {url}: {last}; {FATAL_STATUS[status]}")
        raise PolicyError(f"policy server {url} rejected the request: {last}")

    def _delay(self, attempt: int, retry_after: float | None) -> float:
        cap = min(self.backoff_max_s, self.backoff_s * 2**attempt)
        delay = random.uniform(cap / 2, cap)
        if retry_after is not None:
            delay = max(delay, min(retry_after, self.backoff_max_s))
        return delay


def _retry_after(headers: Mapping[str, str]) -> float | None:
    try:
        return float(headers["Retry-After"])
    except (KeyError, ValueError):
        return None


def _tokens(choice: Mapping[str, Any]) -> tuple[tuple[int, ...] | None, tuple[float, ...] | None]:
    """(completion token ids, log-probabilities) from one choice, each None when absent."""
    content = (choice.get("logprobs") or {}).get("content") or []
    logprobs = tuple(float(c["logprob"]) for c in content if "logprob" in c) or None
    ids = choice.get("token_ids")
    if ids:
        return tuple(int(i) for i in ids), logprobs
    matched = [TOKEN_ID.match(str(c.get("token", ""))) for c in content]
    if content and all(matched):
        return tuple(int(m.group(1)) for m in matched if m), logprobs
    return None, logprobs


__all__ = ["VERSION_HEADER", "OpenAIPolicy", "check_http_url", "normalise_base_url", "parse_version",
           "version_of"]
