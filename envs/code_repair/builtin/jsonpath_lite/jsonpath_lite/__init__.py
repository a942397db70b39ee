"""A small JSONPath subset: ``$.a.b``, ``$.a[0]``, ``$.a[-1]``, ``$.a[*]``, ``$.*``, ``$.a[1:3]``, ``$['key']``."""

from .path import JSONPathError, Path, compile, find, first

__all__ = ["JSONPathError", "Path", "compile", "find", "first"]
