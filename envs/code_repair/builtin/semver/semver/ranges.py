from __future__ import annotations

import operator
import re
from typing import Iterable, Optional

from .version import InvalidVersion, Version

_OPS = {">=": operator.ge, "<=": operator.le, ">": operator.gt, "<": operator.lt, "=": operator.eq}
_PARTIAL = re.compile(r"v?(?P<major>\d+|[xX*])(?:\.(?P<minor>\d+|[xX*]))?(?:\.(?P<patch>\d+|[xX*]))?"
                      r"(?:-(?P<pre>[0-9A-Za-z.-]+))?")
_COMPARATOR = re.compile(r"\s*(\^|~|>=|<=|>|<|=)?\s*([^\s<>=^~]\S*)")


class InvalidRange(ValueError):
    pass


def _wild(part: Optional[str]) -> bool:
    return part is None or part in ("x", "X", "*")


class Range:
    """An npm-style range: comparator sets joined by ``||``; comparators in a set are ANDed.

    Supported: ``1.2.3``, ``=1.2.3``, ``>=1.2.3 <2``, ``^1.2.3``, ``^0.2``, ``~1.2.3``, ``~1.2``, ``1.x``, ``*``.
    """

    def __init__(self, text: str):
        self.text = text
        self.sets: list[list[tuple[str, Version]]] = []
        for part in text.split("||"):
            comps: list[tuple[str, Version]] = []
            tokens = _COMPARATOR.findall(part.strip())
            if not tokens:
                comps.append((">=", Version(0, 0, 0)))
            for op, spec in tokens:
                comps.extend(self._expand(op or "", spec))
            self.sets.append(comps)

    def _expand(self, op: str, spec: str) -> list[tuple[str, Version]]:
        m = _PARTIAL.fullmatch(spec)
        if not m:
            raise InvalidRange(f"invalid range: {self.text!r}")
        major, minor, patch = m["major"], m["minor"], m["patch"]
        pre = tuple(m["pre"].split(".")) if m["pre"] else ()
        if _wild(major):
            return [(">=", Version(0, 0, 0))] if op in ("", "=", ">=", "^", "~", "<=") else [("<", Version(0, 0, 0))]
        M = int(major)
        if _wild(minor):
            lo, hi = Version(M, 0, 0), Version(M + 1, 0, 0)
            return self._partial(op, lo, hi)
        m_ = int(minor)
        if _wild(patch):
            lo = Version(M, m_, 0)
            if op == "^" and M == 0:
                hi = Version(0, m_ + 1, 0)
            elif op == "^":
                hi = Version(M + 1, 0, 0)
            else:
                hi = Version(M, m_ + 1, 0)
            return self._partial("" if op in ("^", "~") else op, lo, hi)
        v = Version(M, m_, int(patch), pre)
        if op == "^":
            if M > 0:
                hi = Version(M + 1, 0, 0)
            elif m_ > 0:
                hi = Version(0, m_ + 1, 0)
            else:
                hi = Version(0, 0, int(patch) + 1)
            return [(">=", v), ("<", hi)]
        if op == "~":
            return [(">=", v), ("<", Version(M, m_ + 1, 0))]
        return [(op or "=", v)]

    @staticmethod
    def _partial(op: str, lo: Version, hi: Version) -> list[tuple[str, Version]]:
        if op in ("", "=", "^", "~"):
            return [(">=", lo), ("<", hi)]
        if op == ">":
            return [(">=", hi)]
        if op == ">=":
            return [(">=", lo)]
        if op == "<":
            return [("<", lo)]
        return [("<", hi)]  # "<="

    def __contains__(self, version) -> bool:
        if isinstance(version, str):
            version = Version.parse(version)
        return any(self._set_matches(s, version) for s in self.sets)

    @staticmethod
    def _set_matches(comps, v: Version) -> bool:
        if not all(_OPS[op](v, bound) for op, bound in comps):
            return False
        if v.prerelease:
            # a pre-release only matches if some comparator of the set opts into that exact release
            return any(bound.prerelease and bound.release == v.release for _, bound in comps)
        return True

    def __repr__(self) -> str:
        return f"Range({self.text!r})"


def satisfies(version, range_text: str) -> bool:
    try:
        return version in Range(range_text)
    except InvalidVersion:
        return False


def max_satisfying(versions: Iterable, range_text: str) -> Optional[Version]:
    r = Range(range_text)
    matching = [Version.parse(v) if isinstance(v, str) else v for v in versions]
    matching = [v for v in matching if v in r]
    return max(matching) if matching else None
