"""Running a Harbor task's verifier in the agent's sandbox, as Harbor runs it, out of the agent's reach.

Harbor (``harbor/verifier/verifier.py``) uploads ``tests/`` to ``/tests`` only when the agent is done, runs
``bash /tests/test.sh`` with ``[verifier] env`` and timeout, and reads ``/logs/verifier/reward.txt`` (one
number: the reward) or else ``/logs/verifier/reward.json`` (a flat dict of named rewards). Here:

- Sandboxes have a read-only root (only ``/workspace`` and ``/tmp`` are writable), so the verifier's folders
  live in a fresh folder ``/tmp/envfarm-verify-<random>/`` made at verification time (``mkdir`` fails if it
  exists: nothing the agent planted is in it), and the task's test files are copied there with the absolute
  paths ``/tests`` and ``/logs`` rewritten to it. The agent never sees ``tests/``.
- Before the verifier runs, every process of the sandbox but its agent is killed (``kill -9 -1``: a
  background writer the agent left cannot touch the reward after test.sh).
- The reward, read as Harbor 0.26 reads it: ``reward.json`` when it exists, else ``reward.txt`` (one number).
  Harbor keeps reward.json's dict of named rewards as is (``info["rewards"]`` has it here); the env's one
  reward is its ``"reward"`` key, else its only value, else the mean of its values.
  A missing, empty or garbled reward file, a non-zero exit of test.sh without a reward, and a verifier
  timeout are the policy's failures: reward 0 with ``info["reason"]``, never an infrastructure error.
"""

from __future__ import annotations

import asyncio
import json
import math
import re
import secrets
import shutil
import tempfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envfarm.sandbox import Sandbox

from .task import HarborTask

VERIFY_PREFIX = "/tmp/envfarm-verify-"
SOLUTION_DIR = "/tmp/envfarm-solution"
KILL_OTHERS = "kill -9 -1 2>/dev/null; sleep 0.05; kill -9 -1 2>/dev/null; true"
_READ = ('for k in json txt; do f="$1/reward.$k"; if [ -e "$f" ]; then '
         'if [ -s "$f" ]; then echo "$k"; cat "$f"; else echo empty; fi; exit 0; fi; done; echo none')


@dataclass(frozen=True)
class Verdict:
    """What the verifier gave."""

    reward: float
    reason: str | None
    """None when a reward was read; else why the reward is 0."""
    rewards: Mapping[str, float] = field(default_factory=dict)
    output: str = ""
    exit_code: int | None = None
    seconds: float = 0.0
    source: str | None = None
    """``reward.json`` or ``reward.txt``: the file the reward was read from."""


def rewrite_paths(text: str, mapping: Mapping[str, str]) -> str:
    """``text`` with each absolute path prefix in ``mapping`` (``/tests``) replaced where it starts a path
    (not inside another path such as ``/app/tests``)."""
    for old, new in mapping.items():
        text = re.sub(rf"(?<![\w./-]){re.escape(old)}(?=[/\s'\";:)|&>]|$)", new, text)
    return text


def staged_copy(src: Path, mapping: Mapping[str, str]) -> Path:
    """A temporary copy of folder ``src`` whose text files have ``mapping``'s paths rewritten (the caller
    removes ``result.parent``)."""
    tmp = Path(tempfile.mkdtemp(prefix="envfarm-harbor-"))
    dest = tmp / src.name
    shutil.copytree(src, dest, symlinks=False)
    for path in dest.rglob("*"):
        if path.is_file() and path.stat().st_size < (4 << 20):
            try:
                text = path.read_text(encoding="utf-8")
            except UnicodeDecodeError:
                continue
            new = rewrite_paths(text, mapping)
            if new != text:
                path.write_text(new, encoding="utf-8")
    return dest


async def upload_rewritten(sb: Sandbox, src: Path, dest: str, mapping: Mapping[str, str]) -> None:
    staged = await asyncio.to_thread(staged_copy, src, mapping)
    try:
        await sb.upload(staged, dest)
    finally:
        await asyncio.to_thread(shutil.rmtree, staged.parent, True)


