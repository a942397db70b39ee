"""`envfarm farm run` and `envfarm eval` in a subprocess: SIGINT drains or cancels cleanly, --resume continues
without duplicates, a dead policy server is a clear error with a non-zero exit."""

from __future__ import annotations

import asyncio
import json
import signal
import sys
from pathlib import Path

import pytest
from rollout_support import StubServer, free_port, read_jsonl

pytestmark = pytest.mark.bwrap

ENV = ["--env", "envfarm/ToolCalc-v0", "--backend", "bwrap"]


async def envfarm(*args: str) -> asyncio.subprocess.Process:
    pipe = asyncio.subprocess.PIPE
    return await asyncio.create_subprocess_exec(sys.executable, "-m", "envfarm.cli", *args, stdout=pipe,
                                                stderr=pipe)


async def finish(proc: asyncio.subprocess.Process, timeout: float = 60) -> tuple[int, str]:
    out, err = await asyncio.wait_for(proc.communicate(), timeout)
    assert proc.returncode is not None
    return proc.returncode, (out + err).decode()


async def wait_lines(path: Path, n: int, proc: asyncio.subprocess.Process) -> None:
    for _ in range(3000):
        if len(read_jsonl(path)) >= n:
            return
        assert proc.returncode is None, "the run ended before it was interrupted"
        await asyncio.sleep(0.01)
    raise AssertionError(f"{path} never reached {n} lines")


async def test_sigint_drains_then_resume_completes(tmp_path: Path) -> None:
    out, run, summary = tmp_path / "out.jsonl", tmp_path / "run", tmp_path / "summary.json"
    proc = await envfarm("farm", "run", *ENV, "--episodes", "60", "--concurrency", "4", "--policy", "oracle",
                         "--trajectories", str(out), "--summary", str(summary), "--run-dir", str(run),
                         "--quiet")
    await wait_lines(out, 5, proc)
    proc.send_signal(signal.SIGINT)
    code, text = await finish(proc)
    assert code == 130, text
    s = json.loads(summary.read_text())
    assert s["stopped"] == "interrupted" and s["episodes_interrupted"] == 0  # drained: in flight finished
    assert 5 <= s["episodes_completed"] < 60 and len(read_jsonl(out)) == s["episodes_completed"]
    assert len(read_jsonl(run / "spool.jsonl")) == s["episodes_completed"]
    code, text = await finish(await envfarm("farm", "run", "--resume", str(run), "--quiet"))  # run's options
    assert code == 0, text
    ids = [x["episode_id"] for x in read_jsonl(out)]
    assert len(ids) == 60 and len(set(ids)) == 60
    assert json.loads(summary.read_text())["episodes_completed"] == 60


async def test_second_sigint_cancels_in_flight_episodes(stub: StubServer, tmp_path: Path) -> None:
    stub.delay_s = 0.3  # a slow model: episodes are in flight when we interrupt
    out, run = tmp_path / "out.jsonl", tmp_path / "run"
    proc = await envfarm("farm", "run", *ENV, "--episodes", "16", "--concurrency", "6", "--policy",
                         f"openai:{stub.url}", "--trajectories", str(out), "--run-dir", str(run), "--quiet")
    await wait_lines(out, 1, proc)
    proc.send_signal(signal.SIGINT)
    await asyncio.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    code, text = await finish(proc)
    assert code == 130, text
    s = json.loads((run / "summary.json").read_text())
    interrupted = read_jsonl(run / "interrupted.jsonl")
    assert s["episodes_interrupted"] == len(interrupted) >= 1
    assert {x["episode_id"] for x in interrupted}.isdisjoint(x["episode_id"] for x in read_jsonl(out))
    stub.delay_s = 0.0
    resumed = await envfarm("farm", "run", "--resume", str(run), "--quiet", "--concurrency", "8")
    code, text = await finish(resumed)
    assert code == 0, text
    ids = [x["episode_id"] for x in read_jsonl(out)]
    assert len(ids) == 16 and len(set(ids)) == 16
    assert {x["episode_id"] for x in interrupted} <= set(ids)  # re-run under the same episode ids
    assert all(x["status"] == "completed" and x["reward"] == 1.0 for x in read_jsonl(out))


