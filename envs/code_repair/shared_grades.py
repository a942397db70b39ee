"""One grading per distinct patch within a group: the attempts forked from one prepared CodeRepair env share
the verdicts of the patches they submit (``share_grades=True``, the default).

Attempts at a task that submit the byte-identical diff (an oracle, a policy that converges on one fix) get
the verdict of the one harness run of it, which canaries, twins and tamper rules checked in full: the first
to submit grades it, the others wait for it under the patch's lock and reuse its outcome; when that grading
failed (an infrastructure error, a cancelled attempt) the next one grades on its own. The table is shared
by an env and its forks (``fork_shared``) and replaced at every reset, so it lives for one task's group.
A patch that differs by one byte is graded on its own.
"""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace

from ..core import Outcome


@dataclass
class SharedGrades:
    """The group's verdicts by patch (module docstring)."""

    outcomes: dict[str, Outcome] = field(default_factory=dict)
    locks: dict[str, asyncio.Lock] = field(default_factory=dict)

    async def grade(self, patch: str, fresh: Callable[[str], Awaitable[Outcome]]) -> Outcome:
        """The outcome of ``patch``: a verdict already reached in this group, else ``fresh(patch)``."""
        key = hashlib.sha256(patch.encode()).hexdigest()
        async with self.locks.setdefault(key, asyncio.Lock()):
            known = self.outcomes.get(key)
            if known is not None:
                return replace(known, info={**known.info, "grade_shared": True})
            outcome = await fresh(patch)
            self.outcomes[key] = outcome
            return outcome
