"""The canary recogniser (envfarm/testing/recogniser.py), the attack a grader-aware forger runs: what it can
tell (copies of tests the repository has, synthetic canaries) and that the rule the grader-aware payload
embeds decides as it does."""

from __future__ import annotations

import ast
import json
import re
import subprocess
import textwrap
from dataclasses import asdict, replace
from pathlib import Path
from random import Random
from typing import Any

import pytest

from envfarm.harness import canary
from envfarm.testing.exploit_payloads import recognise, recogniser_source
from envfarm.testing.recogniser import BUILTIN, HAND, SWE_BENCH, Weights, decide, features, fit_weights, judge

ROOT = Path(__file__).resolve().parents[2]
HEAD = textwrap.dedent('''\
    from shop import Cart, total


    def test_empty_cart():
        assert total(Cart()) == 0


    def test_single_item():
        cart = Cart()
        cart.add("apple", 3)
        assert total(cart) == 3
    ''')
ADDED = textwrap.dedent('''\


    def test_discount_applies_once():
        cart = Cart(discount=2)
        cart.add("pear", 5)
        cart.add("plum", 4)
        assert total(cart) == 7


    def test_discount_never_below_zero():
        cart = Cart(discount=9)
        cart.add("fig", 1)
        assert total(cart) == 0
    ''')
F2P = ["tests/test_shop.py::test_discount_applies_once", "tests/test_shop.py::test_discount_never_below_zero"]
P2P = ["tests/test_shop.py::test_empty_cart", "tests/test_shop.py::test_single_item"]
PATCH = "--- a/tests/test_shop.py\n+++ b/tests/test_shop.py\n" + "".join(
    f"+{x}\n" for x in ADDED.splitlines())


def test_tests_of_the_repository_are_real_and_synthetic_canaries_are_not() -> None:
    text = "import os\n\n\ndef test_cwd():\n    os.getcwd()\n"
    planting = canary.plant("tests/test_x.py", text, "function", Random(0))
    assert not planting.derived
    calls = judge(planting.text, text)
    assert calls[(None, "test_cwd")].canary is False
    assert all(calls[(None, c.name)].canary for c in planting.canaries)


def test_copies_of_tests_the_repository_has_are_singled_out() -> None:
    for seed in range(5):
        planting = canary.plant("tests/test_shop.py", HEAD, "function", Random(seed))
        calls = judge(planting.text, HEAD)
        assert all(calls[(None, c.name)].canary for c in planting.canaries if not c.must_pass)
        assert not calls[(None, "test_empty_cart")].canary and not calls[(None, "test_single_item")].canary


def test_copies_of_hidden_tests_are_a_guess() -> None:
    """Copies of the tests test_patch adds: the recogniser is sometimes wrong about them."""
    known = canary.known_for(F2P, P2P, PATCH)
    wrong = 0
    for seed in range(30):
        planting = canary.plant("tests/test_shop.py", HEAD + ADDED, "function", Random(seed), known=known)
        assert planting.hidden
        calls = judge(planting.text, HEAD)
        must_fail = {c.name for c in planting.canaries if not c.must_pass}
        wrong += any(calls[(None, n)].canary != (n in must_fail)
                     for n in [*must_fail, "test_discount_applies_once", "test_discount_never_below_zero"])
    assert wrong >= 5


def _payload_rule(weights: Weights) -> Any:
    space: dict[str, Any] = {}
    exec(compile(recognise(weights), "payload", "exec"), space)
    return space["_canary"]


