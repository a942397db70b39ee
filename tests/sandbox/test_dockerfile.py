"""Translating Harbor task Dockerfiles for the offline builder: parsing only, no docker."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from envfarm.sandbox.dockerfile import (
    BUILD_FAILED,
    NEEDS_NETWORK,
    UNSUPPORTED_BASE,
    instructions,
    map_base,
    translate,
    translate_file,
)
from envfarm.sandbox.dockerfile_run import split_commands
from envfarm.sandbox.harbor_image import render

# modelled on the python:3.12-slim tasks of a Harbor dataset
PYTHON_SLIM = """\
# canary comment
FROM python:3.12-slim
ENV DEBIAN_FRONTEND=noninteractive
RUN apt-get update && apt-get install -y --no-install-recommends ca-certificates \\
    && rm -rf /var/lib/apt/lists/*
WORKDIR /app
RUN pip install --no-cache-dir --retries 3 \\
      pytest==8.4.1 \\
      pytest-json-ctrf==0.3.5
RUN mkdir -p /app/data
COPY data/scene.udel /app/data/scene.udel
"""

# modelled on the t-bench ubuntu-24-04 tasks
TBENCH_UBUNTU = """\
FROM ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624

ENV DEBIAN_FRONTEND=noninteractive

# Install python3-pip and create python symlink
RUN apt-get update && \\
    apt-get install -y python3-pip && \\
    ln -s /usr/bin/python3 /usr/bin/python && \\
    rm -rf /var/lib/apt/lists/*

RUN pip3 install --no-cache-dir --break-system-packages pytest==8.4.1 pandas==2.3.2 scipy==1.16.1

RUN apt-get update && \\
    apt-get install -y \\
    build-essential \\
    # a comment inside the continuation
    cmake \\
    && rm -rf /var/lib/apt/lists/*

COPY opt/src/main.cpp /opt/src/main.cpp
WORKDIR /opt/src
ENV TEST_DIR=/tests
"""

# modelled on the golang task: pinned apt versions, the uv installer, useradd of the sandbox user, USER
GOLANG = """\
FROM golang:1.22.7-bookworm
RUN apt-get update && apt-get install -y --no-install-recommends \\
        git=1:2.39.5-0+deb12u2 \\
        python3=3.11.2-1+b1 \\
        curl \\
    && rm -rf /var/lib/apt/lists/*
RUN curl -LsSf https://astral.sh/uv/0.5.11/install.sh | sh
ENV PATH="/root/.local/bin:${PATH}"
RUN useradd -m -s /bin/bash -u 1000 agent
WORKDIR /app
COPY flake-rate.go /tmp/flake-rate.go
RUN cd /tmp && go build -o /usr/local/bin/flake-rate flake-rate.go
WORKDIR repo
USER agent
"""

TEMURIN = """\
FROM eclipse-temurin:17.0.12_7-jdk-jammy
RUN apt-get update && apt-get install -y --no-install-recommends curl unzip python3 python3-pip
ENV KOTLIN_VERSION=1.9.22
RUN curl -fsSL https://github.com/JetBrains/kotlin/releases/download/v${KOTLIN_VERSION}/k.zip -o /tmp/k.zip \\
    && unzip -q /tmp/k.zip -d /opt
"""


def test_python_slim_task() -> None:
    t = translate(PYTHON_SLIM)
    assert t.buildable, t.reasons
    assert (t.base.suite, t.base.python) == ("bookworm", "3.11")
    assert "3.12" in t.base.note
    assert t.base.apt_packages == ("python-is-python3",)
    assert t.apt_packages == ("ca-certificates", "python-is-python3")  # python:* images have `python`
    assert t.pip_requirements == ("pytest==8.4.1", "pytest-json-ctrf==0.3.5")
    assert [s.kind for s in t.steps] == ["env", "workdir", "pip", "run", "copy"]
    assert t.steps[3].args == ("mkdir -p /app/data",)
    assert t.workdir == "/app" and t.user is None
    assert t.env == (("DEBIAN_FRONTEND", "noninteractive"),)


def test_tbench_ubuntu_task() -> None:
    t = translate(TBENCH_UBUNTU)
    assert t.buildable, t.reasons
    assert t.base.suite == "bookworm"
    assert t.apt_packages == ("build-essential", "cmake", "python3-pip")
    assert t.pip_requirements == ("pytest==8.4.1", "pandas==2.3.2", "scipy==1.16.1")
    runs = [s.args[0] for s in t.steps if s.kind == "run"]
    assert runs == ["ln -s /usr/bin/python3 /usr/bin/python"]
    assert t.workdir == "/opt/src"
    assert dict(t.env)["TEST_DIR"] == "/tests"


def test_golang_task() -> None:
    t = translate(GOLANG)
    assert t.buildable, t.reasons
    assert "golang-go" in t.apt_packages and "git" in t.apt_packages and "python3" in t.apt_packages
    assert any("pins dropped" in n for n in t.notes)
    assert t.pip_requirements == ("uv==0.5.11",)
    runs = [s.args[0] for s in t.steps if s.kind == "run"]
    assert any(r.startswith("{ id -u agent >/dev/null 2>&1 || useradd") for r in runs)
    assert t.workdir == "/app/repo" and t.user == "agent"


def test_temurin_download_needs_network() -> None:
    t = translate(TEMURIN)
    assert "openjdk-17-jdk-headless" in t.apt_packages
    assert [i.reason for i in t.issues] == [NEEDS_NETWORK]
    assert t.issues[0].line == 4 and "1.9.22" in t.issues[0].detail  # ENV substituted into the report
    reason, detail = t.reasons[0]
    assert reason == NEEDS_NETWORK and detail.startswith("line 4:")


@pytest.mark.parametrize(
    "run",
    [
        "git clone https://github.com/x/y /src",
        "wget -q http://example.com/a.tgz",
        "npm install -g typescript",
        "yarn add left-pad",
        "gem install rails",
        "cargo install ripgrep",
        "curl https://sh.rustup.rs -sSf | sh -s -- -y",
        "go install golang.org/x/tools/gopls@latest",
        "go get example.com/m",
        "conda install -y numpy",
        "pip install git+https://github.com/x/y.git",
        "pip install https://example.com/pkg-1.0.tar.gz",
        "pip install --index-url https://download.pytorch.org/whl/cpu torch",
        "add-apt-repository ppa:deadsnakes/ppa",
        "Rscript -e 'install.packages(\"jsonlite\")'",
        "cd /app && mvn -q package",
    ],
)
def test_network_needs_are_reported(run: str) -> None:
    t = translate(f"FROM python:3.11\nRUN {run}\n")
    assert [i.reason for i in t.issues] == [NEEDS_NETWORK], t.issues
    assert t.issues[0].line == 2


def test_add_url_needs_network() -> None:
    t = translate("FROM debian:bookworm\nADD https://example.com/x.tar.gz /opt/\n")
    assert t.reasons == ((NEEDS_NETWORK, "line 2: ADD of a URL: https://example.com/x.tar.gz"),)


@pytest.mark.parametrize(
    ("image", "suite", "python", "extra"),
    [
        ("python:3.9-slim-bullseye", "bullseye", "3.9", ("python-is-python3",)),
        ("python:3.11", "bookworm", "3.11", ("python-is-python3",)),
        ("python:3.12-slim-bookworm", "bookworm", "3.11", ("python-is-python3",)),
        ("python:3.13-slim", "trixie", "3.13", ("python-is-python3",)),
        ("debian:bullseye-slim", "bullseye", "3.9", ()),
        ("debian:12", "bookworm", "3.11", ()),
        ("debian:trixie", "trixie", "3.13", ()),
        ("ubuntu:24.04", "bookworm", "3.11", ()),
        ("ghcr.io/laude-institute/t-bench/ubuntu-24-04:20250624", "bookworm", "3.11", ()),
        ("ghcr.io/laude-institute/t-bench/python-3-13:20250620", "trixie", "3.13", ()),
        ("gcc:13.3.0-bookworm", "bookworm", "3.11", ("build-essential",)),
        ("golang:1.22.7-bookworm", "bookworm", "3.11", ("golang-go", "ca-certificates")),
        ("eclipse-temurin:17.0.12_7-jdk-jammy", "bookworm", "3.11", ("openjdk-17-jdk-headless",)),
    ],
)
def test_base_mapping(image: str, suite: str, python: str, extra: tuple[str, ...]) -> None:
    mapped = map_base(image)
    assert (mapped.suite, mapped.python, mapped.apt_packages) == (suite, python, extra)


@pytest.mark.parametrize("image", ["node:20", "alpine:3.19", "eclipse-temurin:21-jdk", "nvidia/cuda:12.1"])
def test_unsupported_base(image: str) -> None:
    t = translate(f"FROM {image}\nRUN echo hi\n")
    assert [i.reason for i in t.issues] == [UNSUPPORTED_BASE]
    assert image in t.issues[0].detail


def test_multi_stage_is_unsupported() -> None:
    t = translate("FROM golang:1.22-bookworm AS b\nRUN true\nFROM debian:bookworm\nCOPY --from=b /x /x\n")
    assert {i.reason for i in t.issues} == {UNSUPPORTED_BASE}


def test_arg_substitution_and_from_arg() -> None:
    t = translate("ARG PY=3.13\nFROM python:${PY}-slim\nARG PKG=jq\nRUN apt-get install -y $PKG\n")
    assert t.base.python == "3.13" and t.apt_packages == ("jq", "python-is-python3")
    assert dict(t.args) == {"PY": "3.13", "PKG": "jq"}


def test_json_form_and_legacy_env() -> None:
    t = translate('FROM debian:bookworm\nENV FOO bar baz\nRUN ["pip3", "install", "six"]\nUSER 1000:1000\n')
    assert t.env == (("FOO", "bar baz"),)
    assert t.pip_requirements == ("six",)
    assert t.user == "1000:1000"


def test_pip_spellings_and_flags() -> None:
    t = translate(
        "FROM python:3.11\n"
        "RUN python -m pip install -U --no-cache-dir 'requests>=2' --timeout 60"
        " && pip install --upgrade pip\n"
        "RUN python3 -m pip install --break-system-packages --user \"uvicorn[standard]==0.30\"\n"
        "RUN uv pip install --system numpy==1.26.4 || true\n"
        "RUN pip install --index-url https://pypi.org/simple six\n"
    )
    assert t.buildable, t.reasons
    assert t.pip_requirements == ("requests>=2", "uvicorn[standard]==0.30", "numpy==1.26.4", "six")
    assert any("pip upgrade dropped" in n for n in t.notes)


def test_pip_requirements_file_from_context(tmp_path: Path) -> None:
    (tmp_path / "reqs").mkdir()
    (tmp_path / "reqs" / "requirements.txt").write_text("# pins\nflask==3.0.0  # web\n\nsix\n-e .\n")
    (tmp_path / "Dockerfile").write_text(
        "FROM python:3.11-slim\nWORKDIR /app\nCOPY reqs/requirements.txt .\n"
        "RUN pip install -r requirements.txt\n"
    )
    t = translate_file(tmp_path / "Dockerfile")
    assert t.buildable, t.reasons
    assert t.pip_requirements == ("flask==3.0.0", "six")


def test_missing_requirements_file_is_build_failed() -> None:
    t = translate("FROM python:3.11\nRUN pip install -r /nowhere/requirements.txt\n")
    assert [i.reason for i in t.issues] == [BUILD_FAILED]


HEREDOCS = """\
FROM debian:bookworm
RUN cat > /app/a.py << 'EOF'
#!/usr/bin/env python3
print("$HOME && x")
  EOF
EOF
RUN tr a-z A-Z <<-END > /app/b.txt && cat - <<TWO >> /app/b.txt
\tkeep
\tEND
two
TWO
WORKDIR /app
"""


def test_heredocs_follow_their_run_line() -> None:
    got = instructions(HEREDOCS)
    assert [(n, word) for n, word, _ in got] == [(1, "FROM"), (2, "RUN"), (7, "RUN"), (12, "WORKDIR")]
    assert got[1][2] == "cat > /app/a.py << 'EOF'\n#!/usr/bin/env python3\nprint(\"$HOME && x\")\n  EOF\nEOF"
    assert got[2][2].splitlines()[1:] == ["\tkeep", "\tEND", "two", "TWO"]
    t = translate(HEREDOCS)
    assert not t.issues and [s.kind for s in t.steps] == ["run", "run", "workdir"]


def test_heredoc_run_renders_to_one_line_that_sh_runs(tmp_path: Path) -> None:
    """The classic builder takes one line per RUN: the script travels base64-encoded, and sh runs it as
    written (a quoted body verbatim, ``<<-`` strips leading tabs)."""
    t = translate(HEREDOCS.replace("/app/", f"{tmp_path}/"))
    lines = [x for x in render(t).splitlines() if x.startswith("RUN sh -c")]
    assert len(lines) == 2
    for line in lines:
        subprocess.run(["sh", "-c", line.removeprefix("RUN ")], check=True, timeout=30)
    assert (tmp_path / "a.py").read_text() == '#!/usr/bin/env python3\nprint("$HOME && x")\n  EOF\n'
    assert (tmp_path / "b.txt").read_text() == "KEEP\ntwo\n"


@pytest.mark.parametrize(("text", "word"), [
    ("RUN <<EOF\necho hi\nEOF\n", "script form"),
    ("COPY <<EOF /x\nhi\nEOF\n", "COPY <<EOF"),
    ("RUN bash <<EOF && apt-get install -y vim\necho hi\nEOF\n", "installs"),
])
def test_unsupported_heredocs_are_reported(text: str, word: str) -> None:
    t = translate("FROM debian:bookworm\n" + text)
    assert t.issues and t.issues[0].reason == BUILD_FAILED and word in t.issues[0].detail, t.issues


def test_apt_dropped_and_kept_commands() -> None:
    t = translate(
        "FROM debian:bookworm\n"
        "RUN apt-get update; DEBIAN_FRONTEND=noninteractive apt-get install -y"
        " -o Dpkg::Options::=--force-confdef"
        " tmux 2>/dev/null && apt-get clean && echo 'a && b' > /x; apt-get purge -y vim\n"
    )
    assert t.apt_packages == ("tmux",)
    assert [s.args[0] for s in t.steps] == ["echo 'a && b' > /x; apt-get purge -y vim"]


def test_split_commands_respects_quotes_and_groups() -> None:
    assert split_commands('a && b "x && y"; { c; d; } && e $(f; g)') == [
        ("", "a"), ("&&", 'b "x && y"'), (";", "{ c; d; }"), ("&&", "e $(f; g)")]


def test_instructions_join_continuations() -> None:
    got = instructions("from x\n# c\nRUN a \\\n  b \\\n  # skipped\n  c\n")
    assert got == [(1, "FROM", "x"), (3, "RUN", "a b c")]


def test_render_puts_context_under_its_folder_and_restores_user() -> None:
    text = render(translate(GOLANG))
    assert 'COPY ["context/flake-rate.go", "/tmp/flake-rate.go"]' in text
    assert "--find-links /tmp/envfarm-wheelhouse uv==0.5.11" in text
    assert text.rstrip().splitlines()[-2:] == ["USER agent", "WORKDIR /app/repo"]
    assert text.startswith("ARG BASE\nFROM ${BASE}\n")
