"""Environment specs derived for repos without a spec file (harness/upstream_specs.py)."""

from __future__ import annotations

import collections
import dataclasses
from pathlib import Path

import pytest

from envfarm.errors import ImageBuildError, SpecNotFound
from envfarm.harness import Instance, SpecCatalog, _swebench, plan_all
from envfarm.harness import images as harness_images
from envfarm.harness.upstream_specs import (
    FACTS,
    SUITES,
    DerivedEnvSpec,
    derive,
    offline_install,
    suite_for,
)
from envfarm.sandbox import images


def _eval_script_install(script: str) -> str:
    """The pip install line of a v5 eval_script (after the diff of the base commit, before the resets)."""
    lines = script.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("git -c core.fileMode=false diff"))
    return next(line for line in lines[start:] if line.startswith("python -m pip install"))


def test_lite_rows_plan_with_a_python_a_suite_and_the_rows_install(lite: list[Instance]) -> None:
    plans, errors = plan_all(lite, SpecCatalog())
    assert set(errors) == {"astropy__astropy-6938", "astropy__astropy-7746"}, "astropy 1.3: exact_python 3.6"
    per_suite = collections.Counter()
    for plan in plans:
        env = plan.env
        if not isinstance(env, DerivedEnvSpec):
            continue
        assert env.origin == "envfarm FACTS" and env.source.name == "upstream_specs.py"
        assert (env.suite, env.python) in {("bullseye", "3.9"), ("bookworm", "3.11"), ("trixie", "3.13")}
        assert bool(env.note) == (env.requires_python != env.python), env
        assert env.install == (offline_install(_eval_script_install(plan.instance.eval_script)),)
        assert {"setuptools", "wheel"} <= set(env.packages)
        per_suite[(env.requires_python, env.suite)] += 1
    assert per_suite == {  # django, matplotlib, scikit-learn (160 rows): the repos without a spec file
        ("3.9", "bullseye"): 34,
        ("3.6", "bullseye"): 75,
        ("3.11", "bookworm"): 31,
        ("3.8", "bullseye"): 20,
    }


def test_overrides_win_over_derived_specs(lite: list[Instance], tmp_path: Path) -> None:
    flask = SpecCatalog().env("pallets/flask", "2.0")
    assert not isinstance(flask, DerivedEnvSpec) and flask.source.name == "pallets__flask.toml"
    assert derive("pallets/flask", "2.0") is not None, "swebench knows flask too; the file still wins"
    (tmp_path / "sympy.toml").write_text('repo = "sympy/sympy"\n[defaults]\npackages = ["mpmath==1.3.0"]\n')
    sympy = next(i for i in lite if i.repo == "sympy/sympy")
    plan = SpecCatalog([tmp_path]).plan(sympy)
    assert not isinstance(plan.env, DerivedEnvSpec) and plan.env.packages == ("mpmath==1.3.0",)
    django = next(i for i in lite if i.repo == "django/django")
    assert isinstance(SpecCatalog().plan(django).env, DerivedEnvSpec)


def test_unknown_repo_still_names_the_spec_to_write() -> None:
    assert derive("o/unknown", "1.0") is None
    with pytest.raises(SpecNotFound, match=r'images/swebench/o__unknown.toml with repo = "o/unknown" and a'):
        SpecCatalog().env("o/unknown", "1.0", "o__unknown-1")


def test_suites_and_nearest_suite() -> None:
    assert suite_for("3.11").name == "bookworm" and not suite_for("3.11").note
    assert suite_for("3.13").name == "trixie" and suite_for("3.9").name == "bullseye"
    old = suite_for("3.6")
    assert (old.name, old.python) == ("bullseye", "3.9") and "3.6" in old.note and "bullseye" in old.note
    assert suite_for("3.12").name == "bookworm" and suite_for("3.10").name == "bullseye"  # ties: older
    assert FACTS["django/django"].python_for("3.0") == "3.6"
    assert FACTS["django/django"].python_for("5.2") == "3.11"
    assert FACTS["astropy/astropy"].python_for("v5.3") == "3.10"


