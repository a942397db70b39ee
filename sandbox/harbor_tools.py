"""The tools a Harbor task's tests fetch when they run, installed when its image is built instead.

Many Harbor verifiers start with ``uvx --python 3.12 --with pytest==8.3.3 pytest /tests/test_outputs.py``:
uv downloads a Python and the packages at grading time, which a sandbox with no network cannot do. The image
builder reads ``tests/test.sh`` (:func:`verifier_requirements`: every ``--with`` package of a ``uvx`` call,
and the tool itself), installs them from the host wheelhouse into their own virtualenv ``VERIFIER_VENV`` (as
uvx would: apart from the task's own packages, whose pins may differ), and puts a ``uvx`` at
``/usr/local/bin/uvx`` that runs the tool from it (``UVX_SHIM``; ``--python`` is ignored: the image's Python
runs it). The agent sees that these packages are installed, never the tests themselves.
"""

from __future__ import annotations

import hashlib
import re
import shlex
import shutil
from pathlib import Path

from . import imagebuild
from .rootfs import ProgressFn

VERIFIER_VENV = "/opt/envfarm-verifier"
TOOLS_WHEELHOUSE = "verifier-wheelhouse"
"""The folder of the build context (and ``/tmp/<it>`` in the build) that holds the tools' wheels."""
_UVX = re.compile(r"(?:^|[\s;&|(])uvx\s+(.*)")
_OPTIONS_WITH_VALUE = ("--with", "--python", "-p", "--from", "--index-url", "--extra-index-url")
UVX_SHIM = f"""#!/bin/sh
# uvx without a network: the tools this task's tests name were installed at build time into
# {VERIFIER_VENV}; run the tool from there (--python is ignored: the image's Python runs it).
while [ $# -gt 0 ]; do
  case "$1" in
    --with|--python|-p|--from|--index-url|--extra-index-url) shift 2 ;;
    -*) shift ;;
    *) break ;;
  esac
done
tool="$1"; shift
exec {VERIFIER_VENV}/bin/python -m "$tool" "$@"
"""


def verifier_requirements(test_sh: str) -> tuple[str, ...]:
    """The packages ``uvx`` calls in ``test_sh`` fetch: each ``--with`` value and the tool (sorted, no
    duplicates); empty when the script calls no uvx."""
    text = re.sub(r"\\\n", " ", test_sh)
    found: set[str] = set()
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for match in _UVX.finditer(line):
            found |= _uvx_packages(match.group(1))
    return tuple(sorted(found))


def _uvx_packages(args: str) -> set[str]:
    try:
        words = shlex.split(args, comments=True)
    except ValueError:
        words = args.split()
    packages: set[str] = set()
    i = 0
    while i < len(words):
        word = words[i]
        if word in _OPTIONS_WITH_VALUE:
            if word == "--with" and i + 1 < len(words):
                packages |= {p.strip() for p in words[i + 1].split(",") if p.strip()}
            i += 2
        elif word.startswith("--with="):
            packages |= {p.strip() for p in word.split("=", 1)[1].split(",") if p.strip()}
            i += 1
        elif word.startswith("-"):
            i += 1
        else:
            names = {re.split(r"[<>=!~\[ ]", p, maxsplit=1)[0].lower() for p in packages}
            if word.lower() not in names and re.fullmatch(r"[A-Za-z0-9._-]+", word):
                packages.add(word)
            break
    return packages


def tools_steps(requirements: tuple[str, ...]) -> list[str]:
    """Dockerfile lines (run as root) that install ``requirements`` into ``VERIFIER_VENV`` from the context's
    tools wheelhouse and put the uvx shim in place; none for no requirements."""
    if not requirements:
        return []
    words = " ".join(shlex.quote(r) for r in requirements)
    shim = " ".join(shlex.quote(line) for line in UVX_SHIM.splitlines())
    return [
        f"COPY {TOOLS_WHEELHOUSE} /tmp/{TOOLS_WHEELHOUSE}",
        f"RUN python3 -m venv {VERIFIER_VENV} && {VERIFIER_VENV}/bin/python -m pip install --no-index "
        f"--find-links /tmp/{TOOLS_WHEELHOUSE} {words} && rm -rf /tmp/{TOOLS_WHEELHOUSE}",
        f"RUN printf '%s\\n' {shim} > /usr/local/bin/uvx && chmod 755 /usr/local/bin/uvx",
    ]


def fill_wheelhouse(context: Path, requirements: tuple[str, ...], spec: imagebuild.LayerSpec,
                    progress: ProgressFn | None) -> None:
    """Put the wheels of ``requirements`` (for the image's Python and glibc, from the shared wheelhouse
    cache) into ``context/TOOLS_WHEELHOUSE``."""
    recipe = context.parent / "verifier-recipe"
    recipe.mkdir(exist_ok=True)
    (recipe / "requirements.txt").write_text("".join(f"{r}\n" for r in requirements), encoding="utf-8")
    digest = hashlib.sha256(f"{spec.python}\0{spec.glibc}\0{requirements}".encode()).hexdigest()[:12]
    tools = imagebuild.LayerSpec(recipe, spec.tag, spec.base_tag, spec.labels, f"harbor-tools-{digest}",
                                 spec.python, spec.glibc)
    shutil.copytree(imagebuild.wheelhouse(tools, progress), context / TOOLS_WHEELHOUSE, dirs_exist_ok=True)


__all__ = ["TOOLS_WHEELHOUSE", "UVX_SHIM", "VERIFIER_VENV", "fill_wheelhouse", "tools_steps",
           "verifier_requirements"]
