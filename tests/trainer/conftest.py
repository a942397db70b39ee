"""The vLLM engine's tests need .venv-vllm, which `make setup VLLM=1` builds (~3.4 GB, so not by default).

Without it they skip and say so; with ENVFARM_REQUIRE_VLLM=1 (CI, .ci/run) a missing engine fails them
instead, so a broken engine install cannot pass as a green run.
"""

from __future__ import annotations

import os

import pytest

from envfarm.errors import EngineStartError
from envfarm.trainer.vllm_process import VLLMConfig, engine_python

REQUIRE = "ENVFARM_REQUIRE_VLLM"


@pytest.fixture(scope="session")
def vllm_engine() -> str:
    """The interpreter that runs the engine (``engine_python``); session-scoped, so it is decided before a
    module's engine fixture would start one. Skips (fails under ENVFARM_REQUIRE_VLLM) when none has vllm."""
    try:
        return engine_python(VLLMConfig())
    except EngineStartError as e:
        if os.environ.get(REQUIRE, "") not in ("", "0"):
            pytest.fail(f"{REQUIRE} is set and the vLLM engine is missing: {e}")
        pytest.skip(f"needs the vLLM engine (`make setup VLLM=1`; {REQUIRE}=1 makes this a failure): {e}")
