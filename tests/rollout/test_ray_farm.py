"""The farm on a real two-node Ray cluster on this machine (ray.cluster_utils, every port on 127.0.0.1):
400 episodes over both nodes, a node lost mid-run, ``envfarm farm run|eval --ray`` and their errors."""

from __future__ import annotations

import asyncio
import ipaddress
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray.cluster_utils
from rollout_support import free_port, read_jsonl

from envfarm.errors import ClusterUnavailable
from envfarm.rollout import FarmConfig, FileSink, Trajectory, make_policy
from envfarm.rollout.ray_farm import RayConfig, RayFarm

pytestmark = [pytest.mark.bwrap, pytest.mark.slow]  # ray is in `make setup`: missing, these fail
TOOLCALC = "envfarm/ToolCalc-v0"
NODE = {"num_cpus": 1, "node_ip_address": "127.0.0.1", "object_store_memory": 100 * 2**20}
ENV = ["--env", TOOLCALC, "--backend", "bwrap", "--policy", "oracle", "--quiet"]


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    """A head and a second node, each with one CPU, 100 MB of object store, no dashboard, no usage stats;
    only the head has the custom resource ``envfarm``."""
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("RAY_USAGE_STATS_ENABLED", "0")
        c = ray.cluster_utils.Cluster(initialize_head=True, head_node_args={
            **NODE, "include_dashboard": False, "resources": {"envfarm": 3}})
        try:
            c.add_node(**NODE)
            c.wait_for_nodes()
            yield c
        finally:
            c.shutdown()


def config(episodes: int, concurrency: int = 16, **kw: Any) -> FarmConfig:
    return FarmConfig(env_id=TOOLCALC, episodes=episodes, concurrency=concurrency, backend="bwrap",
                      step_slots=4, **kw)


def spool_indices(run: Path) -> list[int]:
    return sorted(x["index"] for x in read_jsonl(run / "spool.jsonl"))


def descendants(pid: int) -> set[int]:
    parents: dict[int, int] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (OSError, IndexError):
            continue
        parents[int(stat.parent.name)] = int(fields[1])
    out, todo = set(), [pid]
    while todo:
        p = todo.pop()
        kids = [c for c, pp in parents.items() if pp == p and c not in out]
        out.update(kids)
        todo.extend(kids)
    return out


def loopback(address: str) -> bool:
    """``127.0.0.1:80``, ``[::1]:80``, ``[::ffff:127.0.0.1]:80`` are on loopback; ``*:80``, ``0.0.0.0:80``
    are not."""
    host = address.rsplit(":", 1)[0].strip("[]")
    try:
        ip = ipaddress.ip_address(host)
    except ValueError:
        return False
    mapped = getattr(ip, "ipv4_mapped", None)
    return (mapped or ip).is_loopback


def listeners(pids: set[int]) -> list[str]:
    """Local addresses of the TCP sockets that ``pids`` listen on (``ss -tlnp``)."""
    lines = subprocess.run(["ss", "-Htlnp"], capture_output=True, text=True, check=True).stdout.splitlines()
    return [line.split()[3] for line in lines
            if {int(p) for p in re.findall(r"pid=(\d+)", line)} & pids]


async def test_400_episodes_over_two_nodes_on_loopback(cluster: Any, tmp_path: Path) -> None:
    run, out = tmp_path / "run", tmp_path / "out.jsonl"
    farm = RayFarm(config(400), make_policy("oracle"), RayConfig(cluster.address), run_dir=run,
                   sinks=[FileSink(out)], summary_path=tmp_path / "summary.json")
    seen: list[Trajectory] = []
    bound: list[str] = []
    async for traj in farm.run():
        seen.append(traj)
        if len(seen) == 20:  # every Ray process is up and busy: none may listen beyond loopback
            bound = await asyncio.to_thread(listeners, descendants(os.getpid()))
    assert len(bound) >= 6 and all(loopback(a) for a in bound), bound
    assert spool_indices(run) == list(range(400)) and len(read_jsonl(out)) == 400
    assert all(t.status == "completed" and t.reward == 1.0 for t in seen)
    s = json.loads((tmp_path / "summary.json").read_text())
    assert (s["episodes_completed"], s["nodes_used"], s["stopped"], s["steps"]) == (400, 2, None, 800)
    per_node = [n["episodes"] for n in s["nodes"].values()]
    assert len(per_node) == 2 and min(per_node) > 0 and sum(per_node) == 400, s["nodes"]
    assert all(n["lost"] is None and n["steps_per_s"] > 0 for n in s["nodes"].values())


