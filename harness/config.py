"""Configuration of one harness run (what ``envfarm harness run`` parses its options into)."""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from envfarm.sandbox.values import IMAGE_BACKEND, TIMEOUTS

from .repos import parse_source
from .tamper import Policy


class ImageSource(StrEnum):
    """Where instance images come from."""

    BUILD = "build"
    """Built here from the spec, offline (the default)."""
    PULL = "pull"
    """Pulled from a registry: the row's ``image`` (v5 rows name SWE-bench's official image) or
    ``<registry>/<name>``; checked to hold the row's repository at its base commit before use."""
    AUTO = "auto"
    """Pulled when the registry has it and it checks out, built otherwise."""


class HarnessConfig(BaseModel):
    """Options of :func:`envfarm.harness.evaluate`."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    run_id: str
    """Names the run; re-running with the same id resumes (finished instances are not rerun)."""
    report_dir: Path = Path("reports")
    """Where ``<run_id>/<model>/<instance_id>/`` logs and the run summaries are written."""
    repo_source: Path | str | None = None
    """A folder with one git repository per repo (``owner__name`` or ``owner__name.git``, bare or not), or a
    git URL prefix (``https://github.com/``, ``git://host/``): cloned once into $ENVFARM_HOME/harness/git,
    then the commits a run needs are fetched."""
    image_source: ImageSource = ImageSource.BUILD
    """build (default): build instance images here; pull: pull them from a registry (checked before use);
    auto: pull, and build where the pull or its check fails."""
    registry: str | None = None
    """Registry prefix for pulls (``127.0.0.1:5000`` or ``host/namespace``): pulls ``<registry>/<name>``, with
    ``<name>`` the row's ``image`` (SWE-bench's ``swebench/sweb.eval.x86_64.<id>:latest`` when it has none);
    without it, the row's ``image`` as written."""
    specs: tuple[Path, ...] = ()
    """Extra spec files or folders, searched before images/swebench/."""
    max_workers: int = Field(4, ge=1)
    """Instances built and run at the same time (and parallel docker builds)."""
    timeout_s: float = Field(TIMEOUTS.tests_s, gt=0)
    """Seconds the tests of one instance may run (a spec's timeout_s may raise it)."""
    backend: str = IMAGE_BACKEND
    """Sandbox backend that runs the tests (the images are docker images)."""
    tamper: Policy = Policy.REVERT
    """What a tamper rule does when it fires: revert (default), flag, or off (SWE-bench's behaviour)."""
    run_empty: bool = False
    """Run an empty prediction as the unpatched base (test_patch applied, no model patch) and grade it, as
    SWE-bench's validation does (``harness validate``); by default an empty patch is counted, not run."""
    canaries: bool = True
    """Plant canary tests in every graded run and require every expected test exactly once (canary.py); off
    reproduces SWE-bench's grading (for comparisons and cost measurements only)."""
    differential: bool = True
    """Twin up to 8 FAIL_TO_PASS tests per run with a perturbed copy that must fail, and make an instance
    whose perturbed twin of a passing test passed unresolved (differential.py; its own check, apart from
    the canaries); off for comparisons and cost measurements only."""
    decoy_pool: Path | None = None
    """A ``decoys.json`` written by ``harness validate``: a twinned test with no expected literal draws its
    decoys from the edits gold failed there (decoy_pool.py; opt-in: another correct fix may pass one)."""
    probe_decoys: bool = False
    """Also plant candidate decoys at any literal of each twinned test, tried but never judged; their
    outcomes go to the report (``harness validate`` sets it on its probe run to build decoys.json)."""
    strict: bool = False
    """Make an instance whose model patch is suspect (static screening, ``screen.py``: it reaches for the test
    framework's internals, sys.modules, an exit at import, tracing hooks...) unresolved; by default the report
    only says ``suspect`` and why."""
    output_cap_mb: int = Field(32, ge=1)
    """MiB of test output brought back to the host per attempt (head and tail; the report says what was
    cut)."""
    retries: int = Field(1, ge=0)
    """Extra attempts for an infra failure (build, sandbox, an environment too slow or small for the
    tests)."""
    cpus: float = Field(1.0, gt=0)
    """CPU share of each test sandbox."""
    memory_mb: int = Field(4096, ge=256)
    """Memory cap of each test sandbox (tmpfs pages count too; raised automatically for large repos)."""
    disk_mb: int = Field(2048, ge=64)
    """Size of the sandbox's /workspace and /tmp; raised automatically to hold the repository twice."""
    pids: int = Field(2048, ge=64)
    """Process/thread cap of each test sandbox."""
    force_rebuild: bool = False
    """Rebuild env and instance images even when an image with the same hash exists."""
    rerun_infra: bool = True
    """On resume, run again instances whose last result was an infra error (setup errors, such as a
    missing spec or repository, always run again; model failures and verdicts never do)."""

    @field_validator("repo_source", mode="before")
    @classmethod
    def _source(cls, value: object) -> object:
        return parse_source(value) if isinstance(value, str | Path) else value

    @field_validator("registry")
    @classmethod
    def _registry(cls, value: str | None, info: ValidationInfo) -> str | None:
        if value is None:
            return None
        if info.data.get("image_source", ImageSource.BUILD) is ImageSource.BUILD:
            raise ValueError(
                f"registry {value} is only read by --image-source pull or auto (images are built here by "
                "default); add --image-source pull or auto"
            )
        value = value.strip().rstrip("/")
        if "://" in value:
            value = value.split("://", 1)[1]  # docker names registries without a scheme
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9.-]*(:[0-9]+)?(/[a-z0-9]+([._-][a-z0-9]+)*)*", value):
            raise ValueError(
                f"registry {value!r} is not a registry prefix; write host[:port][/namespace], e.g. "
                "127.0.0.1:5000 or registry.example.com/swebench"
            )
        return value

    @field_validator("run_id")
    @classmethod
    def _safe_run_id(cls, value: str) -> str:
        if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", value):
            raise ValueError(f"run id {value!r} must be letters, digits, '.', '_' or '-' (it names folders)")
        return value
