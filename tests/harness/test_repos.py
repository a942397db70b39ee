"""Offline repositories: find them by SWE-bench's prefix, snapshot one commit with no history."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from envfarm.errors import RepoNotFound
from envfarm.harness.repos import archive, find_repo, snapshot
from envfarm.testing.toyrepo import KEY, REPO, git


def test_snapshot_has_one_commit_and_no_future(toy: tuple[Path, str, Path], tmp_path: Path) -> None:
    source, base, _ = toy
    src = find_repo(source, REPO)
    future = git(src, "rev-parse", "HEAD")
    tree = snapshot(src, base, tmp_path / "snap")
    snap = tmp_path / "snap"
    assert tree == git(src, "rev-parse", f"{base}^{{tree}}") == git(snap, "rev-parse", "HEAD^{tree}")
    assert git(snap, "rev-list", "--all").splitlines() == [git(snap, "rev-parse", "HEAD")]
    assert git(snap, "status", "--porcelain") == "" and not (snap / "FUTURE.md").exists()
    missing = subprocess.run(["git", "cat-file", "-e", future], cwd=snap, capture_output=True)
    assert missing.returncode != 0, "the later commit must not be reachable, or present at all"
    assert (snap / "calc" / "ops.py").read_text().startswith("def add")
    again = tmp_path / "again"
    snapshot(src, base, again)
    assert git(again, "rev-parse", "HEAD") == git(snap, "rev-parse", "HEAD"), "snapshots are deterministic"
    size = archive(snap, tmp_path / "repo.tar.gz")
    assert size > 0


def test_bare_mirrors_and_clear_errors(toy: tuple[Path, str, Path], tmp_path: Path) -> None:
    source, base, _ = toy
    mirrors = tmp_path / "mirrors"
    mirrors.mkdir()
    subprocess.run(
        ["git", "clone", "-q", "--mirror", str(source / KEY), str(mirrors / f"{KEY}.git")], check=True
    )
    src = find_repo(mirrors, REPO)
    assert src.name == f"{KEY}.git"
    snapshot(src, base, tmp_path / "snap")
    with pytest.raises(RepoNotFound, match="pass --repo-source DIR"):
        find_repo(None, REPO)
    with pytest.raises(
        RepoNotFound,
        match=r"no git repository pallets__flask or pallets__flask.git .*it holds: envfarm-tests__calc.git",
    ):
        find_repo(mirrors, "pallets/flask")
    with pytest.raises(RepoNotFound, match="is not in"):
        snapshot(src, "0" * 40, tmp_path / "nope")


def test_a_mirror_missing_files_of_the_commit_is_no_repository(toy: tuple[Path, str, Path],
                                                                tmp_path: Path) -> None:
    """A snapshot mirror can hold a commit and its tree but lack a blob (astropy's here): that is a missing
    repository (validate's no-repository), not a build failure."""
    source, base, _ = toy
    mirror = tmp_path / f"{KEY}.git"
    clone = ["git", "clone", "-q", "--mirror", "--no-local", str(source / KEY), str(mirror)]
    subprocess.run(clone, check=True)
    subprocess.run(["git", "repack", "-q", "-a", "-d"], cwd=mirror, check=True)
    blob = git(mirror, "rev-parse", f"{base}:calc/ops.py")
    objects = git(mirror, "rev-list", "--objects", "--all").splitlines()
    keep = "\n".join(line.split()[0] for line in objects if not line.startswith(blob)) + "\n"
    pack = subprocess.run(["git", "pack-objects", "--stdout", "-q"], cwd=mirror, input=keep.encode(),
                          capture_output=True, check=True).stdout
    for old in (mirror / "objects" / "pack").iterdir():
        old.unlink()
    subprocess.run(["git", "index-pack", "--stdin"], cwd=mirror, input=pack, capture_output=True, check=True)
    with pytest.raises(RepoNotFound, match=r"has commit .* but not all of its files .*mirror is incomplete"):
        snapshot(mirror, base, tmp_path / "snap")
