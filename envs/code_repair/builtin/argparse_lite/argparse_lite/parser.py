from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

_NEGATIVE_NUMBER = re.compile(r"-\d+(\.\d+)?$")


class ParseError(Exception):
    """Raised for bad command lines; the message is meant for the user."""


class HelpRequested(Exception):
    """Raised by parse_args when -h/--help is given; .text holds the help text."""

    def __init__(self, text: str):
        super().__init__(text)
        self.text = text


class Namespace:
    def __init__(self, **values):
        self.__dict__.update(values)

    def __eq__(self, other):
        return isinstance(other, Namespace) and vars(self) == vars(other)

    def __repr__(self):
        inner = ", ".join(f"{k}={v!r}" for k, v in sorted(vars(self).items()))
        return f"Namespace({inner})"


@dataclass
class _Arg:
    names: list[str]
    dest: str
    action: str = "store"  # store, store_true, store_false, count, append
    type: Callable[[str], Any] = str
    default: Any = None
    required: bool = False
    choices: Optional[Sequence] = None
    help: str = ""
    metavar: Optional[str] = None
    nargs: Optional[str] = None  # positionals only: None, "?", "*"
    positional: bool = False
    seen: bool = field(default=False, repr=False)

    @property
    def takes_value(self) -> bool:
        return self.action in ("store", "append")

    def display(self) -> str:
        if self.positional:
            return self.metavar or self.dest
        return ", ".join(self.names) + (f" {self.metavar or self.dest.upper()}" if self.takes_value else "")