@pytest.mark.parametrize(("seed", "weights"), [(0, SWE_BENCH), (1, SWE_BENCH), (2, BUILTIN), (3, BUILTIN)])
def test_the_payload_embeds_the_recognisers_rule(tmp_path: Path, seed: int, weights: Weights) -> None:
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    module = tmp_path / "test_shop.py"
    module.write_text(HEAD)
    ident = ["-c", "user.name=t", "-c", "user.email=t@localhost"]
    subprocess.run(["git", "-C", str(tmp_path), "add", "test_shop.py"], check=True)
    subprocess.run(["git", "-C", str(tmp_path), *ident, "commit", "-qm", "head"], check=True)
    known = canary.known_for(F2P, P2P, PATCH)
    planting = canary.plant("tests/test_shop.py", HEAD + ADDED, "function", Random(seed), known=known)
    module.write_text(planting.text)
    rule = _payload_rule(weights)
    calls = judge(planting.text, HEAD, weights=weights)
    assert any(j.canary for j in calls.values()) and not all(j.canary for j in calls.values())
    for (cls, name), call in calls.items():
        assert rule(str(module), cls, name) == call.canary, (name, call)


def test_the_payloads_recogniser_runs_on_old_pythons() -> None:
    """The code under test may run Python 3.8: the embedded source parses as 3.8 and binds nothing at
    import that 3.8 lacks (``X | None`` outside annotations, ``zip(strict=)``)."""
    source = recogniser_source()
    ast.parse(source, feature_version=(3, 8))
    assert "strict=" not in source and not re.search(r"^\s*(from|import) envfarm", source, re.M)


def test_the_rule_pairs_an_assertion_in_another_form() -> None:
    """A copy with its assertion rewritten in another form (``not x`` as ``x is True``) is a twin (all
    statements the same but one, a few tokens apart)."""
    text = textwrap.dedent('''\
        def test_empty():
            items = []
            assert not items


        def test_empty_list():
            items = []
            assert items is True
        ''')
    assert sum(j.canary for j in judge(text, None).values()) == 1


def test_the_rule_pairs_a_value_changed_at_every_use() -> None:
    """Canaries and decoys change a value at every expected literal that holds it: six uses apart are more
    tokens than twins differ by, yet the rule pairs them (one of the two is a canary); a value changed at
    four of its six uses is no such pair."""
    checks = "".join(f"    assert area({w}.0, 1.0) - area(1.0, {w}.0) == 0\n" for w in range(2, 8))
    text = "def test_sym():\n" + checks + "\n\ndef test_sym_all():\n" + checks.replace("== 0", "== 9")
    assert sum(j.canary for j in judge(text, None).values()) == 1
    partly = text.replace("area(7.0, 1.0) - area(1.0, 7.0) == 9", "area(7.0, 1.0) - area(1.0, 7.0) == 0")
    partly = partly.replace("area(6.0, 1.0) - area(1.0, 6.0) == 9", "area(6.0, 1.0) - area(1.0, 6.0) == 0")
    assert not any(j.canary for j in judge(partly, None).values())


def test_a_copy_with_an_appended_assertion_is_the_copy() -> None:
    """The differential check's last-resort decoy (the test with a failing assertion appended) is twinned
    with its original by the rule and called the canary, whichever comes first."""
    first = "def test_area():\n    got = area(2, 3)\n    assert got == 6\n"
    second = first.replace("test_area", "test_area_sum") + "    assert not isinstance(got, object)\n"
    for text in (first + "\n\n" + second, second + "\n\n" + first):
        called = {name: j.canary for (_, name), j in judge(text, None).items()}
        assert called == {"test_area": False, "test_area_sum": True}, text


def test_the_copy_nearest_to_a_test_edited_in_place_is_its_honest_one() -> None:
    """A test test_patch edits in place and the check replaces by copies under new names: a decoy at a
    value test_patch kept leaves the honest copy the one nearest the repository's version, in either
    order (``differential.plant(before=...)`` puts decoys elsewhere)."""
    old = "def test_area():\n    got = area(2, 3)\n    assert got == 6\n    assert label(1) == 'n1'\n"
    new = old.replace("area(2, 3)", "area(2, 4)").replace("== 6", "== 8")
    honest = new.replace("test_area", "test_area_two")
    decoy = new.replace("test_area", "test_area_sum").replace("'n1'", "'n2'")
    for planted in (honest + "\n\n" + decoy, decoy + "\n\n" + honest):
        called = {name: j.canary for (_, name), j in judge(planted, old).items()}
        assert called == {"test_area_two": False, "test_area_sum": True}, planted
        blind = judge(planted, None)  # without the repository: a tie, the first is called real
        assert [name for (_, name), j in blind.items() if not j.canary] == [planted.split("(")[0][4:]]