async def verify(sb: Sandbox, task: HarborTask, cwd: str, env: Mapping[str, str]) -> Verdict:
    """Kill the agent's processes, stage the tests in a fresh folder, run test.sh and read its reward."""
    await sb.exec(KILL_OTHERS, timeout_s=10, cwd="/")
    root = VERIFY_PREFIX + secrets.token_hex(12)
    made = await sb.exec(["mkdir", "-m", "0700", root, f"{root}/logs", f"{root}/logs/verifier"], timeout_s=10,
                         cwd="/")
    if not made.ok:
        return Verdict(0.0, f"the verifier's folder could not be made: {made.stderr.strip()[-300:]}")
    mapping = {"/tests": f"{root}/tests", "/logs": f"{root}/logs"}
    await upload_rewritten(sb, task.tests_dir, f"{root}/tests", mapping)
    run_env = {**env, **dict(task.verifier_env)}
    res = await sb.exec(["bash", f"{root}/tests/test.sh"], timeout_s=task.verifier_timeout_s, cwd=cwd,
                        env=run_env)
    output = (res.stdout + ("\n" + res.stderr if res.stderr else ""))[-8000:]
    if res.timed_out:
        return Verdict(0.0, f"verifier timeout: tests/test.sh ran past {task.verifier_timeout_s:g} s", {},
                       output, None, res.duration)
    await sb.exec(KILL_OTHERS, timeout_s=10, cwd="/")
    got = await sb.exec(["bash", "-c", _READ, "read", f"{root}/logs/verifier"], timeout_s=10, cwd="/")
    reward, rewards, reason = parse_reward(got.stdout)
    kind = got.stdout.partition("\n")[0]
    source = f"reward.{kind}" if kind in ("txt", "json") else None
    output += await _test_stdout(sb, f"{root}/logs/verifier")
    return Verdict(reward, reason, rewards, output, res.exit_code, res.duration, source)


TEST_STDOUT = "test-stdout.txt"
"""Where many test.sh scripts send their runner's output (``/logs/verifier/test-stdout.txt``)."""


async def _test_stdout(sb: Sandbox, folder: str, limit: int = 4000) -> str:
    """The tail of the verifier's ``test-stdout.txt`` (a header and the text; "" when there is none)."""
    got = await sb.exec(["tail", "-c", str(limit), f"{folder}/{TEST_STDOUT}"], timeout_s=10, cwd="/")
    return f"\n--- /logs/verifier/{TEST_STDOUT} ---\n{got.stdout}" if got.ok and got.stdout.strip() else ""


def parse_reward(text: str) -> tuple[float, dict[str, float], str | None]:
    """``(reward, rewards, reason)`` from the reader's output: ``txt``/``json`` then the file."""
    kind, _, body = text.partition("\n")
    if kind == "none":
        return 0.0, {}, "no reward: tests/test.sh wrote neither reward.txt nor reward.json (missing)"
    if kind == "empty":
        return 0.0, {}, "no reward: the reward file is empty"
    if kind == "txt":
        try:
            value = float(body.strip())
        except ValueError:
            return 0.0, {}, f"garbled reward.txt: {body.strip()[:80]!r} is not a number"
        return _finite(value, {"reward": value})
    try:
        data = json.loads(body)
    except json.JSONDecodeError as e:
        return 0.0, {}, f"garbled reward.json: {e}"
    return _from_dict(data)


def _from_dict(data: Any) -> tuple[float, dict[str, float], str | None]:
    if isinstance(data, (int, float)) and not isinstance(data, bool):
        data = {"reward": data}
    if not isinstance(data, dict):
        return 0.0, {}, "garbled reward.json: not a JSON object or number"
    bad = [k for k, v in data.items() if isinstance(v, bool) or not isinstance(v, (int, float))]
    if bad or not data:
        return 0.0, {}, f"garbled reward.json: {'no values' if not data else f'{bad[0]!r} is not a number'}"
    rewards = {str(k): float(v) for k, v in data.items()}
    if "reward" in rewards:
        return _finite(rewards["reward"], rewards)
    if len(rewards) == 1:
        return _finite(next(iter(rewards.values())), rewards)
    return _finite(sum(rewards.values()) / len(rewards), rewards)


def _finite(value: float, rewards: dict[str, float]) -> tuple[float, dict[str, float], str | None]:
    if not math.isfinite(value):
        return 0.0, rewards, f"garbled reward: {value!r} is not finite"
    return value, rewards, None


__all__ = ["SOLUTION_DIR", "Verdict", "parse_reward", "rewrite_paths", "upload_rewritten", "verify"]
