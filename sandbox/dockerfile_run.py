"""The shell of one Dockerfile ``RUN``, split for the offline builder (used by :mod:`.dockerfile`).

A RUN's ``&&``/``;`` chain is cut into commands: ``apt-get install`` packages go to the apt layer (``apt-get
update``/``clean`` and ``rm -rf /var/lib/apt/lists`` are dropped), ``pip install`` requirements go to the
wheelhouse (flags such as ``--no-cache-dir --break-system-packages --retries 3`` stripped, ``-r FILE`` read
from the build context), and every other command is kept, in order, with its raw text. A kept command that
needs the network is reported as ``needs-network``.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from pathlib import Path

NEEDS_NETWORK = "needs-network"
BUILD_FAILED = "build-failed"

DROPPED_APT = ("update", "clean", "autoclean", "autoremove", "upgrade", "dist-upgrade", "full-upgrade")
_APT_VALUE_FLAGS = {"-o", "-t", "--target-release", "-c", "--config-file"}
_PIP_STRIPPED_VALUE_FLAGS = {
    "--retries", "--timeout", "--progress-bar", "--cache-dir", "--src", "--upgrade-strategy",
    "--root-user-action", "--log", "--proxy", "--trusted-host", "--find-links", "-f", "-c", "--constraint",
    "--python", "-p", "--prefix", "--root", "--target", "-t",
}
_PIP_INDEX_FLAGS = {"-i", "--index-url", "--extra-index-url"}
_PYPI = re.compile(r"^https?://(pypi\.org|pypi\.python\.org|files\.pythonhosted\.org)/")
_PIP_CMD = re.compile(r"^(pip3?(\.\d+)?|python3?(\.\d+)?\s+-m\s+pip|uv\s+pip)\s+install\s")
_UV_INSTALLER = re.compile(
    r"\b(curl|wget)\b[^|]*https?://astral\.sh/uv/(?:(\d[\w.]*)/)?install\.sh[^|]*\|\s*(env\s+\S+\s+)*(ba)?sh\b"
)
_UV_LINK = "mkdir -p /root/.local/bin && cp /usr/local/bin/uv /usr/local/bin/uvx /root/.local/bin/"
"""Where the uv installer script puts uv (copies: Dockerfiles then `cp` them to /usr/local/bin)."""
_NETWORK = (
    (re.compile(r"\b(curl|wget)\b[^|;&]*\b(https?|ftp)://"), "downloads a URL"),
    (re.compile(r"\bgit\s+(clone|fetch|pull|submodule\s+update|ls-remote)\b"), "fetches a git repository"),
    (re.compile(r"\b(npm|pnpm)\s+(i|install|ci|add|update)\b|\bnpx\s"), "installs npm packages"),
    (re.compile(r"\byarn\s+(add|install|global)\b|^yarn\s*$"), "installs npm packages"),
    (re.compile(r"\bgem\s+install\b|\bbundle\s+install\b"), "installs Ruby gems"),
    (re.compile(r"\bcargo\s+(install|fetch|add)\b|\brustup\b|sh\.rustup\.rs"), "installs Rust crates"),
    (re.compile(r"\bgo\s+(get|install|mod\s+download)\b"), "downloads Go modules"),
    (re.compile(r"\b(conda|mamba|micromamba)\s+(install|create|env)\b"), "installs conda packages"),
    (re.compile(r"\b(add-apt-repository|apt-add-repository)\b"), "adds an apt repository"),
    (re.compile(r"install\.packages\s*\(|BiocManager::|install_github\s*\("), "installs R packages"),
    (re.compile(r"\b(mvn|gradle|gradlew|sbt)\b"), "runs a JVM build tool (downloads dependencies)"),
    (re.compile(r"\bpipx\s+install\b|\buvx?\s+(sync|add|tool\s+install|run)\b|\bpoetry\s+install\b"),
     "installs Python packages with a network tool"),
    (re.compile(r"\bpip3?\s+download\b"), "downloads Python packages"),
    (re.compile(r"\b(composer\s+install|cpanm?\s|luarocks\s+install|dotnet\s+(restore|tool\s+install))"),
     "downloads packages"),
    (re.compile(r"\b(nvm|sdk)\s+install\b"), "downloads a toolchain"),
)


@dataclass
class RunAnalysis:
    """What one RUN does, for the translation."""

    apt_packages: list[str] = field(default_factory=list)
    pip_requirements: list[str] = field(default_factory=list)
    """For the wheelhouse (local paths are not here; they are installed from the image)."""
    steps: list[tuple[str, tuple[str, ...]]] = field(default_factory=list)
    """``("run", (shell,))`` and ``("pip", (requirement or local path, ...))`` in order."""
    notes: list[str] = field(default_factory=list)
    issues: list[tuple[str, str]] = field(default_factory=list)


def split_commands(shell: str) -> list[tuple[str, str]]:
    """``[(connector, command), ...]`` cut at top-level ``&&``, ``;`` and newlines (quotes, ``$(...)``,
    subshells and ``{ ...; }`` groups respected); the first connector is ""."""
    out: list[tuple[str, str]] = []
    buf: list[str] = []
    connector, quote, depth, i = "", "", 0, 0
    while i < len(shell):
        c = shell[i]
        if quote:
            if c == "\\" and quote == '"' and i + 1 < len(shell):
                buf.append(shell[i : i + 2])
                i += 2
                continue
            quote = "" if c == quote else quote
        elif c == "\\" and i + 1 < len(shell):
            buf.append(shell[i : i + 2])
            i += 2
            continue
        elif c in "'\"":
            quote = c
        elif c in "({":
            depth += 1
        elif c in ")}":
            depth = max(0, depth - 1)
        elif depth == 0 and (shell.startswith("&&", i) or c in ";\n"):
            out.append((connector, "".join(buf).strip()))
            connector, buf = ("&&" if c == "&" else ";"), []
            i += 2 if c == "&" else 1
            continue
        buf.append(c)
        i += 1
    out.append((connector, "".join(buf).strip()))
    return [(conn, cmd) for conn, cmd in out if cmd]


def analyze_run(shell: str, copies: dict[str, str], context: Path | None) -> RunAnalysis:
    """Split ``shell`` (one RUN, variables already substituted) into apt, pip and kept commands.
    ``copies`` maps image paths to the context paths COPY put there (for ``pip install -r``)."""
    out = RunAnalysis()
    kept: list[str] = []

    def flush() -> None:
        if kept:
            out.steps.append(("run", (re.sub(r"^( && |; )", "", "".join(kept)),)))
            kept.clear()

    for connector, command in split_commands(shell):
        body = _strip_prefix(command)
        if (apt := _apt(body, out)) is not None:
            out.apt_packages += apt
        elif _PIP_CMD.match(body):
            flush()
            _pip(body, copies, context, out)
        elif m := _UV_INSTALLER.search(body):
            flush()
            out.pip_requirements.append(f"uv=={m.group(2)}" if m.group(2) else "uv")
            out.steps.append(("pip", (out.pip_requirements[-1],)))
            out.steps.append(("run", (_UV_LINK,)))
            out.notes.append("the uv installer script became the uv wheel")
        elif re.match(r"^rm\s+-[rf]+\s+/var/lib/apt/lists", body):
            continue
        else:
            _check_network(command, out)
            kept.append(f"{' && ' if connector == '&&' else '; '}{_tolerate_existing_user(command)}")
    flush()
    return out


def _strip_prefix(command: str) -> str:
    """The command without leading ``VAR=value`` assignments, ``sudo``, ``exec`` or ``command``."""
    words = command.split()
    while words and (re.match(r"^[A-Za-z_]\w*=", words[0]) or words[0] in ("sudo", "exec", "command")):
        words.pop(0)
    return " ".join(words)


def _words(command: str) -> list[str]:
    """Shell words of ``command`` up to the first ``|``, ``||``, ``&`` or redirection."""
    try:
        lexer = shlex.shlex(command, posix=True, punctuation_chars="|&<>")
        lexer.whitespace_split = True
        words = list(lexer)
    except ValueError:
        words = command.split()
    out = []
    for i, w in enumerate(words):
        redirect = w.isdigit() and i + 1 < len(words) and words[i + 1].startswith((">", "<"))  # 2>/dev/null
        if w in ("|", "||", "&", "|&") or redirect or w.startswith((">", "<")):
            break
        out.append(w)
    return out


def _apt(body: str, out: RunAnalysis) -> list[str] | None:
    """The packages of an apt install ([] for update/clean), or None when ``body`` is no apt command."""
    words = _words(body)
    if not words or words[0] not in ("apt-get", "apt", "aptitude"):
        return None
    rest = words[1:]
    packages: list[str] = []
    sub = ""
    skip = False
    for w in rest:
        if skip:
            skip = False
        elif w in _APT_VALUE_FLAGS:
            skip = True
        elif w.startswith("-"):
            continue
        elif not sub:
            sub = w
        else:
            packages.append(w)
    if sub in DROPPED_APT or sub == "":
        return []
    if sub not in ("install", "reinstall"):
        return None  # purge, remove, ... run in the image
    pinned = [p for p in packages if "=" in p]
    if pinned:
        out.notes.append(f"apt version pins dropped: {', '.join(pinned)}")
    return [p.split("=", 1)[0] for p in packages]


def _pip(body: str, copies: dict[str, str], context: Path | None, out: RunAnalysis) -> None:
    words = _words(body)
    start = words.index("install") + 1
    args: list[str] = []
    it = iter(words[start:])
    for w in it:
        flag, eq, value = w.partition("=")
        joined = w.startswith("-r") and len(w) > 2
        if w in ("-r", "--requirement") or joined or (flag == "--requirement" and eq):
            path = value if eq else (w[2:] if w.startswith("-r") and len(w) > 2 else next(it, ""))
            args += _requirements_file(path, copies, context, out)
        elif flag in _PIP_INDEX_FLAGS:
            url = value if eq else next(it, "")
            if not _PYPI.match(url):
                out.issues.append((NEEDS_NETWORK, f"pip install from the index {url}"))
        elif flag in _PIP_STRIPPED_VALUE_FLAGS:
            if not eq:
                next(it, None)
        elif w in ("-e", "--editable"):
            args.append(next(it, ""))
        elif w.startswith("-"):
            continue
        else:
            args.append(w)
    _pip_args(args, out)


def _pip_args(args: list[str], out: RunAnalysis) -> None:
    step: list[str] = []
    for arg in args:
        if re.match(r"^(git\+|hg\+|svn\+|bzr\+)?(https?|ftp|ssh|git)://|^git@|@\s*(https?|git\+)", arg):
            out.issues.append((NEEDS_NETWORK, f"pip install from a URL: {arg}"))
        elif local_path(arg):
            step.append(arg)  # a path in the image: pip builds it there, from the wheelhouse's setuptools
            out.pip_requirements += step_requirements((arg,))
        elif re.match(r"^pip([<>=!~ ].*)?$", arg):
            out.notes.append("pip upgrade dropped (the image keeps its Debian pip)")
        else:
            step.append(arg)
            out.pip_requirements.append(arg)
    if step:
        out.steps.append(("pip", tuple(step)))


def local_path(arg: str) -> bool:
    """A pip argument naming a path in the image (pip builds it there), not a requirement to download."""
    return arg.startswith((".", "/", "~")) or arg.endswith((".whl", ".tar.gz", ".zip"))


def step_requirements(args: tuple[str, ...]) -> list[str]:
    """What the wheelhouse needs for a pip step's ``args``: each requirement, and setuptools and wheel in
    place of a local path (in the order of ``RunAnalysis.pip_requirements``)."""
    return [r for a in args for r in (("setuptools", "wheel") if local_path(a) else (a,))]


def _requirements_file(
    path: str, copies: dict[str, str], context: Path | None, out: RunAnalysis
) -> list[str]:
    """The requirement lines of ``-r path`` (an image path), read from the build context."""
    found = _context_file(path, copies, context)
    if found is None:
        out.issues.append((BUILD_FAILED, f"pip install -r {path}: the file is not in the build context"))
        return []
    lines = []
    for raw in found.read_text(encoding="utf-8", errors="replace").splitlines():
        line = raw.split(" #", 1)[0].strip()
        if line.startswith("-r "):
            lines += _requirements_file(str(found.parent / line[3:].strip()), {}, context, out)
        elif line and not line.startswith(("#", "-")):
            lines.append(line)
    return lines


def _context_file(path: str, copies: dict[str, str], context: Path | None) -> Path | None:
    if context is None:
        return None
    if Path(path).is_absolute() and Path(path).is_file() and context in Path(path).parents:
        return Path(path)
    for dest, source in copies.items():
        for prefix in (dest.rstrip("/") + "/", ""):
            rel = path.removeprefix(prefix) if prefix and path.startswith(prefix) else None
            if rel is not None and (context / source / rel).is_file():
                return context / source / rel
        if dest == path and (context / source).is_file():
            return context / source
    name = Path(path).name
    direct = context / path.lstrip("/")
    if direct.is_file():
        return direct
    matches = sorted(context.rglob(name))
    return matches[0] if matches else None


def _check_network(command: str, out: RunAnalysis) -> None:
    for pattern, what in _NETWORK:
        if pattern.search(command):
            out.issues.append((NEEDS_NETWORK, f"{what}: {command[:160]}"))
            return


def _tolerate_existing_user(command: str) -> str:
    """``useradd ... agent`` fails on an envfarm base, which has the user already: make it a no-op there."""
    words = _words(_strip_prefix(command))
    if words and words[0] in ("useradd", "adduser", "groupadd", "addgroup") and words[-1].isidentifier():
        check = "getent group" if "group" in words[0] else "id -u"
        return f"{{ {check} {shlex.quote(words[-1])} >/dev/null 2>&1 || {command}; }}"
    return command
