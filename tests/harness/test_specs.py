"""Environment specs and per-instance plans: every Lite row plans or names the spec to write."""

from __future__ import annotations

from pathlib import Path

import pytest

from envfarm.errors import ConfigError, SpecNotFound
from envfarm.harness import Instance, SpecCatalog, plan_all
from envfarm.harness.instances import instance_from_row
from envfarm.harness.specs import directives_for, eval_script_command, eval_script_exports
from envfarm.harness.upstream_specs import DerivedEnvSpec
from envfarm.testing.toyrepo import row


def test_every_lite_row_plans(lite: list[Instance]) -> None:
    plans, errors = plan_all(lite, SpecCatalog())
    astropy_13 = {"astropy__astropy-6938", "astropy__astropy-7746"}
    assert len(plans) == 298 and set(errors) == astropy_13, errors
    assert all("needs Python 3.6 exactly" in str(e) for e in errors.values()), (
        "exact_python: no nearest suite"
    )
    files = {p.instance.repo for p in plans if not isinstance(p.env, DerivedEnvSpec)}
    shipped = {"pallets/flask", "sympy/sympy", "pytest-dev/pytest", "psf/requests", "mwaskom/seaborn"}
    shipped |= {"pylint-dev/pylint", "sphinx-doc/sphinx", "pydata/xarray", "astropy/astropy"}
    assert files == shipped, "images/swebench/ ships these; the rest is derived"
    sympy = {p for p in plans if p.instance.repo == "sympy/sympy"}
    assert not any(isinstance(p.env, DerivedEnvSpec) for p in sympy), "the sympy file has every Lite version"
    assert {p.env.suite for p in sympy if p.instance.version in ("1.1", "1.11")} == {"bullseye"}
    for plan in plans:
        inst = plan.instance
        command = eval_script_command(inst.eval_script)
        assert command and ">>>>>" not in command, inst.instance_id
        assert plan.test_command == command and plan.command_source == "eval_script"
        assert plan.test_files and plan.env.python in {"3.9", "3.11", "3.13"}
    flask = next(p for p in plans if p.instance.instance_id == "pallets__flask-4045")
    assert flask.command_source == "eval_script"
    assert flask.test_command == "pytest -rA tests/test_basic.py tests/test_blueprints.py"
    assert flask.test_files == ("tests/test_basic.py", "tests/test_blueprints.py")
    assert flask.log_parser == "parse_log_flask" and flask.eval_type == "pass_and_fail"
    assert flask.env.python == "3.11" and any(p.startswith("Werkzeug==") for p in flask.env.packages)


def test_django_rows_derive_exports_and_module_labels(lite: list[Instance]) -> None:
    django = next(i for i in lite if i.instance_id == "django__django-10914")
    assert eval_script_command(django.eval_script) == (
        "./tests/runtests.py --verbosity 2 --settings=test_sqlite --parallel 1 test_utils.tests"
    )
    assert ("LANG", "en_US.UTF-8") in eval_script_exports(django.eval_script)
    assert directives_for(["tests/test_utils/tests.py", "tests/x/data.json"], "django") == [
        "test_utils.tests"
    ]
    assert directives_for(["a/tests/test_b.py", "README.md"], "paths") == ["a/tests/test_b.py"]
    assert directives_for(["a/tests/test_b.py"], "none") == []


def test_user_specs_override_and_cover_classic_rows(lite: list[Instance], tmp_path: Path) -> None:
    (tmp_path / "django.toml").write_text(
        'repo = "django/django"\n[defaults]\npackages = ["asgiref"]\ntest_cmd = "./tests/runtests.py -v 2"\n'
        'directives = "django"\nenv = { PYTHONHASHSEED = "0" }\n'
    )
    catalog = SpecCatalog([tmp_path])
    django = next(i for i in lite if i.instance_id == "django__django-10914")
    plan = catalog.plan(django)
    assert plan.command_source == "spec" and plan.test_command == "./tests/runtests.py -v 2 test_utils.tests"
    assert dict(plan.env_vars)["PYTHONHASHSEED"] == "0" and dict(plan.env_vars)["LANG"] == "en_US.UTF-8"
    classic = instance_from_row({**row("envfarm-tests__calc-1", "a" * 40), "repo": "django/django"})
    assert catalog.plan(classic).test_command == "./tests/runtests.py -v 2 test_ops"


