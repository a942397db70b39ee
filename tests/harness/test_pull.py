"""``--image-source pull|auto`` against Debian's ``docker-registry`` on 127.0.0.1, holding images built and
pushed here: envfarm's own layout and one shaped like SWE-bench's official images (repo at /testbed with its
history, SWE-bench's empty commit on top)."""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from servers import registry

from envfarm import config
from envfarm.errors import ConfigError, ImageError, ImageMismatch, ImagePullError
from envfarm.harness import HarnessConfig, SpecCatalog, evaluate, load_predictions
from envfarm.harness.config import ImageSource
from envfarm.harness.grading import ErrorKind
from envfarm.harness.images import PRISTINE, ImageBuilder
from envfarm.harness.instances import Instance, instance_from_row
from envfarm.harness.pull import official_name, pull_instance, pull_ref
from envfarm.harness.specs import Plan
from envfarm.sandbox import dockerutil
from envfarm.testing.toyrepo import KEY, git, row


def _inst(iid: str, base: str, image: str = "") -> Instance:
    return instance_from_row({**row(iid, base), "image": image})


def test_pull_names() -> None:
    inst = _inst("psf__requests-2317", "a" * 40)
    assert official_name(inst.instance_id) == "swebench/sweb.eval.x86_64.psf_1776_requests-2317:latest"
    assert pull_ref(inst, None) == "swebench/sweb.eval.x86_64.psf_1776_requests-2317:latest"
    assert pull_ref(inst, "127.0.0.1:5000") == f"127.0.0.1:5000/{official_name(inst.instance_id)}"
    mirrored = _inst("o__r-1", "a" * 40, image="ghcr.io/org/img:v1")
    assert pull_ref(mirrored, None) == "ghcr.io/org/img:v1"
    assert pull_ref(mirrored, "127.0.0.1:5000/ns") == "127.0.0.1:5000/ns/org/img:v1"
    with pytest.raises(ValueError, match="only read by --image-source pull or auto"):
        HarnessConfig(run_id="r", registry="127.0.0.1:5000")
    with pytest.raises(ValueError, match="is not a registry prefix"):
        HarnessConfig(run_id="r", image_source=ImageSource.PULL, registry="not a registry")
    assert issubclass(ImagePullError, ImageError) and not issubclass(ConfigError, ImagePullError)


