"""The dashboard server's JSON and SSE endpoints (aiohttp's test client); the `envfarm dashboard` command."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
from aiohttp.test_utils import TestClient, TestServer
from typer.testing import CliRunner

from envfarm.cli import app
from envfarm.dashboard.server import Dashboard
from envfarm.dashboard.sources import discover
from envfarm.testing.dashboard_runs import write_trainer_run


@pytest.fixture
async def client(runs: Path) -> AsyncIterator[TestClient]:
    dash = Dashboard([runs])
    dash.scan()
    async with TestClient(TestServer(dash.app())) as c:
        yield c


def _ids(runs: Path) -> dict[str, str]:
    return {s.path.name if s.kind != "harness" else "harness": s.id for s in discover([runs])}


async def _get(client: TestClient, path: str, status: int = 200) -> Any:
    resp = await client.get(path)
    assert resp.status == status, f"{path}: {resp.status} {await resp.text()}"
    return await resp.json()


async def test_page_and_assets_are_served_from_the_package(client: TestClient) -> None:
    page = await client.get("/")
    html = await page.text()
    assert page.status == 200 and "<title>envfarm dashboard</title>" in html
    assert not re.search(r"""(src|href)=["']https?://""", html), "no asset may come from the network"
    for name in ("app.js", "views.js", "charts.js", "style.css", "favicon.svg"):
        resp = await client.get(f"/static/{name}")
        assert resp.status == 200, name
        assert "http://" not in (await resp.text()).replace('"http://www.w3.org/2000/svg"', ""), name
    assert (await client.get("/favicon.ico")).status == 200
    assert (await client.get("/static/../server.py")).status in (403, 404)


async def test_sources_and_views(client: TestClient, runs: Path) -> None:
    ids = _ids(runs)
    sources = await _get(client, "/api/sources")
    assert {s["kind"] for s in sources} == {"farm", "trainer", "harness"} and len(sources) == 4
    farm = await _get(client, f"/api/view/{ids['toolcalc']}")
    assert (farm["kind"], farm["done"], farm["total"], farm["state"]) == ("farm", 12, 12, "finished")
    trainer = await _get(client, f"/api/view/{ids['train']}")
    assert trainer["n_updates"] == 60 and len(trainer["publishes"]) == 30 and trainer["unknown_kinds"] == [
        "checkpoint"]
    harness = await _get(client, f"/api/view/{ids['harness']}")
    assert harness["counts"]["resolved"] == 1 and harness["rules"]["conftest"]
    await _get(client, "/api/view/nope", status=404)


async def test_episode_endpoints_filter_and_open(client: TestClient, runs: Path) -> None:
    fid = _ids(runs)["toolcalc"]
    assert (await _get(client, f"/api/farm/{fid}/episodes"))["matched"] == 12
    assert (await _get(client, f"/api/farm/{fid}/episodes?min_reward=2"))["matched"] == 0
    assert (await _get(client, f"/api/farm/{fid}/episodes?infra=no&task=toolcalc&limit=5"))["rows"][0][
        "index"] == 11
    await _get(client, f"/api/farm/{fid}/episodes?min_reward=abc", status=400)
    ep = await _get(client, f"/api/farm/{fid}/episodes/3")
    assert ep["messages"][0]["role"] == "user" and ep["calls"][0]["tool"] == "calc"
    assert "token_ids" not in ep["turns"][0]
    await _get(client, f"/api/farm/{fid}/episodes/999", status=404)
    await _get(client, f"/api/farm/{fid}/episodes/x", status=400)
    await _get(client, f"/api/farm/{_ids(runs)['train']}/episodes", status=404)  # not a farm run
    repair = await _get(client, f"/api/farm/{_ids(runs)['repair']}/episodes/1")
    assert repair["code_repair"]["tests"]["FAIL_TO_PASS"]["failure"] == ["tests/test_ops.py::test_div"]


async def test_harness_instance_endpoint(client: TestClient, runs: Path) -> None:
    hid = _ids(runs)["harness"]
    inst = await _get(client, f"/api/harness/{hid}/instances/envfarm-tests__calc-3")
    assert inst["findings"][0]["rule"] == "conftest" and "test_output.txt" in inst["logs"]
    assert inst["suspect"] and {"conftest", "framework-internals"} <= {x["rule"] for x in inst["suspicions"]}
    assert all(x["rule_text"] for x in inst["suspicions"]) and "conftest" in inst["row"]["suspect"]
    gold = await _get(client, f"/api/harness/{hid}/instances/envfarm-tests__calc-1")
    assert not gold["suspect"] and gold["suspicions"] == [] and gold["row"]["suspect"] == []
    await _get(client, f"/api/harness/{hid}/instances/nope", status=404)


async def test_events_push_the_view_and_nan_becomes_null(tmp_path: Path) -> None:
    nan = {"kind": "update", "time": 1.0, "step": 1, "loss": float("nan")}
    folder = write_trainer_run(tmp_path / "t", [nan])
    dash = Dashboard([folder])
    dash.scan()
    (sid,) = dash.sources
    async with TestClient(TestServer(dash.app())) as c:
        resp = await c.get(f"/api/events/{sid}")
        assert resp.headers["Content-Type"].startswith("text/event-stream")
        event = await resp.content.readuntil(b"\n\n")
        head, data = event.decode().split("\n", 1)
        assert head == "event: update"
        view = json.loads(data.removeprefix("data: "))
        assert view["updates"][0]["loss"] is None and view["n_updates"] == 1
        with (folder / "metrics.jsonl").open("a") as f:
            f.write(json.dumps({"kind": "update", "time": 2.0, "step": 2, "loss": 0.5}) + "\n")
        event = await resp.content.readuntil(b"\n\n")
        assert json.loads(event.decode().split("data: ", 1)[1])["n_updates"] == 2
        resp.close()


def test_cli_refuses_a_folder_without_runs(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["dashboard", "--run", str(tmp_path)])
    assert result.exit_code == 2
    assert "error:" in result.output and "holds no envfarm run" in result.output
    result = CliRunner().invoke(app, ["dashboard", "--run", str(tmp_path / "missing")])
    assert result.exit_code == 2 and "is not a folder" in result.output


def test_cli_serves_the_runs(runs: Path) -> None:
    cmd = [sys.executable, "-m", "envfarm.cli", "dashboard", "--run", str(runs / "toolcalc"), "--run",
           str(runs / "train"), "--port", "0"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            env={**os.environ, "COLUMNS": "200"})
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        match = re.search(r"dashboard on (http://127\.0\.0\.1:\d+/)", line)
        assert match, line
        with urllib.request.urlopen(match.group(1) + "api/sources", timeout=10) as resp:
            kinds = sorted(s["kind"] for s in json.load(resp))
        assert kinds == ["farm", "trainer"]
    finally:
        proc.terminate()
        proc.wait(10)
