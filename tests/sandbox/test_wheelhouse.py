"""The wheelhouse cache when two builds of one recipe run at once (two processes: CI beside a demo)."""

from __future__ import annotations

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
