"""Repositories: find ``owner__name`` in ``--repo-source`` and snapshot one commit with no history.

    src = find_repo(Path("mirrors"), "pallets/flask")       # mirrors/pallets__flask or pallets__flask.git
    src = locate("https://github.com/", "pallets/flask", base_commit)   # a URL prefix: cloned once, cached
    tree = snapshot(src, base_commit, Path("out/repo"))      # a fresh repo holding exactly one commit

``--repo-source`` is a folder of mirrors (``owner__name`` or ``owner__name.git``, bare or not) or a git URL
prefix (``git://``, ``http://``, ``https://``, ``ssh://``, ``file://``). A prefix names each repository as
``<prefix>owner/name`` (GitHub's layout), ``<prefix>owner/name.git``, ``<prefix>owner__name.git`` or
``<prefix>owner__name`` (a served folder of mirrors), the first that ``git ls-remote`` answers; ``{repo}``
(``owner/name``) or ``{key}`` (``owner__name``) in the prefix is a template instead. The first use clones a
bare mirror into ``$ENVFARM_HOME/harness/git/`` (one per URL, under a file lock, so parallel builds clone
once); a commit missing from it is fetched (all refs, then the commit itself), never the whole history again.

The snapshot is a new repository whose only commit (no parent, fixed author and date) has the base commit's
tree: the objects of that tree are copied with ``git pack-objects``, nothing else, so later commits, other
branches, tags and reflogs of the mirror cannot be reached from inside the image. The work tree is checked
out by git as a clone would be. Functions here block (subprocess); call them through ``asyncio.to_thread``.
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import logging
import os
import re
import shutil
import subprocess
import tarfile
from collections.abc import Iterator
from pathlib import Path

from envfarm import config
from envfarm.errors import ConfigError, HarnessError, RepoNotFound, tail

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


URL_SCHEMES = ("git", "http", "https", "ssh", "file")
_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]*)://")
REMOTE_TIMEOUT_S = 1800
"""Seconds one clone or fetch may take."""

RepoSource = Path | str | None
"""A folder of mirrors (Path), a git URL prefix (str), or nothing."""


def is_url(source: RepoSource) -> bool:
    """Whether ``source`` is a git URL prefix rather than a folder."""
    return isinstance(source, str) and _URL.match(source) is not None


def parse_source(value: str | Path | None) -> RepoSource:
    """``--repo-source`` as given: a URL prefix stays a string (checked scheme), anything else is a Path."""
    if value is None or isinstance(value, Path):
        return value
    found = _URL.match(value)
    if found is None:
        return Path(value)
    if found.group(1).lower() not in URL_SCHEMES:
        raise ConfigError(
            f"{value}: git cannot fetch from {found.group(1)}:// URLs here; use one of "
            f"{', '.join(s + '://' for s in URL_SCHEMES)} or a folder of owner__name(.git) repositories"
        )
    return value


def locate(source: RepoSource, repo: str, commit: str) -> Path:
    """A local git repository of ``repo`` that holds ``commit``: in the folder ``source``, or the cached
    clone of the URL prefix ``source`` (cloned or fetched now when needed). RepoNotFound otherwise."""
    source = parse_source(source)
    if isinstance(source, str):
        return fetch_commit(source, repo, commit)
    return find_repo(source, repo)


def cache_dir() -> Path:
    """Where clones of URL sources live: ``$ENVFARM_HOME/harness/git``."""
    return config.home() / "harness" / "git"


def fetch_commit(prefix: str, repo: str, commit: str) -> Path:
    """The cached bare clone of ``repo`` from the URL ``prefix``, holding ``commit``; see the module doc."""
    dest = clone_dir(prefix, repo)
    with _locked(dest.with_suffix(".lock")):
        if not (dest / "HEAD").is_file():
            _clone(prefix, repo, dest)
        if _has_commit(dest, commit):
            return dest
        log.info("fetching %s into %s for %s", repo, dest, commit[:12])
        _remote(["fetch", "-q", "--prune", "origin"], dest, check=False)
        if not _has_commit(dest, commit):
            _remote(["fetch", "-q", "origin", commit], dest, check=False)
        if not _has_commit(dest, commit):
            url = _git(["config", "remote.origin.url"], dest, check=False).stdout.decode().strip()
            raise RepoNotFound(
                f"commit {commit} of {repo} is not at {url} (fetched all its refs and asked for the commit; "
                f"cached clone: {dest}); check --repo-source, or that the server has the full history"
            )
        return dest


def clone_dir(prefix: str, repo: str) -> Path:
    """The cached bare clone of ``repo`` from the URL ``prefix`` (one per prefix and repo)."""
    digest = hashlib.sha256(f"{prefix}\0{repo}".encode()).hexdigest()[:12]
    return cache_dir() / f"{repo.replace('/', '__')}-{digest}.git"


def _clone(prefix: str, repo: str, dest: Path) -> None:
    urls = candidate_urls(prefix, repo)
    tried = []
    for url in urls:
        probe = _remote(["ls-remote", "-q", "--heads", url], cache_dir(), check=False)
        if probe.returncode == 0:
            break
        tried.append(f"{url}: {tail(probe.stderr.decode(errors='replace'), 2).strip()}")
    else:
        raise RepoNotFound(
            f"no git repository for {repo} under --repo-source {prefix}; tried:\n  "
            + "\n  ".join(tried)
            + "\nfix: check the URL prefix and that the server answers (`git ls-remote URL`), or put "
            "{repo} / {key} in the prefix"
        )
    tmp = dest.with_name(dest.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    log.info("cloning %s into %s (once; later runs fetch only)", url, dest)
    res = _remote(["clone", "-q", "--mirror", url, str(tmp)], cache_dir(), check=False)
    if res.returncode != 0:
        shutil.rmtree(tmp, ignore_errors=True)
        raise RepoNotFound(
            f"cloning {url} failed (exit {res.returncode}):\n{tail(res.stderr.decode(errors='replace'))}"
        )
    tmp.rename(dest)


def candidate_urls(prefix: str, repo: str) -> list[str]:
    """The URLs tried for ``repo`` under ``prefix`` (a template when it holds {repo} or {key})."""
    key = repo.replace("/", "__")
    if "{repo}" in prefix or "{key}" in prefix:
        return [prefix.replace("{repo}", repo).replace("{key}", key)]
    base = prefix if prefix.endswith("/") else prefix + "/"
    return [f"{base}{repo}", f"{base}{repo}.git", f"{base}{key}.git", f"{base}{key}"]


def _has_commit(src: Path, commit: str) -> bool:
    return _git(["cat-file", "-e", f"{commit}^{{commit}}"], src, check=False).returncode == 0


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    """An exclusive flock on ``path``, per open file, so threads and processes both wait for each other."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


