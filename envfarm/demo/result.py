"""What each part of the demo hands back: a table's worth of text, a verdict, and how long it took."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from envfarm.sandbox.values import DEFAULT_BACKEND

Progress = Callable[[str, int, int], None]
"""``progress(label, done, total)``: a part reports how far it is (the CLI draws a bar per label)."""


def no_progress(label: str, done: int, total: int) -> None:
    """The default :data:`Progress`: report nothing."""


@dataclass(frozen=True)
class PartResult:
    """One part of the demo, ready to print as a table: a title, columns, rows of text, notes under it."""

    key: str
    """Short name: farm, containment, harness, repair, training."""
    title: str
    columns: tuple[str, ...]
    rows: tuple[tuple[str, ...], ...]
    ok: bool
    """The part showed what it is meant to show (every oracle rewarded, every forgery caught, ...)."""
    seconds: float = 0.0
    notes: tuple[str, ...] = ()
    """Lines printed under the table: what was run, where its files are, honest caveats."""
    error: str | None = None
    """Set when the part crashed: one line naming what failed (the table then holds that row only)."""

    @classmethod
    def failed(cls, key: str, title: str, error: BaseException, seconds: float) -> PartResult:
        """A part that raised: one error row, the exception's first line, and the fix when it names one."""
        lines = str(error).strip().splitlines() or [""]
        text = f"{type(error).__name__}: {lines[0]}"[:400]
        more = tuple(line[:400] for line in lines[1:4])
        return cls(key, title, ("error",), ((text,),), False, seconds, more, text)


BUNDLED_POLICY = Path(__file__).with_name("policy")
"""The ``tiny-cpu`` model after SFT on ToolCalc to a held-out match of 0.61 (step 1,650 of
``envfarm train --seed 1 --rl-updates 1 --no-sft-more``, 2026-12-04); 3.3 MB of safetensors."""


@dataclass(frozen=True)
class DemoConfig:
    """Options of :func:`envfarm.demo.run_demo` (what ``envfarm demo`` parses its options into)."""

    out: Path = Path("out/demo")
    """Parent folder; each demo run writes a fresh ``<out>/<UTC time>/`` (farm run folders refuse reuse)."""
    backend: str = DEFAULT_BACKEND
    """Sandbox backend of the tool-use farm, the containment checks and the training farm."""
    episodes: int = 64
    """Oracle episodes per tool-use env."""
    concurrency: int = 32
    """Episodes in flight at once in the tool-use farm."""
    parts: tuple[str, ...] = ("farm", "containment", "harness", "repair", "training")
    """Which parts to run, in this order."""
    instance_id: str | None = None
    """Harness and CodeRepair row (None: ``BUILTIN_ROW``)."""
    instances: Path | None = None
    """A SWE-bench file (JSON, JSONL, parquet, datasets folder) to take the harness row from instead of the
    bundled rows; needs ``repo_source``."""
    repo_source: str | None = None
    """Git mirrors (folder of ``owner__name``) or a git URL prefix for rows from ``instances``."""
    rl_updates: int = 4
    """GRPO updates of the training part."""
    sft_steps: int = 60
    """SFT steps before RL when ``train_checkpoint`` is None (the loss falls from ~5 to ~0.3: the call
    format, not yet the numbers)."""
    train_checkpoint: Path | None = BUNDLED_POLICY
    """The policy folder RL starts from: by default the bundled SFT policy, whose rewards differ within a
    group, so GRPO's updates take optimizer steps; any ``checkpoints/sft/policy`` of an ``envfarm train`` run
    works. None: a short SFT warm start from a random init instead (``sft_steps``), whose rewards are 0."""
    train_seconds: float = 30.0
    """Wall-clock budget of the RL phase (it stops early at this, with the updates done so far)."""
    threads: int | None = None
    """torch threads of the training part (None: torch's default)."""
    stamp: str = field(default="")
    """The run folder's name under ``out`` (empty: the UTC time when the demo starts)."""
