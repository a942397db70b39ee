"""The byte tokenizer and the built-in chat template: compact, prefix-consistent, round trips."""

from __future__ import annotations

import json

import pytest

from envfarm.trainer.base import ChatTemplate, Tokenizer
from envfarm.trainer.chat import BuiltinTemplate, parse_tool_calls
from envfarm.trainer.tokenizer import ByteTokenizer

CALL = {"id": "call_1", "type": "function", "function": {"name": "calc", "arguments": '{"expr": "3*4"}'}}


def test_tokenizer_round_trip_and_specials() -> None:
    tok = ByteTokenizer()
    assert isinstance(tok, Tokenizer)
    assert tok.vocab_size == 262 and tok.eos_id == 257 and tok.pad_id == 256
    text = "<|user|>héllo ✓<|eot|>"
    ids = tok.encode(text)
    assert ids[0] == 259 and ids[-1] == tok.eos_id and len(ids) == 2 + len("héllo ✓".encode())
    assert tok.decode(ids) == text
    assert tok.token_bytes(104) == b"h"


def test_prompt_is_compact_and_prefix_consistent() -> None:
    t = BuiltinTemplate()
    assert isinstance(t, ChatTemplate)
    tools = [{"type": "function", "function": {"name": "calc", "parameters": {"properties": {"expr": {}}}}}]
    user = {"role": "user", "content": "What is 3*4?"}
    p1 = t.render_prompt([user], tools)
    assert p1 == "<|user|>What is 3*4?<|eot|><|assistant|>"
    answer = {"role": "assistant", "content": None, "tool_calls": [CALL]}
    p2 = t.render_prompt([user, answer, {"role": "tool", "tool_call_id": "call_1", "content": "12"}], tools)
    assert p2 == p1 + t.render_completion(answer) + "<|eot|><|tool|>12<|eot|><|assistant|>"
    assert t.render_completion(answer) == '<tool_call>{"name":"calc","arguments":{"expr":"3*4"}}</tool_call>'
    assert "calc(expr)" in BuiltinTemplate(tool_list=True).render_prompt([user], tools)


@pytest.mark.parametrize("message", [
    {"role": "assistant", "content": None, "tool_calls": [CALL]},
    {"role": "assistant", "content": "Let me compute.", "tool_calls": [CALL, CALL]},
    {"role": "assistant", "content": "The answer is 12."},
])
def test_render_parse_round_trip(message: dict) -> None:
    t = BuiltinTemplate()
    parsed = t.parse_completion(t.render_completion(message))
    assert parsed.content == (message["content"] or "")
    calls = message.get("tool_calls") or []
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == \
        [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


def test_canonical_completions_survive_the_farm_round_trip() -> None:
    """Sampled text -> parsed message (what the farm stores) -> rendered again: the same text, so turn k+1's
    prompt tokens continue turn k's prompt + completion tokens."""
    t = BuiltinTemplate()
    for text in ('Sure. <tool_call>{"name":"calc","arguments":{"expr":"(3+4)*2"}}</tool_call>',
                 '<tool_call>{"name":"submit","arguments":{"answer":"14"}}</tool_call>', "no tool call here"):
        parsed = t.parse_completion(text)
        message = {"role": "assistant", "content": parsed.content or None, "tool_calls": [
            {"id": "x", "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
            for c in parsed.tool_calls]}
        assert t.render_completion(message) == text


def test_parse_is_lenient_on_whitespace_and_keeps_malformed_as_content() -> None:
    got = parse_tool_calls('<tool_call>\n {"name": "submit", "arguments": {"answer": "7"}}\n</tool_call>')
    assert got.tool_calls[0].name == "submit" and json.loads(got.tool_calls[0].arguments) == {"answer": "7"}
    unclosed = parse_tool_calls('<tool_call>{"name":"calc","arguments":{"expr":"1+1"}}')
    assert unclosed.tool_calls[0].name == "calc"
    for bad in ('<tool_call>{"name": "calc", "arguments": </tool_call>', "<tool_call>[1]</tool_call>",
                '<tool_call>{"arguments": {}}</tool_call>', "plain text"):
        got = parse_tool_calls(bad)
        assert got.tool_calls == () and got.content == bad
