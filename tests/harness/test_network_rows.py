"""Rows whose tests need the internet: what images/swebench/psf__requests.toml serves on loopback inside the
sandbox (httpbin on 127.0.0.1, requests' black-holed TARPIT address), checked on the toy repository with the
requests spec's own packages, pre_test and env (so no requests mirror is needed), Python 3.9 like the rows."""

from __future__ import annotations

import asyncio
import json
import textwrap
import tomllib
from pathlib import Path

import pytest

from envfarm.harness import HarnessConfig, evaluate, load_predictions
from envfarm.harness.env_spec import spec_path
from envfarm.harness.instances import instance_from_row
from envfarm.testing.toyrepo import REPO, TEST_PATCH, row

NET_TESTS = textwrap.dedent("""\
    import json
    import os
    import socket
    import urllib.request

    import pytest


    def test_httpbin_on_loopback():
        with urllib.request.urlopen(os.environ["HTTPBIN_URL"] + "get?x=1", timeout=10) as reply:
            assert json.load(reply)["args"] == {"x": "1"}


    def test_tarpit_times_out_like_a_black_hole():
        sock = socket.socket()
        sock.settimeout(0.3)
        with pytest.raises(socket.timeout):
            sock.connect(("10.255.255.1", 80))


    def test_no_other_network():
        with pytest.raises(OSError) as caught:
            socket.create_connection(("10.0.0.1", 80), timeout=2)
        assert not isinstance(caught.value, socket.timeout)


    def test_pytest_httpbin_fixture(httpbin):
        with urllib.request.urlopen(httpbin.url + "/status/204", timeout=10) as reply:
            assert reply.status == 204
    """)


def _new_file_patch(path: str, text: str) -> str:
    lines = text.splitlines()
    body = "".join(f"+{line}\n" for line in lines)
    head = f"diff --git a/{path} b/{path}\nnew file mode 100644\n--- /dev/null\n+++ b/{path}\n"
    return f"{head}@@ -0,0 +1,{len(lines)} @@\n{body}"


def _spec_like_requests(folder: Path) -> Path:
    """The toy repo's spec with psf__requests.toml's python, packages, pre_test and env (an editable
    install, since the toy's tests import the package from outside the repository root)."""
    requests_spec = tomllib.loads(spec_path("psf/requests").read_text())["defaults"]
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "envfarm-tests__calc.toml"
    table = {
        "python": requests_spec["python"],
        "packages": requests_spec["packages"],
        "pre_test": requests_spec["pre_test"],
        "env": requests_spec["env"],
        "install": ["python -m pip install --no-deps --no-build-isolation -e ."],
        "test_cmd": "pytest -rA",
    }
    lines = [f'repo = "{REPO}"', "", "[defaults]"]
    for key, value in table.items():
        if isinstance(value, dict):
            inner = ", ".join(f"{k} = {json.dumps(v)}" for k, v in value.items())
            lines.append(f"{key} = {{ {inner} }}")
        else:
            lines.append(f"{key} = {json.dumps(value)}")
    path.write_text("\n".join(lines) + "\n")
    assert tomllib.loads(path.read_text())["defaults"]["pre_test"] == requests_spec["pre_test"]
    return path


@pytest.mark.docker
@pytest.mark.slow
def test_loopback_network_of_the_requests_spec(toy: tuple[Path, str, Path], tmp_path: Path) -> None:
    source, base, _ = toy
    specs = _spec_like_requests(tmp_path / "specs").parent
    net = [f"tests/test_net.py::{name}" for name in (
        "test_httpbin_on_loopback", "test_tarpit_times_out_like_a_black_hole", "test_no_other_network",
        "test_pytest_httpbin_fixture",
    )]  # fmt: skip
    fields = row("envfarm-tests__calc-net", base)
    fields["test_patch"] = TEST_PATCH + _new_file_patch("tests/test_net.py", NET_TESTS)
    fields["PASS_TO_PASS"] = json.dumps([*json.loads(str(fields["PASS_TO_PASS"])), *net])
    inst = instance_from_row(fields)
    cfg = HarnessConfig(
        run_id="net", report_dir=tmp_path / "out", repo_source=source, specs=(specs,), timeout_s=300
    )
    run = asyncio.run(evaluate([inst], load_predictions("gold", [inst]), cfg))
    report = run.reports[inst.instance_id]
    log = (tmp_path / "out" / "net" / "gold" / inst.instance_id / "test_output.txt").read_text()
    assert report.resolved, log[-3000:]
    for test in net:
        assert f"PASSED {test}" in log, log[-3000:]
