import pytest

from argparse_lite import ArgumentParser, HelpRequested, Namespace, ParseError


def make():
    p = ArgumentParser("copy", description="Copy files.")
    p.add_argument("-v", "--verbose", action="count", help="more output")
    p.add_argument("-n", "--dry-run", action="store_true", help="do nothing")
    p.add_argument("-j", "--jobs", type=int, default=1, help="parallel jobs")
    p.add_argument("--mode", choices=["fast", "safe"], default="safe")
    p.add_argument("-I", "--include", action="append", metavar="DIR")
    p.add_argument("src")
    p.add_argument("dst", nargs="?", default=".")
    return p


def test_defaults():
    ns = make().parse_args(["a.txt"])
    assert ns == Namespace(verbose=0, dry_run=False, jobs=1, mode="safe", include=None, src="a.txt", dst=".")


def test_long_options_both_forms():
    ns = make().parse_args(["--jobs", "4", "--mode=fast", "a", "b"])
    assert (ns.jobs, ns.mode, ns.src, ns.dst) == (4, "fast", "a", "b")


def test_short_options_attached_and_separate():
    assert make().parse_args(["-j8", "a"]).jobs == 8
    assert make().parse_args(["-j", "8", "a"]).jobs == 8


def test_combined_short_flags_and_count():
    ns = make().parse_args(["-vvn", "a"])
    assert ns.verbose == 2 and ns.dry_run is True


def test_combined_flags_ending_with_value_option():
    ns = make().parse_args(["-vj3", "a"])
    assert ns.verbose == 1 and ns.jobs == 3


def test_append():
    ns = make().parse_args(["-I", "x", "--include=y", "a"])
    assert ns.include == ["x", "y"]


def test_options_after_positionals():
    ns = make().parse_args(["a", "b", "-n"])
    assert ns.dry_run is True and ns.dst == "b"


def test_double_dash_ends_options():
    ns = make().parse_args(["--", "-weird-name"])
    assert ns.src == "-weird-name"


def test_invalid_type():
    with pytest.raises(ParseError, match="invalid int value: 'many'"):
        make().parse_args(["-j", "many", "a"])


def test_invalid_choice():
    with pytest.raises(ParseError, match="invalid choice"):
        make().parse_args(["--mode", "slow", "a"])


def test_missing_value():
    with pytest.raises(ParseError, match="expected a value"):
        make().parse_args(["a", "--jobs"])


def test_flag_with_value_rejected():
    with pytest.raises(ParseError, match="takes no value"):
        make().parse_args(["--dry-run=yes", "a"])


def test_unknown_option():
    with pytest.raises(ParseError, match="unrecognized argument: --color"):
        make().parse_args(["--color", "a"])


def test_missing_positional():
    with pytest.raises(ParseError, match="required: src"):
        make().parse_args(["-n"])


def test_too_many_positionals():
    with pytest.raises(ParseError, match="unrecognized arguments: c"):
        make().parse_args(["a", "b", "c"])


def test_required_option():
    p = ArgumentParser()
    p.add_argument("--token", required=True)
    with pytest.raises(ParseError, match="required: --token TOKEN"):
        p.parse_args([])
    assert p.parse_args(["--token", "t"]).token == "t"


def test_star_positional_between():
    p = ArgumentParser()
    p.add_argument("cmd")
    p.add_argument("files", nargs="*")
    p.add_argument("out")
    ns = p.parse_args(["cp", "x", "y", "z"])
    assert (ns.cmd, ns.files, ns.out) == ("cp", ["x", "y"], "z")
    assert p.parse_args(["cp", "z"]).files == []


def test_help_text():
    with pytest.raises(HelpRequested) as exc:
        make().parse_args(["a", "--help"])
    assert exc.value.text == (
        "usage: copy [-h] [-v] [-n] [-j JOBS] [--mode MODE] [-I DIR] src [dst]\n"
        "\n"
        "Copy files.\n"
        "\n"
        "positional arguments:\n"
        "  src\n"
        "  dst\n"
        "\n"
        "options:\n"
        "  -h, --help         show this help message and exit\n"
        "  -v, --verbose      more output\n"
        "  -n, --dry-run      do nothing\n"
        "  -j, --jobs JOBS    parallel jobs (default: 1)\n"
        "  --mode MODE        (default: safe)\n"
        "  -I, --include DIR\n"
    )