def test_suites_match_the_base_recipes() -> None:
    recipes = images.base_recipes()
    assert {(r.suite, r.python) for r in recipes.values()} == set(SUITES)
    assert recipes["bookworm"].name == "base" and recipes["bullseye"].name == "base-bullseye"
    assert recipes["bullseye"].glibc == "2.31" and recipes["trixie"].python == "3.13"


def test_spec_files_choose_the_suite_of_their_python(tmp_path: Path) -> None:
    spec = tmp_path / "o__r.toml"
    spec.write_text(
        'repo = "o/r"\n[versions."1"]\npython = "3.9"\n[versions."2"]\npython = "3.6"\n[versions."3"]\n'
        '[versions."4"]\npython = "3.13"\n'
    )
    catalog = SpecCatalog([tmp_path])
    old = catalog.env("o/r", "1")
    assert (old.suite, old.python, old.requires_python, old.note) == ("bullseye", "3.9", "3.9", "")
    oldest = catalog.env("o/r", "2")
    assert (oldest.suite, oldest.python, oldest.requires_python) == ("bullseye", "3.9", "3.6")
    assert "o__r.toml runs it on Python 3.6" in oldest.note and "nearest: bullseye" in oldest.note
    default = catalog.env("o/r", "3")
    assert (default.suite, default.python) == ("bookworm", "3.11")
    assert catalog.env("o/r", "4").suite == "trixie"
    django = derive("django/django", "3.0")
    assert django is not None and (django.suite, django.python, django.requires_python) == (
        "bullseye",
        "3.9",
        "3.6",
    )


def test_env_images_build_from_their_suite_and_its_env_packages(tmp_path: Path) -> None:
    env = dataclasses.replace(SpecCatalog().env("psf/requests", "2.4"), packages=("pytest==7.4.4",))
    base = harness_images.base_of(env)
    assert (base.name, base.suite, base.python) == ("base-bullseye", "bullseye", "3.9")
    harness_images.write_env_recipe(env, tmp_path / "a", base)
    assert (tmp_path / "a" / "requirements.txt").read_text() == "pip==24.3.1\npytest==7.4.4\n"
    own = dataclasses.replace(env, packages=("PIP>=25", "pytest==7.4.4"))
    harness_images.write_env_recipe(own, tmp_path / "b", base)
    assert (tmp_path / "b" / "requirements.txt").read_text() == "PIP>=25\npytest==7.4.4\n", (
        "the spec's pip wins"
    )
    nowhere = dataclasses.replace(env, suite="sid")
    with pytest.raises(ImageBuildError, match=r"needs Python 3.9 \(Debian sid\).*known: bookworm"):
        harness_images.base_of(nowhere)


def test_swebench_table_is_used_when_the_installed_swebench_has_one(monkeypatch: pytest.MonkeyPatch) -> None:
    entry = {
        "python": "3.6",
        "packages": "numpy scipy",
        "pip_packages": ["cython", "numpy==1.19.2"],
        "install": "python -m pip install -e .",
        "pre_install": ["sed -i 's/a/b/' setup.cfg", "apt-get update && apt-get install -y locales"],
    }
    table = {"o/table": {"1.0": entry}, "o/reqs": {"2.0": {"packages": "requirements.txt"}}}
    monkeypatch.setattr(_swebench.load().constants, "MAP_REPO_VERSION_TO_SPECS", table, raising=False)
    env = derive("o/table", "1.0")
    assert env is not None and env.origin.endswith("MAP_REPO_VERSION_TO_SPECS")
    assert env.packages == ("setuptools", "wheel", "cython", "numpy==1.19.2", "numpy", "scipy")
    assert env.install == ("sed -i 's/a/b/' setup.cfg", "python -m pip install --no-build-isolation -e .")
    assert (env.requires_python, env.suite) == ("3.6", "bullseye") and "apt-get" in env.note
    reqs = derive("o/reqs", "2.0")
    assert reqs is not None and reqs.python == "3.9" and "requirements" in reqs.install[0]
    assert derive("o/table", "9.9") is None
