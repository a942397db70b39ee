"""``envfarm tasks mine`` end to end on a tiny project served from a local index: real pip download, real
env image, real sandboxes, real harness validation; then the rows in the harness CLI and in CodeRepair-v0."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import gymnasium
import pytest
from typer.testing import CliRunner

import envfarm.envs  # noqa: F401  (registers CodeRepair-v0)
from envfarm.cli import app

from .tinyproject import FILES, NAME, VERSION, write_sdist

pytestmark = pytest.mark.docker
SPEC = f"{NAME}=={VERSION}"
TESTS = {
    "tests/test_clamp.py": ["test_above", "test_below", "test_inside", "test_type"],
    "tests/test_stats.py": ["test_callable", "test_mean", "test_mean_empty", "test_total"],
}


def mine(out: Path, index: Path, *extra: str) -> tuple[int, str]:
    res = CliRunner().invoke(app, ["tasks", "mine", "--package", SPEC, "--instances", str(out),
                                   "--find-links", str(index), "--max-tasks", "4", "--max-mutants", "40",
                                   "--seed", "3", "--report", str(out.with_suffix(".report.json")), *extra])
    return res.exit_code, res.output


@pytest.fixture(scope="module")
def mined(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    root = tmp_path_factory.mktemp("mine")
    write_sdist(root / "index")
    code, output = mine(root / "a" / "tasks.jsonl", root / "index")
    assert code == 0, output
    yield root, root / "a" / "tasks.jsonl"


def rows(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_rows_are_validated_bugs_with_hidden_tests(mined: tuple[Path, Path]) -> None:
    _, out = mined
    table = rows(out)
    assert len(table) == 4
    report = json.loads(out.with_suffix(".report.json").read_text())
    (pkg,) = report["packages"]
    assert pkg["emitted"] == 4 and pkg["validated"] >= 4 and not report["invalid"]
    for row in table:
        src = row["envfarm_source"]
        assert isinstance(src, dict)
        module = src["mutation"]["file"].rsplit("/", 1)[-1].removesuffix(".py")
        assert src["hidden_tests"] == [f"tests/test_{module}.py"]  # the mutated module's own test file
        f2p, p2p = json.loads(str(row["FAIL_TO_PASS"])), json.loads(str(row["PASS_TO_PASS"]))
        names = sorted(t.split("::")[1] for t in f2p + p2p)
        assert f2p and names == TESTS[f"tests/test_{module}.py"]  # F2P + P2P = the file's tests
        assert row["repo"] == f"pypi/{NAME}" and row["version"] == VERSION
        assert str(row["patch"]).count("\n-") >= 1 and src["mutation"]["file"] in str(row["patch"])
        assert "new file mode" in str(row["test_patch"])
        text = str(row["problem_statement"])
        assert all(f"`{t}`" in text for t in f2p[:8])
        edit = str(src["mutation"]["text"])
        assert len(edit) < 4 or edit not in text.split("```")[0]  # the statement never shows the change


def test_same_seed_same_bytes_and_resume_skips_work(mined: tuple[Path, Path],
                                                    monkeypatch: pytest.MonkeyPatch) -> None:
    from envfarm.envs.code_repair.factory import mine as mine_mod

    root, out = mined
    before = out.read_bytes()
    code, output = mine(out, root / "index")  # resume: every outcome and harness report is cached
    assert code == 0, output
    report = json.loads(out.with_suffix(".report.json").read_text())
    assert report["packages"][0]["ran"] == 0 and out.read_bytes() == before
    fresh = root / "b" / "tasks.jsonl"
    monkeypatch.setattr(mine_mod, "CHUNK_PER_TASK", 1)  # candidates checked 4 at a time: several chunks
    code, output = mine(fresh, root / "index")  # a fresh work folder: the same bytes
    assert code == 0, output
    assert json.loads(fresh.with_suffix(".report.json").read_text())["packages"][0]["tried"] > 4
    assert fresh.read_bytes() == before


def test_harness_cli_resolves_gold_on_rebuilt_repos(mined: tuple[Path, Path]) -> None:
    root, out = mined
    runner = CliRunner()
    rebuilt = root / "rebuilt"
    res = runner.invoke(app, ["tasks", "repos", "--instances", str(out), "--out", str(rebuilt),
                              "--find-links", str(root / "index")])
    assert res.exit_code == 0, res.output
    res = runner.invoke(app, ["harness", "run", "--instances", str(out), "--predictions", "gold", "--run-id",
                              "gold", "--repo-source", str(rebuilt / "repos"), "--specs",
                              str(rebuilt / "specs"), "--report-dir", str(root / "reports")])
    assert res.exit_code == 0, res.output
    assert "resolved 4/4" in res.output


def test_code_repair_env_takes_the_mined_jsonl(mined: tuple[Path, Path]) -> None:
    _, out = mined
    work = Path(f"{out}.work")
    env = gymnasium.make("envfarm/CodeRepair-v0", tasks=str(out), repo_source=str(work / "repos"),
                         specs=[str(work / "specs")], backend="docker")
    try:
        obs, info = env.reset(seed=1)
        assert "Failing tests" in obs
        reward, done = 0.0, False
        for action in env.unwrapped.oracle():  # type: ignore[attr-defined]
            obs, reward, done, _, info = env.step(action)
        assert done and reward == 1.0 and info["resolved"]
        env.reset(seed=2)
        obs, reward, done, _, info = env.step('{"name": "submit", "arguments": {}}')
        assert done and reward == 0.0 and not info["resolved"]  # the unfixed bug does not resolve
    finally:
        env.close()


@pytest.mark.parametrize(("args", "message"), [
    (["--package", "tinycalc"], "is not NAME==VERSION"),
    (["--package", "envfarm-nosuch==1.0"], "no source distribution of envfarm-nosuch==1.0"),
    (["--package", "envfarm-notests==1.0"], "ships no tests"),
])
def test_bad_input_is_one_error_line_exit_2(mined: tuple[Path, Path], args: list[str], message: str) -> None:
    root, _ = mined
    pyproject = FILES["pyproject.toml"].replace(NAME, "envfarm-notests").replace(VERSION, "1.0")
    write_sdist(root / "index", {"pyproject.toml": pyproject.replace("tinycalc", "notests"),
                                 "notests/__init__.py": "x = 1\n"}, "envfarm-notests", "1.0")
    res = CliRunner().invoke(app, ["tasks", "mine", *args, "--instances", str(root / "bad" / "t.jsonl"),
                                   "--find-links", str(root / "index")])
    assert res.exit_code == 2, res.output
    assert "error:" in res.output and "Traceback" not in res.output
    assert message in " ".join(res.output.split())


def test_a_hanging_suite_is_named_as_such(mined: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch) -> None:
    """A baseline that does not finish fails the project once (no second run) with what to do, not as a
    suite where no test passes."""
    from envfarm.envs.code_repair.factory import prepare

    root, _ = mined
    monkeypatch.setattr(prepare, "BASELINE_TIMEOUT_S", 8.0)
    pyproject = FILES["pyproject.toml"].replace(NAME, "envfarm-hangs").replace(VERSION, "1.0")
    tests = "import time\n\n\ndef test_ok():\n    assert True\n\n\ndef test_hangs():\n    time.sleep(600)\n"
    write_sdist(root / "index", {"pyproject.toml": pyproject.replace("tinycalc", "hangs"),
                                 "hangs/__init__.py": "x = 1\n", "tests/test_hangs.py": tests},
                "envfarm-hangs", "1.0")
    res = CliRunner().invoke(app, ["tasks", "mine", "--package", "envfarm-hangs==1.0", "--instances",
                                   str(root / "hangs" / "t.jsonl"), "--find-links", str(root / "index")])
    text = " ".join(res.output.split())
    assert res.exit_code == 2 and "Traceback" not in text, res.output
    assert "did not finish within 8s" in text and 'ignore = [...] under [packages."envfarm-hangs"]' in text


async def test_modules_pytest_cannot_import_leave_the_rest_of_the_suite(mined: tuple[Path, Path]) -> None:
    """dill's layout: a test module that imports a sibling by bare name stops pytest's whole session at
    collection; the baseline runs again with --continue-on-collection-errors and the other modules count."""
    from envfarm.envs.code_repair.factory.prepare import CONTINUE_ON_COLLECTION_ERRORS, prepare
    from envfarm.envs.code_repair.factory.sdist import parse_spec
    from envfarm.envs.code_repair.factory.state import WorkFolder
    from envfarm.sandbox import get_backend

    root, _ = mined
    name = "envfarm-halfbroken"
    pyproject = FILES["pyproject.toml"].replace(NAME, name).replace(VERSION, "1.0")
    write_sdist(root / "index", {"pyproject.toml": pyproject.replace("tinycalc", "halfbroken"),
                                 "halfbroken/__init__.py": "def double(x):\n    return 2 * x\n",
                                 "tests/test_ok.py": "from halfbroken import double\n\n\ndef test_double():\n"
                                                     "    assert double(2) == 4\n",
                                 "tests/test_sibling.py": "import helper_by_bare_name\n\n\ndef test_x():\n"
                                                          "    assert helper_by_bare_name\n"},
                name, "1.0")
    work = WorkFolder(root / "halfbroken" / "t.jsonl")
    backend = get_backend("docker")
    try:
        p = await prepare(parse_spec(f"{name}==1.0"), work, backend, [root / "index"])
    finally:
        await backend.aclose()
    assert p.passing == ("tests/test_ok.py::test_double",)
    assert p.project.env.test_cmd.endswith(CONTINUE_ON_COLLECTION_ERRORS)
    spec = next(work.specs.glob("*halfbroken*.toml")).read_text()
    assert CONTINUE_ON_COLLECTION_ERRORS in spec  # the harness runs the rows with it too


async def test_a_dropped_plugins_mark_under_filterwarnings_error(mined: tuple[Path, Path]) -> None:
    """python-dateutil's layout: its conftest marks items with pytest-cov's no_cover (a plugin the factory
    leaves out) and its config turns warnings into errors: the baseline runs again with that warning off."""
    from envfarm.envs.code_repair.factory.prepare import UNKNOWN_MARKS, prepare
    from envfarm.envs.code_repair.factory.sdist import parse_spec
    from envfarm.envs.code_repair.factory.state import WorkFolder
    from envfarm.sandbox import get_backend

    root, _ = mined
    name = "envfarm-marked"
    pyproject = FILES["pyproject.toml"].replace(NAME, name).replace(VERSION, "1.0")
    pyproject = pyproject.replace("tinycalc", "marked")
    conftest = ("import pytest\n\n\ndef pytest_collection_modifyitems(items):\n    for item in items:\n"
                "        item.add_marker(pytest.mark.no_cover)\n")
    write_sdist(root / "index", {"pyproject.toml": pyproject + '\n[tool.pytest.ini_options]\n'
                                 'filterwarnings = ["error"]\n',
                                 "marked/__init__.py": "def double(x):\n    return 2 * x\n",
                                 "tests/conftest.py": conftest,
                                 "tests/test_ok.py": "from marked import double\n\n\ndef test_double():\n"
                                                     "    assert double(2) == 4\n"},
                name, "1.0")
    backend = get_backend("docker")
    try:
        p = await prepare(parse_spec(f"{name}==1.0"), WorkFolder(root / "marked" / "t.jsonl"), backend,
                          [root / "index"])
    finally:
        await backend.aclose()
    assert p.passing == ("tests/test_ok.py::test_double",) and p.project.env.test_cmd.endswith(UNKNOWN_MARKS)


async def test_a_known_mutant_gives_the_expected_test_lists(mined: tuple[Path, Path]) -> None:
    from envfarm.envs.code_repair.factory.mine import judge
    from envfarm.envs.code_repair.factory.mutate import mutations
    from envfarm.envs.code_repair.factory.prepare import prepare, test_files_for
    from envfarm.envs.code_repair.factory.runner import TestSession
    from envfarm.envs.code_repair.factory.sdist import parse_spec
    from envfarm.envs.code_repair.factory.state import WorkFolder
    from envfarm.sandbox import get_backend

    root, out = mined
    backend = get_backend("docker")
    try:
        p = await prepare(parse_spec(SPEC), WorkFolder(out), backend, [root / "index"])  # cached baseline
        assert len(p.passing) == 8
        source = p.project.files["tinycalc/clamp.py"]
        (m,) = [m for m in mutations("tinycalc/clamp.py", source) if m.kind == "negate" and m.line == 2]
        assert m.apply(source).startswith(b"def clamp(x, lo, hi):\n    if not (x < lo):\n")
        files = test_files_for(m.file, ("tests/test_clamp.py", "tests/test_stats.py"), p.project.files)
        assert files == ("tests/test_clamp.py",)
        async with TestSession.open(backend, p.image, p.project.files, p.project.env.test_cmd, p.env) as s:
            outcome = judge(m, await s.run_mutant(m.file, m.apply(source), source, files, 60), files, p)
            again = await s.run(files, 60)  # the file was restored
        assert outcome.verdict == "kept" and outcome.hidden == ("tests/test_clamp.py",)
        assert outcome.fail_to_pass == tuple(f"tests/test_clamp.py::{t}" for t in
                                             ("test_above", "test_below", "test_inside"))
        assert outcome.pass_to_pass == ("tests/test_clamp.py::test_type",)
        assert set(again.statuses.values()) == {"PASSED"} and len(again.statuses) == 4
    finally:
        await backend.aclose()


COVERED = {
    "covered/__init__.py": "",
    "covered/ops.py": ("def inc(x):\n    return x + 1\n\n\ndef dec(x):\n    return x - 1\n\n\n"
                       "def unused(x):\n    return (x *\n            2)\n\n\nLIMIT = 3\n"),
    "tests/test_inc.py": ("from covered.ops import inc\n\n\ndef test_inc():\n    assert inc(1) == 2\n\n\n"
                          "def test_zero():\n    assert inc(-1) == 0\n\n\ndef test_name():\n"
                          "    assert inc.__name__ == 'inc'\n"),
    "tests/test_dec.py": "from covered.ops import dec\n\n\ndef test_dec():\n    assert dec(1) == 0\n",
    "tests/test_limit.py": "from covered import ops\n\n\ndef test_limit():\n    assert ops.LIMIT == 3\n",
}


async def test_coverage_runs_a_mutant_on_the_test_files_that_reach_it(mined: tuple[Path, Path],
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """The suite runs once under coverage (pytest-cov uploaded into the sandbox): a mutant runs only the test
    files that execute its lines, a line run at import goes to the name heuristic, an unreached one is not
    run; the map is cached with the baseline."""
    from envfarm.envs.code_repair.factory import covmap
    from envfarm.envs.code_repair.factory.mine import judge
    from envfarm.envs.code_repair.factory.mutate import mutations
    from envfarm.envs.code_repair.factory.prepare import prepare
    from envfarm.envs.code_repair.factory.runner import TestSession
    from envfarm.envs.code_repair.factory.sdist import parse_spec
    from envfarm.envs.code_repair.factory.state import WorkFolder
    from envfarm.errors import SandboxCrashed
    from envfarm.sandbox import get_backend

    root, _ = mined
    name = "envfarm-covered"
    pyproject = FILES["pyproject.toml"].replace(NAME, name).replace(VERSION, "1.0")
    pyproject = pyproject.replace("tinycalc", "covered")
    write_sdist(root / "index", {"pyproject.toml": pyproject, **COVERED}, name, "1.0")
    work = WorkFolder(root / "covered" / "t.jsonl")
    backend = get_backend("docker")
    try:
        p = await prepare(parse_spec(f"{name}==1.0"), work, backend, [root / "index"])
        cov = p.coverage
        assert cov is not None and len(p.passing) == 5
        assert cov.select("covered/ops.py", [2]) == ("tests/test_inc.py",)
        assert cov.select("covered/ops.py", [6]) == ("tests/test_dec.py",)
        assert cov.select("covered/ops.py", [10, 11]) == ()  # unused(): no test calls it
        assert cov.select("covered/ops.py", [1]) is None and cov.select("covered/ops.py", [14]) is None
        assert set(cov.durations) <= set(cov.files) and "tests/test_inc.py" in cov.durations
        assert p.recipe.min_timeout_s <= p.timeout_for(["tests/test_dec.py"]) <= p.mutant_timeout_s
        source = p.project.files["covered/ops.py"]
        (m,) = [m for m in mutations("covered/ops.py", source) if m.kind == "binop" and m.line == 2]
        lines = covmap.mutation_lines(source, m.start, m.end, m.line)
        ran = cov.select(m.file, lines)
        assert ran == ("tests/test_inc.py",)
        files = ("tests/test_dec.py", "tests/test_inc.py", "tests/test_limit.py")  # all name the module
        async with TestSession.open(backend, p.image, p.project.files, p.project.env.test_cmd, p.env) as s:
            run = await s.run_mutant(m.file, m.apply(source), source, ran, 60)
        assert {t.split("::")[0] for t in run.statuses} == {"tests/test_inc.py"}  # only that file ran
        outcome = judge(m, run, files, p, ran)
        assert outcome.verdict == "kept" and outcome.hidden == ("tests/test_inc.py",)
        assert outcome.fail_to_pass == ("tests/test_inc.py::test_inc", "tests/test_inc.py::test_zero")
        assert outcome.pass_to_pass == ("tests/test_inc.py::test_name",)

        async def no_second_run(*args: object) -> None:
            raise AssertionError("the coverage map is cached with the baseline")

        monkeypatch.setattr(covmap, "measure", no_second_run)
        again = await prepare(parse_spec(f"{name}==1.0"), work, backend, [root / "index"])
        assert again.coverage == cov
        assert (await prepare(parse_spec(f"{name}==1.0"), work, backend, [root / "index"],
                              coverage=False)).coverage is None

        async def sandbox_lost(*args: object) -> None:
            raise SandboxCrashed("killed from outside")

        monkeypatch.setattr(covmap, "measure", sandbox_lost)
        cached = work.project(p.project.key) / "coverage.json"
        cached.unlink()
        lost = await prepare(parse_spec(f"{name}==1.0"), work, backend, [root / "index"])
        assert lost.coverage is None and not cached.exists()  # by name this time; measured again next run
    finally:
        await backend.aclose()


async def test_validation_runs_the_unfixed_code_in_the_harness(mined: tuple[Path, Path]) -> None:
    """A row whose FAIL_TO_PASS test already passes on the unfixed code is refused: the harness runs the base
    (test_patch applied, no fix) for every row, it does not trust the miner's log."""
    from envfarm.envs.code_repair.factory.state import WorkFolder
    from envfarm.envs.code_repair.factory.validate import validate
    from envfarm.sandbox import get_backend

    _, out = mined
    row = next(r for r in rows(out) if json.loads(str(r["PASS_TO_PASS"])))
    p2p = json.loads(str(row["PASS_TO_PASS"]))
    forged = {**row, "instance_id": f"{row['instance_id']}-forged", "FAIL_TO_PASS": json.dumps(p2p[:1]),
              "PASS_TO_PASS": json.dumps(p2p[1:])}
    work = WorkFolder(out)
    backend = get_backend("docker")
    try:
        verdicts, _ = await validate([row, forged], work, backend, 2, run_id="attack")
    finally:
        await backend.aclose()
    real, fake = verdicts[str(row["instance_id"])], verdicts[str(forged["instance_id"])]
    assert real.ok and real.gold_resolved and not real.empty_resolved
    assert fake.gold_resolved and fake.empty_resolved and not fake.ok and fake.reason == "upstream-broken"
    logs = sorted(p.parent.name for p in (work.harness / "attack-empty").rglob("test_output.txt"))
    assert logs == sorted([str(row["instance_id"]), str(forged["instance_id"])])  # the base really ran


