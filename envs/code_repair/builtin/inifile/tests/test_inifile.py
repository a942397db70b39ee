import pytest

from inifile import (DuplicateError, IniFile, InterpolationError, NoOptionError, NoSectionError,
                     ParsingError)

SAMPLE = """\
; global settings
[DEFAULT]
home = /srv/app
debug = no

[Server]
Host = example.org
port: 8080   ; inline comment
root = %(home)s/www
# a comment line
motd = Hello
    World

[paths]
logs = %(home)s/logs
discount = 10%%
"""


def test_sections_are_case_insensitive_and_ordered():
    ini = IniFile.loads(SAMPLE)
    assert ini.sections() == ["server", "paths"]
    assert ini.has_section("SERVER")


def test_get_and_types():
    ini = IniFile.loads(SAMPLE)
    assert ini.get("server", "HOST") == "example.org"
    assert ini.getint("server", "port") == 8080
    assert ini.getboolean("server", "debug") is False


def test_inline_comments_and_hash_inside_value():
    ini = IniFile.loads("[a]\nurl = http://x/#frag\ncolor = #fff ; white\n")
    assert ini.get("a", "url") == "http://x/#frag"
    assert ini.get("a", "color") == "#fff"


def test_multiline_value():
    ini = IniFile.loads(SAMPLE)
    assert ini.get("server", "motd") == "Hello\nWorld"


def test_interpolation_within_section():
    ini = IniFile.loads("[s]\na = 1\nb = %(a)s2\nc = %(b)s3\n")
    assert ini.get("s", "c") == "123"


def test_percent_escape():
    ini = IniFile.loads(SAMPLE)
    assert ini.get("paths", "discount") == "10%"
    assert ini.get("paths", "discount", raw=True) == "10%%"


def test_interpolation_errors():
    ini = IniFile.loads("[s]\na = %(missing)s\nb = 50%\nc = %(d)s\nd = %(c)s\n")
    with pytest.raises(InterpolationError, match="missing"):
        ini.get("s", "a")
    with pytest.raises(InterpolationError, match="bare"):
        ini.get("s", "b")
    with pytest.raises(InterpolationError, match="recursion"):
        ini.get("s", "c")


def test_interpolation_disabled():
    ini = IniFile.loads("[s]\na = %(b)s\n", interpolation=False)
    assert ini.get("s", "a") == "%(b)s"


def test_missing_section_and_option():
    ini = IniFile.loads(SAMPLE)
    with pytest.raises(NoSectionError):
        ini.get("nope", "x")
    with pytest.raises(NoOptionError):
        ini.get("server", "nope")
    assert ini.get("server", "nope", fallback=None) is None
    assert ini.getint("server", "nope", fallback=3) == 3


def test_defaults_visible_in_options():
    ini = IniFile.loads(SAMPLE)
    assert ini.options("paths") == ["logs", "discount", "home", "debug"]
    assert ini.has_option("paths", "HOME")


def test_parse_errors():
    with pytest.raises(ParsingError, match="line 1"):
        IniFile.loads("x = 1\n")
    with pytest.raises(ParsingError, match="line 2"):
        IniFile.loads("[a]\njust text\n")
    with pytest.raises(DuplicateError):
        IniFile.loads("[a]\n[A]\n")


def test_set_remove_and_add():
    ini = IniFile()
    ini.add_section("Main")
    ini.set("main", "Name", "x")
    assert ini.get("MAIN", "name") == "x"
    with pytest.raises(TypeError):
        ini.set("main", "n", 3)
    assert ini.remove_option("main", "name") is True
    assert ini.remove_section("main") is True
    assert ini.sections() == []


def test_dumps_simple():
    ini = IniFile.loads("[DEFAULT]\nk = v\n[b]\nx = 1\ny =\n")
    assert ini.dumps() == "[DEFAULT]\nk = v\n\n[b]\nx = 1\ny =\n"


def test_round_trip():
    ini = IniFile.loads(SAMPLE)
    again = IniFile.loads(ini.dumps())
    assert again.sections() == ini.sections()
    for s in ini.sections():
        assert [(k, again.get(s, k, raw=True)) for k in again.options(s)] == \
               [(k, ini.get(s, k, raw=True)) for k in ini.options(s)]
