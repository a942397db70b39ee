"""The wheelhouse: its cache when two builds of one recipe run at once (two processes: CI beside a demo),
and the dependencies it must hold for the image's Python."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pytest

from envfarm.sandbox import imagebuild
from envfarm.sandbox.imagebuild import LayerSpec, wheelhouse


def test_a_wheelhouse_finished_meanwhile_by_another_build_is_used(tmp_path: Path,
                                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ENVFARM_HOME", str(tmp_path / "home"))
    recipe = tmp_path / "recipe"
    recipe.mkdir()
    (recipe / "requirements.txt").write_text("six==1.16.0\n")
    spec = LayerSpec(recipe, "envfarm/x:1", "envfarm/base:1", {}, "abc123", "3.11", "2.36")
    dest = imagebuild.wheelhouse_dir() / "abc123"

    def download(req: Path, into: Path, *_: object) -> None:
        (into / "six-1.16.0-py2.py3-none-any.whl").write_bytes(b"ours")
        dest.mkdir()  # the other build renames its complete folder into place first
        (dest / "six-1.16.0-py2.py3-none-any.whl").write_bytes(b"theirs")

    monkeypatch.setattr(imagebuild, "_download", download)
    assert wheelhouse(spec) == dest
    assert (dest / "six-1.16.0-py2.py3-none-any.whl").read_bytes() == b"theirs"
    assert [p.name for p in imagebuild.wheelhouse_dir().iterdir()] == ["abc123"]  # no staging folder left


def _wheel(folder: Path, name: str, requires: list[str]) -> None:
    meta = "".join(f"Requires-Dist: {r}\n" for r in requires)
    with zipfile.ZipFile(folder / f"{name}-1.0-py3-none-any.whl", "w") as zf:
        zf.writestr(f"{name}-1.0.dist-info/METADATA", f"Metadata-Version: 2.1\nName: {name}\n{meta}")


def test_host_wheels_are_completed_with_the_images_markers(tmp_path: Path,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """No wheel for the image: the host (same x.y) builds them, evaluating markers with its own x.y.z; the
    image's x.y.0 may need more (redis: async-timeout below 3.11.3), which the wheelhouse must then hold."""
    calls: list[list[str]] = []

    def pip(args: list[str], progress: object, extra_env: object = None) -> None:
        calls.append(args)
        dest = Path(args[args.index("-w") + 1] if "-w" in args else args[args.index("-d") + 1])
        if args[0] == "download" and "-r" in args:
            raise imagebuild.ImageBuildError("no binary wheel for python-lzf")
        if args[0] == "wheel":
            _wheel(dest, "redis", ['async-timeout>=4.0.3; python_full_version < "3.11.3"'])
        elif args[0] == "download":
            _wheel(dest, "async_timeout", [])

    monkeypatch.setattr(imagebuild, "_pip", pip)
    host = f"{sys.version_info.major}.{sys.version_info.minor}"
    spec = LayerSpec(tmp_path, "t", "b", {}, "h", host, "2.36")
    (tmp_path / "req.txt").write_text("redis\n")
    (tmp_path / "wh").mkdir()
    imagebuild._download(tmp_path / "req.txt", tmp_path / "wh", spec, None)
    assert [c[0] for c in calls] == ["download", "wheel", "download"], calls
    assert "async-timeout>=4.0.3" in calls[-1], calls[-1]
    assert imagebuild.missing_requirements(tmp_path / "wh", host) == []


@pytest.mark.skipif(imagebuild.cpu_torch("3.11") is None, reason="no CPU build of torch on pip's find-links")
def test_torch_comes_as_the_cpu_build_on_the_find_links(tmp_path: Path) -> None:
    """A sandbox has no GPU: ``torch`` asked for by name fills the wheelhouse with the CPU build found on the
    host's find-links, not the default build and its 3 GB of CUDA wheels."""
    (tmp_path / "req.txt").write_text("torch\n")
    (tmp_path / "wh").mkdir()
    spec = LayerSpec(tmp_path, "t", "b", {}, "h", "3.11", "2.36")
    imagebuild._download_preferring_cpu(tmp_path / "req.txt", tmp_path / "wh", spec, None)
    names = sorted(p.name for p in (tmp_path / "wh").iterdir())
    assert [n for n in names if n.startswith("torch-")] == [
        f"torch-{imagebuild.cpu_torch('3.11')}-cp311-cp311-manylinux_2_28_x86_64.whl"], names
    assert not [n for n in names if n.startswith("nvidia")], names
    assert imagebuild.missing_requirements(tmp_path / "wh", "3.11") == []


def test_a_requirement_the_cpu_build_does_not_fit_gets_torch_as_asked(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``torch<2`` conflicts with the CPU pin: the pinned download's partial wheels are dropped and the
    requirements are downloaded again unpinned; a failure that is not about torch is raised as is."""
    monkeypatch.setattr(imagebuild, "cpu_torch", lambda python: "2.13.0+cpu")
    calls: list[tuple[str, ...]] = []

    def download(req: Path, into: Path, spec: object, progress: object, pins: tuple[str, ...] = ()) -> None:
        calls.append(pins)
        if pins:
            assert Path(pins[1]).read_text() == "torch==2.13.0+cpu\n"
            (into / "partial.whl").write_bytes(b"")
            raise imagebuild.ImageBuildError(f"{req.read_text().strip()} conflicts with torch==2.13.0+cpu")
        (into / "torch-1.13.1-cp311-cp311-manylinux1_x86_64.whl").write_bytes(b"")

    monkeypatch.setattr(imagebuild, "_download", download)
    spec = LayerSpec(tmp_path, "t", "b", {}, "h", "3.11", "2.36")
    (tmp_path / "req.txt").write_text("torch<2\n")
    (tmp_path / "wh").mkdir()
    imagebuild._download_preferring_cpu(tmp_path / "req.txt", tmp_path / "wh", spec, None)
    assert [bool(p) for p in calls] == [True, False]
    assert [p.name for p in (tmp_path / "wh").iterdir()] == ["torch-1.13.1-cp311-cp311-manylinux1_x86_64.whl"]
    calls.clear()
    (tmp_path / "req.txt").write_text("no-such-package\n")
    monkeypatch.setattr(imagebuild, "_download", lambda *a: (calls.append(a[4]), _fail("no-such-package")))
    with pytest.raises(imagebuild.ImageBuildError, match="no matching distribution for no-such-package"):
        imagebuild._download_preferring_cpu(tmp_path / "req.txt", tmp_path / "wh", spec, None)
    assert len(calls) == 1  # not retried: the failure is not about torch


def _fail(name: str) -> None:
    raise imagebuild.ImageBuildError(f"no matching distribution for {name}")
