"""The sandbox's values, one floor below ``base.py`` (which re-exports them) so that ``transfer.py`` and the
backends share them without importing the contract module: :class:`Limits`, :class:`ExecResult`, the default
backend and every timeout's default (:data:`TIMEOUTS`).
"""

from __future__ import annotations

from dataclasses import dataclass

from envfarm.errors import ConfigError, ExecFailed, ExecTimeout, tail

DEFAULT_BACKEND = "bwrap"
"""The backend of every env, farm, eval, demo and training run unless ``--backend`` or ``backend=`` says
otherwise. bwrap needs the least set-up on a fresh machine (bubblewrap and the debootstrap rootfs folder: no
daemon, no image import) and steps about twice as fast as docker (README: measured here)."""
IMAGE_BACKEND = "docker"
"""The default for sandboxes of docker-built images (the harness's instance images; CodeRepair, the task
factory): docker builds them, and bwrap would export each into a rootfs folder first."""
PARENT_LABEL = "envfarm.parent"
"""Label of a forked sandbox that names its parent's id (`envfarm sandbox list` shows it)."""


@dataclass(frozen=True)
class Timeouts:
    """Every timeout envfarm has, one meaning each, in seconds. :data:`TIMEOUTS` holds the defaults that the
    configs start from; a field keeps its own name where it is set (``Limits.timeout_s`` is ``command_s``)."""

    command_s: float = 60.0
    """One command in a sandbox; its whole process tree is killed past it (``Limits.timeout_s``,
    ``sb.exec(cmd, timeout_s=...)``). A timed-out command is a result, not an error."""
    episode_s: float = 900.0
    """One farm episode from reset to its last step (``FarmConfig.episode_timeout_s``); past it the episode
    is recorded as an infrastructure error."""
    request_s: float = 120.0
    """One HTTP request of the OpenAI-compatible policy client (``OpenAIPolicy(timeout_s=...)``)."""
    tests_s: float = 1800.0
    """The tests of one harness instance (``HarnessConfig.timeout_s``; a spec's ``timeout_s`` raises it)."""
    start_s: float = 60.0
    """A new sandbox and its agent must answer within this."""
    agent_grace_s: float = 10.0
    """The agent answers within a command's timeout plus this, or the sandbox is declared hung."""
    file_op_s: float = 120.0
    """One agent read/write request, one tar transfer."""


TIMEOUTS = Timeouts()


@dataclass(frozen=True)
class Limits:
    """Resource limits for one sandbox. The defaults are safe for untrusted code."""

    cpus: float = 1.0
    """CPU share (docker --cpus; a CFS quota for bwrap)."""
    memory_mb: int = 1024
    """Memory cap for everything in the sandbox (OOM-kill beyond it); tmpfs pages count toward it."""
    pids: int = 256
    """Maximum number of processes and threads (a fork bomb stops here)."""
    disk_mb: int = 512
    """Size cap of each writable tmpfs: /workspace and /tmp. Everything else is read-only."""
    output_bytes: int = 1 << 20
    """Captured bytes per stream per command; the rest is dropped and ``truncated`` is set."""
    timeout_s: float = TIMEOUTS.command_s
    """Default timeout of one command; its whole process tree is killed past it."""
    shm_mb: int = 64
    """Size cap of /dev/shm, a tmpfs of its own whose pages count toward ``memory_mb``. 64 MiB is Docker's
    default: enough for POSIX semaphores and multiprocessing queues; raise it for programs that pass big
    buffers through shared memory (torch DataLoader workers)."""
    open_files: int = 4096
    """Open file descriptors per process (RLIMIT_NOFILE, soft = hard): a descriptor leak in the policy's
    code fails with EMFILE instead of pinning host kernel memory."""

    def __post_init__(self) -> None:
        for name in ("cpus", "memory_mb", "pids", "disk_mb", "output_bytes", "timeout_s", "shm_mb",
                     "open_files"):
            if getattr(self, name) <= 0:
                raise ConfigError(f"Limits.{name} must be positive, got {getattr(self, name)!r}")
        if self.memory_mb < 32:
            raise ConfigError(f"Limits.memory_mb={self.memory_mb} is too small for the agent; use >= 32")


@dataclass(frozen=True)
class ExecResult:
    """What one command did. Output is text (UTF-8, undecodable bytes replaced)."""

    exit_code: int
    """Exit status; a negative number -N means killed by signal N (-9 on timeout)."""
    stdout: str
    stderr: str
    duration: float
    """Seconds from spawn to exit, measured inside the sandbox."""
    timed_out: bool
    truncated: bool
    """True when stdout or stderr passed ``Limits.output_bytes`` and was cut."""

    @property
    def ok(self) -> bool:
        return self.exit_code == 0 and not self.timed_out

    def check(self, what: str = "command") -> ExecResult:
        """Return self when the command succeeded, else raise ExecTimeout or ExecFailed."""
        if self.timed_out:
            raise ExecTimeout(f"{what} timed out after {self.duration:.1f}s; stderr:\n{tail(self.stderr)}")
        if self.exit_code != 0:
            raise ExecFailed(f"{what} exited {self.exit_code}; stderr tail:\n{tail(self.stderr)}")
        return self


__all__ = ["DEFAULT_BACKEND", "IMAGE_BACKEND", "TIMEOUTS", "ExecResult", "Limits", "Timeouts"]
