"""``envfarm farm run|receive`` and ``envfarm eval``: the rollout farm from the command line.

    envfarm farm run --env envfarm/ToolCalc-v0 --episodes 1000 --concurrency 64 --policy oracle \\
        --backend bwrap --trajectories rollouts.jsonl --summary summary.json [--learner URL] \\
        [--max-staleness K]
    envfarm farm run --resume runs/20250101-120000-4242          # continue an interrupted run
    envfarm farm deliver runs/20250101-120000-4242               # hand a stopped run's spool to its sinks
    envfarm farm receive --port 8100 --store received.jsonl       # a stand-in learner endpoint
    envfarm eval --env envfarm/ToolCalc-v0 --policy openai:http://127.0.0.1:8000/v1 --num-tasks 200 \
        --attempts 4
    envfarm farm run --ray 10.0.0.1:6379 ...                      # one worker per node of a Ray cluster

Ctrl-C (or SIGTERM) drains: no new episodes, the ones in flight finish; a second Ctrl-C cancels them (they are
re-run by ``--resume``). Either way the spool is flushed and the summary written; the exit code is 130.
A FarmError (policy server down, learner gone) is printed by the root app as one ``error:`` line, exit 2.
Whatever way a run stops, every healthy sink has every finished trajectory; what a sink that was down did
not take waits in RUN/spool.jsonl, and the summary and the error say so and name ``envfarm farm deliver RUN``.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import time
from collections.abc import Awaitable
from pathlib import Path
from typing import Annotated, Any, TypeVar

import typer
from rich.console import Console
from rich.live import Live
from rich.table import Table

from envfarm.errors import ConfigError, FarmError, LearnerUnavailable
from envfarm.rollout.deliver import LEARNER_BACKLOG, DeliveryCount, deliver_run, run_sinks
from envfarm.rollout.eval import EvalReport, eval_farm, report_run
from envfarm.rollout.farm import Farm, FarmConfig
from envfarm.rollout.policies import Policy
from envfarm.rollout.policy_spec import make_policy
from envfarm.rollout.receiver import serve
from envfarm.rollout.runs import RunSpec, read_spec
from envfarm.sandbox.values import TIMEOUTS

from .farm_view import FarmView, summary_table
from .options import config_option, old_spelling

EXIT_INTERRUPTED = 130

app = typer.Typer(name="farm", help="Run many episodes at once: rollouts to JSONL and to a learner.",
                  no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False)
console = Console()
err_console = Console(stderr=True)
T = TypeVar("T")

# Options shared by `farm run` and `eval`; those that set a FarmConfig field take help and default from it.
EnvOpt = Annotated[str | None, config_option(FarmConfig, "env_id", "--env")]
PolicyOpt = Annotated[str | None, typer.Option(help="oracle | random | openai:URL (an OpenAI-style server).")]
BackendOpt = Annotated[str | None, config_option(FarmConfig, "backend", config_default=True)]
ConcurrencyOpt = Annotated[int, config_option(FarmConfig, "concurrency", min=1)]
StepSlotsOpt = Annotated[int | None, config_option(FarmConfig, "step_slots", min=1, config_default=True)]
SeedOpt = Annotated[int | None, config_option(FarmConfig, "seed", config_default=True)]
ResumeOpt = Annotated[Path | None, typer.Option(help="Continue this run folder (no episode runs twice).")]
RunDirOpt = Annotated[Path | None, typer.Option(help="Run folder to create \\[default: runs/<time>-<pid>].")]
EnvArgsOpt = Annotated[str | None, config_option(FarmConfig, "env_kwargs", "--env-kwargs",
                                                more='As JSON: \'{"difficulty": 2}\'.')]
ModelOpt = Annotated[str | None, typer.Option(
    help="openai: model name \\[default: the server's first model].")]
PolicyTimeoutOpt = Annotated[float, typer.Option(help="openai: seconds per request.")]
PolicyRetriesOpt = Annotated[int, typer.Option(min=0, help="openai: retries on 429/5xx/timeouts (backoff).")]
TemperatureOpt = Annotated[float, typer.Option(help="openai: sampling temperature.")]
MaxTokensOpt = Annotated[int, typer.Option(min=1, help="openai: max tokens per completion.")]
RayOpt = Annotated[str | None, typer.Option(
    "--ray", help="Run on the Ray cluster at this address (HOST:PORT of the head's GCS, or auto): one worker "
    "per node, each with its node's backend and images; --concurrency is split by node capacity and "
    "--step-slots applies per node.")]
RayResourceOpt = Annotated[str | None, typer.Option(
    "--ray-resource", help="With --ray: a worker only on nodes with this custom resource, sized by its "
    "amount (without it: every node, sized by its CPUs).")]


def _policy(spec: str, concurrency: int, model: str | None, timeout: float, retries: int, temperature: float,
            max_tokens: int) -> Policy:
    if spec.startswith("openai:"):
        return make_policy(spec, model=model, timeout_s=timeout, max_retries=retries, temperature=temperature,
                           max_tokens=max_tokens, max_connections=min(concurrency, 256))
    return make_policy(spec)


def _prior(resume: Path | None) -> RunSpec | None:
    """The stored spec of the run being resumed (a clear error when the folder is not a run)."""
    return None if resume is None else read_spec(resume)


def _pick(given: T | None, prior: T | None, name: str, default: T | None = None) -> T:
    value = given if given is not None else prior if prior is not None else default
    if value is None:
        raise ConfigError(f"{name} is required (or --resume RUN to continue a run)")
    return value


def _option(given: T | None, prior: RunSpec | None, key: str, convert: Any = None) -> T | None:
    """``given``, else what the resumed run was started with (``run.json`` options), else None."""
    if given is not None or prior is None or prior.options.get(key) is None:
        return given
    value = prior.options[key]
    return convert(value) if convert is not None else value


def _env_kwargs(text: str | None, prior: RunSpec | None) -> dict[str, Any]:
    if text is None:
        return dict(prior.env_kwargs) if prior is not None else {}
    return parse_env_kwargs(text)


def parse_env_kwargs(text: str) -> dict[str, Any]:
    """``--env-kwargs`` JSON as a dict; ConfigError with an example otherwise."""
    try:
        value = json.loads(text)
    except json.JSONDecodeError as e:
        raise ConfigError(f"--env-kwargs is not JSON ({e}); e.g. --env-kwargs '{{\"difficulty\": 2}}'") from e
    if not isinstance(value, dict):
        raise ConfigError(f"--env-kwargs must be a JSON object, got {type(value).__name__}")
    return value


def _files(*options: tuple[str, Path | None]) -> None:
    """ConfigError for an output option that names a folder (found now, not when the run ends)."""
    for option, path in options:
        if path is not None and path.is_dir():
            raise ConfigError(f"{option} {path} is a folder; give a file in it, e.g. {path / 'out.json'}")


def _make_farm(config: FarmConfig, policy: Policy, ray: str | None, ray_resource: str | None,
               **kw: Any) -> Farm:
    """A one-machine Farm, or with ``--ray`` a RayFarm (ray is imported only then)."""
    if ray is None:
        if ray_resource is not None:
            raise ConfigError("--ray-resource selects nodes of a Ray cluster: add --ray ADDRESS")
        return Farm(config, policy, **kw)
    from envfarm.rollout.ray_farm import RayConfig, RayFarm

    return RayFarm(config, policy, RayConfig(ray, ray_resource), **kw)


def _new_run_dir(run_dir: Path | None) -> Path:
    return run_dir or Path("runs") / f"{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}"


async def _drive(farm: Farm, work: Awaitable[T], title: str, quiet: bool) -> T:
    """Run ``work`` under the live view; Ctrl-C/SIGTERM drain the farm, a second one cancels."""
    loop = asyncio.get_running_loop()
    presses = 0

    def interrupt() -> None:
        nonlocal presses
        presses += 1
        farm.stop(cancel=presses > 1)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, interrupt)
    try:
        if quiet:
            return await work
        with Live(FarmView(farm, title), console=err_console, refresh_per_second=4, transient=False):
            return await work
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def _consume(farm: Farm) -> None:
    async for _ in farm.run():
        pass


def _finish(farm: Farm) -> None:
    """Print the summary; exit 130 when interrupted; LearnerUnavailable when a sink missed records."""
    s = farm.summary()
    console.print(summary_table(s))
    if s.run_dir:
        console.print(f"run folder: {s.run_dir}  (continue with: envfarm farm run --resume {s.run_dir})")
    if s.stopped == "interrupted":
        if s.undelivered is not None:
            err_console.print(s.undelivered.message(), highlight=False, soft_wrap=True)
        raise typer.Exit(EXIT_INTERRUPTED)
    if s.undelivered is not None:
        raise LearnerUnavailable(s.undelivered.message())


@app.command("run")
def run_command(
    env: EnvOpt = None,
    episodes: Annotated[int | None, config_option(FarmConfig, "episodes", min=0)] = None,
    concurrency: ConcurrencyOpt = FarmConfig.concurrency,
    step_slots: StepSlotsOpt = None,
    policy: PolicyOpt = None,
    backend: BackendOpt = None,
    out: Annotated[Path | None, typer.Option(
        "--trajectories", help="JSONL file of trajectories, one per line.")] = None,
    old_out: Annotated[Path | None, typer.Option("--out", hidden=True, help="Deprecated: --trajectories.")
                       ] = None,
    summary: Annotated[Path | None, typer.Option(help="Also write the summary as JSON to this file.")] = None,
    learner: Annotated[str | None, typer.Option(help="Stream trajectories to this learner (NDJSON POSTs to "
                                                "URL/trajectories).")] = None,
    max_staleness: Annotated[int | None, config_option(FarmConfig, "max_staleness", min=0)] = None,
    resume: ResumeOpt = None,
    run_dir: RunDirOpt = None,
    seed: SeedOpt = None,
    env_kwargs: EnvArgsOpt = None,
    model: ModelOpt = None,
    policy_timeout: PolicyTimeoutOpt = TIMEOUTS.request_s,
    policy_retries: PolicyRetriesOpt = 6,
    temperature: TemperatureOpt = 1.0,
    max_tokens: MaxTokensOpt = 1024,
    learner_backlog: Annotated[int, typer.Option(
        min=1, help="Undelivered trajectories at which the farm waits for the learner.")] = LEARNER_BACKLOG,
    learner_timeout: Annotated[float, config_option(FarmConfig, "learner_timeout_s")
                               ] = FarmConfig.learner_timeout_s,
    flush_timeout: Annotated[float, config_option(FarmConfig, "flush_timeout_s", min=0)
                             ] = FarmConfig.flush_timeout_s,
    ray: RayOpt = None,
    ray_resource: RayResourceOpt = None,
    quiet: Annotated[bool, typer.Option(help="No live view.")] = False,
) -> None:
    """Run episodes of any registered env with a policy; stream trajectories to a file and/or a learner."""
    prior = _prior(resume)
    ray, ray_resource = _option(ray, prior, "ray"), _option(ray_resource, prior, "ray_resource")
    out = old_spelling(out, old_out, "farm run --out FILE", "farm run --trajectories FILE")
    out, summary = _option(out, prior, "out", Path), _option(summary, prior, "summary", Path)
    learner = _option(learner, prior, "learner")
    max_staleness = _option(max_staleness, prior, "max_staleness")
    if learner is None and max_staleness is not None:
        raise ConfigError("--max-staleness compares with the learner's weight version: add --learner URL")
    _files(("--trajectories", out), ("--summary", summary))
    if out is not None and resume is None and out.exists() and out.stat().st_size:
        raise ConfigError(f"{out} already holds trajectories; continue its run with --resume RUN, or choose "
                          "another --trajectories file")
    spec = _pick(policy, prior.policy if prior else None, "--policy")
    config = FarmConfig(
        env_id=_pick(env, prior.env_id if prior else None, "--env"),
        episodes=_pick(episodes, prior.episodes if prior else None, "--episodes"),
        concurrency=concurrency, backend=_pick(backend, prior.backend if prior else None, "--backend",
                                               FarmConfig.backend),
        seed=_pick(seed, prior.seed if prior else None, "--seed", FarmConfig.seed),
        env_kwargs=_env_kwargs(env_kwargs, prior), max_staleness=max_staleness,
        learner_timeout_s=learner_timeout, flush_timeout_s=flush_timeout, step_slots=step_slots)
    sinks = run_sinks({"out": out, "learner": learner}, learner_backlog)
    pol = _policy(spec, concurrency, model, policy_timeout, policy_retries, temperature, max_tokens)
    options = {"out": str(out) if out else None, "summary": str(summary) if summary else None,
               "learner": learner, "max_staleness": max_staleness, "ray": ray, "ray_resource": ray_resource}
    farm = _make_farm(config, pol, ray, ray_resource, run_dir=resume or _new_run_dir(run_dir),
                      resume=resume is not None, sinks=sinks, summary_path=summary, options=options)
    try:
        asyncio.run(_drive(farm, _consume(farm), f"{config.env_id} · {pol.name}", quiet))
    except FarmError:
        if farm.run_dir is not None:
            console.print(summary_table(farm.summary()))
            console.print(f"run folder: {farm.run_dir.path}")
        raise
    _finish(farm)


@app.command("deliver")
def deliver_command(
    run: Annotated[Path, typer.Argument(help="The run folder whose spooled trajectories to deliver.")],
    timeout: Annotated[float, typer.Option(min=0, help="Seconds to keep trying a sink that is down.")] = 60.0,
) -> None:
    """Deliver a stopped run's spooled trajectories to the sinks it was started with (--trajectories,
    --learner), each from where it stopped; runs no episode."""
    counts = asyncio.run(deliver_run(run, timeout_s=timeout))
    console.print(_deliveries_table(run, counts))
    waiting = {name: c for name, c in counts.items() if c.backlog}
    if waiting:
        detail = "; ".join(f"{name}: {c.backlog} left ({c.last_error})" for name, c in waiting.items())
        raise LearnerUnavailable(f"not every sink of {run} took its trajectories within {timeout:.0f}s: "
                                 f"{detail}. Bring it up, then run `envfarm farm deliver {run}` again")


def _deliveries_table(run: Path, counts: dict[str, DeliveryCount]) -> Table:
    table = Table(title=f"deliveries of {run}")
    for col in ("sink", "delivered", "left"):
        table.add_column(col)
    for name, c in counts.items():
        table.add_row(name, str(c.delivered), str(c.backlog))
    return table


@app.command("receive")
def receive_command(
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8100,
    host: Annotated[str, typer.Option(help="Address to bind (loopback by default).")] = "127.0.0.1",
    store: Annotated[Path | None, typer.Option(help="JSONL file of accepted trajectories (dedup survives "
                                               "restarts).")] = None,
    weight_version: Annotated[str, typer.Option(help="The weight version to report.")] = "0",
    max_staleness: Annotated[int | None, typer.Option(help="Drop trajectories K+ versions old.")] = None,
) -> None:
    """A minimal learner endpoint: accepts NDJSON trajectories, dedups on episode_id, reports a version."""
    from envfarm.rollout.openai_policy import parse_version

    asyncio.run(serve(host, port, store, parse_version(weight_version), max_staleness,
                      ready=lambda url: console.print(f"listening on {url}/trajectories")))


def eval_command(
    env: EnvOpt = None,
    policy: PolicyOpt = None,
    n_tasks: Annotated[int | None, typer.Option(
        "--num-tasks", min=1,
        help="Tasks (seeds seed .. seed+N-1), each attempted --attempts times.")] = None,
    attempts: Annotated[int | None, typer.Option(min=1, help="Attempts per task, the k of pass@k.")] = None,
    backend: BackendOpt = None,
    concurrency: ConcurrencyOpt = FarmConfig.concurrency,
    step_slots: StepSlotsOpt = None,
    seed: SeedOpt = None,
    success_threshold: Annotated[float, typer.Option(help="An attempt succeeds when its return is at least "
                                                     "this.")] = 1.0,
    report_file: Annotated[Path | None, typer.Option(
        "--report", help="Also write the report as JSON to this file (it is in RUN/eval.json).")] = None,
    resume: ResumeOpt = None,
    run_dir: RunDirOpt = None,
    env_kwargs: EnvArgsOpt = None,
    model: ModelOpt = None,
    policy_timeout: PolicyTimeoutOpt = TIMEOUTS.request_s,
    policy_retries: PolicyRetriesOpt = 6,
    temperature: TemperatureOpt = 1.0,
    max_tokens: MaxTokensOpt = 1024,
    ray: RayOpt = None,
    ray_resource: RayResourceOpt = None,
    quiet: Annotated[bool, typer.Option(help="No live view.")] = False,
    old_episodes: Annotated[int | None, typer.Option(
        "--episodes", hidden=True, min=1, help="Deprecated: --num-tasks.")] = None,
    old_out: Annotated[Path | None, typer.Option("--out", hidden=True, help="Deprecated: --report.")] = None,
) -> None:
    """Evaluate a policy on an env: pass@1 and unbiased pass@k with 95% CIs, per-task results; resumable."""
    n_tasks = old_spelling(n_tasks, old_episodes, "eval --episodes N", "eval --num-tasks N")
    out = old_spelling(report_file, old_out, "eval --out FILE", "eval --report FILE")
    prior = _prior(resume)
    ray, ray_resource = _option(ray, prior, "ray"), _option(ray_resource, prior, "ray_resource")
    _files(("--report", out))
    k = _pick(attempts, prior.attempts if prior else None, "--attempts", 1)
    tasks = _pick(n_tasks, prior.episodes // prior.attempts if prior else None, "--num-tasks")
    spec = _pick(policy, prior.policy if prior else None, "--policy")
    config = FarmConfig(
        env_id=_pick(env, prior.env_id if prior else None, "--env"), episodes=tasks * k, attempts=k,
        concurrency=concurrency, backend=_pick(backend, prior.backend if prior else None, "--backend",
                                               FarmConfig.backend),
        seed=_pick(seed, prior.seed if prior else None, "--seed", FarmConfig.seed),
        env_kwargs=_env_kwargs(env_kwargs, prior), step_slots=step_slots)
    pol = _policy(spec, concurrency, model, policy_timeout, policy_retries, temperature, max_tokens)
    folder = resume or _new_run_dir(run_dir)
    if ray is None and ray_resource is None:
        farm = eval_farm(config, pol, folder, resume=resume is not None)
    else:
        farm = _make_farm(config, pol, ray, ray_resource, run_dir=folder, resume=resume is not None,
                          options={"ray": ray, "ray_resource": ray_resource})
    report = asyncio.run(_eval(farm, folder, success_threshold, quiet))
    console.print(summary_table(farm.summary()))
    if report is None:
        raise typer.Exit(EXIT_INTERRUPTED)
    data = json.dumps(report.to_dict(), indent=2) + "\n"
    (folder / "eval.json").write_text(data)
    if out is not None:
        out.write_text(data)
    console.print(report_table(report))
    console.print(f"run folder: {folder}  (per-task results in {folder / 'eval.json'})")


async def _eval(farm: Farm, folder: Path, threshold: float, quiet: bool) -> EvalReport | None:
    """Play the evaluation under the live view; None when interrupted (``--resume`` continues it)."""
    await _drive(farm, _consume(farm), f"eval {farm.config.env_id} · {farm.policy.name}", quiet)
    if farm.stopped == "interrupted":
        return None
    return await report_run(folder, threshold)


def report_table(report: EvalReport) -> Table:
    title = f"{report.env_id} · {report.policy}: {report.tasks} tasks x {report.attempts} attempts"
    table = Table(title=title)
    for col in ("metric", "value", "95% CI", "tasks", "method"):
        table.add_column(col)
    for name, est in report.metrics.items():
        ci = f"[{est.low:.3f}, {est.high:.3f}]"
        table.add_row(name, f"{est.value:.3f}", ci, str(est.n_tasks), est.method)
    if report.infra_errors:
        table.caption = f"{report.infra_errors} attempts broken by the infrastructure were left out"
    return table


__all__ = ["app", "eval_command", "parse_env_kwargs"]
