"""``--repo-source`` as a git URL prefix, against a real ``git daemon`` on 127.0.0.1 serving a mirror."""

from __future__ import annotations

import json
import shutil
import subprocess
import uuid
from pathlib import Path

import pytest
from servers import git_daemon
from typer.testing import CliRunner

from envfarm.cli import app as root
from envfarm.errors import ConfigError, RepoNotFound
from envfarm.harness import repos
from envfarm.harness.repos import candidate_urls, locate, parse_source, snapshot
from envfarm.testing.toyrepo import KEY, REPO, git, row


def _serve(source: Path, served: Path) -> Path:
    """A bare mirror of the toy repository under ``served`` (what the daemon exports)."""
    served.mkdir(parents=True, exist_ok=True)
    bare = served / f"{KEY}.git"
    subprocess.run(["git", "clone", "-q", "--bare", str(source / KEY), str(bare)], check=True)
    return bare


def test_url_source_clones_once_then_fetches_what_is_missing(
    toy: tuple[Path, str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("ENVFARM_HOME", str(tmp_path / "home"))
    source, base, _ = toy
    bare = _serve(source, tmp_path / "served")
    with git_daemon(tmp_path / "served") as url:
        src = locate(url, REPO, base)
        assert src.parent == tmp_path / "home" / "harness" / "git" and src.name.startswith(f"{KEY}-")
        snapshot(src, base, tmp_path / "snap")
        want = git(source / KEY, "rev-parse", f"{base}^{{tree}}")
        assert git(tmp_path / "snap", "rev-parse", "HEAD^{tree}") == want
        marker = src / "objects" / "envfarm-test-marker"
        marker.write_text("the cached clone is reused, not cloned again")
        assert locate(url, REPO, base) == src and marker.exists()
        # a commit the server gets after the clone is fetched on demand into the same cache
        tree = git(bare, "rev-parse", f"{base}^{{tree}}")
        later = git(bare, "commit-tree", tree, "-p", base, "-m", f"later {uuid.uuid4()}")
        git(bare, "update-ref", "refs/heads/later", later)
        assert subprocess.run(["git", "cat-file", "-e", later], cwd=src, capture_output=True).returncode != 0
        assert locate(url, REPO, later) == src and marker.exists()
        assert git(src, "cat-file", "-t", later) == "commit"
        with pytest.raises(RepoNotFound, match=rf"commit {'0' * 40} of {REPO} is not at {url}"):
            locate(url, REPO, "0" * 40)
        with pytest.raises(RepoNotFound, match=r"no git repository for o/missing under --repo-source"):
            locate(url, "o/missing", base)
        template = locate(f"{url}{{key}}.git", REPO, base)
        assert template != src and (template / "HEAD").is_file()


def test_url_forms_and_bad_sources() -> None:
    assert candidate_urls("https://github.com", "psf/requests") == [
        "https://github.com/psf/requests",
        "https://github.com/psf/requests.git",
        "https://github.com/psf__requests.git",
        "https://github.com/psf__requests",
    ]
    assert candidate_urls("http://h/{repo}.git", "a/b") == ["http://h/a/b.git"]
    assert parse_source("git://127.0.0.1:9/") == "git://127.0.0.1:9/"
    assert parse_source("mirrors") == Path("mirrors") and parse_source(None) is None
    assert repos.is_url("file:///srv/git/") and not repos.is_url(Path("git:/x"))
    with pytest.raises(ConfigError, match="git cannot fetch from ftp:// URLs"):
        parse_source("ftp://127.0.0.1/")


@pytest.mark.docker
def test_a_harness_row_gets_its_repository_from_a_git_server(
    toy: tuple[Path, str, Path], tmp_path: Path
) -> None:
    """End to end: no folder of mirrors, only the server; the instance image is built from the fetched
    commit (a commit made for this test, so no cached image can stand in for the fetch)."""
    source, base, specs = toy
    bare = _serve(source, tmp_path / "served")
    tree = git(bare, "rev-parse", f"{base}^{{tree}}")
    unique = git(bare, "commit-tree", tree, "-p", base, "-m", f"unique {uuid.uuid4()}")
    git(bare, "update-ref", "refs/heads/unique", unique)
    iid = "envfarm-tests__calc-git"
    (tmp_path / "rows.jsonl").write_text(json.dumps(row(iid, unique)) + "\n")
    with git_daemon(tmp_path / "served") as url:
        clone = repos.clone_dir(url, REPO)
        args = [
            "harness", "run", "--instances", str(tmp_path / "rows.jsonl"), "--predictions", "gold",
            "--repo-source", url, "--specs", str(specs), "--run-id", "git",
            "--report-dir", str(tmp_path / "out"), "--timeout", "120",
        ]  # fmt: skip
        image = None
        try:
            result = CliRunner().invoke(root, args)
            assert result.exit_code == 0, result.output
            assert "resolved 1/1" in result.output
            report = json.loads((tmp_path / "out" / "git" / "gold" / iid / "report.json").read_text())[iid]
            image = report["envfarm"]["image"]
            assert report["envfarm"]["image_built"] is True
            assert git(clone, "cat-file", "-t", unique) == "commit"
        finally:
            shutil.rmtree(clone, ignore_errors=True)
            if image:
                subprocess.run(["docker", "rmi", "-f", image], capture_output=True)


@pytest.mark.docker
def test_code_repair_env_takes_a_git_url_as_its_repo_source() -> None:
    """CodeRepair-v0 with repo_source=git://...: the URL reaches the image builder as a URL (not a Path) and
    an episode resolves; the instance image has the folder-fed one's content, so it is usually cached and
    nothing is fetched (the harness test above proves the fetch itself)."""
    from envfarm.envs.code_repair.env import CodeRepairEnv, builtin_instances

    folder = builtin_instances()[1]
    task = "envfarm__lrucache-get-does-not-refresh"
    with git_daemon(folder) as url:
        env = CodeRepairEnv(repo_source=url, instance_ids=[task])
        clone = repos.clone_dir(url, "envfarm/lrucache")
        try:
            assert env.repo_source == url
            env.reset(options={"instance_id": task})
            for action in env.oracle():
                _, reward, terminated, truncated, info = env.step(action)
                if terminated or truncated:
                    break
            assert terminated and reward == 1.0 and info["resolved"], info
            assert env._builder.repo_source == url
        finally:
            env.close()
            shutil.rmtree(clone, ignore_errors=True)
