"""Static screening (harness/screen.py): false positives on gold patches, true positives on the forgery suite.

    python bench/screen.py [--json bench/results/screen.json] [--tasks FILE ...]
    nice -n 10 python bench/screen.py --catalogue-mutants bench/packages-catalogue.txt   # + every mutant

Gold: every row of SWE-bench Lite (dev + test) and Verified, the built-in code-repair tasks, and any mined
task file given with --tasks (or found in a catalogue folder). Screening reads only the patch text, so no
repository or image is needed. Forgeries: every exploit of ``envfarm.testing.exploits`` for each runner
(pytest, sympy, django), rendered as real diffs against a built-in row's repository. Prints and writes JSON.

``--catalogue-mutants FILE`` bounds the false positives of a mined catalogue from above without mining it (no
docker, no test run): a mined task's gold patch is the reverse of one single-edit mutant, so for each
``NAME==VERSION`` of FILE it downloads the sdist as the factory does (``prepare.infer``, cached in
``$ENVFARM_HOME/sdists``), takes the miner's trial order (``mutate.sites`` of the layout's source files,
seeded ``order``; ``distinct`` picks the candidates from it), renders each mutant's row with the factory's
own ``repo.materialize`` + ``repo.rows`` and screens its ``patch`` with ``screen_context`` of a row whose
hidden test files are all of the project's test files (the widest context any of its rows can get).
``--mutants-per-project`` N (default 500: the miner's own cap, 10 x max_tasks, at the catalogue's 50 tasks
a project) screens the sites of that order up to its N-th candidate, those ``distinct`` skips included:
with the catalogue's seed (0), every mutant a catalogue run could try, so every one of its tasks; 0 screens
every site (~318,000 over the 65-project list: hours). Projects that cannot be read are listed with the
reason.

The JSON is updated, not replaced: keys this run does not measure (``catalogue_mutants`` on a plain run) are
kept, and gold sets measured before but not now (a ``--tasks`` file not given this time) move to
``gold.earlier`` with their date.
"""

from __future__ import annotations

import argparse
import dataclasses
import itertools
import json
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from envfarm import config
from envfarm.envs.code_repair.factory import repo as repo_mod
from envfarm.envs.code_repair.factory.catalogue import read_packages_file, reason_code
from envfarm.envs.code_repair.factory.mine import order
from envfarm.envs.code_repair.factory.mutate import Mutation, distinct, sites
from envfarm.envs.code_repair.factory.prepare import infer
from envfarm.envs.code_repair.factory.sdist import parse_spec
from envfarm.errors import FarmError
from envfarm.harness import load_instances, tamper
from envfarm.harness.grading import screen_context as context
from envfarm.harness.instances import Instance, instance_from_row
from envfarm.harness.screen import Suspicion, screen_patch

DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
DATASETS = {
    "swe-bench-lite": ("dev.parquet", "test.parquet"),
    "swe-bench-verified": ("test.parquet",),
}
MUTANTS_PER_PROJECT = 500
"""The miner's cap on single-edit candidates tried per project (``mine._Miner``: 10 x max_tasks x mutations)
at the catalogue's settings (50 tasks a project, one edit)."""
CHUNK_MUTANTS = 200
CHUNK_BYTES = 64 << 20
"""Mutants rendered per repository (``repo.materialize`` streams the mutated file once per mutant)."""


def gold_rows(tasks: list[Path]) -> dict[str, list[Instance]]:
    out: dict[str, list[Instance]] = {}
    for name, files in DATASETS.items():
        rows = [r for f in files if (DATA / name / f).is_file() for r in load_instances(DATA / name / f)]
        if rows:
            out[name] = rows
    from envfarm.envs.code_repair.env import builtin_instances

    out["code-repair-builtin"] = list(builtin_instances()[0])
    for path in tasks:
        out[f"mined:{path.name}"] = list(load_instances(path))
    return out


def _flag(s: Suspicion) -> dict[str, object]:
    return dataclasses.asdict(s)


def measure_gold(sets: dict[str, list[Instance]]) -> dict[str, object]:
    per_set: dict[str, object] = {}
    flagged: list[dict[str, object]] = []
    seen: set[str] = set()
    for name, rows in sets.items():
        hits = 0
        for inst in rows:
            found = screen_patch(inst.patch, context(inst))
            hits += bool(found)
            if found and inst.instance_id not in seen:
                flagged.append(
                    {"set": name, "instance_id": inst.instance_id, "reasons": [_flag(s) for s in found]}
                )
            seen.add(inst.instance_id)
        per_set[name] = {"rows": len(rows), "suspect": hits}
    return {"sets": per_set, "unique_rows": len(seen), "unique_suspect": len(flagged), "flagged": flagged}


