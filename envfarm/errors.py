"""One error tree for all of envfarm.

    FarmError
    ├── ConfigError (ValueError)              bad user input: a name, a path, an option
    ├── BackendUnavailable                    docker daemon / bwrap / cgroups missing   -> run `make setup`
    ├── ImageError                            building or finding images
    │   ├── ImageNotFound (LookupError)       -> run `envfarm images build`
    │   ├── ImageBuildError                   a build step failed; the message holds the log tail
    │   │   └── HarborImageError              a Harbor task's image cannot be built offline: .reason is
    │   │                                     needs-network, unsupported-base or build-failed;
    │   │                                     .detail names the line
    │   ├── ImagePullError                    a registry pull failed (no such image, registry down, refused)
    │   └── ImageMismatch                     a pulled image does not hold the row's repository at its
    │                                         base commit (`--image-source build` builds it instead)
    ├── InfraError                            the machinery failed during an episode, not the policy: the
    │   │                                     farm replays the episode, then records infra_error, never a
    │   │                                     reward (envs raise it from astep; the sync step() wrapper alone
    │   │                                     turns it into info["infra_error"])
    │   └── SandboxError                      anything inside one sandbox
    │       ├── SandboxStartError             the sandbox or its agent did not come up
    │       ├── SandboxCrashed                killed from outside, OOM-killed agent, daemon gone mid-command
    │       ├── LeaseExpired                  a pool lease outlived its deadline and was reclaimed
    │       ├── ExecTimeout (TimeoutError)    a command ran past its timeout (raised with check=True)
    │       ├── ExecFailed                    a command exited non-zero (raised with check=True)
    │       ├── SandboxFileError (OSError)    read/write/upload/download failed inside the sandbox
    │       └── ForkError                     sandbox.fork() failed: a dead parent, a failed copy
    │           └── ForkUnsupported           this backend cannot fork (the message names one that can)
    ├── HarnessError                          the SWE-bench harness (envfarm/harness)
    │   ├── DatasetError (ValueError)         an instances/predictions file that is unreadable or malformed
    │   ├── SpecNotFound (LookupError)        no environment spec for a repo/version -> write
    │   │                                     images/swebench/<owner>__<name>.toml (the message names it)
    │   ├── RepoNotFound (LookupError)        no repository or base commit in --repo-source -> clone/fetch it
    │   └── PatchApplyError                   a patch applies with none of SWE-bench's fallback commands
    ├── HarborTaskError (ValueError)          a Harbor task folder that is missing a file or has a malformed
    │   │                                     task.toml: the message names the file and the fix
    │   └── HarborTaskNotFound (LookupError)  an unknown task id (with "did you mean")
    ├── TaskFactoryError                      `envfarm tasks mine`: a bad --package, no sdist, no tests
    │   └── PackageNotFound (LookupError)     no such package/version (or no sdist of it) on the index
    ├── RolloutError                          the rollout farm (envfarm/rollout)
    │   ├── PolicyError                       one policy call failed (a 400, an unusable reply): that episode
    │   │                                     is recorded with `error`, the run goes on
    │   ├── PolicyUnavailable (ConnectionError)  the policy server is down, refuses us or stays overloaded
    │   │                                     past the retry budget: the run stops, exit non-zero
    │   ├── LearnerUnavailable (ConnectionError) the learner took no delivery for too long; the spool keeps
    │   │                                     everything -> fix the learner, then `envfarm farm deliver RUN`
    │   ├── SinkFailed                        a sink raised something other than a delivery failure (a bug
    │   │                                     in it): the run stops, the other sinks drain, the spool keeps
    │   │                                     its share -> fix it, then `envfarm farm deliver RUN`
    │   └── ClusterUnavailable (ConnectionError) `--ray`: ray not installed, no cluster at the address, no
    │                                         node fits, or every farm worker was lost -> `make setup`,
    │                                         `ray start`, then `--resume RUN`
    └── TrainerError                          the learner (`envfarm train`): batching, updates, the loop
        ├── CheckpointError                   a checkpoint that is missing, damaged or for another model
        ├── WeightsError                      published weights that are no safetensors file or do not fit
        │                                     the served model (`envfarm policy serve` answers 400)
        └── EngineError                       the vLLM engine (`--engine vllm`) died, or a reload failed
            └── EngineStartError              not installed (-> `make setup`), or did not come up: the message
                                              names its log file and shows the log's tail

Messages name the object, show the tail of stderr where there is one, and say how to fix it.
Foreign errors (docker SDK, OSError from subprocess spawning) are mapped once, in the backend that meets
them, with ``raise ... from e``.
"""

from __future__ import annotations


class FarmError(Exception):
    """Base of every error envfarm raises on purpose."""

    def add_detail(self, text: str) -> None:
        """Append a line to the message (the CLI prints it under the red first line)."""
        self.args = (f"{self}\n{text}",)


class ConfigError(FarmError, ValueError):
    """Invalid user input (an unknown backend name, a bad limit, a missing file)."""


class BackendUnavailable(FarmError):
    """A sandbox backend cannot be used on this machine (no daemon, no bwrap, no cgroups)."""

    def __init__(self, what: str, fix: str = "run `make setup`") -> None:
        super().__init__(f"{what}; {fix}")


class ImageError(FarmError):
    """Building, finding or pruning images failed."""


