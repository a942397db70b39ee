"""The toy repository lives in :mod:`envfarm.testing.toyrepo`; this module only re-exports what
tests/dashboard/dashboard_support.py imports through tests/harness on sys.path. New code imports
envfarm.testing.toyrepo."""

from envfarm.testing.toyrepo import PATCHES, row

__all__ = ["PATCHES", "row"]
