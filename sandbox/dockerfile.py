"""Translate a Harbor task's ``environment/Dockerfile`` into what the offline image builder can make.

Builds here have no network: apt packages are installed on the host side into a copy of an envfarm Debian
base, Python packages come from the host wheelhouse. :func:`translate` reads a Dockerfile (continuation lines,
``ARG`` substitution, JSON and shell forms) and returns a :class:`Translation`: the base it maps to, the apt
packages and pip requirements it installs, and every other instruction kept in order. What cannot be built
offline is reported, never dropped: ``needs-network`` (curl/wget of a URL, git clone, npm, cargo, go get,
conda, pip from a URL or another index, ADD of a URL, ...) and ``unsupported-base``, each with the line.

FROM mapping (the closest envfarm base; the Python actually used is recorded in ``Translation.base``):

    ==============================================  ===================  ======  ===========================
    FROM                                            envfarm base         Python  extra apt packages
    ==============================================  ===================  ======  ===========================
    python:3.9*                                     base-bullseye        3.9     python-is-python3
    python:3.10*, 3.11*, 3.12*                      base (bookworm)      3.11    python-is-python3
    python:3.13*, 3.14*                             base-trixie          3.13    python-is-python3
    debian:bullseye* / 11*                          base-bullseye        3.9
    debian:trixie* / 13* / sid / testing            base-trixie          3.13
    debian:* (others, bookworm)                     base (bookworm)      3.11
    ubuntu:*                                        base (bookworm)      3.11
    ghcr.io/laude-institute/t-bench/ubuntu-24-04:*  base (bookworm)      3.11
    ghcr.io/laude-institute/t-bench/python-3-13:*   base-trixie          3.13
    gcc:*                                           base (bookworm)      3.11    build-essential
    golang:*                                        base (bookworm)      3.11    golang-go (Go modules
                                                                                 still need the network)
    eclipse-temurin:17*-jdk*                        base (bookworm)      3.11    openjdk-17-jdk-headless
    anything else                                   unsupported-base
    ==============================================  ===================  ======  ===========================

``python:*`` images get ``python-is-python3``: they have a ``python`` command. A Python between two suites
(3.10, 3.12) takes bookworm: pinned wheels exist for the older Python more often, and its base is the
default one. apt version pins (``git=1:2.39.5-0+deb12u2``) are dropped with a note: Debian's mirror keeps
only the newest point release. The astral ``uv`` installer script
(``curl -LsSf https://astral.sh/uv/X/install.sh | sh``) becomes the ``uv==X`` wheel from the wheelhouse,
copied to ``/root/.local/bin/`` where the script would put it.
"""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

from .dockerfile_run import BUILD_FAILED, NEEDS_NETWORK, analyze_run

UNSUPPORTED_BASE = "unsupported-base"
REASONS = (NEEDS_NETWORK, UNSUPPORTED_BASE, BUILD_FAILED)
"""Every reason a task image can have: a fixed list callers may switch on."""

_VAR = re.compile(r"\$(?:\{([A-Za-z_][A-Za-z0-9_]*)(?::?[-+][^}]*)?\}|([A-Za-z_][A-Za-z0-9_]*))")


@dataclass(frozen=True)
class BaseMapping:
    """Where a FROM line lands."""

    image: str
    """The FROM image as written (ARGs substituted)."""
    suite: str
    """The Debian suite of the envfarm base ("bookworm", "bullseye", "trixie"); "" when unsupported."""
    python: str
    """The Python the image gets ("3.11"); "" when unsupported."""
    apt_packages: tuple[str, ...] = ()
    """Packages the mapping adds (gcc: build-essential; golang: golang-go; temurin: openjdk-17-jdk-headless).
    """
    note: str = ""


@dataclass(frozen=True)
class Step:
    """One instruction kept for the task layer, in Dockerfile order."""

    kind: str
    """"run" (shell), "pip" (requirements), "copy", "add", "workdir", "env", "user"."""
    args: tuple[str, ...]
    """run: (shell,); pip: requirement lines; copy/add: (*flags, *sources, dest); workdir/user: (value,);
    env: (name, value)."""
    line: int


@dataclass(frozen=True)
class Issue:
    reason: str
    """One of :data:`REASONS`."""
    detail: str
    line: int