def test_spec_errors_name_the_fix(tmp_path: Path) -> None:
    (tmp_path / "a.toml").write_text('repo = "o/a"\n[versions."1.0"]\npackages = []\n')
    (tmp_path / "b.toml").write_text('repo = "o/b"\n[defaults]\npython = "3.9"\n')
    (tmp_path / "c.toml").write_text('repo = "o/c"\n')
    catalog = SpecCatalog([tmp_path])
    with pytest.raises(SpecNotFound, match=r'has no \[versions."2.0"\] table .* \(it has 1.0\)'):
        catalog.env("o/a", "2.0")
    old = catalog.env("o/b", "1.0")  # a Python other than the default base's picks its Debian suite
    assert (old.python, old.suite) == ("3.9", "bullseye")
    classic = instance_from_row({**row("o__c-1", "a" * 40), "repo": "o/c"})
    with pytest.raises(SpecNotFound, match=r"no test command for o__c-1: .* add test_cmd"):
        catalog.plan(classic)
    (tmp_path / "d.toml").write_text('repo = "o/d"\n[defaults]\npyhton = "3.11"\n')
    with pytest.raises(ConfigError, match="pyhton"):
        SpecCatalog([tmp_path])
    with pytest.raises(ConfigError, match="does not exist"):
        SpecCatalog([tmp_path / "nope"])


def test_a_glob_spec_covers_a_family_of_repos(tmp_path: Path) -> None:
    (tmp_path / "fam.toml").write_text('repo = "fam/*"\n[defaults]\ntest_cmd = "pytest -rA"\ninstall = []\n')
    (tmp_path / "fam__special.toml").write_text('repo = "fam/special"\n[defaults]\ntest_cmd = "pytest -x"\n')
    catalog = SpecCatalog([tmp_path])
    assert catalog.env("fam/anything", "1.0").test_cmd == "pytest -rA"
    assert catalog.env("fam/anything", "1.0").install == ()
    assert catalog.env("fam/special", "1.0").test_cmd == "pytest -x"  # an exact name wins over a pattern
    with pytest.raises(SpecNotFound, match="no environment spec for other/x"):
        catalog.env("other/x", "1.0")


def test_like_and_extra_packages_share_a_version_table(tmp_path: Path) -> None:
    (tmp_path / "s.toml").write_text(
        'repo = "o/s"\n[defaults]\npackages = ["a==1", "Cython==0.29.30"]\n'
        '[versions."1.0"]\nextra_packages = ["cython==0.29.22", "b==2"]\ntest_cmd = "pytest"\n'
        '[versions."1.1"]\nlike = "1.0"\n[versions."1.2"]\nlike = "1.1"\ntest_cmd = "tox"\n'
        '[versions."2.0"]\nlike = "3.0"\n[versions."3.0"]\nlike = "2.0"\n'
    )
    catalog = SpecCatalog([tmp_path])
    assert catalog.env("o/s", "1.0").packages == ("a==1", "cython==0.29.22", "b==2"), "same project: replaced"
    assert catalog.env("o/s", "1.1").packages == catalog.env("o/s", "1.0").packages
    assert (catalog.env("o/s", "1.1").test_cmd, catalog.env("o/s", "1.2").test_cmd) == ("pytest", "tox")
    with pytest.raises(ConfigError, match="a cycle"):
        catalog.env("o/s", "2.0")


def test_exact_python_reports_the_missing_python(tmp_path: Path) -> None:
    (tmp_path / "e.toml").write_text(
        'repo = "o/e"\n[defaults]\npython = "3.6"\n[versions."1.0"]\nexact_python = true\n'
        '[versions."2.0"]\n[versions."3.0"]\npython = "3.9"\nexact_python = true\n'
    )
    catalog = SpecCatalog([tmp_path])
    with pytest.raises(SpecNotFound, match=r"o/e 1.0 needs Python 3.6 exactly .* no Debian suite ships it"):
        catalog.env("o/e", "1.0")
    assert catalog.env("o/e", "2.0").suite == "bullseye" and catalog.env("o/e", "2.0").note, "nearest suite"
    assert catalog.env("o/e", "3.0").python == "3.9"


def test_a_spec_raises_the_cores_of_its_test_runs(tmp_path: Path) -> None:
    """pylint's multiprocessing tests skip on one core ("Need 2 or more cores"), so SWE-bench's PASS_TO_PASS
    lists them as passing: the spec gives its test runs 2 cores, never fewer than --cpus."""
    (tmp_path / "c.toml").write_text('repo = "o/c"\n[defaults]\ncpus = 2\n[versions."1.0"]\n'
                                     '[versions."2.0"]\ncpus = 0.5\n')
    catalog = SpecCatalog([tmp_path])
    assert catalog.env("o/c", "1.0").run_cpus(1.0) == 2.0
    assert catalog.env("o/c", "1.0").run_cpus(4.0) == 4.0
    assert catalog.env("o/c", "2.0").run_cpus(1.0) == 1.0
    pylint = SpecCatalog().env("pylint-dev/pylint", "2.15")
    assert pylint.run_cpus(1.0) == 2.0
