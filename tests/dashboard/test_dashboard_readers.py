"""The dashboard's readers: discovery, incremental spool/metrics reading, live.json, trainer and harness."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from envfarm.dashboard.farm_reader import EpisodeFilter, FarmRun
from envfarm.dashboard.harness_reader import HarnessRun
from envfarm.dashboard.sources import Source, discover
from envfarm.dashboard.tail import JsonlTail
from envfarm.dashboard.trainer_reader import TrainerRun
from envfarm.errors import ConfigError
from envfarm.rollout.live import read_live
from envfarm.testing.dashboard_runs import HARNESS_RUN_ID, write_trainer_run


def test_discover_finds_every_kind_in_a_folder_of_runs(runs: Path) -> None:
    found = {(s.kind, s.path.name, s.run_id, s.model) for s in discover([runs])}
    assert found == {("farm", "toolcalc", "", ""), ("farm", "repair", "", ""), ("trainer", "train", "", ""),
                     ("harness", "reports", HARNESS_RUN_ID, "toy__model")}
    # each folder on its own, the harness run id folder too, and the same run twice counts once
    assert [s.kind for s in discover([runs / "toolcalc", runs / "toolcalc"])] == ["farm"]
    by_run_id = discover([runs / "reports" / HARNESS_RUN_ID])
    assert [(s.path, s.run_id) for s in by_run_id] == [((runs / "reports").resolve(), HARNESS_RUN_ID)]
    assert discover([runs / "reports"])[0].id == by_run_id[0].id


def test_discover_refuses_empty_and_missing_folders(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"holds no envfarm run.*envfarm farm run"):
        discover([tmp_path])
    with pytest.raises(ConfigError, match="is not a folder"):
        discover([tmp_path / "nope"])
    with pytest.raises(ConfigError, match="--run DIR"):
        discover([])


def test_tail_reads_only_new_complete_lines_and_restarts_on_truncation(tmp_path: Path) -> None:
    path = tmp_path / "x.jsonl"
    tail = JsonlTail(path)
    assert tail.read_new() == (False, [])
    path.write_bytes(b'{"a": 1}\n{"a": 2}\n{"a"')  # a torn last line waits for its newline
    reset, lines = tail.read_new()
    assert not reset and [json.loads(x.data) for x in lines] == [{"a": 1}, {"a": 2}]
    assert tail.read_at(lines[1].offset, lines[1].length) == b'{"a": 2}\n'
    with path.open("ab") as f:
        f.write(b': 3}\n')
    assert [json.loads(x.data) for x in tail.read_new()[1]] == [{"a": 3}]
    assert tail.read_new()[1] == []
    path.write_bytes(b'{"b": 1}\n')
    reset, lines = tail.read_new()
    assert reset and [json.loads(x.data) for x in lines] == [{"b": 1}]


def test_farm_run_counts_filters_and_opens_episodes(runs: Path) -> None:
    run = FarmRun(runs / "toolcalc")
    status = run.status()
    assert (status["done"], status["total"], status["completed"], status["infra_errors"]) == (12, 12, 12, 0)
    assert status["state"] == "finished" and status["mean_reward"] == 1.0 and status["steps"] >= 12
    assert status["series"]["done"][-1] == 12 and set(status["time_split"]) >= {"sandbox", "env", "farm"}
    assert status["pool"]["started_total"] >= 4, "live.json carries the pool's counters"
    assert run.episodes(EpisodeFilter())["matched"] == 12
    assert run.episodes(EpisodeFilter(min_reward=1.5))["matched"] == 0
    assert run.episodes(EpisodeFilter(infra=True))["matched"] == 0
    assert run.episodes(EpisodeFilter(status="completed", env="envfarm/ToolCalc-v0"))["matched"] == 12
    page = run.episodes(EpisodeFilter(), offset=2, limit=3)["rows"]
    assert [r["index"] for r in page] == [9, 8, 7]
    ep = run.episode(5)
    assert ep is not None and ep["index"] == 5 and [c["tool"] for c in ep["calls"]][-1] == "submit"
    assert ep["code_repair"] is None and run.episode(99) is None


def test_farm_run_reads_the_spool_incrementally(runs: Path, tmp_path: Path) -> None:
    src = runs / "toolcalc"
    dst = tmp_path / "copy"
    dst.mkdir()
    (dst / "run.json").write_text((src / "run.json").read_text())
    lines = (src / "spool.jsonl").read_bytes().splitlines(keepends=True)
    (dst / "spool.jsonl").write_bytes(b"".join(lines[:5]) + lines[5][:40])
    run = FarmRun(dst)
    assert run.status()["done"] == 5
    first_offset = run.spool.offset
    with (dst / "spool.jsonl").open("ab") as f:
        f.write(lines[5][40:] + b"".join(lines[6:]) + b"not json\n")
    run.refresh(force=True)
    assert run.status()["done"] == 12 and run.bad_lines == 1 and run.spool.offset > first_offset
    assert run.status()["state"] == "unknown", "no live.json and no summary: nothing claims the run ended"


def test_live_json_written_by_the_farm(runs: Path) -> None:
    live = read_live(runs / "toolcalc")
    assert live is not None and live["state"] == "finished" and live["done"] == 12 and live["active"] == 0
    assert live["max_active"] == 4 and live["steps"] == FarmRun(runs / "toolcalc").status()["steps"]
    assert live["run_id"] == json.loads((runs / "toolcalc" / "run.json").read_text())["run_id"]
    assert set(live["time_s"]) == {"sandbox", "policy", "env", "queue", "total"}
    assert live["time_s"]["total"] > 0


def test_code_repair_episode_shows_diff_tests_and_logs(runs: Path) -> None:
    run = FarmRun(runs / "repair")
    gold, half, tampered = (run.episode(i) for i in range(3))
    assert gold is not None and half is not None and tampered is not None
    cr = gold["code_repair"]
    assert cr["resolved"] is True and cr["patch"].startswith("diff --git a/calc/ops.py")
    assert cr["tests"]["FAIL_TO_PASS"]["success"] == ["tests/test_ops.py::test_mul",
                                                      "tests/test_ops.py::test_div"]
    assert "1 failed, 3 passed" in cr["test_logs"][0]
    assert half["code_repair"]["tests"]["FAIL_TO_PASS"]["failure"] == ["tests/test_ops.py::test_div"]
    assert any(f.startswith("conftest: conftest.py") for f in tampered["code_repair"]["findings"])


def test_trainer_run_tolerates_missing_fields_unknown_kinds_and_bad_lines(tmp_path: Path) -> None:
    folder = write_trainer_run(tmp_path / "t", [
        {"kind": "update", "time": 1.0, "step": 1, "phase": "sft", "loss": 2.5, "lr": 1e-3},
        {"kind": "update", "time": 2.0, "step": 2, "phase": "rl", "loss": float("nan"), "reward_mean": 0.5,
         "kl": 0.01, "clip_frac": 0.2, "lr": 1e-3, "samples": 8, "tokens": 100, "version": 1, "extra": "x"},
        {"kind": "publish", "version": 1},
        {"kind": "eval", "phase": "before_rl", "mean_reward": 0.25},
        {"kind": "something_new", "time": 3.0},
        {"no_kind": True},
    ])
    with (folder / "metrics.jsonl").open("a") as f:
        f.write("[1, 2]\nnot json\n")
    view = TrainerRun(folder).view()
    assert view["n_updates"] == 2 and view["updates"][0]["reward_mean"] is None
    assert view["last"]["version"] == 1 and view["publishes"] == [{"time": None, "version": 1, "bytes": None,
                                                                   "seconds": None}]
    assert view["evals"][0]["episodes"] is None and view["summary"]["diff_ci95"] == [0.29, 0.35]
    assert view["unknown_kinds"] == ["None", "something_new"] and view["bad_lines"] == 2


def test_trainer_run_downsamples_long_runs(tmp_path: Path) -> None:
    recs = [{"kind": "update", "time": float(i), "step": i, "loss": 1.0 / (i + 1), "grad_norm": 1.0,
             **({"held_out_match": i / 5000} if i % 25 == 0 else {})} for i in range(5000)]
    view = TrainerRun(write_trainer_run(tmp_path / "t", recs)).view()
    assert view["n_updates"] == 5000 and len(view["updates"]) <= 501 + 200
    assert view["updates"][-1]["step"] == 4999
    assert sum("held_out_match" in u["extra"] for u in view["updates"]) == 200, "sparse keys are all kept"


def test_harness_run_reads_the_harness_reports(runs: Path) -> None:
    (src,) = [s for s in discover([runs / "reports"]) if s.kind == "harness"]
    run = HarnessRun(src)
    view = run.view()
    assert view["counts"] == {"resolved": 1, "unresolved": 2, "error": 1, "empty_patch": 1}
    assert view["summary"]["resolved_ids"] == ["envfarm-tests__calc-1"]
    rows = {r["instance_id"]: r for r in view["rows"]}
    assert rows["envfarm-tests__calc-2"]["f2p"] == [1, 2] and rows["envfarm-tests__calc-2"]["status"] == \
        "RESOLVED_PARTIAL"
    assert rows["envfarm-tests__calc-3"]["tamper"] == ["conftest"]
    timed_out = rows["envfarm-tests__calc-4"]
    assert timed_out["error_kind"] == "env_timeout" and timed_out["infra"]
    inst = run.instance("envfarm-tests__calc-3")
    assert inst is not None and inst["findings"][0]["rule"] == "conftest"
    assert "conftest.py" in inst["findings"][0]["rule_text"]
    assert set(inst["logs"]) == {"test_output.txt", "patch.diff", "applied.diff", "eval.sh",
                                 "run_instance.log"}
    assert "PASSED tests/test_ops.py::test_mul" in inst["logs"]["test_output.txt"]
    assert run.instance("nope") is None


def test_a_harness_instance_still_running_or_unreadable(runs: Path, tmp_path: Path) -> None:
    report_dir = tmp_path / "reports"
    inst = report_dir / "r9" / "m" / "x__y-1"
    inst.mkdir(parents=True)
    (inst / "run_instance.log").write_text("building image\n")
    run = HarnessRun(Source("harness", report_dir, "r9", "m"))
    assert run.view()["rows"][0]["outcome"] == "running"
    (inst / "report.json").write_text("{broken")
    run.refresh(force=True)
    row = run.view()["rows"][0]
    assert row["outcome"] == "unreadable" and "report.json is unreadable" in row["error"]


def test_a_stopped_farm_and_a_farm_that_died(tmp_path: Path) -> None:
    """stop() mid-run: live.json says stopped, the interrupted episodes are counted; a live.json left at
    "running" and no longer rewritten reads as a farm that is not responding."""
    import asyncio

    from envfarm.rollout import Farm, FarmConfig
    from envfarm.rollout.policies import EpisodeView, Reply
    from envfarm.testing.dashboard_runs import SlowOracle

    class StopWhileActing(SlowOracle):
        """Stops the farm from inside an action once three episodes are delivered: the acting episode is
        then surely in flight (a stop between episodes, when every slot is leasing or recording, is not)."""

        farm: Farm | None = None

        async def act(self, view: EpisodeView) -> Reply:
            if self.farm is not None:
                self.farm.stop(cancel=True)
            return await super().act(view)

    async def run_and_stop() -> None:
        policy = StopWhileActing(0.1)
        farm = Farm(FarmConfig(env_id="envfarm/ToolCalc-v0", episodes=40, concurrency=4, backend="bwrap"),
                    policy, run_dir=tmp_path / "stopped")
        n = 0
        async for _ in farm.run():
            n += 1
            if n == 3:
                policy.farm = farm

    asyncio.run(run_and_stop())
    live = read_live(tmp_path / "stopped")
    assert live is not None and live["state"] == "stopped" and live["stopped"] == "interrupted"
    status = FarmRun(tmp_path / "stopped").status()
    assert status["state"] == "stopped" and status["interrupted"] >= 1 and 3 <= status["done"] < 40
    live["state"], live["time"] = "running", live["time"] - 60
    (tmp_path / "stopped" / "live.json").write_text(json.dumps(live))
    assert FarmRun(tmp_path / "stopped").status()["state"] == "not responding"


def test_ray_nodes_in_live_json_reach_the_view(runs: Path, tmp_path: Path) -> None:
    import shutil

    run_dir = tmp_path / "ray"
    shutil.copytree(runs / "toolcalc", run_dir)
    live = read_live(run_dir)
    assert live is not None and live["nodes"] is None, "a farm without Ray has no nodes"
    node = {"node_id": "n1", "address": "127.0.0.1", "hostname": "head", "head": True, "capacity": 2,
            "slots": 4, "episodes": 12, "steps": 24, "episodes_per_s": 3.0, "steps_per_s": 6.0, "requeued": 0,
            "lost": None}
    live.update(nodes=[node], pool=None)
    (run_dir / "live.json").write_text(json.dumps(live))
    status = FarmRun(run_dir).status()
    assert status["nodes"] == [node] and status["pool"] is None


def test_a_trainer_folders_farm_runs_are_listed(runs: Path, tmp_path: Path) -> None:
    import shutil

    folder = write_trainer_run(tmp_path / "train")
    shutil.copytree(runs / "toolcalc", folder / "runs" / "rl")
    kinds = sorted((s.kind, s.name) for s in discover([folder]))
    assert kinds == [("farm", "train · rl"), ("trainer", "train")]
    assert sorted((s.kind, s.name) for s in discover([tmp_path])) == kinds, "also from the folder above"


def test_the_trainers_own_metrics_writer(tmp_path: Path) -> None:
    """metrics.jsonl as envfarm.trainer.metrics.Metrics writes it (extra keys included)."""
    from envfarm.trainer.metrics import Metrics

    m = Metrics(tmp_path / "t", tensorboard=False)
    m.update(step=1, phase="sft", loss=2.0, reward_mean=None, kl=None, clip_frac=None, lr=1e-3, samples=8,
             tokens=100, version=0, grad_norm=1.5)
    m.eval(arm="sft", mode="sampled", mean_reward=0.25, episodes=8, infra_errors=0)
    m.update(step=1, phase="rl", loss=0.1, reward_mean=0.5, kl=0.01, clip_frac=0.2, lr=3e-4, samples=32,
             tokens=900, version=1)
    m.publish(version=1, bytes=1000, seconds=0.5)
    m.close()
    view = TrainerRun(tmp_path / "t").view()
    assert [u["phase"] for u in view["updates"]] == ["sft", "rl"] and view["last"]["version"] == 1
    assert view["updates"][0]["extra"] == {"grad_norm": 1.5} and view["updates"][1]["extra"] == {}
    assert view["publishes"][0]["bytes"] == 1000 and view["evals"][0]["mean_reward"] == 0.25
    assert view["unknown_kinds"] == [] and view["bad_lines"] == 0 and view["summary"] is None


def test_time_series_buckets() -> None:
    from types import SimpleNamespace

    from envfarm.dashboard.series import time_series

    rows = [SimpleNamespace(status="infra_error" if i % 10 == 0 else "completed", reward=1.0, steps=2,
                            started_at=100 + i * 0.1, finished_at=100.5 + i * 0.1) for i in range(100)]
    s = time_series(rows)
    assert len(s["t"]) == 21 and s["done"][-1] == 100 and s["infra_errors"][-1] == 10
    assert s["t"][-1] == 10.4 and s["steps_per_s"][-1] == 25.0, "the last bucket's rate is over its own span"
    assert s["reward_mean"][0] is None and s["reward_mean"][-1] == 1.0
    assert time_series([])["t"] == []
