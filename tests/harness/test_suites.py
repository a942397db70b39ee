"""Env images on the base image of another Debian suite (real docker): the toy repository with a spec saying
``python = "3.9"`` builds FROM ``envfarm/base-bullseye`` and its gold patch resolves through the harness.

Cost: cold, this builds the bullseye base (debootstrap + docker import, ~1.5 min once on this machine) and a
small env image (pytest 8.4 and setuptools for Python 3.9 from the wheelhouse, ~20 s); both are cached by
content hash like every image, so later sessions find them and the test takes a few seconds.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from envfarm.harness import HarnessConfig, Prediction, ResolutionStatus, SpecCatalog, evaluate
from envfarm.harness.images import build_env
from envfarm.harness.instances import instance_from_row
from envfarm.sandbox import dockerutil
from envfarm.testing.toyrepo import KEY, PATCHES, row, write_spec

pytestmark = [pytest.mark.docker, pytest.mark.slow]


def test_a_python_39_spec_builds_on_bullseye_and_its_gold_resolves(
    toy: tuple[Path, str, Path], tmp_path: Path
) -> None:
    source, base, _ = toy
    specs = tmp_path / "specs"
    write_spec(specs, python="3.9")
    env = SpecCatalog([specs]).env("envfarm-tests/calc", "0.1")
    assert (env.suite, env.python) == ("bullseye", "3.9")
    image, _ = build_env(env)
    found = dockerutil.get_image(image.tag)
    assert found is not None and found.labels["envfarm.harness.suite"] == "bullseye"
    out = dockerutil.client().containers.run(
        image.tag,
        ["python", "-c", "import sys, pip; print(sys.version_info[:2], pip.__version__)"],
        network_mode="none",
        remove=True,
    )
    assert out.decode().strip() == "(3, 9) 24.3.1", "bullseye's Python with the base's env_packages pip"

    inst = instance_from_row(row(f"{KEY}-bullseye", base))
    config = HarnessConfig(
        run_id="b1", report_dir=tmp_path / "reports", repo_source=source, specs=(specs,), timeout_s=120
    )
    preds = {inst.instance_id: Prediction(inst.instance_id, "toy/model", PATCHES["gold"])}
    report = asyncio.run(evaluate([inst], preds, config)).reports[inst.instance_id]
    assert report.resolved and report.status is ResolutionStatus.FULL, report
