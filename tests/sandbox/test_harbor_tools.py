"""What a Harbor task's tests fetch at grading time (``uvx --with ...``), read from tests/test.sh."""

from __future__ import annotations

import pytest

from envfarm.sandbox.harbor_tools import UVX_SHIM, VERIFIER_VENV, tools_steps, verifier_requirements


@pytest.mark.parametrize(("script", "wanted"), [
    ("uvx --python 3.12 --with pytest==8.3.3 \\\n    pytest /tests/test_outputs.py -rA\n",
     ("pytest==8.3.3",)),
    ("uvx --with pytest==8.4.1 --with pytest-json-ctrf==0.3.5 pytest --ctrf /logs/verifier/c.json /tests\n",
     ("pytest-json-ctrf==0.3.5", "pytest==8.4.1")),
    ("if command -v uvx >/dev/null; then\n  uvx --with=numpy==2.1.3,scipy pytest -q\nfi\n",
     ("numpy==2.1.3", "pytest", "scipy")),
    ("# uvx --with evil pytest\npython3 -m pytest /tests\n", ()),
    ("pytest /tests/test_outputs.py -rA\n", ()),
])
def test_verifier_requirements(script: str, wanted: tuple[str, ...]) -> None:
    assert verifier_requirements(script) == wanted


def test_the_shim_runs_the_tool_from_the_verifier_venv() -> None:
    steps = tools_steps(("pytest==8.3.3",))
    assert any(f"{VERIFIER_VENV}/bin/python -m pip install --no-index" in s and "pytest==8.3.3" in s
               for s in steps)
    assert f'exec {VERIFIER_VENV}/bin/python -m "$tool" "$@"' in UVX_SHIM
    assert tools_steps(()) == []