@dataclass(frozen=True)
class Translation:
    """A Dockerfile as the offline builder sees it."""

    base: BaseMapping
    apt_packages: tuple[str, ...]
    """Sorted, version pins dropped, the base mapping's extras included."""
    pip_requirements: tuple[str, ...]
    """Every requirement line of every pip step, in order, without duplicates."""
    steps: tuple[Step, ...]
    workdir: str
    """The last WORKDIR (absolute), "/" when none."""
    user: str | None
    env: tuple[tuple[str, str], ...]
    """ENV as written (later values of a name replace earlier ones; ``${PATH}`` is left for docker)."""
    args: tuple[tuple[str, str], ...]
    issues: tuple[Issue, ...]
    notes: tuple[str, ...] = ()

    @property
    def reasons(self) -> tuple[tuple[str, str], ...]:
        """``(reason, "line N: detail")`` for every issue."""
        return tuple((i.reason, f"line {i.line}: {i.detail}") for i in self.issues)

    @property
    def buildable(self) -> bool:
        return not self.issues


@dataclass
class _State:
    context: Path | None
    args: dict[str, str] = field(default_factory=dict)
    env: dict[str, str] = field(default_factory=dict)
    base: BaseMapping | None = None
    apt: list[str] = field(default_factory=list)
    pip: list[str] = field(default_factory=list)
    steps: list[Step] = field(default_factory=list)
    workdir: str = "/"
    user: str | None = None
    copies: dict[str, str] = field(default_factory=dict)  # image path -> context path
    issues: list[Issue] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def translate_file(dockerfile: Path) -> Translation:
    """:func:`translate` of a Dockerfile whose folder is the build context."""
    return translate(dockerfile.read_text(encoding="utf-8", errors="replace"), dockerfile.parent)


def translate(text: str, context: Path | None = None) -> Translation:
    """Translate Dockerfile ``text``; ``context`` (the build context folder) resolves ``pip install -r``."""
    st = _State(context)
    for line, instruction, rest in instructions(text):
        _apply(st, line, instruction, rest)
    if st.base is None:
        st.base = BaseMapping("", "", "")
        st.issues.append(Issue(UNSUPPORTED_BASE, "no FROM instruction", 1))
    apt = sorted({*st.apt, *st.base.apt_packages})
    return Translation(
        base=st.base,
        apt_packages=tuple(apt),
        pip_requirements=tuple(dict.fromkeys(st.pip)),
        steps=tuple(st.steps),
        workdir=st.workdir,
        user=st.user,
        env=tuple(st.env.items()),
        args=tuple(st.args.items()),
        issues=tuple(st.issues),
        notes=tuple(dict.fromkeys(st.notes)),
    )


HEREDOC = re.compile(r"<<(-?)\s*(['\"]?)([A-Za-z_]\w*)\2")
"""A heredoc marker (``<<EOF``, ``<< 'EOF'``, ``<<-EOF``): its body follows the instruction's line."""


def instructions(text: str) -> list[tuple[int, str, str]]:
    """``(line, INSTRUCTION, rest)`` for each instruction: comments dropped, continuations joined; the body of
    each heredoc of a RUN/COPY/ADD line (up to its terminator line) follows ``rest`` after a newline, as
    written."""
    out: list[tuple[int, str, str]] = []
    buf: list[str] = []
    start = 0
    lines = text.splitlines()
    n = 0
    while n < len(lines):
        raw = lines[n]
        n += 1
        stripped = raw.strip()
        if not buf and (not stripped or stripped.startswith("#")):
            continue
        if buf and stripped.startswith("#"):
            continue  # comment lines inside a continued instruction are skipped by docker
        if not buf:
            start = n
        if stripped.endswith("\\"):
            buf.append(stripped[:-1])
            continue
        buf.append(stripped)
        joined = " ".join(part.strip() for part in buf if part.strip())
        buf = []
        word, _, rest = joined.partition(" ")
        if word.upper() in ("RUN", "COPY", "ADD"):
            for dash, _, name in HEREDOC.findall(rest):
                body, n = _heredoc(lines, n, name, bool(dash))
                rest += "\n" + body
        out.append((start, word.upper(), rest.strip(" ")))
    if buf:
        joined = " ".join(buf)
        word, _, rest = joined.partition(" ")
        out.append((start, word.upper(), rest.strip()))
    return out


def _heredoc(lines: list[str], n: int, name: str, dash: bool) -> tuple[str, int]:
    """The body of a heredoc starting at line index ``n`` through its terminator line, and the index after
    it (the end of the file when the terminator is missing)."""
    body: list[str] = []
    while n < len(lines):
        line = lines[n]
        n += 1
        body.append(line)
        if (line.lstrip("\t") if dash else line) == name:
            break
    return "\n".join(body), n


