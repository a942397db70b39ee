import pytest

from semver import InvalidRange, InvalidVersion, Range, Version, max_satisfying, satisfies


def test_parse_full():
    v = Version.parse("1.2.3-rc.1+build.5")
    assert v.release == (1, 2, 3)
    assert v.prerelease == ("rc", "1")
    assert v.build == ("build", "5")
    assert str(v) == "1.2.3-rc.1+build.5"


def test_parse_leading_v_and_whitespace():
    assert Version.parse(" v2.0.0 ") == Version(2, 0, 0)


@pytest.mark.parametrize("bad", ["1.2", "1.2.3.4", "01.2.3", "1.2.3-", "1.2.3-01", "a.b.c", ""])
def test_parse_invalid(bad):
    with pytest.raises(InvalidVersion):
        Version.parse(bad)


def test_release_ordering():
    assert Version.parse("1.2.3") < Version.parse("1.2.10") < Version.parse("1.10.0") < Version.parse("2.0.0")


def test_prerelease_before_release():
    assert Version.parse("1.0.0-alpha") < Version.parse("1.0.0")
    assert Version.parse("1.0.0") > Version.parse("1.0.0-rc.1")


def test_spec_precedence_example():
    order = ["1.0.0-alpha", "1.0.0-alpha.1", "1.0.0-alpha.beta", "1.0.0-beta", "1.0.0-beta.2",
             "1.0.0-beta.11", "1.0.0-rc.1", "1.0.0"]
    parsed = [Version.parse(s) for s in order]
    assert sorted(reversed(parsed)) == parsed


def test_build_metadata_ignored_in_comparison():
    assert Version.parse("1.0.0+a") == Version.parse("1.0.0+b")
    assert hash(Version.parse("1.0.0+a")) == hash(Version.parse("1.0.0"))


def test_compare_with_string():
    assert Version(1, 2, 3) == "1.2.3"
    assert Version(1, 2, 3) < "1.2.4"


def test_bump():
    v = Version.parse("1.2.3")
    assert (str(v.bump("major")), str(v.bump("minor")), str(v.bump("patch"))) == ("2.0.0", "1.3.0", "1.2.4")
    assert str(Version.parse("1.2.3-rc.1").bump("patch")) == "1.2.3"


def test_caret_ranges():
    assert satisfies("1.9.9", "^1.2.3")
    assert not satisfies("2.0.0", "^1.2.3")
    assert not satisfies("1.2.2", "^1.2.3")
    assert satisfies("1.2.0", "^1.2") and not satisfies("1.1.9", "^1.2")
    assert satisfies("0.0.3", "^0.0.3") and not satisfies("0.0.4", "^0.0.3")


def test_tilde_ranges():
    assert satisfies("1.2.9", "~1.2.3")
    assert not satisfies("1.3.0", "~1.2.3")
    assert satisfies("1.2.0", "~1.2") and not satisfies("1.3.0", "~1.2")


def test_x_ranges_and_star():
    assert satisfies("1.99.0", "1.x") and not satisfies("2.0.0", "1.x")
    assert satisfies("1.2.7", "1.2.*")
    assert satisfies("5.0.0", "*") and satisfies("0.0.1", "")


def test_comparator_sets():
    r = Range(">=1.2.0 <1.4.0 || >=2.0.0")
    assert "1.3.5" in r and "2.5.0" in r
    assert "1.4.0" not in r and "1.1.0" not in r


def test_partial_comparators():
    assert satisfies("1.9.0", "<2") and not satisfies("2.0.0", "<2")
    assert satisfies("2.0.0", ">1") and not satisfies("1.9.9", ">1")
    assert satisfies("1.2.9", "<=1.2")


def test_prerelease_excluded_unless_opted_in():
    assert not satisfies("1.3.0-beta.1", "^1.2.0")
    assert satisfies("1.2.4-beta.2", ">=1.2.4-beta.1")
    assert not satisfies("1.2.5-beta.2", ">=1.2.4-beta.1")


def test_invalid_range():
    with pytest.raises(InvalidRange):
        Range(">=banana")
    assert satisfies("not-a-version", "*") is False


def test_max_satisfying():
    versions = ["1.2.3", "1.2.10", "1.3.0", "2.0.0", "1.4.0-rc.1"]
    assert max_satisfying(versions, "~1.2.0") == Version(1, 2, 10)
    assert max_satisfying(versions, "^1.0.0") == Version(1, 3, 0)
    assert max_satisfying(versions, "^3") is None