async def test_attempts_at_a_task_fork_from_one_prepared_env_on_one_node(cluster: Any,
                                                                        tmp_path: Path) -> None:
    """With --attempts, every attempt at a task goes to one worker, which prepares the task once and forks
    the other attempts from it; rewards are those of independent resets."""
    tasks, attempts = 12, 4
    farm = RayFarm(config(tasks * attempts, concurrency=8, attempts=attempts), make_policy("oracle"),
                   RayConfig(cluster.address), run_dir=tmp_path / "run")
    seen = [traj async for traj in farm.run()]
    assert sorted(t.index for t in seen) == list(range(tasks * attempts))
    assert all(t.status == "completed" and t.reward == 1.0 for t in seen)
    nodes = farm.summary().nodes.values()
    assert sum(n["group_resets"] for n in nodes) == tasks, nodes
    assert sum(n["forks"] for n in nodes) == tasks * (attempts - 1), nodes
    assert all(n["episodes"] > 0 for n in nodes), nodes  # the tasks spread over both nodes


async def test_a_node_lost_mid_run_has_its_episodes_rerun(cluster: Any, tmp_path: Path) -> None:
    doomed = cluster.add_node(**NODE)
    cluster.wait_for_nodes()
    run = tmp_path / "run"
    farm = RayFarm(config(90, concurrency=12), make_policy("oracle"), RayConfig(cluster.address),
                   run_dir=run)
    n = 0
    async for _ in farm.run():
        n += 1
        if n == 15:  # kill the third node (its raylet, its worker, its sandboxes) with episodes in flight
            await asyncio.to_thread(cluster.remove_node, doomed, False)
    assert n == 90 and spool_indices(run) == list(range(90))  # every episode once: none lost, none twice
    s = farm.summary()
    lost = s.nodes[f"127.0.0.1/{doomed.node_id[:6]}"]
    assert lost["lost"] and lost["requeued"] >= 1 and lost["episodes"] >= 1, lost
    survivors = [v for v in s.nodes.values() if v is not lost]
    assert [v["lost"] for v in survivors] == [None, None] and sum(v["slots"] for v in survivors) == 12
    assert s.nodes_used == 3 and s.episodes_completed == 90 and s.stopped is None
    assert sum(v["episodes"] for v in s.nodes.values()) == 90
    cluster.wait_for_nodes()  # until the cluster, too, counts the node as gone


@pytest.mark.usefixtures("slow_disk")
async def test_every_worker_lost_still_delivers_the_finished_ones(cluster: Any, tmp_path: Path) -> None:
    """The driver's stop path: the only worker's node dies mid-run; the run stops with ClusterUnavailable
    and the file sink holds every trajectory the driver recorded, each once (on a slow disk)."""
    doomed = cluster.add_node(**NODE, resources={"doomed": 2})
    cluster.wait_for_nodes()
    run, out = tmp_path / "run", tmp_path / "out.jsonl"
    farm = RayFarm(config(60, concurrency=2), make_policy("oracle"), RayConfig(cluster.address, "doomed"),
                   run_dir=run, sinks=[FileSink(out)])
    n = 0
    with pytest.raises(ClusterUnavailable, match="every farm worker was lost"):
        async for _ in farm.run():
            n += 1
            if n == 6:
                await asyncio.to_thread(cluster.remove_node, doomed, False)
    s = farm.summary()
    ids = [x["episode_id"] for x in read_jsonl(out)]
    assert len(ids) == len(set(ids)) == s.episodes_completed >= 6 and s.sinks["file"]["backlog"] == 0
    assert set(ids) == {x["episode_id"] for x in read_jsonl(run / "spool.jsonl")} and s.undelivered is None
    cluster.wait_for_nodes()


