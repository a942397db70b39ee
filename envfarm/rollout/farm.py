"""The rollout farm: many episodes of one registered env in flight on one asyncio loop.

    config = FarmConfig(env_id="envfarm/ToolCalc-v0", episodes=1000, concurrency=64, backend="bwrap")
    farm = Farm(config, make_policy("oracle"), run_dir=Path("runs/a"), sinks=[FileSink(Path("out.jsonl"))])
    async for traj in farm.run():           # Trajectory objects, as they finish (already on disk)
        ...
    farm.summary()                           # Summary (also written to RUN/summary.json)

Shape: ``concurrency`` worker tasks in a TaskGroup, each owning one env instance that it reuses episode after
episode; every env leases its sandboxes from the farm's one :class:`Pools` registry, whose pool for the env's
image is kept warm (``environments.start_pools``), so episodes start on warm sandboxes; the attempts at one
task (pass@k, RL groups) start from one prepared env, forked (``groups.py``). A gate (a lock that
one worker holds while it waits) admits each new episode: not after :meth:`stop`, not while a sink's backlog
is full (backpressure from a slow learner), not while the policy's weight version is more than
``max_staleness`` behind the learner's. An optional semaphore (``step_slots``) bounds the env steps running at
once, whatever the concurrency. Finished trajectories go to the spool (fsync'd), then to the caller; each
sink's :class:`Delivery` tails the spool.

Faults: see ``episode.py`` for one episode. :class:`PolicyUnavailable`, :class:`LearnerUnavailable` or
:class:`SinkFailed` (a sink with a bug) stops the run: in-flight episodes are cancelled and written to
RUN/interrupted.jsonl, the summary written, and ``run()`` raises the error. ``stop()`` drains (no new
episodes; in-flight ones finish, for at most ``drain_timeout_s``); ``stop(cancel=True)`` cancels the
in-flight ones. Every stop, these and the Ray driver's included, first lets every sink take every finished
trajectory (lines an episode cancelled mid-append left queued for the spool too), for at most
``flush_timeout_s``; what a sink that is down did not take stays in the spool, and the summary's
``undelivered`` and the error's message say how many, where, and that ``envfarm farm deliver RUN`` delivers
them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter, deque
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from envfarm.errors import ConfigError, FarmError, LearnerUnavailable, SinkFailed
from envfarm.sandbox import BACKENDS, Backend, get_backend
from envfarm.sandbox.pool import Pools, SandboxPool
from envfarm.sandbox.values import DEFAULT_BACKEND, TIMEOUTS

from .deliver import sink_options
from .environments import env_class, env_defaults, make_env, start_pools
from .episode import Episode, play
from .groups import Groups
from .live import LiveFile
from .policies import Policy
from .runs import RunDir, RunSpec
from .sinks import Delivery, Sink, finish_feeding
from .spool import Spool
from .summary import Live, Summary, Tally, Undelivered
from .trajectory import Trajectory

log = logging.getLogger(__name__)

GATE_POLL_S = 0.05
VERSION_POLL_S = 1.0


@dataclass(frozen=True)
class FarmConfig:
    """What to run and how hard."""

    env_id: str
    """A registered env id (``envfarm envs list``)."""
    episodes: int
    """Episodes in the run (for an evaluation: tasks x attempts)."""
    concurrency: int = 8
    """Episodes in flight at once (one env instance each)."""
    backend: str = DEFAULT_BACKEND
    """Sandbox backend: docker or bwrap (local: no isolation, tests only)."""
    seed: int = 0
    """Seed of the first task; task t uses seed + t."""
    attempts: int = 1
    """Episodes per task (consecutive indices share a seed)."""
    fork_groups: bool = True
    """Prepare each task once and fork its attempts from that state (``groups.py``) when the env can fork;
    False: every attempt resets on its own."""
    env_kwargs: Mapping[str, Any] = field(default_factory=dict)
    """Extra constructor arguments of the env (e.g. ``difficulty``)."""
    step_slots: int | None = None
    """Env steps (tool calls running in sandboxes) at once across the farm; None: no bound. Set it near the
    core count when tools are CPU-bound and concurrency is far above the cores, so commands do not starve
    past their timeouts; leave it None for long tool runs (test suites) that must overlap."""
    max_retries: int = 1
    """Replays of an episode broken by the infrastructure before it is recorded with infra_error."""
    episode_timeout_s: float | None = TIMEOUTS.episode_s
    """Wall-time limit of one attempt (an infrastructure error past it)."""
    max_staleness: int | None = None
    """Start no episode while the policy's weight version is more than this behind the learner's."""
    pool_size: int | None = None
    """Warm sandboxes kept ready (default: min(concurrency, 32))."""
    max_live: int | None = None
    """Cap on this farm's live sandboxes (default: concurrency + pool_size + a quarter, for closing ones)."""
    prefill: bool = False
    """Wait until ``pool_size`` warm sandboxes are ready before the first episode starts."""
    drain_timeout_s: float = 60.0
    """After stop(): how long in-flight episodes may take before they are cancelled."""
    flush_timeout_s: float = 30.0
    """However the run ends or stops: how long sinks may take to deliver their backlog (what a sink that is
    down did not take stays in the spool; `envfarm farm deliver RUN` delivers it later)."""
    learner_timeout_s: float = 300.0
    """A sink that blocks the farm (full backlog) and fails for this long stops the run."""

    def __post_init__(self) -> None:
        if self.episodes < 0 or self.concurrency < 1 or self.attempts < 1 or self.max_retries < 0:
            raise ConfigError(f"FarmConfig needs episodes >= 0, concurrency >= 1, attempts >= 1, max_retries "
                              f">= 0; got {self.episodes}, {self.concurrency}, {self.attempts}, "
                              f"{self.max_retries}")
        if self.backend not in BACKENDS:
            get_backend(self.backend)  # raises the ConfigError that names the backends
        if self.step_slots is not None and self.step_slots < 1:
            raise ConfigError(f"step_slots must be >= 1 or None, got {self.step_slots}")
        if self.max_staleness is not None and self.max_staleness < 0:
            raise ConfigError(f"max_staleness must be >= 0, got {self.max_staleness}")


