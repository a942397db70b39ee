"""The one-commit property of an instance image: the repository holds the base commit's tree and nothing else.

    history = inspect_image(tag, instance)        # runs one container (no network), reads its repository
    history.problems                              # () for a sound image

A model that can read the repository's history could copy the fix from a later commit (SWE-bench images
once shipped the whole history: upstream swebench issue 465 and others). ``repos.snapshot`` writes a fresh
repository with one commit of the base tree; this module checks the built image: exactly one commit object
in the object store, every object reachable from it, no tags, stash, packed refs, other refs or reflog
entries pointing elsewhere, and no copy of the gold patch's distinctive added lines anywhere a model could
read (the repository's files, /tmp, /opt, /root, /home, /srv, /var/tmp, /workspace).
"""

from __future__ import annotations

import contextlib
import shlex
from dataclasses import dataclass

import requests
from docker.errors import APIError, DockerException, ImageNotFound

from envfarm.errors import ImageMismatch
from envfarm.sandbox import dockerutil

from .instances import Instance
from .layout import PRISTINE
from .patches import parse

SEARCHED = ("/tmp", "/opt", "/root", "/home", "/srv", "/var/tmp", "/workspace")
"""Folders searched for a copy of the fix (besides the repository itself)."""
PROBE_TIMEOUT_S = 300

_SCRIPT = r"""
cd "$1" || { echo "norepo"; exit 0; }
g() { git -c safe.directory='*' "$@" 2>/dev/null; }
echo "commits $(g cat-file --batch-all-objects --batch-check='%(objecttype)' | grep -c '^commit$')"
echo "objects $(g cat-file --batch-all-objects --batch-check='%(objectname)' | sort -u | wc -l)"
echo "reachable $(g rev-list --objects --all --reflog | cut -d' ' -f1 | sort -u | wc -l)"
echo "revs $(g rev-list --all --reflog | sort -u | wc -l)"
echo "refs $(g for-each-ref --format='%(refname)' | tr '\n' ' ')"
echo "tags $(g tag -l | wc -l)"
echo "stash $(g stash list | wc -l)"
echo "packed $(test -s .git/packed-refs && grep -v '^#' .git/packed-refs | grep -vc "^$(g rev-parse HEAD) " \
  || echo 0)"
echo "reflog $(g reflog --all --format=%H | sort -u | grep -vc "$(g rev-parse HEAD)")"
shift
for needle in "$@"; do
  hit=$(grep -rIlF --exclude-dir=.git -e "$needle" . /tmp /opt /root /home /srv /var/tmp /workspace \
        2>/dev/null | grep -v '^\./\.git/' | head -n 1)
  echo "needle ${hit:-none}"
done
"""


@dataclass(frozen=True)
class ImageHistory:
    """What an instance image's repository holds besides its one commit."""

    tag: str
    commits: int
    """Commit objects in the object store (1 for a sound image)."""
    unreachable_objects: int
    """Objects no ref or reflog entry reaches (a dangling copy of a later tree)."""
    refs: tuple[str, ...]
    tags: int
    stash: int
    packed_refs: int
    """Lines of .git/packed-refs naming a commit other than HEAD (git gc packs the branch itself)."""
    reflog_elsewhere: int
    """Reflog entries naming a commit other than HEAD."""
    fix_copies: tuple[str, ...]
    """Files holding a distinctive added line of the gold patch (every needle found: a copy of the fix)."""

    @property
    def problems(self) -> tuple[str, ...]:
        out = []
        if self.commits != 1:
            out.append(f"{self.commits} commit objects (one expected)")
        if self.unreachable_objects:
            out.append(f"{self.unreachable_objects} unreachable objects")
        if len(self.refs) != 1:
            out.append(f"refs {', '.join(self.refs) or 'none'} (one branch expected)")
        for name, n in (
            ("tags", self.tags),
            ("stash entries", self.stash),
            ("packed refs", self.packed_refs),
            ("reflog entries elsewhere", self.reflog_elsewhere),
        ):
            if n:
                out.append(f"{n} {name}")
        if self.fix_copies:
            out.append(f"the fix is on disk: {', '.join(self.fix_copies)}")
        return tuple(out)


def needles(patch: str, count: int = 3) -> tuple[str, ...]:
    """Up to ``count`` distinctive added lines of ``patch``: the longest (stripped, >= 10 characters) that
    are neither removed nor context lines of the patch (a line the base already has proves nothing)."""
    changes = parse(patch)
    old = {line.strip() for c in changes for line in (*c.removed_lines, *c.context_lines)}
    lines = {line.strip() for c in changes for line in c.added_lines}
    good = sorted(
        (x for x in lines if len(x) >= 10 and x not in old and "\x00" not in x), key=lambda x: (-len(x), x)
    )
    return tuple(good[:count])


def inspect_image(tag: str, instance: Instance, folder: str = PRISTINE) -> ImageHistory:
    """Read the repository at ``folder`` in ``tag`` (one container, no network). Blocking."""
    found = needles(instance.patch)
    out = _run(tag, ["bash", "-c", _SCRIPT, "onecommit", folder, *found])
    if out.strip() == "norepo":
        raise ImageMismatch(
            f"{tag} has no repository at {folder}; build it with `envfarm harness images build`"
        )
    fields: dict[str, str] = {}
    hits: list[str] = []
    for line in out.splitlines():
        key, _, value = line.partition(" ")
        if key == "needle":
            hits.append(value.strip())
        else:
            fields[key] = value.strip()
    copies = tuple(dict.fromkeys(h for h in hits if h != "none")) if hits and "none" not in hits else ()
    return ImageHistory(
        tag=tag,
        commits=int(fields.get("commits", "0") or 0),
        unreachable_objects=max(
            0, int(fields.get("objects", "0") or 0) - int(fields.get("reachable", "0") or 0)
        ),
        refs=tuple(fields.get("refs", "").split()),
        tags=int(fields.get("tags", "0") or 0),
        stash=int(fields.get("stash", "0") or 0),
        packed_refs=int(fields.get("packed", "0") or 0),
        reflog_elsewhere=int(fields.get("reflog", "0") or 0),
        fix_copies=copies,
    )


def _run(tag: str, command: list[str]) -> str:
    container = None
    try:  # create/start/wait/logs: containers.run() can return before the output is readable
        container = dockerutil.client().containers.create(
            tag, command, network_mode="none", user="0:0", labels={"envfarm.harness.probe": "1"},
            log_config={"Type": "json-file", "Config": {}},
        )  # fmt: skip
        container.start()
        status = container.wait(timeout=PROBE_TIMEOUT_S).get("StatusCode")
        out: str = container.logs(stdout=True, stderr=False).decode(errors="replace")
    except (ImageNotFound, APIError, DockerException, requests.RequestException) as e:
        raise ImageMismatch(f"cannot look into {tag} (`bash`, `git` and `grep` must run in it): {e}") from e
    finally:
        if container is not None:
            with contextlib.suppress(DockerException, requests.RequestException):
                container.remove(force=True)
    if status != 0:
        raise ImageMismatch(
            f"cannot look into {tag}: `{shlex.join(command[:2])}` exited {status}: {out[-500:]}"
        )
    return out
