"""Seeded arithmetic word problems with whole-number answers, in three difficulty levels."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from fractions import Fraction

import numpy as np

from .calc_program import evaluate


@dataclass(frozen=True)
class Problem:
    text: str
    expression: str
    """An expression for the calc tool that computes the answer."""
    answer: Fraction
    template: int
    key: str
    """The numbers drawn, joined: with the template index this identifies the task."""


def _n(rng: np.random.Generator, lo: int, hi: int) -> int:
    return int(rng.integers(lo, hi + 1))


def _problem(text: str, expression: str, template: int, *nums: int) -> Problem:
    return Problem(text, expression, evaluate(expression), template, "-".join(map(str, nums)))


def _l1(rng: np.random.Generator, t: int) -> Problem:
    a, b = _n(rng, 12, 999), _n(rng, 2, 99)
    forms = [
        (f"A farmer has {a} apples and buys {b} more. How many apples does the farmer have now?", f"{a}+{b}"),
        (f"A library had {a + b} books and lent out {b}. How many books are left?", f"{a + b}-{b}"),
        (f"There are {b} boxes with {a} pencils in each. How many pencils are there in total?", f"{b}*{a}"),
        (f"{a * b} candies are shared equally among {b} children. How many candies does each child get?",
         f"{a * b}/{b}"),
    ]
    text, expr = forms[t]
    return _problem(text, expr, t, a, b)


def _l2(rng: np.random.Generator, t: int) -> Problem:
    a, b, c = _n(rng, 3, 60), _n(rng, 5, 99), _n(rng, 2, 40)
    forms = [
        (f"A shop sells {a} shirts at {b} dollars each and gives a discount of {c} dollars on the whole "
         f"order. How many dollars does the order cost?", f"{a}*{b}-{c}"),
        (f"A train travels at {b} km per hour for {a} hours, then another {c} km. How many km did it travel "
         f"in total?", f"{b}*{a}+{c}"),
        (f"{a} workers each pack {b} boxes a day. How many boxes do they pack in {c} days?", f"{a}*{b}*{c}"),
        (f"A tank holds {c * a + b} liters. {b} liters leak out, and the rest is poured equally into {c} "
         f"bottles. How many liters go into each bottle?", f"({c * a + b}-{b})/{c}"),
    ]
    text, expr = forms[t]
    return _problem(text, expr, t, a, b, c)


def _l3(rng: np.random.Generator, t: int) -> Problem:
    a, b, c, d = _n(rng, 2, 30), _n(rng, 3, 24), _n(rng, 2, 30), _n(rng, 3, 24)
    e = _n(rng, 2, 9)
    if t == 0:
        total = a * b + c * d
        extra = (-total) % e  # top up so the split is exact
        return _problem(
            f"A school buys {a} packs of {b} markers, {c} packs of {d} pens and {extra} loose erasers. All "
            f"items are split equally among {e} classrooms. How many items does each classroom get?",
            f"({a}*{b}+{c}*{d}+{extra})/{e}", t, a, b, c, d, e, extra)
    if t == 1:
        p, q = b, b + d
        f = _n(rng, 1, min(50, c * d - 1))  # the fee never eats the whole gain
        return _problem(
            f"An investor buys {a + c} shares at {p} dollars each and later sells {c} of them at {q} dollars "
            f"each, paying a fee of {f} dollars. What is the profit in dollars on the shares sold?",
            f"{c}*({q}-{p})-{f}", t, a, c, p, q, f)
    if t == 2:
        w, h, s = a + 10, c + 10, min(a, c)
        return _problem(
            f"A wall is {w} m wide and {h} m high, with a square window of side {s} m. Painting costs {e} "
            f"dollars per square meter. How many dollars does it cost to paint the wall?",
            f"({w}*{h}-{s}**2)*{e}", t, w, h, s, e)
    return _problem(
        f"A baker makes {a} trays of {b} rolls in the morning and {c} trays of {d} rolls in the afternoon, "
        f"then sells {a} rolls. The rest are packed {e} to a bag and leftovers are eaten. How many full bags "
        f"are there?", f"({a}*{b}+{c}*{d}-{a})//{e}", t, a, b, c, d, e)


LEVELS: dict[int, Callable[[np.random.Generator, int], Problem]] = {1: _l1, 2: _l2, 3: _l3}


def make_problem(rng: np.random.Generator, level: int) -> Problem:
    """A problem of ``level`` (1-3) drawn from ``rng``."""
    return LEVELS[level](rng, int(rng.integers(0, 4)))