class Farm:
    """See the module docstring."""

    def __init__(self, config: FarmConfig, policy: Policy, *, run_dir: Path | None = None,
                 resume: bool = False, sinks: Sequence[Sink] = (), summary_path: Path | None = None,
                 backend: Backend | None = None, options: Mapping[str, Any] | None = None) -> None:
        if sinks and run_dir is None:
            raise ConfigError("sinks are fed from the run's spool: give the Farm a run_dir")
        if config.max_staleness is not None and not sinks:
            raise ConfigError("max_staleness compares with the learner's weight version: add a learner sink "
                              "(--learner URL)")
        if resume and run_dir is None:
            raise ConfigError("resume needs the run_dir of the run to continue")
        env_defaults(config.env_id, config.env_kwargs)  # checks the env id now
        make_env(config.env_id, config.backend, None, config.env_kwargs)  # and its arguments; starts nothing
        self.config = config
        self.policy = policy
        self.run_dir_path = run_dir
        self.resume = resume
        self.sinks = list(sinks)
        self.summary_path = summary_path
        self.tally = Tally()
        self.live = Live(total=config.episodes)
        self.run_dir: RunDir | None = None
        self.spec = RunSpec(config.env_id, config.episodes, config.seed, config.attempts,
                            dict(config.env_kwargs), policy.name, config.backend,
                            {**sink_options(sinks), **(options or {})})  # what `farm deliver` feeds
        self.deliveries: list[Delivery] = []
        self.stopped: str | None = None
        self._backend = backend
        self._pending: deque[int] = deque()
        self._inflight: dict[int, Episode] = {}
        self._interrupted: list[Trajectory] = []
        self._workers: list[asyncio.Task[None]] = []
        self._recording: set[asyncio.Task[None]] = set()
        """Trajectories on their way to the spool and the caller (see _record)."""
        self._producer: asyncio.Task[None] | None = None
        self._setting_up = False
        self._gate = asyncio.Lock()
        self._step_slots = asyncio.Semaphore(config.step_slots) if config.step_slots else None
        self._stopping = False
        self._drain_timer: asyncio.TimerHandle | None = None
        self._spool: Spool | None = None
        self._pools: Pools | None = None
        self._pool: SandboxPool | None = None
        self._groups: Groups | None = None
        """Prepared tasks whose attempts start on forks (None: every attempt resets)."""
        """The warm pool every episode leases from (None for per-task images and envs without sandboxes)."""
        self._version_checked = 0.0
        self._wall_before = 0.0
        self._summary: Summary | None = None

    # -------------------------------------------------------------------------------------------- public

    async def run(self) -> AsyncIterator[Trajectory]:
        """Run the episodes; yield each finished trajectory once it is in the spool.

        To stop early, call :meth:`stop` and keep iterating, or leave the loop inside
        ``async with contextlib.aclosing(farm.run()) as it:`` so the farm is torn down at once (a generator
        left behind is only closed when it is garbage-collected)."""
        out: asyncio.Queue[Trajectory | None] = asyncio.Queue(maxsize=self.config.concurrency)
        producer = self._producer = asyncio.create_task(self._produce(out), name="envfarm farm")
        try:
            while (item := await out.get()) is not None:
                yield item
            await producer
        finally:
            if not producer.done():  # the caller stopped iterating, or was cancelled
                self.stop(cancel=True)
                producer.cancel()
            while not producer.done():  # keep the queue moving so the producer can finish
                while not out.empty():
                    out.get_nowait()
                await asyncio.wait([producer], timeout=0.05)

    def stop(self, cancel: bool = False) -> None:
        """Start no new episode; with ``cancel``, cancel those in flight (else they get drain_timeout_s)."""
        if not self._stopping:
            self._stopping = True
            self.stopped = self.stopped or "interrupted"
            log.warning("stopping: no new episodes; %d in flight", len(self._inflight))
            loop = asyncio.get_running_loop()
            self._drain_timer = loop.call_later(self.config.drain_timeout_s, self.stop, True)
        if self._setting_up and self._producer is not None:  # nothing in flight yet: stop setting up
            self._producer.cancel()
        if cancel:
            for task in self._workers:
                task.cancel()

    def summary(self) -> Summary:
        """The summary as of now (final once run() has finished)."""
        return self._summary or self._build_summary()

    # ------------------------------------------------------------------------------------------ producer

    async def _produce(self, out: asyncio.Queue[Trajectory | None]) -> None:
        error: FarmError | None = None
        try:
            async with AsyncExitStack() as stack:
                await stack.enter_async_context(LiveFile(self))  # RUN/live.json for the dashboard
                self._setting_up = True
                try:
                    await self._setup(stack)
                finally:
                    self._setting_up = False
                await self._work(out)
            self._check_sinks()  # a sink that failed after the last episode started
        except asyncio.CancelledError:
            if not self._stopping:
                raise
            log.info("stopped while setting up (filling the pool, starting the policy)")
        except BaseExceptionGroup as eg:
            farm_error = _first_farm_error(eg)
            if farm_error is None:
                raise
            self.stopped = f"{type(farm_error).__name__}: {farm_error}"
            error = farm_error
            raise farm_error from None
        except FarmError as e:
            self.stopped = self.stopped or f"{type(e).__name__}: {e}"
            error = e
            raise
        finally:
            if self._drain_timer is not None:
                self._drain_timer.cancel()
            await asyncio.shield(self._finish())
            if error is not None and self._summary is not None and self._summary.undelivered is not None:
                error.add_detail(self._summary.undelivered.message())
            await out.put(None)

    async def _setup(self, stack: AsyncExitStack) -> None:
        await self._open_run(stack)
        if not self._pending:
            return
        backend = self._backend
        if backend is None:
            backend = get_backend(self.config.backend)
            stack.push_async_callback(backend.aclose)
        stack.push_async_callback(self.policy.aclose)
        await self.policy.start()  # before any sandbox starts: a server that is down fails the run at once
        c, cfg = self.config.concurrency, self.config
        size = cfg.pool_size if cfg.pool_size is not None else min(c, 32)
        max_live = cfg.max_live if cfg.max_live is not None else c + size + max(8, c // 4)
        self._pools, self._pool = await start_pools(self.spec.env_id, self.spec.env_kwargs, backend,
                                                    warm=size, max_live=max_live, prefill=cfg.prefill)
        stack.push_async_callback(self._pools.aclose)
        self._groups = self._make_groups()
        if self._groups is not None:
            stack.push_async_callback(self._groups.aclose)  # before the pools close
        if self.config.max_staleness is not None:  # know both versions before the first episode starts
            await self._refresh_learner_version()

    def _groups_on(self) -> bool:
        """Whether a task's attempts start from one prepared env: grouping is on and the env can fork."""
        return self.config.fork_groups and self.spec.attempts > 1 and env_class(self.spec.env_id).forkable

    def _make_groups(self) -> Groups | None:
        """The run's groups (tasks whose pending attempts start from one prepared env), or None when the
        env cannot fork or grouping is off."""
        if not self._groups_on():
            return None
        pending = Counter(self.spec.seed_of(i) for i in self._pending)
        spec, backend, pools = self.spec, self.config.backend, self._pools
        return Groups(lambda: make_env(spec.env_id, backend, pools, spec.env_kwargs), pending)

    async def _open_run(self, stack: AsyncExitStack) -> None:
        if self.run_dir_path is None:
            self._pending = deque(range(self.config.episodes))
            return
        if self.resume:
            folder = await RunDir.load(self.run_dir_path)
            folder.check_matches(self.spec)  # before self.run_dir is set: a refused resume writes nothing
            done = await folder.finished()  # a damaged spool is refused too
            self.run_dir, self.spec = folder, folder.spec
            for t in done:
                self.tally.add(t)
            finished = {t.index for t in done}
            self._pending = deque(i for i in range(self.spec.episodes) if i not in finished)
            self._wall_before = float((await folder.previous_summary()).get("wall_s_total", 0.0))
            self.live.done_before = len(finished)
            log.info("resuming %s: %d of %d episodes done", folder.path, len(finished),
                     self.spec.episodes)
        else:
            self.run_dir = await RunDir.create(self.run_dir_path, self.spec)
            self._pending = deque(range(self.spec.episodes))
        self._spool = Spool(self.run_dir.spool_path)
        await self._spool.open()
        stack.push_async_callback(self._spool.aclose)
        for sink in self.sinks:
            delivery = Delivery(self._spool, sink, self.run_dir.cursor_dir)
            stack.push_async_callback(sink.aclose)
            await delivery.open()
            self.deliveries.append(delivery)

    async def _work(self, out: asyncio.Queue[Trajectory | None]) -> None:
        draining = asyncio.Event()
        # not in a TaskGroup: one sink's failure must not cancel the others' feeding (Delivery.run never
        # raises; a dead sink stops the run at the gate), and each is awaited below
        feeders = [asyncio.create_task(d.run(draining), name=f"sink {d.sink.name}") for d in self.deliveries]
        try:
            async with asyncio.TaskGroup() as tg:
                n = min(self.config.concurrency, len(self._pending))
                self._workers = [tg.create_task(self._worker(out), name=f"episode slot {i}")
                                 for i in range(n)]
        finally:
            if self._recording:
                await asyncio.wait(set(self._recording))
            draining.set()
            await self._record_interrupted()
            await finish_feeding(feeders, self.config.flush_timeout_s)

    # ------------------------------------------------------------------------------------------- workers

    async def _worker(self, out: asyncio.Queue[Trajectory | None]) -> None:
        assert self._pools is not None
        env = None
        try:
            while (index := await self._admit()) is not None:
                if env is None:
                    env = make_env(self.spec.env_id, self.config.backend, self._pools, self.spec.env_kwargs)
                ep = Episode(self.spec.episode_id(index), self.spec.env_id, index, self.spec.seed_of(index),
                             self.spec.attempt_of(index), self.policy.name)
                self._inflight[index] = ep
                self.live.begin()
                try:
                    traj = await play(env, self.policy, ep, self.live, max_retries=self.config.max_retries,
                                      timeout_s=self.config.episode_timeout_s, step_slots=self._step_slots,
                                      groups=self._groups)
                except FarmError as e:  # fatal for the run (PolicyUnavailable): name it in the records
                    self.stopped = self.stopped or f"{type(e).__name__}: {e}"
                    raise
                finally:
                    self.live.end()
                del self._inflight[index]
                await self._record(traj, out)
                if traj.status == "error":  # the env may be broken: play the next episode on a new one
                    await env.aclose()
                    env = None
        finally:
            if env is not None:
                await asyncio.shield(env.aclose())

    async def _record(self, traj: Trajectory, out: asyncio.Queue[Trajectory | None]) -> None:
        """Count ``traj``, spool it, hand it to run()'s caller; all of it even if a stop cancels us here
        (``_work`` waits for every record before the sinks drain and the caller's iteration ends)."""
        self.tally.add(traj)
        task = asyncio.ensure_future(self._store(traj, out))
        self._recording.add(task)
        task.add_done_callback(self._recording.discard)
        await asyncio.shield(task)

    async def _store(self, traj: Trajectory, out: asyncio.Queue[Trajectory | None]) -> None:
        if self._spool is not None:
            await self._spool.append(traj.to_json())
        await out.put(traj)

    async def _record_interrupted(self) -> None:
        for _, ep in sorted(self._inflight.items()):
            self._interrupted.append(ep.build("interrupted", error=self.stopped or "cancelled"))
            log.info("episode %s interrupted (%d turns); --resume runs it again", ep.episode_id,
                     len(ep.turns))
        self._inflight.clear()
        self.live.interrupted = len(self._interrupted)
        if self.run_dir is not None:
            await self.run_dir.record_interrupted(self._interrupted)

    # ---------------------------------------------------------------------------------------------- gate

    async def _admit(self) -> int | None:
        """The next episode index to start, or None when there is none (done or stopping)."""
        async with self._gate:
            while True:
                if self._stopping or not self._pending:
                    self.live.paused = None
                    return None
                reason = await self._blocked()
                self.live.paused = reason
                if reason is None:
                    index = self._pending.popleft()
                    if not self._pending and self._pool is not None:
                        self._pool.size = 0  # the last episode started: warm no sandbox nobody will lease
                    return index
                await asyncio.sleep(GATE_POLL_S)

    def _check_sinks(self) -> None:
        for d in self.deliveries:
            if d.dead:
                raise SinkFailed(f"sink {d.sink.name} failed: {d.last_error}")

    async def _blocked(self) -> str | None:
        self._check_sinks()
        for d in self.deliveries:
            if d.full:
                if d.stalled_for() > self.config.learner_timeout_s:
                    raise LearnerUnavailable(
                        f"sink {d.sink.name} has taken no delivery for {d.stalled_for():.0f}s with "
                        f"{d.backlog} trajectories waiting; last error: {d.last_error}")
                return f"waiting for sink {d.sink.name} ({d.backlog} undelivered)"
        return await self._stale()

    async def _stale(self) -> str | None:
        k = self.config.max_staleness
        if k is None:
            return None
        learner, policy = self._learner_version(), self.policy.weight_version
        if isinstance(learner, int) and isinstance(policy, int) and learner - policy > k:
            if time.monotonic() - self._version_checked > VERSION_POLL_S:
                self._version_checked = time.monotonic()
                await self.policy.refresh_version()
                await self._refresh_learner_version()
                return await self._stale()
            return f"policy v{policy} is {learner - policy} behind the learner's v{learner} (max {k})"
        return None

    def _learner_version(self) -> Any:
        versions = [d.sink.weight_version for d in self.deliveries if isinstance(d.sink.weight_version, int)]
        return max(versions) if versions else None

    async def _refresh_learner_version(self) -> None:
        for d in self.deliveries:
            try:
                await d.sink.refresh_version()
            except FarmError as e:  # a learner that is down is the sink's problem; keep the last version
                log.debug("could not refresh the version of sink %s: %s", d.sink.name, e)

    # ------------------------------------------------------------------------------------------- summary

    async def _finish(self) -> None:
        self._summary = self._build_summary()
        if self.run_dir is not None:
            await self.run_dir.write_summary(self._summary.to_dict(), also=self.summary_path)
        elif self.summary_path is not None and self.run_dir_path is None:
            # no run folder asked for; one that was refused (taken, damaged) keeps its summaries as they are
            await asyncio.to_thread(_write_text, self.summary_path, _dumps(self._summary.to_dict()))

    def _build_summary(self) -> Summary:
        t, wall = self.tally, self.live.wall_s()
        done_now = t.finished - self.live.done_before
        sinks = {d.sink.name: {"backlog": d.backlog, "delivered": d.cursor.count,
                               "last_error": d.last_error or None} for d in self.deliveries}
        return Summary(
            run_id=self.spec.run_id, run_dir=str(self.run_dir.path) if self.run_dir else None,
            env_id=self.spec.env_id, policy=self.policy.name, backend=self.config.backend,
            episodes_requested=self.spec.episodes, episodes_completed=t.completed, episodes_failed=t.failed,
            episodes_interrupted=len(self._interrupted), episodes_remaining=self.spec.episodes - t.finished,
            infra_errors=t.infra_errors, infra_retries=t.infra_retries, policy_errors=t.policy_errors,
            errors=t.errors, max_concurrent=self.live.max_active, concurrency=self.config.concurrency,
            steps=t.steps, wall_s=round(wall, 3), wall_s_total=round(self._wall_before + wall, 3),
            steps_per_s=round(self.live.steps / wall, 2) if wall > 0 else 0.0,
            episodes_per_s=round(done_now / wall, 2) if wall > 0 else 0.0,
            mean_reward=t.mean_reward, time_split=t.time_split(), weight_versions=sorted(t.versions, key=str),
            nodes_used=1, stopped=self.stopped, sinks=sinks, undelivered=self._undelivered())

    def _undelivered(self) -> Undelivered | None:
        waiting = {d.sink.name: d.backlog for d in self.deliveries if d.backlog > 0}
        if not waiting or self.run_dir is None:
            return None
        return Undelivered(waiting, str(self.run_dir.spool_path), f"envfarm farm deliver {self.run_dir.path}")


def _first_farm_error(eg: BaseExceptionGroup) -> FarmError | None:
    for e in eg.exceptions:
        if isinstance(e, BaseExceptionGroup):
            inner = _first_farm_error(e)
            if inner is not None:
                return inner
        elif isinstance(e, FarmError):
            return e
    return None


def _dumps(data: Any) -> str:
    import json

    return json.dumps(data, indent=2, default=str) + "\n"


def _write_text(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


__all__ = ["Farm", "FarmConfig"]
