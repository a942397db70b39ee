"""The in-sandbox agent's own JSON codec (C accelerator only, no json package) against the json package."""

from __future__ import annotations

import json

import pytest

from envfarm.sandbox import agent

REQUESTS = [
    {"id": 1, "op": "exec", "argv": ["printf", "b\u00e9\u2603\n"], "env": {"X": 'y\n"q\\'}, "timeout": 5.5},
    {"id": 2, "op": "write", "path": "/workspace/a", "data": "aGk=", "append": False, "mode": 420, "n": None},
    {"id": 3, "nested": [[], {}, [1, -2, 3.25e300, True, False, None]], "empty": ""},
]


@pytest.mark.parametrize("req", REQUESTS)
def test_loads_matches_json(req: dict[str, object]) -> None:
    line = json.dumps(req).encode()
    assert agent.JSON.loads(line) == req
    assert agent.JSON.loads(b" \t" + line + b"\r\n") == req
    assert agent.JSON.loads(json.dumps(req, ensure_ascii=False).encode()) == req


@pytest.mark.parametrize("req", REQUESTS)
def test_dumps_is_json(req: dict[str, object]) -> None:
    text = agent.JSON.dumps(req)
    assert json.loads(text) == req
    assert "\n" not in text and text.isascii()  # one line per reply, whatever the output held


@pytest.mark.parametrize("bad", [b"", b"{", b"{} x", b"\xff", b'{"a": }', b"nope", b"[1,]"])
def test_bad_requests_raise_value_error(bad: bytes) -> None:
    with pytest.raises(ValueError):
        agent.JSON.loads(bad)


def test_agent_needs_no_heavy_modules() -> None:
    """Every idle sandbox holds one agent: json, base64, signal and ctypes pull in re and enum (~1.5 MiB)."""
    import subprocess
    import sys

    from envfarm.sandbox.agent_io import AGENT_BOOT, agent_preamble

    probe = b'{"id":1,"op":"ping"}\n{"id":2,"op":"read","path":"/proc/self/comm"}\n'
    code = AGENT_BOOT + ("import sys\nprint(sorted(m for m in ('re', 'enum', 'json', 'base64', 'ctypes', "
                         "'signal') if m in sys.modules), file=sys.stderr)\n")  # once the agent saw EOF
    out = subprocess.run([sys.executable, "-u", "-I", "-S", "-c", code], input=agent_preamble() + probe,
                         capture_output=True, timeout=30)
    replies = [json.loads(line) for line in out.stdout.splitlines()]
    assert [(r["id"], r["ok"]) for r in replies] == [(1, True), (2, True)], out.stderr.decode()
    assert out.stderr.decode().strip().splitlines()[-1] == "[]", out.stderr.decode()
