"""Image recipes, hashes, name resolution, rootfs post-processing, and the images `make setup` builds."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import docker
import pytest
from typer.testing import CliRunner

from envfarm import config
from envfarm.cli import app
from envfarm.errors import ConfigError, ImageNotFound
from envfarm.sandbox import dockerutil, imagebuild, images, rootfs


@pytest.fixture
def recipes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of images/ (with an extra recipe "ghost" never built), used via $ENVFARM_IMAGES_DIR."""
    folder = tmp_path / "images"
    shutil.copytree(images.images_dir(), folder)
    (folder / "ghost").mkdir()
    (folder / "ghost" / "Dockerfile").write_text("ARG BASE\nFROM ${BASE}\n")
    monkeypatch.setenv("ENVFARM_IMAGES_DIR", str(folder))
    return folder


@pytest.fixture
def docker_client() -> docker.DockerClient:
    if not dockerutil.ping():
        pytest.fail("the Docker daemon does not answer; run `make setup`")
    return dockerutil.client()


def test_content_hash_is_stable_and_covers_every_file(tmp_path: Path) -> None:
    (tmp_path / "sub").mkdir()
    (tmp_path / "recipe.toml").write_text('suite = "bookworm"\n')
    (tmp_path / "sub" / "extra.txt").write_text("one\n")
    first = images.content_hash(tmp_path)
    assert len(first) == 12 and int(first, 16) >= 0
    assert images.content_hash(tmp_path) == first
    (tmp_path / "__pycache__").mkdir()
    (tmp_path / "__pycache__" / "x.pyc").write_bytes(b"\0")
    assert images.content_hash(tmp_path) == first, "caches do not change the recipe"

    (tmp_path / "sub" / "extra.txt").write_text("two\n")
    changed = images.content_hash(tmp_path)
    assert changed != first
    (tmp_path / "sub" / "extra.txt").rename(tmp_path / "sub" / "renamed.txt")
    assert images.content_hash(tmp_path) not in (first, changed), "a rename changes the hash"
    assert images.content_hash(tmp_path, extra="base123") != images.content_hash(tmp_path)


def test_recipes_and_layer_hashes_follow_the_base(recipes: Path) -> None:
    base = images.load_base_recipe()
    assert base.suite == "bookworm" and base.variant == "minbase"
    assert {"python3", "python3-pip", "python3-venv", "git", "patch", "procps"} <= set(base.packages)
    assert images.recipe_names() == ["base", "ghost", "pytest"]
    before = images.current_hashes()
    with (recipes / "base" / "recipe.toml").open("a") as fh:
        fh.write("# a comment is a change\n")
    after = images.current_hashes()
    assert all(before[name] != after[name] for name in before), "every image depends on the base recipe"


def test_base_recipes_per_suite(recipes: Path) -> None:
    assert images.base_names() == ["base", "base-bullseye", "base-trixie"]
    by_suite = images.base_recipes()
    assert {s: (r.name, r.python, r.glibc) for s, r in by_suite.items()} == {
        "bookworm": ("base", "3.11", "2.36"),
        "bullseye": ("base-bullseye", "3.9", "2.31"),
        "trixie": ("base-trixie", "3.13", "2.41"),
    }
    core = by_suite["bookworm"].packages
    assert by_suite["trixie"].packages == core, "one package list for the suites"
    # bullseye adds what its SWE-bench env images compile and run (astropy's C extensions, sphinx's graphviz)
    assert by_suite["bullseye"].packages[: len(core)] == core
    assert {"gcc", "python3-dev", "graphviz"} <= set(by_suite["bullseye"].packages[len(core):])
    assert by_suite["bullseye"].env_packages == ("pip==24.3.1",) and by_suite["bookworm"].env_packages == ()
    assert (
        images.base_for_suite(None).name == "base" and images.base_for_suite("trixie").name == "base-trixie"
    )
    with pytest.raises(ConfigError, match=r"no base recipe for Debian 'bulleye'; did you mean 'bullseye'"):
        images.base_for_suite("bulleye")
    assert images.recipe_names() == ["base", "ghost", "pytest"], "suite bases are not layered recipes"
    hashes = images.suite_hashes()
    assert (
        set(hashes) == {"base-bullseye", "base-trixie"}
        and images.current_hashes()["base"] not in hashes.values()
    )
    with (recipes / "base-bullseye" / "recipe.toml").open("a") as fh:
        fh.write("# a change\n")
    assert images.suite_hashes()["base-bullseye"] != hashes["base-bullseye"]
    assert images.suite_hashes()["base-trixie"] == hashes["base-trixie"]