def measure_forgeries() -> dict[str, object]:
    from envfarm.demo.harness import target
    from envfarm.envs.code_repair.env import builtin_instances
    from envfarm.harness.repos import locate
    from envfarm.testing.exploits import Target, exploits_for, render_patch

    instances, repos = builtin_instances()
    inst = instances[0]
    repo = locate(repos, inst.repo, inst.base_commit)
    base = target(inst)
    results = []
    for runner in ("pytest", "sympy", "django"):
        t = Target(runner, base.package_init, base.test_files)  # type: ignore[arg-type]
        for e in exploits_for(t):
            found = screen_patch(render_patch(repo, inst.base_commit, e), context(inst))
            results.append(
                {
                    "runner": runner,
                    "exploit": e.name,
                    "class": e.forgery_class,
                    "flagged": bool(found),
                    "rules": sorted({s.rule for s in found}),
                }
            )
    by_class: dict[str, dict[str, int]] = {}
    for r in results:
        c = by_class.setdefault(str(r["class"]), {"exploits": 0, "flagged": 0})
        c["exploits"] += 1
        c["flagged"] += int(bool(r["flagged"]))
    total = len(results)
    hit = sum(bool(r["flagged"]) for r in results)
    return {
        "exploits": total,
        "flagged": hit,
        "rate": hit / total if total else 0.0,
        "by_class": by_class,
        "results": results,
    }


# ------------------------------------------------------------------------------ catalogue mutants


@dataclasses.dataclass(frozen=True)
class MutantSuspect:
    """A mutant whose gold patch (the reverse of the mutant) the screen flags."""

    package: str
    instance_id: str
    """The id the mined row of this mutant would have."""
    kind: str
    file: str
    line: int
    """The mutated line of ``file``."""
    offered: bool
    """``distinct`` offers it (False: it does not compile, or compiles as an earlier candidate does)."""
    reasons: tuple[dict[str, object], ...]
    """The :class:`Suspicion` s: rule, path, line within the added piece, detail."""
    patch: str


@dataclasses.dataclass(frozen=True)
class ProjectScreen:
    """One project of the packages file: its mutants screened, or why it could not be read."""

    package: str
    status: str
    """``screened``, or ``skipped`` (the factory cannot read the project: ``reason``, ``detail``)."""
    sdist: str = ""
    source_files: int = 0
    test_files: int = 0
    sites: int = 0
    """Mutation sites of the source files (``mutate.sites``), before the compile and same-code checks."""
    screened: int = 0
    """Mutants rendered and screened: the sites in the miner's order up to its ``--mutants-per-project``-th
    candidate (:func:`mined_candidates`)."""
    candidates: int = 0
    """The screened mutants ``distinct`` offers."""
    suspect: tuple[MutantSuspect, ...] = ()
    seconds: float = 0.0
    reason: str = ""
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        out = dataclasses.asdict(self)
        out["suspect_count"] = len(self.suspect)
        return out


def mined_candidates(
    found: Sequence[Mutation], files: Mapping[str, bytes], name: str, seed: int, limit: int
) -> tuple[list[Mutation], frozenset[str]]:
    """The mutation sites ``found`` of a project in the miner's trial order (``mine._Miner``) up to its
    ``limit``-th candidate (0, or fewer candidates: every site), and the ids of the candidates among them
    (what ``distinct`` offers). The sites ``distinct`` leaves out before that point are kept: a miner with
    a finer equivalence check (the syntax-tree comparison before 2026-12-02) offered some of them, and
    never reached further into the order."""
    ordered = order(found, seed, name)
    offered = list(itertools.islice(distinct(ordered, files), limit or None))
    reach = ordered.index(offered[-1]) + 1 if limit and len(offered) == limit else len(ordered)
    return ordered[:reach], frozenset(m.id for m in offered)


def mined_rows(
    project: repo_mod.Project, mutants: Sequence[Mutation], hidden: tuple[str, ...] = ()
) -> list[dict[str, Any]]:
    """The rows ``envfarm tasks mine`` writes for ``mutants`` (its own ``materialize`` + ``rows``; the
    tests' outcomes left empty), ``hidden`` test files removed at each base commit."""
    bugs = [repo_mod.Bug(m, hidden, (), (), "") for m in mutants]
    with tempfile.TemporaryDirectory(prefix="screen-mutants-") as tmp:
        return repo_mod.rows(project, bugs, repo_mod.materialize(project, bugs, Path(tmp)))


