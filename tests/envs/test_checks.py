"""The conformance suite reports failing checks as results (never raises) and lists them."""

from __future__ import annotations

from envfarm.envs.checks import run_conformance


def test_a_broken_env_is_reported_not_raised() -> None:
    report = run_conformance("envfarm/NoSuchEnv-v0", backend="local", seeds=1, leak_episodes=1, vector=False)
    assert not report.passed
    assert len(report.failures) == len(report.results) == 6  # every check, the fork check included
    assert all("NoSuchEnv" in f or "not found" in f.lower() for f in report.failures), report.failures
