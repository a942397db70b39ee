from __future__ import annotations

import re
from typing import Iterator, Optional

DEFAULT_SECTION = "DEFAULT"
MAX_DEPTH = 10

_SECTION = re.compile(r"\[(?P<name>[^\]]+)\]\s*$")
_OPTION = re.compile(r"(?P<key>[^=:\s][^=:]*?)\s*[=:]\s*(?P<value>.*)$")
_INTERP = re.compile(r"%\((?P<name>[^)]+)\)s|%%|%")
_BOOLEANS = {"1": True, "yes": True, "true": True, "on": True, "0": False, "no": False, "false": False,
             "off": False}


class IniError(Exception):
    pass


class ParsingError(IniError):
    def __init__(self, message: str, lineno: int):
        super().__init__(f"line {lineno}: {message}")
        self.lineno = lineno


class DuplicateError(ParsingError):
    pass


class NoSectionError(IniError, KeyError):
    pass


class NoOptionError(IniError, KeyError):
    pass


class InterpolationError(IniError):
    pass


def _strip_inline_comment(value: str) -> str:
    # an inline comment starts with " ;" or " #" (a ; or # preceded by whitespace)
    m = re.search(r"\s[;#]", value)
    return value[: m.start()].rstrip() if m else value


class IniFile:
    """Sections and option names are case-insensitive (stored lower-case); values are strings."""

    def __init__(self, interpolation: bool = True):
        self.interpolation = interpolation
        self._defaults: dict[str, str] = {}
        self._sections: dict[str, dict[str, str]] = {}

    # reading ----------------------------------------------------------------------------------------------
    @classmethod
    def loads(cls, text: str, **kwargs) -> "IniFile":
        ini = cls(**kwargs)
        ini.read_string(text)
        return ini

    def read_string(self, text: str) -> None:
        current: Optional[dict[str, str]] = None
        last_key: Optional[str] = None
        seen_in_this_read: set = set()
        for lineno, raw in enumerate(text.splitlines(), start=1):
            line = raw.rstrip()
            stripped = line.strip()
            if not stripped or stripped[0] in "#;":
                if not stripped:
                    last_key = None
                continue
            if raw[0].isspace() and last_key is not None and current is not None:
                # continuation of a multi-line value
                current[last_key] += "\n" + _strip_inline_comment(stripped)
                continue
            m = _SECTION.match(stripped)
            if m:
                name = m["name"].strip()
                if name == DEFAULT_SECTION:
                    current = self._defaults
                else:
                    key = name.lower()
                    if key in seen_in_this_read:
                        raise DuplicateError(f"duplicate section {name!r}", lineno)
                    seen_in_this_read.add(key)
                    current = self._sections.setdefault(key, {})
                last_key = None
                continue
            m = _OPTION.match(stripped)
            if not m:
                raise ParsingError(f"cannot parse {stripped!r}", lineno)
            if current is None:
                raise ParsingError("option outside of any section", lineno)
            key = m["key"].strip().lower()
            current[key] = _strip_inline_comment(m["value"])
            last_key = key

    # access -----------------------------------------------------------------------------------------------
    def sections(self) -> list[str]:
        return list(self._sections)

    def has_section(self, section: str) -> bool:
        return section.lower() in self._sections

    def add_section(self, section: str) -> None:
        if section == DEFAULT_SECTION:
            raise ValueError("the DEFAULT section always exists")
        key = section.lower()
        if key in self._sections:
            raise IniError(f"section {section!r} already exists")
        self._sections[key] = {}

    def remove_section(self, section: str) -> bool:
        return self._sections.pop(section.lower(), None) is not None

    def _section(self, section: str) -> dict[str, str]:
        if section == DEFAULT_SECTION:
            return self._defaults
        try:
            return self._sections[section.lower()]
        except KeyError:
            raise NoSectionError(section) from None

    def options(self, section: str) -> list[str]:
        own = self._section(section)
        return list(own) + [k for k in self._defaults if k not in own]

    def has_option(self, section: str, option: str) -> bool:
        try:
            return option.lower() in self.options(section)
        except NoSectionError:
            return False

    def _raw(self, section: str, option: str) -> str:
        sec = self._section(section)
        key = option.lower()
        if key in sec:
            return sec[key]
        if key in self._defaults:
            return self._defaults[key]
        raise NoOptionError(f"no option {option!r} in section {section!r}")

    def get(self, section: str, option: str, fallback=..., *, raw: bool = False) -> str:
        try:
            value = self._raw(section, option)
        except NoOptionError:
            if fallback is ...:
                raise
            return fallback
        if raw or not self.interpolation:
            return value
        return self._interpolate(section, option, value, 1)

    def _interpolate(self, section: str, option: str, value: str, depth: int) -> str:
        if depth > MAX_DEPTH:
            raise InterpolationError(f"recursion limit exceeded while expanding {section}.{option}")

        def repl(m: re.Match) -> str:
            token = m.group(0)
            if token == "%%":
                return "%"
            if token == "%":
                raise InterpolationError(f"bare '%' in {section}.{option}: use '%%' for a literal percent")
            name = m["name"].lower()
            try:
                ref = self._raw(section, name)
            except NoOptionError:
                raise InterpolationError(f"{section}.{option} references missing option {name!r}") from None
            return self._interpolate(section, name, ref, depth + 1)

        return _INTERP.sub(repl, value)

    def getint(self, section: str, option: str, fallback=...) -> int:
        value = self.get(section, option, fallback)
        return value if value is fallback else int(value)

    def getfloat(self, section: str, option: str, fallback=...) -> float:
        value = self.get(section, option, fallback)
        return value if value is fallback else float(value)

    def getboolean(self, section: str, option: str, fallback=...) -> bool:
        value = self.get(section, option, fallback)
        if value is fallback:
            return value
        try:
            return _BOOLEANS[value.strip().lower()]
        except KeyError:
            raise ValueError(f"not a boolean: {value!r}") from None

    def items(self, section: str) -> list[tuple[str, str]]:
        return [(k, self.get(section, k)) for k in self.options(section)]

    def set(self, section: str, option: str, value) -> None:
        if not isinstance(value, str):
            raise TypeError("option values must be strings")
        self._section(section)[option.lower()] = value

    def remove_option(self, section: str, option: str) -> bool:
        return self._section(section).pop(option.lower(), None) is not None

    def __iter__(self) -> Iterator[str]:
        return iter(self.sections())

    # writing ----------------------------------------------------------------------------------------------
    def dumps(self) -> str:
        chunks = []
        for name, values in [(DEFAULT_SECTION, self._defaults)] + list(self._sections.items()):
            if name == DEFAULT_SECTION and not values:
                continue
            lines = [f"[{name}]"]
            for key, value in values.items():
                value = value.replace("\n", "\n    ")
                lines.append(f"{key} = {value}".rstrip())
            chunks.append("\n".join(lines) + "\n")
        return "\n".join(chunks)
