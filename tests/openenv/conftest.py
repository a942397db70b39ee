"""The OpenEnv tests never reach a hub: models and tokenizers are made in the tests."""

from __future__ import annotations

import os

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")  # environment_factory is experimental in TRL 1.16
