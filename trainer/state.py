"""The training loop's own state, saved in every checkpoint next to the RL phase's :class:`RLState`.

    state.json "loop": {"phase": "rl", "sft_step": 1200, "sft_match": 0.56, "more_step": 0, ...,
                        "rl": {RLState}}

The keys are :class:`LoopState`'s fields plus ``rl``; a checkpoint written before a field existed loads
with that field's default, and keys this version does not know are ignored (a newer checkpoint read by an
older envfarm).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, fields
from typing import Any, Literal

from .rl import RLState

Phase = Literal["sft", "rl", "sft_more", "eval"]


@dataclass(frozen=True)
class LoopState:
    """Where the loop is (frozen: the loop replaces it as phases advance)."""

    phase: Phase = "sft"
    """The phase to run next on resume."""
    sft_step: int = 0
    """SFT steps taken."""
    sft_match: float | None = None
    """Held-out greedy match at which SFT stopped (None: it ran all its steps)."""
    sft_seconds: float = 0.0
    """SFT's training time up to its newest checkpoint (all sessions; a killed session's steps after its last
    checkpoint are redone and counted once)."""
    sft_settled: int = 0
    """SFT step after which the SFT learning rate dropped (``TrainConfig.sft_settle``; 0: not yet)."""
    more_step: int = 0
    """Steps of the sft_more arm taken."""
    more_seconds: float = 0.0
    """The sft_more arm's training time so far (all sessions)."""
    more_tokens: int = 0
    """Completion tokens the sft_more arm trained on so far."""

    def to_json(self, rl: RLState) -> dict[str, Any]:
        """The checkpoint's ``loop`` object."""
        return {**asdict(self), "rl": asdict(rl)}

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> tuple[LoopState, RLState]:
        """The loop and RL states of a checkpoint's ``loop`` object (unknown keys ignored)."""
        own = {f.name for f in fields(cls)}
        rl_known = {f.name for f in fields(RLState)}
        rl = RLState(**{k: v for k, v in dict(data.get("rl") or {}).items() if k in rl_known})
        return cls(**{k: v for k, v in data.items() if k in own}), rl


__all__ = ["LoopState", "Phase"]