def mined_context(project: repo_mod.Project, mutant: Mutation, test_files: Sequence[str]) -> tamper.Context:
    """``screen_context`` of a mined row whose hidden test files are ``test_files``: its test_patch's files
    (the hidden ones; no eval_script). The rules grow with those files, so all of a project's test files
    give every row of the project the widest context it can get."""
    (row,) = mined_rows(project, [mutant], tuple(test_files))
    return context(instance_from_row(row))


def _chunks(project: repo_mod.Project, mutants: Sequence[Mutation]) -> Iterator[list[Mutation]]:
    chunk: list[Mutation] = []
    size = 0
    for m in mutants:
        n = len(project.files[m.file])
        if chunk and (len(chunk) >= CHUNK_MUTANTS or size + n > CHUNK_BYTES):
            yield chunk
            chunk, size = [], 0
        chunk.append(m)
        size += n
    if chunk:
        yield chunk


def screen_mutants(
    project: repo_mod.Project,
    mutants: Sequence[Mutation],
    test_files: Sequence[str],
    offered: frozenset[str] = frozenset(),
) -> list[MutantSuspect]:
    """Render each mutant's mined row and screen its gold patch; the suspect ones (``offered``: the ids
    ``distinct`` offers)."""
    found = []
    ctx: tamper.Context | None = None
    for chunk in _chunks(project, mutants):
        ctx = ctx or mined_context(project, chunk[0], test_files)
        for m, row in zip(chunk, mined_rows(project, chunk), strict=True):
            inst = instance_from_row(row)
            hits = screen_patch(inst.patch, ctx)
            if hits:
                found.append(
                    MutantSuspect(
                        str(project.spec),
                        inst.instance_id,
                        m.kind,
                        m.file,
                        m.line,
                        m.id in offered,
                        tuple(_flag(s) for s in hits),
                        inst.patch,
                    )
                )
    return found


def screen_project(package: str, seed: int, limit: int, sdists: Path) -> ProjectScreen:
    """One project: the sdist and layout as the factory reads them, then :func:`screen_mutants`."""
    t0 = time.monotonic()
    try:
        found = infer(parse_spec(package), sdists)
    except FarmError as e:
        return ProjectScreen(
            package,
            "skipped",
            seconds=round(time.monotonic() - t0, 1),
            reason=reason_code(e),
            detail=str(e)[:2000],
        )
    layout = found.layout
    project = repo_mod.make_project(
        found.spec, found.sdist.path.name, found.sdist.sha256, found.files, found.env_recipe()
    )
    files = project.files
    every = [m for f in layout.source_files for m in sites(f, files[f])]
    mutants, offered = mined_candidates(every, files, found.spec.name, seed, limit)
    suspect = screen_mutants(project, mutants, layout.test_files, offered)
    return ProjectScreen(
        package,
        "screened",
        found.sdist.path.name,
        len(layout.source_files),
        len(layout.test_files),
        len(every),
        len(mutants),
        len(offered),
        tuple(suspect),
        round(time.monotonic() - t0, 1),
    )


def measure_catalogue_mutants(
    packages_file: Path, seed: int, limit: int, sdists: Path, progress: Callable[[ProjectScreen], None]
) -> dict[str, object]:
    projects = []
    for package in read_packages_file(packages_file):
        projects.append(screen_project(package, seed, limit, sdists))
        progress(projects[-1])
    done = [p for p in projects if p.status == "screened"]
    return {
        "date": time.strftime("%Y-%m-%d"),
        "packages_file": str(packages_file),
        "seed": seed,
        "mutants_per_project": limit or "all",
        "projects": len(projects),
        "screened_projects": len(done),
        "skipped": {p.package: p.reason for p in projects if p.status != "screened"},
        "sites": sum(p.sites for p in done),
        "mutants": sum(p.screened for p in done),
        "candidates": sum(p.candidates for p in done),
        "suspect": sum(len(p.suspect) for p in done),
        "rules": dict(Counter(r["rule"] for p in done for s in p.suspect for r in s.reasons)),
        "seconds": round(sum(p.seconds for p in projects), 1),
        "per_project": [p.to_json() for p in projects],
    }


def _where(reasons: Sequence[Mapping[str, object]]) -> str:
    """A flagged patch's reasons (:func:`_flag`) on one line."""
    return "; ".join(f"{r['rule']} {r['path']}:{r['line']} {r['detail']}" for r in reasons)


