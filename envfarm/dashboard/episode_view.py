"""One trajectory as the episode page shows it: the transcript, each tool call, and the code-repair parts.

The code-repair env (envs/code_repair/env.py) leaves in ``meta`` the graded diff (``patch``), swebench's
``tests`` status (FAIL_TO_PASS / PASS_TO_PASS, success and failure), the tamper ``findings``, ``status`` and
``resolved``; its test logs are the observations of the ``run_tests`` tool. Shown as they are; nothing is
re-graded here.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from envfarm.envs.meta import CodeRepairMeta
from envfarm.rollout.trajectory import Trajectory

TEST_TOOLS = frozenset({"run_tests"})
TOKEN_FIELDS = ("prompt_token_ids", "token_ids", "logprobs")


def episode_detail(t: Trajectory) -> dict[str, Any]:
    """``t`` as JSON for the page: token arrays become counts; ``calls`` and ``code_repair`` are added."""
    data = t.to_dict()
    data["turns"] = [_turn(turn) for turn in data["turns"]]
    data["calls"] = [_call(turn) for turn in t.turns]
    data["code_repair"] = code_repair(t)
    return data


def _turn(turn: Mapping[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in turn.items() if k not in TOKEN_FIELDS}
    out["n_tokens"] = len(turn.get("token_ids") or ())
    logprobs = turn.get("logprobs") or ()
    out["mean_logprob"] = round(sum(logprobs) / len(logprobs), 4) if logprobs else None
    return out


def _call(turn: Any) -> dict[str, Any]:
    """The tool call of one turn: name and arguments parsed from the action when it is JSON."""
    args: Any = None
    try:
        parsed = json.loads(turn.action)
        if isinstance(parsed, dict):
            args = parsed.get("arguments", parsed.get("args"))
    except ValueError:
        pass
    return {"tool": turn.tool_name, "arguments": args, "action": turn.action, "error": turn.action_error,
            "observation": turn.observation, "reward": turn.reward}


def code_repair(t: Trajectory) -> dict[str, Any] | None:
    """The diff, test results, tamper findings and test logs of a code-repair episode; None for others."""
    meta = CodeRepairMeta.from_json(t.meta)
    logs = [turn.observation for turn in t.turns if turn.tool_name in TEST_TOOLS]
    if not logs and meta.patch is None and meta.tests is None and meta.findings is None:
        return None
    tests = meta.tests if isinstance(meta.tests, Mapping) else None
    results = {}
    for group in ("FAIL_TO_PASS", "PASS_TO_PASS"):
        part = (tests or {}).get(group) or {}
        results[group] = {"success": list(part.get("success", [])), "failure": list(part.get("failure", []))}
    return {"patch": meta.patch, "tests": results if tests else None, "findings": list(meta.findings or []),
            "status": meta.status, "resolved": meta.resolved, "test_logs": logs,
            "error": meta.diff_error or meta.error_kind}


__all__ = ["code_repair", "episode_detail"]