async def test_a_node_without_the_image_fails_the_run_naming_the_node(cluster: Any, tmp_path: Path) -> None:
    farm = RayFarm(config(4, env_kwargs={"image": "envfarm/missing:0"}), make_policy("oracle"),
                   RayConfig(cluster.address), run_dir=tmp_path / "run")
    with pytest.raises(ClusterUnavailable, match=r"worker on Ray node 127\.0\.0\.1/\w+ .*did not start.*"
                                                 r"missing:0"):
        async for _ in farm.run():
            pass
    assert farm.summary().episodes_remaining == 4


async def test_ray_resource_selects_the_nodes(cluster: Any, tmp_path: Path) -> None:
    farm = RayFarm(config(12, concurrency=4), make_policy("oracle"), RayConfig(cluster.address, "envfarm"),
                   run_dir=tmp_path / "run")
    assert len([t async for t in farm.run()]) == 12
    s = farm.summary()
    assert s.nodes_used == 1 and [(v["head"], v["capacity"], v["episodes"]) for v in s.nodes.values()] == [
        (True, 3.0, 12)]


def envfarm(*args: str, timeout: float = 120) -> tuple[int, str]:
    proc = subprocess.run([sys.executable, "-m", "envfarm.cli", *args], capture_output=True, text=True,
                          timeout=timeout)
    return proc.returncode, proc.stdout + proc.stderr


async def test_cli_farm_run_interrupted_then_resumed_and_eval(cluster: Any, tmp_path: Path) -> None:
    run, out, summary = tmp_path / "run", tmp_path / "out.jsonl", tmp_path / "summary.json"
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "envfarm.cli", "farm", "run", *ENV, "--ray", cluster.address, "--episodes",
        "40", "--concurrency", "6", "--trajectories", str(out), "--run-dir", str(run), "--summary",
        str(summary), stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.STDOUT)
    for _ in range(6000):  # up to 60 s for the driver to join and the workers to start
        if len(read_jsonl(out)) >= 8 or proc.returncode is not None:
            break
        await asyncio.sleep(0.01)
    if proc.returncode is None:
        proc.send_signal(signal.SIGINT)  # drains: no new episodes, those in flight on the nodes finish
    text = (await asyncio.wait_for(proc.communicate(), 60))[0].decode()
    assert proc.returncode == 130, text
    s = json.loads(summary.read_text())
    assert s["stopped"] == "interrupted" and 8 <= s["episodes_completed"] < 40 and s["nodes_used"] >= 1
    assert json.loads((run / "run.json").read_text())["options"]["ray"] == cluster.address
    code, text = await asyncio.to_thread(envfarm, "farm", "run", "--resume", str(run), "--quiet")  # its --ray
    assert code == 0, text
    assert sorted(x["index"] for x in read_jsonl(out)) == list(range(40)) == spool_indices(run)
    s = json.loads(summary.read_text())
    assert (s["episodes_completed"], s["nodes_used"]) == (40, 2) and "node 127.0.0.1/" in text
    folder = tmp_path / "eval"
    code, text = await asyncio.to_thread(envfarm, "eval", *ENV, "--ray", cluster.address, "--num-tasks", "6",
                                         "--attempts", "2", "--concurrency", "4", "--run-dir", str(folder))
    assert code == 0, text
    report = json.loads((folder / "eval.json").read_text())
    assert report["tasks"] == 6 and report["metrics"]["pass@1"]["value"] == 1.0
    assert json.loads((folder / "summary.json").read_text())["nodes_used"] == 2


def test_unreachable_cluster_is_an_error_line(tmp_path: Path) -> None:
    address = f"127.0.0.1:{free_port()}"
    code, text = envfarm("farm", "run", *ENV, "--ray", address, "--episodes", "4", "--run-dir",
                         str(tmp_path / "run"), timeout=60)
    assert code == 2 and "error:" in text and f"no Ray cluster answers at {address}" in text, text
    assert "ray start --head" in text and "Traceback" not in text


def test_ray_not_installed_is_an_error_line(tmp_path: Path) -> None:
    code = ("import sys; sys.modules['ray'] = None; from envfarm.cli import main; "
            f"sys.argv = ['envfarm', 'eval', *{ENV!r}, '--ray', 'auto', '--episodes', '2', "
            f"'--run-dir', {str(tmp_path / 'run')!r}]; main()")
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "ray is not installed" in proc.stderr and "make setup" in proc.stderr, \
        proc.stdout + proc.stderr