def _push(tag: str, ref: str) -> None:
    dockerutil.client().images.get(tag).tag(ref)
    out = subprocess.run(["docker", "push", ref], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    subprocess.run(["docker", "rmi", ref], capture_output=True, check=True)  # the next use must pull it


def _plan(inst: Instance, specs: Path) -> Plan:
    return SpecCatalog((specs,)).plan(inst)


@pytest.fixture(scope="module")
def reg() -> Iterator[str]:
    """One registry on 127.0.0.1 for the module, its storage kept under $ENVFARM_HOME: a push sends only the
    layers it does not hold yet (the toy env's ~300 MB once per machine, then kilobytes)."""
    with registry(config.home() / "test-registry") as address:
        yield address


@pytest.fixture
def cleanup() -> Iterator[list[str]]:
    tags: list[str] = []
    try:
        yield tags
    finally:
        for tag in tags:
            subprocess.run(["docker", "rmi", "-f", tag], capture_output=True)


@pytest.mark.docker
def test_pull_checks_and_falls_back(
    toy: tuple[Path, str, Path], tmp_path: Path, cleanup: list[str], reg: str
) -> None:
    source, base, specs = toy
    future = git(source / KEY, "rev-parse", "HEAD")
    gold = _inst("envfarm-tests__calc-1", base)
    built = asyncio.run(ImageBuilder(source).instance(_plan(gold, specs)))  # cached across sessions
    ref = pull_ref(gold, reg)
    wrong = _inst("envfarm-tests__calc-2", future)  # its name, the calc-1 image (another commit)
    cleanup.extend([ref, pull_ref(wrong, reg)])
    _push(built.tag, ref)
    _push(built.tag, pull_ref(wrong, reg))

    cfg = HarnessConfig(
        run_id="pull", report_dir=tmp_path / "out", specs=(specs,), image_source=ImageSource.PULL,
        registry=reg, timeout_s=120,
    )  # fmt: skip
    run = asyncio.run(evaluate([gold], load_predictions("gold", [gold]), cfg))
    report = run.reports[gold.instance_id]
    assert report.resolved, report
    assert report.extra["image"] == ref and dockerutil.get_image(ref) is not None

    mismatch = rf"not an image of envfarm-tests__calc-2 .*envfarm snapshot of {base}"
    with pytest.raises(ImageMismatch, match=mismatch):
        pull_instance(_plan(wrong, specs), reg, None)
    missing = _inst("envfarm-tests__calc-1", base, image=f"envfarm-test/never-pushed:{uuid.uuid4().hex[:8]}")
    with pytest.raises(ImagePullError, match=rf"pulling {reg}/envfarm-test/never-pushed:.* not found"):
        pull_instance(_plan(missing, specs), reg, None)
    failed = asyncio.run(
        evaluate([missing], load_predictions("gold", [missing]), cfg.model_copy(update={"run_id": "m"}))
    )
    report = failed.reports[missing.instance_id]
    assert report.error_kind is ErrorKind.BUILD and report.attempts == 2, report
    assert (report.error or "").startswith("image pull failed: ") and "never-pushed" in (report.error or "")
    # auto: an image the registry does not have is built instead (here the build is the cached one)
    auto = ImageBuilder(source, image_source=ImageSource.AUTO, registry=reg)
    assert asyncio.run(auto.instance(_plan(missing, specs))).tag == built.tag


_OFFICIAL_DOCKERFILE = """\
FROM {env}
COPY testbed /testbed
RUN python -m pip install --no-deps --no-build-isolation -e /testbed \\
    && mkdir -p /opt/miniconda3/envs/testbed/bin \\
    && mv "$(command -v pytest)" /opt/miniconda3/envs/testbed/bin/
"""


@pytest.mark.docker
def test_an_official_layout_image_is_checked_and_adapted(
    toy: tuple[Path, str, Path], tmp_path: Path, cleanup: list[str], reg: str
) -> None:
    """An image shaped like SWE-bench's (full history at /testbed, a tag on a later commit, SWE-bench's empty
    commit on the base, pytest only in the conda env's bin): pulled, checked, adapted to a one-commit
    snapshot; gold resolves in it (so the test command found pytest through the adapter's env.sh)."""
    source, base, specs = toy
    gold = _inst("envfarm-tests__calc-1", base)
    env = asyncio.run(ImageBuilder(source).env(_plan(gold, specs).env))
    ctx = tmp_path / "ctx"
    subprocess.run(["git", "clone", "-q", str(source / KEY), str(ctx / "testbed")], check=True)
    testbed = ctx / "testbed"
    git(testbed, "tag", "v-future", "HEAD")  # what SWE-bench's images leak: later history
    git(testbed, "reset", "-q", "--hard", base)
    git(testbed, "commit", "-q", "--allow-empty", "-m", "SWE-bench")
    (ctx / "Dockerfile").write_text(_OFFICIAL_DOCKERFILE.format(env=env.tag))
    local = f"envfarm-test/official-like:2-{env.hash}-{base[:12]}"  # kept, like the toy's images
    if dockerutil.get_image(local) is None:
        dockerutil.client().images.build(path=str(ctx), tag=local, network_mode="none", rm=True, forcerm=True)
    official = _inst("envfarm-tests__calc-1", base, image=official_name("envfarm-tests__calc-1"))
    ref = pull_ref(official, reg)
    cleanup.append(ref)
    _push(local, ref)
    image = pull_instance(_plan(official, specs), reg, None)
    cleanup.append(image.tag)
    assert image.tag.startswith("envfarm/sweb.pulled.envfarm-tests__calc-1:") and image.repo_bytes > 0
    listing = dockerutil.client().containers.run(
        image.tag, ["bash", "-c", f"git -c safe.directory='*' -C {PRISTINE} rev-list --all; "
                    f"git -c safe.directory='*' -C {PRISTINE} tag; ls -ld /testbed"],
        network_mode="none", remove=True,
    ).decode()  # fmt: skip
    assert len(listing.split("\n")[0]) == 40 and "v-future" not in listing, listing
    assert "/testbed -> /workspace/testbed" in listing
    cfg = HarnessConfig(
        run_id="official", report_dir=tmp_path / "out", specs=(specs,), image_source=ImageSource.PULL,
        registry=reg, timeout_s=120,
    )  # fmt: skip
    run = asyncio.run(evaluate([official], load_predictions("gold", [official]), cfg))
    assert run.reports[official.instance_id].resolved, run.reports[official.instance_id]
    bad = _inst("envfarm-tests__calc-1", "1" * 40, image=official.image)
    with pytest.raises(ImageMismatch, match=r"/testbed is at [0-9a-f]{40} \(parent " + base):
        pull_instance(_plan(bad, specs), reg, None)
    shutil.rmtree(ctx, ignore_errors=True)
