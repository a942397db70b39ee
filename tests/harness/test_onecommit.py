"""The one-commit property of every instance image the harness and CodeRepair build (harness/onecommit.py):
one commit object; no later commits, tags, stash, packed refs or reflog entries; no copy of the fix."""

from __future__ import annotations

import asyncio
import io
import tarfile
from pathlib import Path

import pytest

from envfarm.harness.images import PRISTINE, ImageBuilder
from envfarm.harness.instances import Instance, instance_from_row
from envfarm.harness.onecommit import ImageHistory, inspect_image, needles
from envfarm.harness.specs import SpecCatalog
from envfarm.testing.toyrepo import PATCHES, row


def test_needles_are_long_added_lines_the_base_does_not_have() -> None:
    patch = (
        "diff --git a/m.py b/m.py\n--- a/m.py\n+++ b/m.py\n@@ -1,2 +1,3 @@\n def f(a, b):\n"
        "-    return a + b  # old and long enough\n+    return a + b  # old and long enough\n"
        "+    return a * b + 1  # the distinctive fix\n+x = 1\n"
    )
    assert needles(patch) == ("return a * b + 1  # the distinctive fix",)


def test_problems_name_each_leak() -> None:
    sound = ImageHistory("t", 1, 0, ("refs/heads/envfarm",), 0, 0, 0, 0, ())
    assert sound.problems == ()
    leaky = ImageHistory("t", 3, 2, ("refs/heads/envfarm", "refs/tags/v1"), 1, 1, 1, 2, ("/tmp/fix",))
    text = "; ".join(leaky.problems)
    for word in (
        "3 commit objects",
        "unreachable",
        "refs/tags/v1",
        "tags",
        "stash",
        "packed refs",
        "reflog",
        "/tmp/fix",
    ):
        assert word in text


def _toy_image(toy: tuple[Path, str, Path]) -> tuple[str, Instance]:
    source, base, specs = toy
    inst = instance_from_row(row("envfarm-tests__calc-gold", base))
    plan = SpecCatalog([specs]).plan(inst)
    return asyncio.run(ImageBuilder(source).instance(plan)).tag, inst


@pytest.mark.docker
@pytest.mark.slow
def test_harness_instance_image_holds_one_commit_and_no_fix(toy: tuple[Path, str, Path]) -> None:
    tag, inst = _toy_image(toy)
    history = inspect_image(tag, inst)
    assert history.problems == () and history.commits == 1 and len(history.refs) == 1, history


@pytest.mark.docker
@pytest.mark.slow
def test_the_check_finds_a_later_commit_a_tag_a_stash_and_a_copy_of_the_fix(
    toy: tuple[Path, str, Path],
) -> None:
    from envfarm.sandbox import dockerutil

    tag, inst = _toy_image(toy)
    line = needles(PATCHES["gold"])[0]
    ident = "-c user.name=x -c user.email=x@localhost -c safe.directory='*'"
    dockerfile = (
        f"FROM {tag}\nRUN cd {PRISTINE} && git {ident} commit -q --allow-empty -m later "
        f"&& git {ident} tag v1 "
        f"&& echo stash >> README.md && git {ident} stash -q "
        f"&& printf '%s\\n' {_sh(line)} > /tmp/fix.txt\n"
    )
    leaky = "envfarm/onecommit-leaky:test"
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = tarfile.TarInfo("Dockerfile")
        info.size = len(dockerfile.encode())
        tar.addfile(info, io.BytesIO(dockerfile.encode()))
    buf.seek(0)
    client = dockerutil.client()
    client.images.build(fileobj=buf, custom_context=True, tag=leaky, network_mode="none", rm=True)
    try:
        problems = "; ".join(inspect_image(leaky, inst).problems)
    finally:
        client.images.remove(leaky, force=True)
    for word in ("commit objects", "1 tags", "stash", "/tmp/fix.txt"):
        assert word in problems, problems


def _sh(text: str) -> str:
    import shlex

    return shlex.quote(text)


@pytest.mark.docker
@pytest.mark.slow
def test_code_repair_builtin_task_images_hold_one_commit_and_no_fix() -> None:
    from envfarm.envs.code_repair.env import builtin_instances

    instances, repos = builtin_instances()
    chosen = instances[:2]
    builder = ImageBuilder(repos, max_workers=1)
    catalog = SpecCatalog(())

    async def build() -> list[str]:
        return [(await builder.instance(catalog.plan(i))).tag for i in chosen]

    for tag, inst in zip(asyncio.run(build()), chosen, strict=True):
        history = inspect_image(tag, inst)
        assert history.problems == () and history.commits == 1, (inst.instance_id, history)
