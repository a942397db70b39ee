"""A policy from a CLI spec: ``oracle``, ``random`` or ``openai:URL`` (above ``policies.py`` and
``openai_policy.py``, which it picks from)."""

from __future__ import annotations

import difflib
from typing import Any

from envfarm.errors import ConfigError

from .openai_policy import OpenAIPolicy
from .policies import CallablePolicy, OraclePolicy, Policy, PolicyFn, RandomPolicy

POLICY_KINDS = ("oracle", "random", "openai:URL")


def make_policy(spec: str | Policy | PolicyFn, **options: Any) -> Policy:
    """A policy from a CLI spec (``oracle``, ``random``, ``openai:URL``), a Policy, or a callable."""
    if isinstance(spec, Policy):
        return spec
    if callable(spec):
        return CallablePolicy(spec, **options)
    if spec == "oracle":
        return OraclePolicy()
    if spec == "random":
        return RandomPolicy()
    if spec.startswith("openai:"):
        return OpenAIPolicy(spec.removeprefix("openai:"), **options)
    hint = difflib.get_close_matches(spec, ["oracle", "random", "openai:"], n=1)
    did = f"; did you mean {hint[0]!r}?" if hint else ""
    raise ConfigError(f"unknown policy {spec!r}: use one of {', '.join(POLICY_KINDS)}{did}")


__all__ = ["POLICY_KINDS", "make_policy"]
