"""Action parsing: every documented form, and clear errors for everything else."""

from __future__ import annotations

import pytest

from envfarm.envs import ActionError, ToolCall, parse_action

CALL = ToolCall("calc", {"expr": "2+2"})


@pytest.mark.parametrize("action", [
    '{"name": "calc", "arguments": {"expr": "2+2"}}',
    '{"name": "calc", "arguments": "{\\"expr\\": \\"2+2\\"}"}',
    'Let me compute. <tool_call>{"name": "calc", "arguments": {"expr": "2+2"}}</tool_call>',
    '<tool_call>\n{"name": "calc", "arguments": {"expr": "2+2"}}\n',  # unterminated tag at the end
    {"name": "calc", "arguments": {"expr": "2+2"}},
    {"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "calc", "arguments": '{"expr": "2+2"}'}}]},
    '{"role": "assistant", "tool_calls": [{"type": "function", "function": {"name": "calc", '
    '"arguments": {"expr": "2+2"}}}]}',
])
def test_accepted_forms(action: object) -> None:
    call = parse_action(action)  # type: ignore[arg-type]
    assert (call.name, dict(call.arguments)) == (CALL.name, CALL.arguments)


def test_openai_call_id_is_kept() -> None:
    msg = {"tool_calls": [{"id": "call_9", "function": {"name": "calc", "arguments": "{}"}}]}
    assert parse_action(msg).call_id == "call_9"


@pytest.mark.parametrize(("action", "says"), [
    ("the answer is 4", "No tool call found"),
    ('{"name": "calc", "arguments": {"expr": ', "not valid JSON"),
    ("<tool_call>nope</tool_call>", "<tool_call> block is not valid JSON"),
    ('{"arguments": {}}', 'no "name"'),
    ('{"name": "calc", "arguments": [1]}', '"arguments" must be a JSON object'),
    ('<tool_call>{"name": "a"}</tool_call><tool_call>{"name": "b"}</tool_call>', "one call per turn"),
    ({"tool_calls": []}, "no tool_calls"),
    ({"tool_calls": [{"function": {"name": "a"}}, {"function": {"name": "b"}}]}, "one call per turn"),
    (42, "must be text or a dict"),
])
def test_errors_say_what_is_wrong_and_what_is_accepted(action: object, says: str) -> None:
    with pytest.raises(ActionError) as err:
        parse_action(action)  # type: ignore[arg-type]
    assert says in str(err.value)
    assert '{"name": "<tool>", "arguments": {...}}' in str(err.value)