async def test_a_projects_validate_json_lists_every_row_after_a_top_up(mined: tuple[Path, Path],
                                                                       tmp_path: Path) -> None:
    """Rows validated in an earlier batch (a top-up validates only the new ones) stay in the project's
    validate.json: they resume from their harness reports, and progress counts the new rows alone."""
    import shutil
    from types import SimpleNamespace

    from envfarm.envs.code_repair.factory.mine import MineConfig, _Validation
    from envfarm.envs.code_repair.factory.state import WorkFolder
    from envfarm.sandbox import get_backend

    _, out = mined
    copy = tmp_path / out.name
    shutil.copytree(f"{out}.work", f"{copy}.work")  # the fixture's reports: both batches resume, no runs
    table = rows(out)
    key = f"pypi__{NAME}"
    events: list[tuple[int, int]] = []
    backend = get_backend("docker")
    pipeline = _Validation(MineConfig(packages=(SPEC,), out=copy), WorkFolder(copy), backend,
                           lambda p: events.append((p.done, p.total)))
    project = SimpleNamespace(key=key, spec=SimpleNamespace(name=NAME))
    try:
        for batch in (table[:3], table):
            await pipeline.run(SimpleNamespace(prepared=SimpleNamespace(project=project),
                                               rows=lambda batch=batch: batch))  # type: ignore[arg-type]
    finally:
        await backend.aclose()
    listed = json.loads((copy.parent / f"{copy.name}.work/harness/mine-validate-{key}/validate.json")
                        .read_text())["rows"]
    assert sorted(r["instance_id"] for r in listed) == sorted(str(r["instance_id"]) for r in table)
    assert all(r["validated"] for r in listed) and all(v.ok for v in pipeline.verdicts.values())
    assert events[-1] == (2, 2) and max(d for d, _ in events) == 6  # batch 1: 3 rows x 2 runs; batch 2: 1


