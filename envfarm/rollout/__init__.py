"""The rollout farm: many episodes of any registered env in flight on one asyncio loop (read farm.py first).

    from envfarm.rollout import Farm, FarmConfig, FileSink, make_policy

    config = FarmConfig(env_id="envfarm/ToolCalc-v0", episodes=1000, concurrency=64, backend="bwrap")
    farm = Farm(config, make_policy("oracle"), run_dir=Path("runs/a"), sinks=[FileSink(Path("out.jsonl"))])
    async for traj in farm.run():
        print(traj.episode_id, traj.reward, traj.infra_error)

Files: ``trajectory.py`` (what an episode produced), ``policies.py`` / ``openai_policy.py`` (what acts),
``episode.py`` (one episode, retries), ``groups.py`` (a task's attempts forked from one reset), ``farm.py``
(many), ``spool.py`` / ``sinks.py`` (durable delivery), ``receiver.py`` (the learner's ingest endpoint),
``runs.py`` (run folders, resume), ``summary.py``, ``eval.py`` (pass@k).
"""

from __future__ import annotations

from .eval import Estimate, EvalReport, TaskResult, evaluate, pass_at_k, run_eval
from .farm import Farm, FarmConfig
from .openai_policy import OpenAIPolicy
from .policies import CallablePolicy, EpisodeView, OraclePolicy, Policy, RandomPolicy, Reply
from .policy_spec import make_policy
from .receiver import Receiver
from .runs import RunDir, RunSpec
from .sinks import Delivery, FileSink, HTTPSink, Sink
from .spool import Spool
from .summary import Summary
from .trajectory import Timings, Trajectory, Turn

__all__ = [
    "CallablePolicy", "Delivery", "EpisodeView", "Estimate", "EvalReport", "Farm", "FarmConfig", "FileSink",
    "HTTPSink", "OpenAIPolicy", "OraclePolicy", "Policy", "RandomPolicy", "Receiver", "Reply", "RunDir",
    "RunSpec", "Sink", "Spool", "Summary", "TaskResult", "Timings", "Trajectory", "Turn", "evaluate",
    "make_policy", "pass_at_k", "run_eval",
]
