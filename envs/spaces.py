"""``AnyText``: a Gymnasium Text space for real tool output and any unicode text.

Gymnasium's ``Text`` only contains characters from a fixed charset (alphanumerics by default). ``AnyText``
contains any ``str`` up to ``max_length``; sampling draws printable ASCII.

Vector envs: text cannot travel through ``AsyncVectorEnv``'s shared memory (Gymnasium reads a Text buffer
once, into immutable strings, so later steps would return stale observations). Use
``AsyncVectorEnv(fns, shared_memory=False)``; with the default, ``AnyText`` raises a ConfigError saying so
instead of returning wrong observations.
"""

from __future__ import annotations

import multiprocessing as mp
from types import ModuleType
from typing import Any, NoReturn

import numpy as np
from gymnasium import spaces
from gymnasium.vector.utils import shared_memory as shm

from envfarm.errors import ConfigError


class AnyText(spaces.Text):
    """Any str (unicode included) of at most ``max_length`` characters."""

    def __init__(self, max_length: int, seed: int | np.random.Generator | None = None) -> None:
        printable = frozenset(chr(c) for c in range(32, 127))
        super().__init__(max_length, min_length=0, charset=printable, seed=seed)

    def contains(self, x: Any) -> bool:
        return isinstance(x, str) and len(x) <= self.max_length

    def __repr__(self) -> str:
        return f"AnyText({self.max_length})"


@shm.create_shared_memory.register(AnyText)
def _no_shared_memory(space: AnyText, n: int = 1, ctx: ModuleType = mp) -> NoReturn:
    raise ConfigError("envfarm envs have text observations, which cannot use shared memory: create the "
                      "vector env with gymnasium.vector.AsyncVectorEnv(env_fns, shared_memory=False)")