def test_mined_rows_rebuild_their_own_repos(mined: tuple[Path, Path], tmp_path: Path) -> None:
    """No --repo-source/--specs: the rows' envfarm_source rebuilds repos + specs once, then they are found."""
    import shutil

    from envfarm import config
    from envfarm.envs.code_repair.factory.sources import rebuilt
    from envfarm.harness import load_instances

    root, out = mined
    instances = load_instances(out)
    sdists, cache = tmp_path / "sdists", config.home() / "sdists"
    sdists.mkdir()
    cache.mkdir(exist_ok=True)
    for sdist in (root / "index").glob("envfarm_tinycalc-*"):
        shutil.copy(sdist, sdists)  # the rebuild's download cache: offline
        shutil.copy(sdist, cache)  # the same for the CLI and the env below
    found = rebuilt(instances, root=tmp_path / "mined", sdists=sdists)
    assert found is not None
    repos, specs = found
    assert sorted(p.name for p in repos.iterdir()) == ["pypi__envfarm-tinycalc"] and any(specs.iterdir())
    done = repos.parent / ".done"
    stamp = done.stat().st_mtime_ns
    assert rebuilt(instances, root=tmp_path / "mined", sdists=sdists) == found
    assert done.stat().st_mtime_ns == stamp  # the second use finds them
    assert rebuilt((), root=tmp_path) is None  # no mined rows: nothing to rebuild

    res = CliRunner().invoke(app, ["harness", "run", "--instances", str(out), "--predictions", "gold",
                                   "--run-id", "auto", "--report-dir", str(tmp_path / "reports")])
    assert res.exit_code == 0, res.output
    assert "resolved 4/4" in res.output
    assert_oracle_resolves(gymnasium.make("envfarm/CodeRepair-v0", tasks=str(out), backend="docker"))