class ArgumentParser:
    def __init__(self, prog: str = "prog", description: str = "", add_help: bool = True):
        self.prog = prog
        self.description = description
        self._options: dict[str, _Arg] = {}
        self._option_list: list[_Arg] = []
        self._positionals: list[_Arg] = []
        self.add_help = add_help

    def add_argument(self, *names: str, action: str = "store", type: Callable = str, default: Any = None,
                     required: bool = False, choices: Optional[Sequence] = None, help: str = "",
                     metavar: Optional[str] = None, nargs: Optional[str] = None, dest: Optional[str] = None) -> None:
        if not names:
            raise ValueError("add_argument needs at least one name")
        if action not in ("store", "store_true", "store_false", "count", "append"):
            raise ValueError(f"unknown action {action!r}")
        positional = not names[0].startswith("-")
        if positional:
            if len(names) != 1:
                raise ValueError("a positional argument has exactly one name")
            if nargs not in (None, "?", "*"):
                raise ValueError(f"unsupported nargs {nargs!r}")
            arg = _Arg(list(names), dest or names[0], type=type, default=default, choices=choices, help=help,
                       metavar=metavar, nargs=nargs, positional=True, required=nargs is None)
            self._positionals.append(arg)
            return
        long_names = [n for n in names if n.startswith("--")]
        auto_dest = (long_names[0] if long_names else names[0]).lstrip("-").replace("-", "_")
        if default is None:
            default = {"store_true": False, "store_false": True, "count": 0}.get(action)
        arg = _Arg(list(names), dest or auto_dest, action=action, type=type, default=default,
                   required=required, choices=choices, help=help, metavar=metavar)
        for n in names:
            if n in self._options:
                raise ValueError(f"conflicting option name {n}")
            self._options[n] = arg
        self._option_list.append(arg)

    # parsing ----------------------------------------------------------------------------------------------
    @staticmethod
    def _is_option(token: str) -> bool:
        return token.startswith("-") and token != "-" and not _NEGATIVE_NUMBER.match(token)

    def _convert(self, arg: _Arg, raw: str) -> Any:
        try:
            value = arg.type(raw)
        except (TypeError, ValueError):
            raise ParseError(f"argument {arg.display()}: invalid {getattr(arg.type, '__name__', 'value')} "
                             f"value: {raw!r}") from None
        if arg.choices is not None and value not in arg.choices:
            choices = ", ".join(map(repr, arg.choices))
            raise ParseError(f"argument {arg.display()}: invalid choice: {value!r} (choose from {choices})")
        return value

    def _apply(self, values: dict, arg: _Arg, raw: Optional[str]) -> None:
        arg.seen = True
        if arg.action == "store":
            values[arg.dest] = self._convert(arg, raw)
        elif arg.action == "append":
            current = values.get(arg.dest)
            values[arg.dest] = (list(current) if current else []) + [self._convert(arg, raw)]
        elif arg.action == "store_true":
            values[arg.dest] = True
        elif arg.action == "store_false":
            values[arg.dest] = False
        elif arg.action == "count":
            values[arg.dest] = (values.get(arg.dest) or 0) + 1

    def parse_args(self, argv: Sequence[str]) -> Namespace:
        for a in self._option_list + self._positionals:
            a.seen = False
        values: dict[str, Any] = {a.dest: a.default for a in self._option_list}
        loose: list[str] = []
        tokens = list(argv)
        i = 0
        only_positional = False
        while i < len(tokens):
            tok = tokens[i]
            i += 1
            if only_positional or not self._is_option(tok):
                loose.append(tok)
                continue
            if tok == "--":
                only_positional = True
                continue
            if self.add_help and tok in ("-h", "--help"):
                raise HelpRequested(self.format_help())
            if tok.startswith("--"):
                if "=" in tok:
                    name, value = tok.split("=", 1)
                else:
                    name, value = tok, None
                arg = self._options.get(name)
                if arg is None:
                    raise ParseError(f"unrecognized argument: {name}")
                if arg.takes_value:
                    if value is None:
                        if i >= len(tokens) or self._is_option(tokens[i]):
                            raise ParseError(f"argument {arg.display()}: expected a value")
                        value = tokens[i]
                        i += 1
                elif value is not None:
                    raise ParseError(f"argument {name}: takes no value")
                self._apply(values, arg, value)
                continue
            # short option(s): -v, -vvx, -ofile, -o file
            j = 1
            while j < len(tok):
                name = "-" + tok[j]
                arg = self._options.get(name)
                if arg is None:
                    raise ParseError(f"unrecognized argument: {name}")
                j += 1
                if arg.takes_value:
                    if j < len(tok):
                        value = tok[j:]
                    elif i < len(tokens) and not self._is_option(tokens[i]):
                        value = tokens[i]
                        i += 1
                    else:
                        raise ParseError(f"argument {arg.display()}: expected a value")
                    self._apply(values, arg, value)
                    break
                self._apply(values, arg, None)

        self._assign_positionals(values, loose)
        missing = [a.display() for a in self._option_list if a.required and not a.seen]
        if missing:
            raise ParseError("the following arguments are required: " + ", ".join(missing))
        return Namespace(**values)

    def _assign_positionals(self, values: dict, loose: list[str]) -> None:
        required = sum(1 for p in self._positionals if p.nargs is None)
        k = 0
        for idx, p in enumerate(self._positionals):
            remaining = len(loose) - k
            if p.nargs is None:
                if remaining <= 0:
                    missing = [q.display() for q in self._positionals[idx:] if q.nargs is None]
                    raise ParseError("the following arguments are required: " + ", ".join(missing))
                values[p.dest] = self._convert(p, loose[k])
                k += 1
                required -= 1
            elif p.nargs == "?":
                if remaining > required:
                    values[p.dest] = self._convert(p, loose[k])
                    k += 1
                else:
                    values[p.dest] = p.default
            else:  # "*"
                take = max(0, remaining - required)
                values[p.dest] = [self._convert(p, x) for x in loose[k:k + take]]
                k += take
        if k < len(loose):
            raise ParseError("unrecognized arguments: " + " ".join(loose[k:]))

    # help -------------------------------------------------------------------------------------------------
    def format_usage(self) -> str:
        parts = [f"usage: {self.prog}"]
        if self.add_help:
            parts.append("[-h]")
        for a in self._option_list:
            shown = a.names[0] + (f" {a.metavar or a.dest.upper()}" if a.takes_value else "")
            parts.append(shown if a.required else f"[{shown}]")
        for p in self._positionals:
            name = p.display()
            parts.append({None: name, "?": f"[{name}]", "*": f"[{name} ...]"}[p.nargs])
        return " ".join(parts)

    def format_help(self) -> str:
        lines = [self.format_usage()]
        if self.description:
            lines += ["", self.description]
        rows: list[tuple[str, str]] = []
        if self._positionals:
            rows.append(("", "positional arguments:"))
            rows += [(p.display(), p.help) for p in self._positionals]
        rows.append(("", "options:"))
        if self.add_help:
            rows.append(("-h, --help", "show this help message and exit"))
        for a in self._option_list:
            text = a.help
            if a.action in ("store", "append") and a.default is not None:
                text = f"{text} (default: {a.default})".strip()
            rows.append((a.display(), text))
        width = max(len(left) for left, _ in rows if left) + 2
        for left, text in rows:
            if not left:
                lines += ["", text]
            else:
                lines.append(f"  {left.ljust(width)}{text}".rstrip())
        return "\n".join(lines) + "\n"