class ImageNotFound(ImageError, LookupError):
    """A requested image (docker tag or bwrap rootfs) does not exist."""

    def __init__(self, image: str, fix: str = "run `envfarm images build`") -> None:
        super().__init__(f"image {image!r} not found; {fix}")
        self.image = image


class ImageBuildError(ImageError):
    """An image build step failed."""


class HarborImageError(ImageBuildError):
    """A Harbor task's environment image cannot be made offline; ``reason`` is one of ``needs-network``,
    ``unsupported-base``, ``build-failed`` and ``detail`` names the line or the build's message."""

    def __init__(self, task: str, reason: str, detail: str, fix: str,
                 reasons: tuple[tuple[str, str], ...] = ()) -> None:
        super().__init__(f"task {task!r}: {reason}: {detail}\nfix: {fix}")
        self.task = task
        self.reason = reason
        self.detail = detail
        self.reasons = reasons or ((reason, detail),)
        """Every (reason, detail) found, the first one is ``reason``/``detail``."""


class ImagePullError(ImageError):
    """Pulling an image from a registry failed; the message names the reference and the registry's answer."""


class ImageMismatch(ImageError):
    """A pulled image is not what the row needs (another repository, another commit, no repository)."""


class InfraError(FarmError):
    """The machinery failed during an episode (a sandbox, a grading run the policy did not break): the farm
    replays the episode, then records it as ``infra_error``; it is never scored as a reward."""


class SandboxError(InfraError):
    """Something went wrong inside or with one sandbox."""


class SandboxStartError(SandboxError):
    """The sandbox or its in-sandbox agent did not start."""


class SandboxCrashed(SandboxError):
    """The sandbox died (killed from outside, agent OOM-killed, daemon gone) while in use."""


class LeaseExpired(SandboxCrashed):
    """A pool lease passed its deadline; the pool killed the sandbox."""


class ExecTimeout(SandboxError, TimeoutError):
    """A command exceeded its timeout (raised by ``exec(..., check=True)``)."""


class ExecFailed(SandboxError):
    """A command exited non-zero (raised by ``exec(..., check=True)``)."""


class SandboxFileError(SandboxError, OSError):
    """A file operation inside the sandbox failed (missing path, permission, no space)."""


class ForkError(SandboxError):
    """``sandbox.fork()`` failed: the parent is dead, or copying its files into the child failed."""


class ForkUnsupported(ForkError):
    """The backend cannot fork a live sandbox; the message names one that can."""

    def __init__(self, what: str, fix: str = "open the sandbox on the bwrap backend") -> None:
        super().__init__(f"{what}; fix: {fix}")
        self.fix = fix


class HarnessError(FarmError):
    """The SWE-bench harness cannot go on with an instance or a run (inputs, specs, repositories, patches)."""


class DatasetError(HarnessError, ValueError):
    """An instances or predictions file cannot be read, or a row lacks a field SWE-bench requires."""


class SpecNotFound(HarnessError, LookupError):
    """No environment spec covers a repo/version; the message names the spec file and table to write."""


class RepoNotFound(HarnessError, LookupError):
    """A repository (or its base commit) is missing from ``--repo-source``."""


class PatchApplyError(HarnessError):
    """A patch did not apply with ``git apply``, ``git apply --reject`` or ``patch --fuzz``."""


class HarborTaskError(FarmError, ValueError):
    """A Harbor task folder that cannot be loaded: a missing ``task.toml``/``instruction.md``/
    ``tests/test.sh`` or a malformed field; the message names the file and the fix."""


class HarborTaskNotFound(HarborTaskError, LookupError):
    """A requested Harbor task id is not among the loaded task folders."""


class TaskFactoryError(FarmError):
    """The task factory cannot mine a package (a bad spec, no sdist, no tests that pass, no test deps)."""


class PackageNotFound(TaskFactoryError, LookupError):
    """The package index has no such package or version, or no source distribution of it."""


class RolloutError(FarmError):
    """Something went wrong in the rollout farm (policies, sinks, runs)."""


class PolicyError(RolloutError):
    """One policy call failed for one episode (a rejected request, an unusable reply); the run goes on."""


class PolicyUnavailable(RolloutError, ConnectionError):
    """The policy server cannot be used: down, refusing us, or overloaded past the retry budget."""


class LearnerUnavailable(RolloutError, ConnectionError):
    """The learner endpoint (or another sink) accepted no delivery for too long; the run's spool keeps every
    trajectory it did not take."""


class SinkFailed(RolloutError):
    """A sink raised an error that is no delivery failure; the run stopped and the spool keeps its share."""


class ClusterUnavailable(RolloutError, ConnectionError):
    """A Ray cluster cannot be used (ray missing, nothing at the address, no node fits, all workers lost)."""


class TrainerError(FarmError):
    """The learner cannot go on (no usable samples, a diverged update, a failed weight publication)."""


class CheckpointError(TrainerError):
    """A checkpoint is missing, damaged or does not fit the model (the message names the folder)."""


class WeightsError(TrainerError):
    """Weights sent to the policy server are unreadable or do not fit its model (names the keys)."""


class EngineError(TrainerError):
    """The managed inference engine (a vLLM server) failed while in use: it died, or a reload failed."""


class EngineStartError(EngineError):
    """The engine is not installed or did not come up; the message names its log file and the fix."""


def tail(text: str, lines: int = 15, chars: int = 2000) -> str:
    """The last ``lines`` lines (at most ``chars`` characters) of ``text``, for error messages."""
    out = "\n".join(text.rstrip().splitlines()[-lines:])
    return out[-chars:]