def test_catalogue_from_a_packages_file(mined: tuple[Path, Path], tmp_path: Path) -> None:
    """--packages-file: a JSONL per project, catalogue.json with the skipped ones and why; the run goes on."""
    import shutil

    root, out = mined
    folder = tmp_path / "catalogue"
    folder.mkdir()
    shutil.copytree(f"{out}.work", folder / f"pypi__{NAME}.jsonl.work")  # the same state: no test reruns
    pyproject = FILES["pyproject.toml"].replace(NAME, "envfarm-notests").replace(VERSION, "1.0")
    write_sdist(root / "index", {"pyproject.toml": pyproject.replace("tinycalc", "notests"),
                                 "notests/__init__.py": "x = 1\n"}, "envfarm-notests", "1.0")
    packages = tmp_path / "packages.txt"
    packages.write_text(f"# three projects\nenvfarm-notests==1.0\n{SPEC}\nenvfarm-nosuch==1.0\n")
    args = ["tasks", "mine", "--packages-file", str(packages), "--out", str(folder), "--find-links",
            str(root / "index"), "--max-tasks", "4", "--max-mutants", "40", "--seed", "3"]
    res = CliRunner().invoke(app, args)
    assert res.exit_code == 0, res.output
    assert (folder / f"pypi__{NAME}.jsonl").read_bytes() == out.read_bytes()
    data = json.loads((folder / "catalogue.json").read_text())
    status = {p["package"]: (p["status"], p["tasks"], p["reason"]) for p in data["projects"]}
    assert status == {"envfarm-notests==1.0": ("skipped", 0, "no-tests"), SPEC: ("done", 4, ""),
                      "envfarm-nosuch==1.0": ("skipped", 0, "no-sdist")}
    assert data["summary"]["tasks"] == 4 and data["projects"][1]["report"]["origin"] == "tests/"
    res = CliRunner().invoke(app, args)  # resumed: every project is already recorded
    assert res.exit_code == 0 and res.output.count("recorded") == 3, res.output
    work = folder / f"pypi__{NAME}.jsonl.work"
    env = gymnasium.make("envfarm/CodeRepair-v0", instances=str(folder), repo_source=str(work / "repos"),
                         specs=[str(work / "specs")], backend="docker")
    assert len(env.unwrapped.plans) == 4  # type: ignore[attr-defined]  # the folder's rows, not its state
    assert_oracle_resolves(env)


def assert_oracle_resolves(env: gymnasium.Env) -> None:  # type: ignore[type-arg]
    """The first task of a CodeRepair env, solved by its oracle, is resolved (reward 1); closes the env."""
    try:
        env.reset(seed=0)
        for action in env.unwrapped.oracle():  # type: ignore[attr-defined]
            _, reward, done, _, info = env.step(action)
        assert done and reward == 1.0 and info["resolved"]
    finally:
        env.close()
