"""Offline repositories: find ``owner__name`` in ``--repo-source`` and snapshot one commit with no history.

    src = find_repo(Path("mirrors"), "pallets/flask")       # mirrors/pallets__flask or pallets__flask.git
    tree = snapshot(src, base_commit, Path("out/repo"))      # a fresh repo holding exactly one commit

The snapshot is a new repository whose only commit (no parent, fixed author and date) has the base commit's
tree: the objects of that tree are copied with ``git pack-objects``, nothing else, so later commits, other
branches, tags and reflogs of the mirror cannot be reached from inside the image. The work tree is checked
out by git as a clone would be. Functions here block (subprocess); call them through ``asyncio.to_thread``.
"""

from __future__ import annotations

import logging
import os
import subprocess
import tarfile
from pathlib import Path

from envfarm.errors import HarnessError, RepoNotFound, tail

log = logging.getLogger(__name__)

SNAPSHOT_BRANCH = "main"
_IDENTITY = {
    "GIT_AUTHOR_NAME": "envfarm",
    "GIT_AUTHOR_EMAIL": "envfarm@localhost",
    "GIT_COMMITTER_NAME": "envfarm",
    "GIT_COMMITTER_EMAIL": "envfarm@localhost",
    "GIT_AUTHOR_DATE": "2000-01-01T00:00:00+0000",
    "GIT_COMMITTER_DATE": "2000-01-01T00:00:00+0000",
}


def find_repo(source: Path | None, repo: str) -> Path:
    """The git repository of ``repo`` (``owner/name``) in ``source``: ``owner__name`` or ``.git`` after it."""
    key = repo.replace("/", "__")
    if source is None:
        raise RepoNotFound(
            f"no repository for {repo}: pass --repo-source DIR, a folder holding {key} or {key}.git "
            f"(e.g. `git clone --mirror <url> DIR/{key}.git` on a machine with network)"
        )
    for candidate in (source / key, source / f"{key}.git"):
        if candidate.is_dir() and _git(["rev-parse", "--git-dir"], candidate, check=False).returncode == 0:
            return candidate
    names = sorted(p.name for p in source.iterdir()) if source.is_dir() else []
    shown = ", ".join(names[:8]) + (" ..." if len(names) > 8 else "")
    raise RepoNotFound(
        f"no git repository {key} or {key}.git in {source} (it holds: {shown or 'nothing'}); "
        f"clone {repo} there (bare or not)"
    )


def tree_of(src: Path, commit: str) -> str:
    """The tree id of ``commit`` in ``src``; RepoNotFound when the commit is missing."""
    res = _git(["rev-parse", "--verify", "--quiet", f"{commit}^{{tree}}"], src, check=False)
    if res.returncode != 0:
        raise RepoNotFound(
            f"commit {commit} is not in {src}; fetch it there (`git -C {src} fetch --all`) "
            "or use a fuller mirror"
        )
    return res.stdout.decode().strip()


def snapshot(src: Path, commit: str, dest: Path) -> str:
    """Create ``dest`` as a one-commit repository of ``commit``'s tree, checked out; returns the tree id."""
    tree = tree_of(src, commit)
    dest.mkdir(parents=True, exist_ok=False)
    _git(["init", "-q", "-b", SNAPSHOT_BRANCH], dest)
    objects = _git(["rev-list", "--objects", tree], src).stdout
    pack = _git(["pack-objects", "--stdout", "-q"], src, stdin=objects).stdout
    _git(["index-pack", "--stdin"], dest, stdin=pack)
    message = f"envfarm snapshot of {commit}\n".encode()
    new = _git(["commit-tree", tree], dest, stdin=message, env=_IDENTITY).stdout.decode().strip()
    _git(["update-ref", f"refs/heads/{SNAPSHOT_BRANCH}", new], dest)
    _git(["-c", "advice.detachedHead=false", "checkout", "-q", "-f", SNAPSHOT_BRANCH], dest)
    _git(["gc", "-q", "--prune=now"], dest, check=False)
    log.info("snapshot of %s@%s (tree %s) at %s", src.name, commit[:12], tree[:12], dest)
    return tree


def archive(folder: Path, out: Path) -> int:
    """Write ``folder``'s contents (``.git`` included) to the gzip tar ``out``; returns its size in bytes."""
    with tarfile.open(out, "w:gz", compresslevel=1) as tar:
        for child in sorted(folder.iterdir()):
            tar.add(child, arcname=child.name)
    return out.stat().st_size


def _git(
    args: list[str],
    cwd: Path,
    stdin: bytes | None = None,
    check: bool = True,
    env: dict[str, str] | None = None,
) -> subprocess.CompletedProcess[bytes]:
    full_env = {
        **os.environ,
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_TERMINAL_PROMPT": "0",
        "LC_ALL": "C",
        **(env or {}),
    }
    cmd = ["git", "-c", "core.hooksPath=/dev/null", "-c", "safe.directory=*", *args]
    try:
        res = subprocess.run(cmd, cwd=cwd, input=stdin, capture_output=True, env=full_env, timeout=600)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HarnessError(f"`git {' '.join(args[:3])}` in {cwd} failed: {e}") from e
    if check and res.returncode != 0:
        raise HarnessError(
            f"`git {' '.join(args[:3])}` in {cwd} exited {res.returncode}:\n"
            f"{tail(res.stderr.decode(errors='replace'))}"
        )
    return res
