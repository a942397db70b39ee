from __future__ import annotations

import re
from functools import total_ordering

_VERSION = re.compile(
    r"v?(?P<major>0|[1-9]\d*)\.(?P<minor>0|[1-9]\d*)\.(?P<patch>0|[1-9]\d*)"
    r"(?:-(?P<pre>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
    r"(?:\+(?P<build>[0-9A-Za-z-]+(?:\.[0-9A-Za-z-]+)*))?"
)


class InvalidVersion(ValueError):
    pass


def _pre_key(ident: str):
    # numeric identifiers sort numerically and before alphanumeric ones
    if ident.isdigit():
        return (0, int(ident), "")
    return (1, 0, ident)


@total_ordering
class Version:
    __slots__ = ("major", "minor", "patch", "prerelease", "build")

    def __init__(self, major: int, minor: int = 0, patch: int = 0, prerelease=(), build=()):
        if min(major, minor, patch) < 0:
            raise InvalidVersion("version numbers must be non-negative")
        self.major, self.minor, self.patch = int(major), int(minor), int(patch)
        self.prerelease = tuple(str(p) for p in prerelease)
        self.build = tuple(str(b) for b in build)

    @classmethod
    def parse(cls, text: str) -> "Version":
        m = _VERSION.fullmatch(text.strip())
        if not m:
            raise InvalidVersion(f"invalid version: {text!r}")
        pre = tuple(m["pre"].split(".")) if m["pre"] else ()
        for ident in pre:
            if ident.isdigit() and len(ident) > 1 and ident[0] == "0":
                raise InvalidVersion(f"numeric pre-release identifier with leading zero in {text!r}")
        build = tuple(m["build"].split(".")) if m["build"] else ()
        return cls(int(m["major"]), int(m["minor"]), int(m["patch"]), pre, build)

    @property
    def release(self) -> tuple[int, int, int]:
        return (self.major, self.minor, self.patch)

    @property
    def is_prerelease(self) -> bool:
        return bool(self.prerelease)

    def _cmp_key(self):
        if not self.prerelease:
            return (self.release, 1, ())
        return (self.release, 0, tuple(_pre_key(p) for p in self.prerelease))

    def __eq__(self, other) -> bool:
        if isinstance(other, str):
            other = Version.parse(other)
        if not isinstance(other, Version):
            return NotImplemented
        return self._cmp_key() == other._cmp_key()

    def __lt__(self, other) -> bool:
        if isinstance(other, str):
            other = Version.parse(other)
        if not isinstance(other, Version):
            return NotImplemented
        return self._cmp_key() < other._cmp_key()

    def __hash__(self):
        return hash(self._cmp_key())

    def __str__(self) -> str:
        s = f"{self.major}.{self.minor}.{self.patch}"
        if self.prerelease:
            s += "-" + ".".join(self.prerelease)
        if self.build:
            s += "+" + ".".join(self.build)
        return s

    def __repr__(self) -> str:
        return f"Version({str(self)!r})"

    def bump(self, part: str) -> "Version":
        if part == "major":
            return Version(self.major + 1, 0, 0)
        if part == "minor":
            return Version(self.major, self.minor + 1, 0)
        if part == "patch":
            # 1.2.3-rc.1 bumps to 1.2.3 (the release it was a candidate for)
            return Version(self.major, self.minor, self.patch + (0 if self.prerelease else 1))
        raise ValueError(f"unknown part {part!r}")
