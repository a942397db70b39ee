"""Disk per (repo, version) from the harness's images (``envfarm images list|prune --harness``)."""

from __future__ import annotations

import asyncio
import subprocess
import uuid
from pathlib import Path

import pytest
from typer.testing import CliRunner

from envfarm.cli import app as root
from envfarm.harness import Instance, SpecCatalog
from envfarm.harness.disk import PULLED_LABEL, EnvDisk, HarnessImage, _version_of, by_env, list_images
from envfarm.harness.images import KIND_LABEL, ImageBuilder
from envfarm.harness.instances import instance_from_row
from envfarm.sandbox import dockerutil
from envfarm.testing.toyrepo import row

MB = 1_000_000


def _image(tag: str, kind: str, repo: str, version: str, own: int, image_id: str = "") -> HarnessImage:
    return HarnessImage(tag, kind, tag, own * 3, own * MB, "", repo, version, image_id or tag)


def _toy(base: str) -> Instance:
    return instance_from_row(row("envfarm-tests__calc-1", base))


def test_by_env_sums_env_and_instance_layers_and_counts_each_image_once() -> None:
    found = [
        _image("envfarm/sweb.env.psf__requests.2.3:a", "env", "psf/requests", "2.3", 78),
        _image("envfarm/sweb.eval.psf__requests-1963:b", "instance", "psf/requests", "2.3", 6),
        _image("envfarm/sweb.eval.psf__requests-2148:c", "instance", "psf/requests", "2.3", 7, "same"),
        _image("127.0.0.1:5000/x/requests-2148:latest", "instance", "psf/requests", "2.3", 7, "same"),
        _image("envfarm/sweb.pulled.psf__requests-2317:d", "instance", "psf/requests", "2.4", 1),
        _image(
            "swebench/sweb.eval.x86_64.psf_1776_requests-2317:latest", "pulled", "psf/requests", "2.4", 900
        ),
        _image("envfarm/sweb.env.pallets__flask.2.3:e", "env", "pallets/flask", "2.3", 10),
    ]
    rows = {(r.repo, r.version): r for r in by_env(found)}
    assert rows[("psf/requests", "2.3")] == EnvDisk("psf/requests", "2.3", 1, 78 * MB, 2, 13 * MB)
    assert rows[("psf/requests", "2.4")] == EnvDisk("psf/requests", "2.4", 0, 0, 1, 901 * MB)
    assert rows[("pallets/flask", "2.3")].total_bytes == 10 * MB
    assert [r.version for r in by_env(found)] == ["2.4", "2.3", "2.3"], "largest first"


def test_version_from_an_env_tag() -> None:
    assert _version_of("envfarm/sweb.env.psf__requests.2.10:abc", "psf/requests") == "2.10"
    assert _version_of("elsewhere/x:1", "psf/requests") == "?"


def test_prune_refuses_a_bad_repo_name() -> None:
    result = CliRunner().invoke(root, ["images", "prune", "--harness", "--repo", "flask"])
    lines = [line for line in result.output.splitlines() if line.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert lines[0].startswith("error: --repo 'flask': write owner/name")


@pytest.mark.docker
def test_list_and_prune_one_repo_keep_env_images_by_default(
    toy: tuple[Path, str, Path], tmp_path: Path
) -> None:
    """A pulled image under an adapter layer and an env image of a throwaway repo: listed under their
    (repo, version); prune --repo removes the adapter and the pulled image and keeps the env image unless
    --all (no other repo's image is touched)."""
    source, base, specs = toy
    env = asyncio.run(ImageBuilder(source).env(SpecCatalog((specs,)).plan(_toy(base)).env))
    suffix = uuid.uuid4().hex[:8]
    raw, adapter = f"envfarm-test/pulled-raw:{suffix}", f"envfarm/sweb.pulled.envfarm-tests__prune-1:{suffix}"
    env_tag = f"envfarm/sweb.env.envfarm-tests__prune.9.9:{suffix}"
    common = {"envfarm.harness.repo": "envfarm-tests/prune", "envfarm.harness.version": "9.9"}
    layers = [
        (raw, "scratch", {"envfarm.test": "1"}),  # a pulled image carries none of envfarm's labels
        (
            adapter,
            raw,
            {KIND_LABEL: "instance", PULLED_LABEL: raw, "envfarm.harness.instance": "x-1", **common},
        ),
        (env_tag, env.tag, {KIND_LABEL: "env", **common}),
    ]
    try:
        for tag, parent, labels in layers:
            (tmp_path / "Dockerfile").write_text(f"FROM {parent}\nCOPY Dockerfile /{suffix}\n")
            dockerutil.client().images.build(
                path=str(tmp_path), tag=tag, labels=labels, network_mode="none", rm=True, forcerm=True
            )
        mine = [i for i in list_images() if i.repo == "envfarm-tests/prune"]
        assert {(i.kind, i.tag) for i in mine} == {("instance", adapter), ("pulled", raw), ("env", env_tag)}
        row = next(r for r in by_env(mine) if r.version == "9.9")
        assert (row.env_images, row.instance_images) == (1, 1)
        pruned = CliRunner().invoke(root, ["images", "prune", "--harness", "--repo", "envfarm-tests/prune"])
        assert pruned.exit_code == 0, pruned.output
        assert f"removed {adapter}" in pruned.output and f"removed {raw}" in pruned.output
        assert dockerutil.get_image(env_tag) is not None and dockerutil.get_image(env.tag) is not None
        pruned = CliRunner().invoke(
            root, ["images", "prune", "--harness", "--repo", "envfarm-tests/prune", "--all"]
        )
        assert pruned.exit_code == 0 and f"removed {env_tag}" in pruned.output, pruned.output
        assert dockerutil.get_image(env.tag) is not None, "another repo's env image is kept"
    finally:
        for tag, _, _ in layers:
            subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)