def _print_project(p: ProjectScreen) -> None:
    if p.status != "screened":
        print(f"  {p.package}: {p.status} ({p.reason}) {p.detail.splitlines()[0][:120]}", flush=True)
        return
    print(
        f"  {p.package}: {p.screened} mutants ({p.candidates} candidates) of {p.sites} sites, "
        f"{len(p.suspect)} suspect, {p.seconds:.0f}s",
        flush=True,
    )
    for s in p.suspect:
        where = _where(s.reasons)
        offered = "" if s.offered else " (not a candidate)"
        print(f"     {s.instance_id} {s.kind} {s.file}:{s.line}{offered}: {where}", flush=True)


# ------------------------------------------------------------------------------------------ output


def merged(previous: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
    """``result`` over the JSON written before: its other keys kept, and gold sets it measured but this run
    did not (a ``--tasks`` file not given now) under ``gold.earlier`` with their date."""
    out = {**previous, **result}
    before = previous.get("gold", {})
    earlier = dict(before.get("earlier", {}))
    for name, figures in before.get("sets", {}).items():
        earlier[name] = {**figures, "date": previous.get("date", "")}
    earlier = {k: v for k, v in earlier.items() if k not in result["gold"]["sets"]}
    if earlier:
        out["gold"] = {**result["gold"], "earlier": earlier}
    return out


def _read_json(path: Path) -> dict[str, Any]:
    if not path.is_file():
        return {}
    data = json.loads(path.read_text(encoding="utf-8"))
    return data if isinstance(data, dict) else {}


def _print_gold(gold: dict[str, Any], rules: Counter[str]) -> None:
    for name, s in gold["sets"].items():
        print(f"gold {name}: {s['suspect']}/{s['rows']} suspect")
    print(f"gold unique rows: {gold['unique_suspect']}/{gold['unique_rows']} suspect; rules {dict(rules)}")
    for f in gold["flagged"]:
        print("  ", f["instance_id"], _where(f["reasons"]))


def _print_forgeries(forged: dict[str, Any]) -> None:
    print(
        f"forgeries flagged: {forged['flagged']}/{forged['exploits']} ({100 * forged['rate']:.0f}%), "
        f"by class {forged['by_class']}"
    )
    for r in forged["results"]:
        if not r["flagged"]:
            print("   missed:", r["runner"], r["exploit"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--json", type=Path, default=Path(__file__).parent / "results" / "screen.json")
    ap.add_argument("--tasks", type=Path, nargs="*", default=[], help="mined task JSONL files (catalogue)")
    ap.add_argument(
        "--catalogue-mutants",
        type=Path,
        metavar="PACKAGES_FILE",
        help="also screen the gold patch of every mined candidate of these NAME==VERSION lines",
    )
    ap.add_argument(
        "--mutants-per-project",
        type=int,
        default=MUTANTS_PER_PROJECT,
        metavar="N",
        help="the first N of the miner's candidates per project (default %(default)s, the "
        "miner's own cap at 50 tasks a project; 0: all)",
    )
    ap.add_argument("--seed", type=int, default=0, help="the miner's seed (its candidate order)")
    ap.add_argument("--sdists", type=Path, default=None, help="sdist cache (default $ENVFARM_HOME/sdists)")
    args = ap.parse_args()
    start = time.monotonic()
    gold: dict[str, Any] = measure_gold(gold_rows(args.tasks))
    forged: dict[str, Any] = measure_forgeries()
    rules = Counter(r["rule"] for f in gold["flagged"] for r in f["reasons"])
    _print_gold(gold, rules)
    _print_forgeries(forged)
    result: dict[str, Any] = {
        "date": time.strftime("%Y-%m-%d"),
        "gold": gold,
        "gold_rules": dict(rules),
        "forgeries": forged,
    }
    if args.catalogue_mutants is not None:
        print(
            f"catalogue mutants of {args.catalogue_mutants} (first {args.mutants_per_project or 'all'} "
            f"candidates a project, seed {args.seed}):",
            flush=True,
        )
        found = measure_catalogue_mutants(
            args.catalogue_mutants,
            args.seed,
            args.mutants_per_project,
            args.sdists or config.home() / "sdists",
            _print_project,
        )
        print(
            f"catalogue mutants: {found['suspect']}/{found['mutants']} suspect over "
            f"{found['screened_projects']} projects ({found['sites']} sites); rules {found['rules']}; "
            f"skipped {found['skipped']}"
        )
        result["catalogue_mutants"] = found
    result["seconds"] = round(time.monotonic() - start, 1)
    args.json.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(merged(_read_json(args.json), result), indent=2) + "\n"
    args.json.write_text(text, encoding="utf-8")
    print(f"wrote {args.json}")


if __name__ == "__main__":
    main()
