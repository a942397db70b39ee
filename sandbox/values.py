"""The sandbox's values, one floor below ``base.py`` (which re-exports them) so that ``transfer.py`` and the
backends share them without importing the contract module: :class:`Limits`, :class:`ExecResult` and the
timeouts of the sandbox boundary.
"""

from __future__ import annotations

from dataclasses import dataclass

from envfarm.errors import ConfigError, ExecFailed, ExecTimeout, tail

START_TIMEOUT_S = 60.0  # a sandbox and its agent must answer within this
AGENT_GRACE_S = 10.0  # the agent answers within timeout + this, or the sandbox is declared hung
FILE_OP_TIMEOUT_S = 120.0  # one agent read/write request, one tar transfer


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
    timeout_s: float = 60.0
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


__all__ = ["AGENT_GRACE_S", "FILE_OP_TIMEOUT_S", "START_TIMEOUT_S", "ExecResult", "Limits"]