def _remote(args: list[str], cwd: Path, check: bool = True) -> subprocess.CompletedProcess[bytes]:
    """A git command that talks to a server: no prompt, no hooks, the longer timeout."""
    cwd.mkdir(parents=True, exist_ok=True)
    return _git(args, cwd, check=check, timeout=REMOTE_TIMEOUT_S)


def find_repo(source: Path | None, repo: str) -> Path:
    """The git repository of ``repo`` (``owner/name``) in ``source``: ``owner__name`` or ``.git`` after it."""
    key = repo.replace("/", "__")
    if source is None:
        raise RepoNotFound(
            f"no repository for {repo}: pass --repo-source DIR, a folder holding {key} or {key}.git "
            f"(e.g. `git clone --mirror <url> DIR/{key}.git` on a machine with network), or a git URL "
            "prefix such as --repo-source https://github.com/"
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
    listed = _git(["rev-list", "--objects", tree], src, check=False)
    if listed.returncode != 0:
        missing = tail(listed.stderr.decode(errors="replace"))
        raise RepoNotFound(
            f"{src} has commit {commit} but not all of its files ({missing.strip()}): the mirror is "
            "incomplete; fetch it again or use a fuller mirror"
        )
    objects = listed.stdout
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
    timeout: float = 600,
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
        res = subprocess.run(cmd, cwd=cwd, input=stdin, capture_output=True, env=full_env, timeout=timeout)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise HarnessError(f"`git {' '.join(args[:3])}` in {cwd} failed: {e}") from e
    if check and res.returncode != 0:
        raise HarnessError(
            f"`git {' '.join(args[:3])}` in {cwd} exited {res.returncode}:\n"
            f"{tail(res.stderr.decode(errors='replace'))}"
        )
    return res