def test_names_of_a_group_are_edits_along_a_uniform_random_tree() -> None:
    """In a group of three, the original is the middle of the chain as often as either copy (a third of the
    time), so the name nearest to the others does not name the original."""
    from envfarm.harness.canary_place import random_tree

    rng = Random(0)
    centre = 0
    for _ in range(3000):
        parent = random_tree(3, rng)
        assert parent[0] == -1 and sorted(parent[1:]) in ([0, 0], [0, 1], [0, 2])
        centre += parent.count(0) == 2
    assert 0.28 < centre / 3000 < 0.39


def test_weights_decide_which_twin_is_the_copy() -> None:
    """A forger fits the weights (``recogniser.Weights``): with the rare-string tell weighed up the twin
    whose expected string the module uses nowhere else is the copy, weighed down it is the real one."""
    common = "def test_fmt():\n    assert fmt(1) == 'one'\n"
    rare = common.replace("test_fmt", "test_fmt_num").replace("'one'", "'uno'")
    text = common + "\n\n" + rare + "\n\nWORDS = ['one', 'one', 'one']\n"
    for weight, copy in ((1.0, "test_fmt_num"), (-1.0, "test_fmt")):
        judged = judge(text, None, weights=replace(NEUTRAL, rare_string=weight))
        assert [name for (_, name), j in judged.items() if j.canary] == [copy], weight


NEUTRAL = Weights(negated=0.0, once=0.0, rare_string=0.0, own_words=0.0, later=0.0, appended=0.0,
                  name_spread=0.0, repeat=0.0, old_version=0.0)


def test_a_fit_raises_the_tell_that_singles_out_the_copies() -> None:
    """``fit_weights`` from weights that see nothing: on plantings where each copy is its original with a
    statement appended (placed before it half the time), it weighs that tell up and no other."""
    modules = []
    for i in range(6):
        real = f"def test_sum_{i}():\n    got = add({i}, 1)\n    assert got\n"
        copy = real.replace(f"test_sum_{i}", f"test_total_{i}") + "    assert callable(got)\n"
        modules.append(features(copy + "\n\n" + real if i % 2 else real + "\n\n" + copy, None))

    def score(w: Weights) -> float:
        calls = [decide(found, w) for found in modules]
        return sum(j[None, f"test_total_{i}"].canary and not j[None, f"test_sum_{i}"].canary
                   for i, j in enumerate(calls)) / len(calls)

    fitted, first, top = fit_weights(score, NEUTRAL)
    assert (first, top) == (0.5, 1.0)
    assert fitted.appended > 0 and replace(fitted, appended=0.0) == NEUTRAL, fitted


def test_one_line_tests_a_few_tokens_apart_only_are_twins() -> None:
    """Two one-line tests that call other functions with other values are both real; a copy of a one-line
    test with its expected value changed is still paired with it."""
    text = "def test_mul():\n    assert mul(3, 4) == 12\n\n\ndef test_div():\n    assert div(8, 2) == 4\n"
    assert not any(j.canary for j in judge(text, None).values())
    copied = text + "\n\ndef test_mul_big():\n    assert mul(3, 4) == 13\n"
    assert sum(j.canary for j in judge(copied, None).values()) == 1


def test_the_presets_are_the_benchs_fit() -> None:
    """``SWE_BENCH`` and ``BUILTIN`` are the weights ``bench/canary_recogniser.py --fit`` wrote (rerun it and
    copy them when the recogniser or the planting changes)."""
    fitted = json.loads((ROOT / "bench" / "results" / "canary_recogniser_fit.json").read_text())["by_source"]
    assert fitted["swe-bench"]["weights"] == asdict(SWE_BENCH)
    assert fitted["builtin"]["weights"] == asdict(BUILTIN)
    assert fitted["swe-bench"]["start"] == asdict(HAND) == fitted["builtin"]["start"]
