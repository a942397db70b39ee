"""Harbor task images built for real (docker daemon + the base image, `make setup`): one tiny task, apt +
pip + COPY + WORKDIR + ENV, run on both isolated backends; translation errors raise before any build."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from envfarm.errors import HarborImageError
from envfarm.sandbox import Backend
from envfarm.sandbox.dockerfile import translate
from envfarm.sandbox.harbor_image import (
    NO_PACKAGE,
    SEED_DIR,
    TaskImage,
    discard,
    ensure_pip_layer,
    ensure_task_image,
    missing_packages,
    render,
    render_pip_layer,
    render_seed_layer,
    requirements,
    seed_command,
    shared_steps,
    wheelhouses,
    writable_dirs,
)

DOCKERFILE = """\
FROM python:3.11-slim
ARG GREETING=hi
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends jq && rm -rf /var/lib/apt/lists/*
WORKDIR /app
RUN pip install --no-cache-dir --retries 3 six==1.16.0
COPY data/hello.txt /app/data/hello.txt
ENV MY_VAR=${GREETING}-there
RUN python3 -c "import six" && echo built > /app/built.txt
"""


def _task(root: Path, dockerfile: str, toml: str = "[environment]\ncpus = 1\n") -> Path:
    task = root / "tiny-harbor-task"
    (task / "environment" / "data").mkdir(parents=True)
    (task / "task.toml").write_text(toml)
    (task / "environment" / "data" / "hello.txt").write_text("hello\n")
    (task / "environment" / "Dockerfile").write_text(dockerfile)
    return task


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, TaskImage]:
    task = _task(tmp_path_factory.mktemp("harbor"), DOCKERFILE)
    return task, ensure_task_image(task)


@pytest.mark.docker
def test_task_image_fields_and_cache_hit(built: tuple[Path, TaskImage]) -> None:
    task, image = built
    assert image.tag.startswith("envfarm/harbor-tiny-harbor-task:")
    assert (image.python, image.suite, image.workdir, image.user) == ("3.11", "bookworm", "/app", None)
    assert dict(image.env) == {"DEBIAN_FRONTEND": "noninteractive", "MY_VAR": "hi-there"}
    assert image.reasons == ()
    start = time.monotonic()
    again = ensure_task_image(task)
    assert time.monotonic() - start < 1.0
    assert (again.tag, again.image_id, again.built) == (image.tag, image.image_id, False)


@pytest.mark.docker
async def test_task_image_runs_on_both_backends(
    built: tuple[Path, TaskImage], isolated_backend: Backend
) -> None:
    _, image = built
    script = ("jq --version && python3 -c 'import six' && cat /app/data/hello.txt /app/built.txt "
              "&& id -u && test -d /workspace && python -c 'print(1)' && echo $MY_VAR "
              "&& echo mine > /app/new.txt && cd /app && cat new.txt")
    async with isolated_backend.open(image=image.tag) as sb:
        # the task's folders come from the image's seed (what the Harbor env's setup runs)
        assert (await sb.exec(["bash", "-c", seed_command()], timeout_s=60)).exit_code == 0
        # bwrap starts from a clear environment: the caller passes the image's ENV (TaskImage.env)
        res = await sb.exec(["bash", "-c", script], timeout_s=60, env=dict(image.env))
    assert res.exit_code == 0, res.stderr
    assert res.stdout.split() == ["jq-1.6", "hello", "built", "1000", "1", "hi-there", "mine"]
    async with isolated_backend.open(image=image.tag) as sb:  # the write went to that sandbox alone
        await sb.exec(["bash", "-c", seed_command()], timeout_s=60)
        res = await sb.exec(["bash", "-c", "ls /app; test ! -e /app/new.txt"], timeout_s=60)
    assert res.exit_code == 0 and "built.txt" in res.stdout, res.stdout + res.stderr


# ---------------------------------------------------------------------------------------- shared pip layer

TEMPLATE = """\
FROM python:3.11-slim
ENV DEBIAN_FRONTEND=noninteractive
WORKDIR /srv/tool
USER nobody
RUN pip install --no-cache-dir six==1.16.0 ./vendored
USER root
COPY data/hello.txt /app/data/hello.txt
RUN pip install iniconfig==2.0.0
WORKDIR /app
"""


def test_the_pip_layer_holds_the_steps_through_the_first_pip_install_and_the_task_goes_on_from_it() -> None:
    t = translate(TEMPLATE)
    skip = shared_steps(t)
    assert [s.kind for s in t.steps[:skip]] == ["env", "workdir", "user", "pip"]
    layer = render_pip_layer(t, skip).splitlines()
    assert layer[:6] == ["ARG BASE", "FROM ${BASE}", "USER root", "WORKDIR /",
                         "ENV PIP_BREAK_SYSTEM_PACKAGES=1", "COPY wheelhouse /tmp/envfarm-wheelhouse"]
    assert any("pip install" in line and "six==1.16.0 ./vendored" in line for line in layer)
    assert layer[-4:] == ["USER root", "RUN rm -rf /tmp/envfarm-wheelhouse", "USER nobody",
                          "WORKDIR /srv/tool"]
    task = render(t, skip=skip).splitlines()
    assert task[:3] == ["ARG BASE", "FROM ${BASE}", "COPY wheelhouse /tmp/envfarm-wheelhouse"]
    assert "six==1.16.0" not in "\n".join(task) and any("iniconfig==2.0.0" in line for line in task)
    assert requirements(t.steps[:skip]) == ("six==1.16.0", "setuptools", "wheel")
    assert requirements(t.steps[skip:]) == ("iniconfig==2.0.0",)
    assert requirements(t.steps) == t.pip_requirements  # every step: the whole task's wheelhouse
    assert render(t, skip=0) == render(t)  # a task without a pip layer renders as it always did
    assert len(set(wheelhouses(t))) == 2  # the pip layer's and the task's own, each named by its lines
    assert wheelhouses(translate("FROM python:3.11-slim\nWORKDIR /app\n")) == ()


def test_a_pip_install_after_the_tasks_files_gets_no_shared_layer() -> None:
    """A step before the first pip install that reads the task's files (COPY/ADD) would tie the layer to
    one task: the whole Dockerfile stays in the task's layer."""
    t = translate("FROM python:3.11-slim\nCOPY req.txt /r.txt\nRUN pip install six==1.16.0\n")
    assert shared_steps(t) == 0
    assert shared_steps(translate("FROM python:3.11-slim\nWORKDIR /app\n")) == 0  # no pip step
    assert render(t, skip=0).splitlines()[2:4] == ["USER root", "WORKDIR /"]


@pytest.mark.docker
def test_tasks_of_one_template_share_one_pip_layer_and_keep_their_own_files(tmp_path: Path) -> None:
    """Two tasks that differ only in their files: one pip layer, built once; each image has its own file,
    the template's package, user and folder."""
    import uuid

    from envfarm.sandbox import dockerutil

    mark = uuid.uuid4().hex[:8]  # a fresh layer: this test builds it, the second task finds it
    text = (f"FROM python:3.11-slim\nENV MARK={mark}\nWORKDIR /opt/lib\nRUN pip install six==1.16.0\n"
            "COPY data/hello.txt /app/data/hello.txt\nWORKDIR /app\nUSER agent\n")
    heard: list[tuple[str, str]] = []
    made = []
    for name in ("one", "two"):
        task = _task(tmp_path / name, text)
        (task / "environment" / "data" / "hello.txt").write_text(f"{name}\n")
        made.append(ensure_task_image(task, on_layer=lambda kind, tag: heard.append((kind, tag))))
    one, two = made
    assert one.pip_layer and one.pip_layer == two.pip_layer and one.tag != two.tag
    assert heard == [("apt", one.apt_layer), ("pip", one.pip_layer)] * 2
    layer = dockerutil.get_image(one.pip_layer)
    assert layer is not None and layer.labels["envfarm.harbor"] == "pip"
    assert layer.attrs["Config"]["WorkingDir"] == "/opt/lib"
    for image, name in ((one, "one"), (two, "two")):
        cfg = dockerutil.client().images.get(image.image_id).attrs["Config"]
        assert (cfg["WorkingDir"], cfg["User"]) == ("/app", "agent")
        script = f"python3 -c 'import six' && cat {SEED_DIR}/app/data/hello.txt && id -un"
        out = dockerutil.client().containers.run(image.image_id, ["sh", "-c", script], working_dir="/",
                                                 network_mode="none", remove=True)
        assert out.decode().split() == [name, "agent"]
    t = translate(text)
    base_hash = layer.labels["envfarm.base_hash"]
    again = ensure_pip_layer(one.apt_layer, base_hash, t, shared_steps(t))
    assert again == one.pip_layer and dockerutil.get_image(again).id == layer.id  # found, not rebuilt
    forced = ensure_task_image(tmp_path / "two" / "tiny-harbor-task", force=True)  # a cold build: both
    assert forced.pip_layer == one.pip_layer and dockerutil.get_image(forced.pip_layer).id != layer.id
    assert forced.image_id != two.image_id
    for ref in (one.tag, two.tag, two.image_id, one.pip_layer, layer.id):
        discard(ref)
    assert dockerutil.get_image(one.pip_layer) is None


@pytest.mark.docker
def test_a_task_whose_own_paths_are_all_files_builds(tmp_path: Path) -> None:
    """``COPY shader.vert /shader.vert`` and nothing else of the task's own: no folder moves to the seed,
    which still exists (the layer's ``chmod`` of it failed the build), and the file stays where it was."""
    from envfarm.sandbox import dockerutil

    task = _task(tmp_path / "files", "FROM python:3.11-slim\nCOPY shader.vert /shader.vert\nWORKDIR /\n")
    (task / "environment" / "shader.vert").write_text("void main() {}\n")
    image = ensure_task_image(task)
    try:
        script = f"cat /shader.vert; ls -A {SEED_DIR}"
        out = dockerutil.client().containers.run(image.image_id, ["sh", "-c", script], network_mode="none",
                                                 remove=True)
        assert out.decode() == "void main() {}\n"
    finally:
        discard(image.tag)


def test_writable_dirs_are_the_tasks_own_folders() -> None:
    t = translate("FROM python:3.12-slim\nWORKDIR /app\nCOPY data /srv/data/\nCOPY x.sh /run.sh\n"
                  "RUN mkdir -p /home/agent2 /tmp/x /var/cache/y && mkdir /results\n"
                  "COPY cfg /etc/tool/cfg\nWORKDIR /workspace/sub\n")
    assert writable_dirs(t) == ("/app", "/home/agent2", "/results", "/run.sh", "/srv")
    assert f"mv \"$d\" \"{SEED_DIR}$d\"" in render(t)


def test_a_prebuilt_images_workspace_and_workdir_move_to_the_seed() -> None:
    """The layer on a prebuilt ``docker_image``: /workspace's entries and the WORKDIR's top folder go to
    the seed (a symlink such as an exported task's /testbed -> /workspace/testbed stays where it is)."""
    text = render_seed_layer("/testbed", "agent")
    lines = text.splitlines()
    assert lines[:4] == ["ARG BASE", "FROM ${BASE}", "USER root", "WORKDIR /"]
    assert f'mv "$e" {SEED_DIR}/' in lines[4] and "/workspace/*" in lines[4]
    assert "for d in /testbed;" in lines[5] and 'if [ -L "$d" ]' in lines[5]
    assert lines[-2:] == ["USER agent", "WORKDIR /testbed"]
    assert "for d in" not in render_seed_layer("/workspace/testbed", None)  # under /workspace: moved above
    assert render_seed_layer("/usr/src", None).splitlines()[-1] == "WORKDIR /usr/src"


def test_needs_network_raises_before_building(tmp_path: Path) -> None:
    task = _task(tmp_path, "FROM python:3.12-slim\nRUN curl -LsSf https://example.com/x.sh | sh\n")
    with pytest.raises(HarborImageError) as info:
        ensure_task_image(task)
    assert info.value.reason == "needs-network"
    assert info.value.detail.startswith("line 2:")


def test_unsupported_base_raises(tmp_path: Path) -> None:
    task = _task(tmp_path, "FROM node:20\nRUN echo hi\n")
    with pytest.raises(HarborImageError) as info:
        ensure_task_image(task)
    assert info.value.reason == "unsupported-base"
    assert info.value.reasons[0][0] == "unsupported-base"


def test_apt_names_the_packages_debian_lacks() -> None:
    output = ("Reading package lists...\nE: Unable to locate package openjdk-21-jdk\n"
              "E: Package 'radare2' has no installation candidate\n"
              "E: Regex compilation error - Unmatched ( or \\(\n"
              "E: Couldn't find any package by regex 'linux-headers-$(uname'\n"
              "E: Unable to locate package openjdk-21-jdk\n")
    assert missing_packages(output) == ["openjdk-21-jdk", "radare2", "linux-headers-$(uname"]
    assert missing_packages("E: Sub-process /usr/bin/dpkg returned an error code (1)\n") == []


@pytest.mark.docker
def test_apt_failure_is_build_failed(tmp_path: Path) -> None:
    task = _task(tmp_path, "FROM debian:bookworm\nRUN apt-get install -y no-such-package-envfarm\n")
    with pytest.raises(HarborImageError) as info:
        ensure_task_image(task)
    assert info.value.reason == "build-failed"
    assert f"{NO_PACKAGE} no-such-package-envfarm" in info.value.detail