def test_build_asks_for_suites_by_name(recipes: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    built: list[str | None] = []

    def fake_base(force: bool = False, progress: object = None, suite: str | None = None) -> str:
        built.append(suite)
        return f"base {suite}"

    monkeypatch.setattr(images, "build_base", fake_base)
    assert images.build(suites=["bullseye", "trixie"]) == ["base bullseye", "base trixie"]  # type: ignore[comparison-overlap]
    assert built == ["bullseye", "trixie"], "--suite alone builds only those bases"
    with pytest.raises(ConfigError, match="no base recipe for Debian 'sid'"):
        images.build(suites=["sid"])
    assert built == ["bullseye", "trixie"], "an unknown suite fails before anything is built"


def test_wheel_platforms_cover_manylinux_and_pure_python() -> None:
    tags = imagebuild.platforms("2.36", arch="x86_64")
    assert tags[0] == "manylinux_2_36_x86_64" and "manylinux_2_28_x86_64" in tags
    assert tags[-2:] == ["manylinux2014_x86_64", "any"]


class _NoImages:
    """Stands in for a docker client that has no images at all."""

    class images:  # mirrors DockerClient.images
        @staticmethod
        def get(ref: str) -> None:
            raise docker.errors.ImageNotFound(f"No such image: {ref}")


def test_resolve_image_missing_names_the_build_command(
    recipes: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dockerutil, "client", _NoImages)
    with pytest.raises(ImageNotFound, match=r"run `envfarm images build ghost`"):
        images.resolve_image("ghost")
    with pytest.raises(ImageNotFound, match=r"run `envfarm images build`") as err:
        images.resolve_image(None)
    assert err.value.image == images.tag_for("base", images.current_hashes()["base"])
    with pytest.raises(ImageNotFound, match=r"did you mean 'pytest'"):
        images.resolve_image("pytset")


def test_rootfs_for_base_missing(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVFARM_HOME", str(tmp_path / "home"))
    with pytest.raises(ImageNotFound, match="envfarm images build"):
        images.rootfs_for(None)


@pytest.mark.skipif(os.geteuid() != 0, reason="chown to the agent uid needs root")
def test_postprocess_adds_agent_user_and_workspace(tmp_path: Path) -> None:
    root = tmp_path / "root"
    for folder in ("etc", "var/cache/apt/archives", "var/lib/apt/lists/partial"):
        (root / folder).mkdir(parents=True)
    (root / "etc/passwd").write_text("root:x:0:0:root:/root:/bin/bash\n")
    (root / "etc/group").write_text("root:x:0:\n")
    (root / "etc/hostname").write_text("buildhost\n")
    (root / "var/cache/apt/archives/python3.deb").write_bytes(b"deb")
    (root / "var/lib/apt/lists/deb.debian.org_Packages").write_text("...")
    rootfs.postprocess(root)
    rootfs.postprocess(root)  # idempotent
    passwd = (root / "etc/passwd").read_text().splitlines()
    assert passwd[-1] == f"agent:x:{config.AGENT_UID}:{config.AGENT_UID}:envfarm agent:/workspace:/bin/bash"
    assert len(passwd) == 2 and (root / "etc/group").read_text().endswith(f"agent:x:{config.AGENT_UID}:\n")
    workspace = (root / "workspace").stat()
    assert (workspace.st_uid, workspace.st_gid, workspace.st_mode & 0o777) == (1000, 1000, 0o755)
    assert (root / "opt/envfarm").is_dir() and (root / "etc/hostname").read_text() == "envfarm\n"
    assert not list((root / "var/cache/apt/archives").glob("*.deb"))
    assert not list((root / "var/lib/apt/lists").iterdir())


@pytest.fixture
def container_labels() -> dict[str, str]:
    """Owner labels, so the session's leftover-container check would catch a leak."""
    return {config.LABEL: "1", **{f"envfarm.{k}": v for k, v in config.owner().items()}}


@pytest.mark.docker
def test_base_image_runs_python_without_network(
    docker_client: docker.DockerClient, container_labels: dict[str, str]
) -> None:
    tag = images.resolve_image("base")
    cmd = ["sh", "-c", "python3 -c 'print(1)'; id -un; stat -c %U /workspace; ls /sys/class/net"]
    container = docker_client.containers.create(
        tag, cmd, network_mode="none", user=str(config.AGENT_UID), labels=container_labels
    )
    try:
        container.start()
        assert container.wait(timeout=60)["StatusCode"] == 0
        out = container.logs().decode().split()
        assert out == ["1", "agent", "agent", "lo"], out
    finally:
        container.remove(force=True)


@pytest.mark.docker
def test_rootfs_for_a_layered_image_is_an_export_cached_by_id(docker_client: docker.DockerClient) -> None:
    folder = images.rootfs_for("pytest")
    assert folder == images.rootfs_for(images.resolve_image("pytest")), "cached, not exported twice"
    assert folder.name == "img-" + docker_client.images.get(images.resolve_image("pytest")).id[7:19]
    assert list(folder.glob("usr/local/lib/python3*/dist-packages/pytest"))
    assert (folder / "workspace").stat().st_uid == config.AGENT_UID and not (folder / ".dockerenv").exists()
    base = images.rootfs_for(None)
    assert base == images.rootfs_for("base") == images.rootfs_for(images.resolve_image(None))


@pytest.mark.docker
@pytest.mark.bwrap
def test_doctor_passes_after_setup(docker_client: docker.DockerClient) -> None:
    result = CliRunner().invoke(app, ["doctor"])
    assert result.exit_code == 0, result.output


def test_images_list_json_parses() -> None:
    result = CliRunner().invoke(app, ["images", "list", "--json"])
    assert result.exit_code == 0, result.output
    listed = json.loads(result.stdout)
    assert {"base", "pytest"} <= {item["name"] for item in listed}
    assert set(listed[0]) == {
        "name",
        "tag",
        "hash",
        "size_mb",
        "created",
        "present_in_docker",
        "rootfs_path",
        "stale",
    }


def test_farm_errors_print_one_red_line_and_exit_2(recipes: Path) -> None:
    result = CliRunner().invoke(app, ["images", "build", "pytset"])
    assert result.exit_code == 2
    assert "error: no image recipe 'pytset'" in result.stderr and "did you mean 'pytest'" in result.stderr
    assert "Traceback" not in result.output


@pytest.mark.slow
def test_an_sdist_whose_setup_py_needs_pkg_resources_is_downloaded(tmp_path: Path) -> None:
    """astropy-helpers 3.2.1 (astropy 3.1's build helper; real PyPI): its setup.py imports pkg_resources,
    which the host's setuptools may no longer have; the download retries with an older build setuptools."""
    imagebuild.download_sources(["astropy-helpers==3.2.1"], tmp_path)
    assert [p.name for p in tmp_path.iterdir()] == ["astropy-helpers-3.2.1.tar.gz"]