def _apply(st: _State, line: int, instruction: str, rest: str) -> None:
    if instruction not in ("ARG", "FROM") and st.base is None:
        st.issues.append(Issue(UNSUPPORTED_BASE, f"{instruction} before FROM", line))
        return
    if instruction in ("COPY", "ADD") and HEREDOC.search(rest.split("\n", 1)[0]):
        detail = f"{instruction} <<EOF (a file from a heredoc) is not supported by the offline builder"
        st.issues.append(Issue(BUILD_FAILED, detail, line))
        return
    handler = _HANDLERS.get(instruction)
    if handler is None:
        st.notes.append(f"line {line}: {instruction} ignored")
        return
    handler(st, line, rest)


def _sub(st: _State, value: str, env_too: bool = True) -> str:
    """Substitute ARG (and ENV) values known so far; unknown variables stay as written."""
    known = {**st.args, **(st.env if env_too else {})}

    def repl(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        return known.get(name, m.group(0))

    return _VAR.sub(repl, value)


def _pairs(rest: str) -> list[tuple[str, str]]:
    """``K=V K2="v 2"`` or the legacy ``K V`` form of ENV/ARG/LABEL."""
    try:
        words = shlex.split(rest, posix=True)
    except ValueError:
        words = rest.split()
    if words and "=" not in words[0]:
        name, _, value = rest.partition(" ")
        return [(name, value.strip())]
    return [(w.partition("=")[0], w.partition("=")[2]) for w in words]


def _on_arg(st: _State, line: int, rest: str) -> None:
    for name, value in _pairs(rest):
        st.args.setdefault(name, _sub(st, value))


def _on_env(st: _State, line: int, rest: str) -> None:
    try:
        raw = shlex.split(rest, posix=True) if "=" in rest.split(" ", 1)[0] else None
    except ValueError:
        raw = None
    pairs = [(w.partition("=")[0], w.partition("=")[2]) for w in raw] if raw else _pairs(rest)
    for name, value in pairs:
        value = _sub(st, value, env_too=False)
        st.env[name] = value
        st.steps.append(Step("env", (name, value), line))


def _on_from(st: _State, line: int, rest: str) -> None:
    words = [w for w in rest.split() if not w.startswith("--")]
    image = _sub(st, words[0]) if words else ""
    if st.base is not None:
        st.issues.append(Issue(UNSUPPORTED_BASE, f"multi-stage build (a second FROM {image})", line))
        return
    st.base = map_base(image)
    if not st.base.suite:
        st.issues.append(Issue(UNSUPPORTED_BASE, f"FROM {image}: {st.base.note}", line))
    elif st.base.note:
        st.notes.append(st.base.note)


def _on_workdir(st: _State, line: int, rest: str) -> None:
    path = _sub(st, rest.strip().strip('"'))
    st.workdir = path if path.startswith("/") else f"{st.workdir.rstrip('/')}/{path}"
    st.steps.append(Step("workdir", (st.workdir,), line))


def _on_user(st: _State, line: int, rest: str) -> None:
    st.user = _sub(st, rest.strip())
    st.steps.append(Step("user", (st.user,), line))


def _on_copy(st: _State, line: int, rest: str, kind: str = "copy") -> None:
    words = _json_or_words(_sub(st, rest, env_too=False))
    flags = [w for w in words if w.startswith("--")]
    paths = [w for w in words if not w.startswith("--")]
    if any(f.startswith("--from") for f in flags):
        st.issues.append(Issue(UNSUPPORTED_BASE, f"{kind.upper()} --from (multi-stage build)", line))
        return
    if len(paths) < 2:
        st.issues.append(Issue(BUILD_FAILED, f"{kind.upper()} needs a source and a destination", line))
        return
    sources, dest = paths[:-1], paths[-1]
    urls = [s for s in sources if re.match(r"^(https?|ftp|git)://|^git@", s)]
    if urls:
        st.issues.append(Issue(NEEDS_NETWORK, f"ADD of a URL: {urls[0]}", line))
        return
    absolute = dest if dest.startswith("/") else f"{st.workdir.rstrip('/')}/{dest}"
    for source in sources:
        target = absolute if not absolute.endswith("/") else absolute + Path(source).name
        st.copies[target] = source
    st.steps.append(Step(kind, (*flags, *sources, dest), line))


def _on_add(st: _State, line: int, rest: str) -> None:
    _on_copy(st, line, rest, kind="add")


def _json_or_words(rest: str) -> list[str]:
    if rest.lstrip().startswith("["):
        try:
            value = json.loads(rest)
            if isinstance(value, list):
                return [str(v) for v in value]
        except ValueError:
            pass
    try:
        return shlex.split(rest)
    except ValueError:
        return rest.split()


def _on_run(st: _State, line: int, rest: str) -> None:
    words = [w for w in rest.split() if w.startswith("--mount") or w.startswith("--network")]
    if words:
        st.issues.append(Issue(BUILD_FAILED, f"RUN {words[0]} needs BuildKit", line))
        return
    rest, _, heredocs = rest.partition("\n")
    if rest.lstrip().startswith("["):
        shell = " ".join(shlex.quote(w) for w in _json_or_words(rest))
    else:
        shell = rest
    result = analyze_run(_sub(st, shell), st.copies, st.context)
    if heredocs:
        if HEREDOC.fullmatch(rest.strip()):
            detail = "RUN <<EOF with no command (BuildKit's script form) is not supported offline"
            st.issues.append(Issue(BUILD_FAILED, detail, line))
            return
        if [kind for kind, _ in result.steps] != ["run"] or result.apt_packages or result.pip_requirements:
            detail = "a RUN with a heredoc that installs packages is not supported by the offline builder"
            st.issues.append(Issue(BUILD_FAILED, detail, line))
            return
        result.steps[0] = ("run", (result.steps[0][1][0] + "\n" + heredocs,))
    st.apt += result.apt_packages
    st.pip += result.pip_requirements
    st.notes += [f"line {line}: {note}" for note in result.notes]
    st.issues += [Issue(reason, detail, line) for reason, detail in result.issues]
    for kind, args in result.steps:
        st.steps.append(Step(kind, args, line))


_HANDLERS = {
    "ARG": _on_arg,
    "ENV": _on_env,
    "FROM": _on_from,
    "WORKDIR": _on_workdir,
    "USER": _on_user,
    "COPY": _on_copy,
    "ADD": _on_add,
    "RUN": _on_run,
}


# ------------------------------------------------------------------------------------------------- FROM

_BOOKWORM = ("bookworm", "3.11")
_BULLSEYE = ("bullseye", "3.9")
_TRIXIE = ("trixie", "3.13")


def map_base(image: str) -> BaseMapping:
    """The envfarm base for a FROM image (see the module docstring's table)."""
    name, _, tag = image.partition("@")[0].rpartition(":") if ":" in image.split("/")[-1] else (image, "", "")
    name = name or image
    short = name.removeprefix("docker.io/").removeprefix("library/")
    if short == "python":
        return _python_base(image, tag)
    if short == "debian":
        suite, python = _debian_suite(tag)
        return BaseMapping(image, suite, python)
    if short == "ubuntu" or short == "ghcr.io/laude-institute/t-bench/ubuntu-24-04":
        return BaseMapping(image, *_BOOKWORM, note=f"{image} is built on Debian bookworm (Python 3.11)")
    if short.startswith("ghcr.io/laude-institute/t-bench/python-3-13"):
        return BaseMapping(image, *_TRIXIE)
    if short == "gcc":
        return BaseMapping(image, *_BOOKWORM, ("build-essential",), f"{image}: Debian's build-essential")
    if short == "golang":
        return BaseMapping(image, *_BOOKWORM, ("golang-go", "ca-certificates"),
                           f"{image}: Debian's golang-go; Go module downloads still need the network")
    if short == "eclipse-temurin" and tag.startswith("17") and "jdk" in tag:
        return BaseMapping(image, *_BOOKWORM, ("openjdk-17-jdk-headless",),
                           f"{image}: Debian's openjdk-17-jdk-headless")
    return BaseMapping(image, "", "", note="no envfarm base maps to it (python, debian, ubuntu, gcc, golang, "
                       "eclipse-temurin:17-jdk and the t-bench images do)")


def _python_base(image: str, tag: str) -> BaseMapping:
    m = re.match(r"^3\.(\d+)", tag)
    minor = int(m.group(1)) if m else 11
    suite, python = _BULLSEYE if minor <= 9 else _TRIXIE if minor >= 13 else _BOOKWORM
    note = "" if python == f"3.{minor}" else f"{image}: Python {python} (Debian {suite}), not 3.{minor}"
    if not m:
        note = f"{image}: no Python version in the tag; Python {python} (Debian {suite})"
    return BaseMapping(image, suite, python, ("python-is-python3",), note=note)


def _debian_suite(tag: str) -> tuple[str, str]:
    if tag.startswith(("bullseye", "11")):
        return _BULLSEYE
    if tag.startswith(("trixie", "13", "sid", "testing", "unstable")):
        return _TRIXIE
    return _BOOKWORM


__all__ = ["BUILD_FAILED", "NEEDS_NETWORK", "REASONS", "UNSUPPORTED_BASE", "BaseMapping", "Issue", "Step",
           "Translation", "instructions", "map_base", "translate", "translate_file"]