async def test_policy_server_down_is_a_clear_error(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{free_port()}/v1"
    proc = await envfarm("farm", "run", *ENV, "--episodes", "4", "--policy", f"openai:{url}",
                         "--policy-retries", "1", "--run-dir", str(tmp_path / "run"), "--quiet")
    code, text = await finish(proc)
    assert code == 2, text
    assert "error:" in text and f"{url}/models failed 2 times" in text and "Is the server running" in text
    assert "Traceback" not in text


def test_bad_options_name_the_fix(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from envfarm.cli import app

    runner = CliRunner()
    res = runner.invoke(app, ["farm", "run", "--env", "envfarm/ToolCalk-v0", "--episodes", "1", "--policy",
                              "oracle", "--run-dir", str(tmp_path / "r"), "--quiet"])
    assert res.exit_code == 2 and "did you mean 'envfarm/ToolCalc-v0'" in res.output, res.output
    res = runner.invoke(app, ["farm", "run", *ENV, "--episodes", "1", "--policy", "oracle",
                              "--max-staleness", "2"])
    assert res.exit_code == 2 and "add --learner URL" in res.output, res.output
    res = runner.invoke(app, ["farm", "run", *ENV, "--episodes", "1", "--policy", "orcale"])
    assert res.exit_code == 2 and "did you mean 'oracle'" in res.output, res.output
    res = runner.invoke(app, ["farm", "run", "--resume", str(tmp_path)])
    assert res.exit_code == 2 and "is not a run folder" in res.output, res.output


@pytest.mark.parametrize(("args", "message"), [
    (["--policy", "openai:http://127.0.0.1:99999/v1"], "Port out of range"),
    (["--policy", "openai:http://127.0.0.1:abc/v1"], "use e.g. openai:http://127.0.0.1:8000/v1"),
    (["--policy", "oracle", "--learner", "http://127.0.0.1:nope"], "use e.g. --learner http://127.0.0.1:8100"),
    (["--policy", "oracle", "--env-kwargs", '{"bogus": 1}'], "argument 'bogus'; fix --env-kwargs"),
    (["--policy", "oracle", "--backend", "bwrp"], "did you mean 'bwrap'"),
    (["--policy", "oracle", "--trajectories", "."], "is a folder; give a file in it"),
])
def test_bad_input_is_one_error_line_before_anything_starts(tmp_path: Path, args: list[str],
                                                             message: str) -> None:
    from typer.testing import CliRunner

    from envfarm.cli import app

    run = tmp_path / "run"
    res = CliRunner().invoke(app, ["farm", "run", *ENV, "--episodes", "2", *args, "--run-dir", str(run),
                                   "--quiet"])
    assert res.exit_code == 2 and message in res.output and "Traceback" not in res.output, res.output
    assert res.exception is None or isinstance(res.exception, SystemExit)
    assert not run.exists()  # refused before the run folder was made


@pytest.mark.parametrize("command", ["farm run", "eval"])
def test_a_damaged_run_folder_is_a_clear_error(tmp_path: Path, command: str) -> None:
    from typer.testing import CliRunner

    from envfarm.cli import app

    (tmp_path / "run.json").write_text("{not json")
    res = CliRunner().invoke(app, [*command.split(), "--resume", str(tmp_path), "--quiet"])
    assert res.exit_code == 2 and "run.json is damaged" in res.output, res.output
    (tmp_path / "run.json").write_text('{"env_id": "envfarm/ToolCalc-v0"}')
    res = CliRunner().invoke(app, [*command.split(), "--resume", str(tmp_path), "--quiet"])
    assert res.exit_code == 2 and "missing 1 required positional argument" in res.output, res.output


async def test_eval_command(tmp_path: Path) -> None:
    run, report = tmp_path / "run", tmp_path / "eval.json"
    proc = await envfarm("eval", *ENV, "--policy", "oracle", "--num-tasks", "4", "--attempts", "2",
                         "--concurrency", "4", "--run-dir", str(run), "--report", str(report), "--quiet")
    code, text = await finish(proc)
    assert code == 0, text
    data = json.loads(report.read_text())
    assert data["metrics"]["pass@1"]["value"] == 1.0 and data["metrics"]["pass@2"]["value"] == 1.0
    assert len(data["per_task"]) == 4 and all(t["attempts"] == 2 for t in data["per_task"])
    assert (run / "eval.json").read_text() == report.read_text() and "pass@2" in text
