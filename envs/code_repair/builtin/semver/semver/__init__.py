"""Semantic versions (semver.org 2.0.0) and npm-style ranges."""
from .version import Version, InvalidVersion
from .ranges import Range, InvalidRange, satisfies, max_satisfying

__all__ = ["Version", "InvalidVersion", "Range", "InvalidRange", "satisfies", "max_satisfying"]
