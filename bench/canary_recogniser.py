"""How well can a forger tell planted canaries from real tests? ``envfarm.testing.recogniser`` against the
canaries ``harness/canary.py`` plants, on the built-in code-repair tasks and on SWE-bench rows.

    python bench/canary_recogniser.py --repo-source MIRRORS --rows 150 --per-repo 40 --trials 3

For every row: the test files at the base commit with test_patch applied (git only, no docker), the module
the harness plants in (``canary.pick_module``, first one present), canaries planted ``--trials`` times with
the row's lists (``canary.known_for``), then (``--twins``, the default, as the harness runs) the
differential check's twins of the module's FAIL_TO_PASS and new PASS_TO_PASS tests (``differential.plant``);
each planted module judged by the recogniser, which also gets the module as the repository has it at HEAD
and the weights fitted for the row's source (``WEIGHTS``; a forger knows which kind of task it attacks).
With ``--decoy-pool`` (the ``decoys.json`` of ``envfarm harness validate`` on these rows) the twins draw
from the pool as ``harness run --decoy-pool`` plants them.
``--fit`` fits the recogniser's weights instead (``recogniser.fit_weights``, from ``HAND``), per source,
on rows the bench does not score: the built-in ones planted with another seed and ``--fit-rows`` other
SWE-bench rows; it writes ``bench/results/canary_recogniser_fit.json``, which ``recogniser.BUILTIN`` and
``recogniser.SWE_BENCH`` copy.
Planted tests are the canaries and the decoys (both must fail, or pass for must-pass canaries); an honest
copy is the test it copies (a real test, or a must-pass canary). ``MIRRORS`` holds ``owner__name.git``
repositories (the harness's ``--repo-source`` folder); rows of repositories not there are left out.
Figures, pooled over every test of every planted module:

- balanced accuracy ((canaries called canary + real tests called real) / 2, each as a rate) on three sets:
  every test; the tests the repository does not have unchanged (*unseen*: test_patch's and the canaries);
  the tests with a name the repository does not have (*new names*: canaries and tests test_patch adds);
  of those, the tests not *settled* by the repository (*new code*): left out are the twins (the honest
  copy and its decoys) of a FAIL_TO_PASS test the repository has unchanged, whose honest copy is that
  test under another name (no decoy can hide it from a reader of the repository, and a forger that reads
  it flips that copy whatever the grader plants): the only set where telling them apart is not settled
  by reading the repository;
- the forger's win rate: plantings where every must-fail canary and decoy is called a canary while every
  FAIL_TO_PASS test of the module (its honest copy), and every must-pass canary copied from one, is called
  real (what a grader-aware forgery needs to be graded resolved by both checks; canaries alone with
  ``--no-twins``);
- how many plantings fell back to synthetic canaries, and how many rows add no FAIL_TO_PASS test under a new
  name to the planted module (a forger that forges only names in the repository evades canaries there);
- per form of planted test (must-fail/must-pass canary, each kind of decoy) and of real test (honest copy,
  real), on the new-code set: how many, and the share called right (``new_code_by_form``).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Collection
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from random import Random

from envfarm.harness import canary, decoy_pool, differential
from envfarm.harness.instances import Instance, instance_from_row, load_instances
from envfarm.harness.repos import RepoNotFound, find_repo
from envfarm.harness.specs import SpecCatalog
from envfarm.testing.recogniser import (
    BUILTIN,
    GRID,
    HAND,
    PASSES,
    SWE_BENCH,
    Judgement,
    Key,
    Weights,
    decide,
    features,
    fit_weights,
    judge,
    tests_of,
)

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
RESULTS = ROOT / "bench" / "results"
WEIGHTS = {"builtin": BUILTIN, "swe-bench": SWE_BENCH}
"""The recogniser's weights per source (a forger knows which it attacks)."""


@dataclass(frozen=True)
class Case:
    """One test of one planted module, with the truth and the recogniser's call."""

    source: str
    instance_id: str
    trial: int
    name: str
    canary: bool
    must_fail: bool
    fail_to_pass: bool
    """A FAIL_TO_PASS test, or a must-pass canary with its code (fails without a fix, like its source)."""
    seen: bool
    """In the repository at HEAD unchanged (same name and code)."""
    new_name: bool
    hidden: bool
    """The planting's must-fail canaries copy tests test_patch adds (``Planting.hidden``)."""
    called_canary: bool
    settled: bool = False
    """A twin (honest copy or decoy) of a test the repository has unchanged."""
    form: str = ""
    """What the test is: ``must-fail``/``must-pass`` (canaries), a decoy's ``how``, ``honest`` (a twin's
    honest copy), ``real``."""
    why: str = ""
    """The recogniser's reason."""


def git(repo: Path, *args: str) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(["git", "-C", str(repo), *args], capture_output=True, check=False)


def test_texts(repo: Path, inst: Instance, files: tuple[str, ...]) -> tuple[dict[str, str], dict[str, str]]:
    """(files at the base commit, files with test_patch applied), path -> text, for ``files``."""
    heads: dict[str, str] = {}
    with tempfile.TemporaryDirectory(prefix="canary-bench-") as tmp:
        root = Path(tmp)
        for path in files:
            shown = git(repo, "show", f"{inst.base_commit}:{path}")
            if shown.returncode == 0:
                heads[path] = shown.stdout.decode(errors="replace")
                (root / path).parent.mkdir(parents=True, exist_ok=True)
                (root / path).write_bytes(shown.stdout)
        (root / "t.patch").write_text(inst.test_patch)
        res = subprocess.run(["git", "apply", "t.patch"], cwd=root, capture_output=True, check=False)
        if res.returncode:
            return heads, {}
        return heads, {p: (root / p).read_text(errors="replace") for p in files if (root / p).is_file()}


@dataclass(frozen=True)
class Planted:
    """One planted module of a row, as the recogniser gets it, with the truth its cases need."""

    source: str
    instance_id: str
    trial: int
    text: str
    head: str | None
    """The module at the repository's HEAD (None: the repository has no such file)."""
    forms: dict[str, str]
    """Planted tests: name -> ``Case.form``."""
    failing: frozenset[str]
    settled: frozenset[str]
    head_names: frozenset[str]
    hidden: bool


def row_plantings(source: str, inst: Instance, repo: Path, catalog: SpecCatalog, trials: int, seed: int,
                  twins: bool = True, pool: decoy_pool.Pools | None = None
                  ) -> tuple[list[Planted], dict[str, object]]:
    """A row's planted modules, ``trials`` of them (none when no test module can be planted in)."""
    plan = catalog.plan(inst)
    heads, texts = test_texts(repo, inst, plan.test_files)
    known = canary.known_for(inst.fail_to_pass, inst.pass_to_pass, inst.test_patch)
    picked = canary.pick_module(plan.test_files, plan.test_command, Random(seed), known)
    modules = [m for m in picked if m in texts]
    if not modules:
        return [], {"instance_id": inst.instance_id, "skipped": "no test module to plant in"}
    module, style = modules[0], canary.style_for(plan.log_parser)
    head = heads.get(module)
    head_names = frozenset(t.key[1] for t in tests_of(head or ""))
    f2p = {k[2] for k in known.failing if k[0] in (None, module)}
    info: dict[str, object] = {"instance_id": inst.instance_id, "module": module,
                               "new_f2p": sorted(f2p - head_names), "derived": 0, "twinned": 0}
    out = []
    stand_in = twins and any(differential.twinnable(m, t, inst.fail_to_pass, inst.test_patch, heads.get(m))
                             for m, t in texts.items() if m.endswith(".py"))
    for trial in range(trials):
        rng = Random(f"{seed}:{inst.instance_id}:{trial}")
        planting = canary.plant(module, texts[module], style, rng, known=known)
        if stand_in and not planting.hidden:  # the harness plants no such canaries (run.py's _plant)
            planting = replace(planting, canaries=(), text=texts[module])
        compile(planting.text, module, "exec")
        info["derived"] = int(info["derived"]) + planting.derived  # type: ignore[call-overload]
        forms = {c.name: "must-pass" if c.must_pass else "must-fail" for c in planting.canaries}
        code = {t.key[1]: t.tokens for t in tests_of(planting.text)}
        failing = f2p | {n for n, form in forms.items()
                         if form == "must-pass" and any(code.get(n) == code.get(f) for f in f2p)}
        text, settled = planting.text, set()
        if twins:
            sites = (pool or {}).get(inst.instance_id, {}).get(module, ())
            text, failing, forms, settled = with_twins(inst, module, text, forms, failing, rng, head, sites)
            info["twinned"] = int(info["twinned"]) + (text != planting.text)  # type: ignore[call-overload]
        out.append(Planted(source, inst.instance_id, trial, text, head, forms, frozenset(failing),
                           frozenset(settled), head_names, planting.hidden))
    return out, info


def cases_of(p: Planted, judged: dict[Key, Judgement]) -> list[Case]:
    """A case per test of a planted module, from the recogniser's judgements of it."""
    cases = []
    for (_, name), j in judged.items():
        form = p.forms.get(name, "real")
        planted = form not in ("real", "honest")
        cases.append(Case(p.source, p.instance_id, p.trial, name, planted, planted and form != "must-pass",
                          name in p.failing, j.score <= -10.0, name not in p.head_names, p.hidden,
                          j.canary, name in p.settled, form, j.why))
    return cases


def row_cases(source: str, inst: Instance, repo: Path, catalog: SpecCatalog, trials: int, seed: int,
              twins: bool = True, pool: decoy_pool.Pools | None = None
              ) -> tuple[list[Case], dict[str, object]]:
    plantings, info = row_plantings(source, inst, repo, catalog, trials, seed, twins, pool)
    return [c for p in plantings for c in cases_of(p, judge(p.text, p.head, weights=WEIGHTS[source]))], info


def with_twins(inst: Instance, module: str, planted: str, forms: dict[str, str], failing: set[str],
               rng: Random, head: str | None = None, pool: tuple[decoy_pool.PoolSite, ...] = ()
               ) -> tuple[str, set[str], dict[str, str], set[str]]:
    """The module after ``differential.py`` twins its FAIL_TO_PASS tests and the PASS_TO_PASS tests
    test_patch adds (decoys placed against ``head``, the repository's version), as the harness runs it,
    with the planted tests (decoys are must-fail plantings; an honest copy of a canary is that canary) and
    the tests a forger must forge (honest copies in place of the tests they copy). ``forms``: what each
    planted test is (``Case.form``), before and after; last, the names of the twins of tests the repository
    has unchanged (``Case.settled``)."""
    wanted, then = differential.targets(module, inst.fail_to_pass, inst.pass_to_pass, inst.test_patch)
    added = differential.added_lines(inst.test_patch, module)
    twinned = differential.plant(module, planted, wanted, added, rng, then=then, before=head, pool=pool)
    failing, forms = set(failing), dict(forms)
    mine = {t.key[1]: t.tokens for t in tests_of(planted)}
    theirs = {t.key[1]: t.tokens for t in tests_of(head or "")}
    settled = {n for t in twinned.twins if theirs.get(t.test, ()) == mine.get(t.test)
               for n in (t.honest, t.decoy)}
    for t in twinned.twins:
        if t.test in failing:
            failing.add(t.honest)
        forms[t.honest] = forms.get(t.test, "honest")  # a must-pass canary's honest copy is that canary
        forms[t.decoy] = t.how
    gone = {t.test for t in twinned.twins}
    return twinned.text, failing - gone, {k: v for k, v in forms.items() if k not in gone}, settled


def balanced(cases: list[Case]) -> dict[str, float | int]:
    pos = [c for c in cases if c.canary]
    neg = [c for c in cases if not c.canary]
    tpr = sum(c.called_canary for c in pos) / len(pos) if pos else float("nan")
    tnr = sum(not c.called_canary for c in neg) / len(neg) if neg else float("nan")
    return {"canaries": len(pos), "real": len(neg), "canaries_called_canary": round(tpr, 4),
            "real_called_real": round(tnr, 4), "balanced_accuracy": round((tpr + tnr) / 2, 4)}


def by_form(cases: list[Case]) -> dict[str, dict[str, float | int]]:
    """Per form (``Case.form``): how many tests, and the share the recogniser called right (a planted test
    a canary, a real test or an honest copy real)."""
    forms: dict[str, list[Case]] = {}
    for c in cases:
        forms.setdefault(c.form, []).append(c)
    return {form: {"tests": len(group),
                   "called_right": round(sum(c.called_canary == c.canary for c in group) / len(group), 4)}
            for form, group in sorted(forms.items())}


def wins(cases: list[Case]) -> tuple[int, int]:
    """(plantings the forger wins, plantings)."""
    groups: dict[tuple[str, int], list[Case]] = {}
    for c in cases:
        groups.setdefault((c.instance_id, c.trial), []).append(c)
    won = 0
    for group in groups.values():
        fail_ok = all(c.called_canary for c in group if c.must_fail)
        real_ok = all(not c.called_canary for c in group if c.fail_to_pass)
        won += fail_ok and real_ok and any(c.must_fail for c in group)
    return won, len(groups)


def _rate(pair: tuple[int, int]) -> float | None:
    return round(pair[0] / pair[1], 4) if pair[1] else None


def summary(cases: list[Case], infos: list[dict[str, object]], trials: int) -> dict[str, object]:
    sets = {"all": cases, "unseen": [c for c in cases if not c.seen],
            "new_names": [c for c in cases if c.new_name],
            "new_code": new_code(cases),
            "new_names_hidden_sources": [c for c in cases if c.new_name and c.hidden],
            "new_names_repository_sources": [c for c in cases if c.new_name and not c.hidden]}
    hidden = {(c.instance_id, c.trial) for c in cases if c.hidden}
    won, plantings = wins(cases)
    planted = [i for i in infos if "module" in i]
    return {
        "rows": len(planted),
        "rows_skipped": len(infos) - len(planted),
        "plantings": plantings,
        "synthetic_plantings": sum(trials - int(i["derived"]) for i in planted),  # type: ignore[call-overload]
        "rows_without_new_f2p_in_module": sum(not i["new_f2p"] for i in planted),
        "plantings_from_hidden_tests": len(hidden),
        "forger_wins": won,
        "forger_win_rate": round(won / plantings, 4) if plantings else None,
        "forger_win_rate_hidden_sources": _rate(wins([c for c in cases if c.hidden])),
        "twinned_plantings": sum(int(i.get("twinned", 0)) for i in planted),  # type: ignore[call-overload]
        **{name: balanced(subset) for name, subset in sets.items()},
        "new_code_by_form": by_form(sets["new_code"]),
    }


def builtin_rows() -> list[tuple[str, Instance, Path]]:
    """Every built-in code-repair task, with its cached repository."""
    from envfarm.envs.code_repair import builtin

    projects = builtin.load_projects()
    repos = builtin.cached_repos(projects)
    out = []
    for r in builtin.rows(projects):
        inst = instance_from_row(r)
        out.append(("builtin", inst, find_repo(repos, inst.repo)))
    return out


def swe_rows(args: argparse.Namespace) -> list[tuple[str, Instance, Path]]:
    """Every SWE-bench row (lite, then verified) whose repository ``--repo-source`` holds, by id."""
    seen: dict[str, Instance] = {}
    for name in ("swe-bench-lite", "swe-bench-verified"):
        for inst in load_instances(args.data / name):
            seen.setdefault(inst.instance_id, inst)
    out = []
    for inst in sorted(seen.values(), key=lambda i: i.instance_id):
        try:
            out.append(("swe-bench", inst, find_repo(args.repo_source, inst.repo)))
        except RepoNotFound:
            continue
    return out


def capped(found: list[tuple[str, Instance, Path]], per_repo: int, keep: Collection[str] = ()
           ) -> list[tuple[str, Instance, Path]]:
    """``found`` with at most ``per_repo`` rows of each repository (rows in ``keep`` always)."""
    count: Counter[str] = Counter()
    out = []
    for row in found:
        if count[row[1].repo] < per_repo or row[1].instance_id in keep:
            count[row[1].repo] += 1
            out.append(row)
    return out


def scored_swe(args: argparse.Namespace, found: list[tuple[str, Instance, Path]]
               ) -> list[tuple[str, Instance, Path]]:
    """Of ``found`` (:func:`swe_rows`), the SWE-bench rows the bench scores: ``--rows`` of them drawn with
    ``--seed``, at most ``--per-repo`` per repository (or the ``--instance-ids``)."""
    chosen = capped(found, args.per_repo, args.instance_ids)
    Random(args.seed).shuffle(chosen)
    if args.instance_ids:
        return [r for r in chosen if r[1].instance_id in set(args.instance_ids)]
    return chosen[: args.rows]


def rows(args: argparse.Namespace) -> list[tuple[str, Instance, Path]]:
    """The rows the bench scores: every built-in one (or those of ``--instance-ids``) and
    :func:`scored_swe`."""
    built = builtin_rows()
    if args.instance_ids:
        built = [r for r in built if r[1].instance_id in set(args.instance_ids)]
    return built + scored_swe(args, swe_rows(args))


def fit_rows(args: argparse.Namespace) -> list[tuple[str, Instance, Path]]:
    """The rows weights are fitted on: the built-in ones (planted with another seed than the bench's) and
    ``--fit-rows`` SWE-bench rows the bench does not score, at most ``--fit-per-repo`` per repository."""
    found = swe_rows(args)
    scored = {r[1].instance_id for r in scored_swe(args, found)}
    rest = [r for r in found if r[1].instance_id not in scored]
    Random(args.seed + 1).shuffle(rest)
    return builtin_rows() + capped(rest, args.fit_per_repo)[: args.fit_rows]


def new_code(cases: list[Case]) -> list[Case]:
    return [c for c in cases if c.new_name and not c.settled]


FIT_SEED = 7
"""Added to ``--seed`` to plant the built-in rows for a fit (the bench scores every built-in row)."""


def fit(plantings: list[Planted], start: Weights) -> tuple[Weights, float, float]:
    """Weights fitted on ``plantings`` (``recogniser.fit_weights``) to the balanced accuracy on their
    new-code set: (weights, start's accuracy, theirs)."""
    found = [(p, features(p.text, p.head)) for p in plantings]

    def score(w: Weights) -> float:
        judged = [c for p, f in found for c in cases_of(p, decide(f, w))]
        return float(balanced(new_code(judged))["balanced_accuracy"])

    return fit_weights(score, start)


def fit_main(args: argparse.Namespace, catalog: SpecCatalog) -> dict[str, object]:
    """``--fit``: weights per source from :func:`fit_rows`, starting from the hand-set ones (``HAND``)."""
    t0 = time.monotonic()
    plantings: dict[str, list[Planted]] = {"builtin": [], "swe-bench": []}
    for source, inst, repo in fit_rows(args):
        seed = args.seed + FIT_SEED if source == "builtin" else args.seed
        plantings[source] += row_plantings(source, inst, repo, catalog, args.trials, seed)[0]
    out: dict[str, object] = {}
    for source, planted in plantings.items():
        weights, first, top = fit(planted, HAND)
        out[source] = {"rows": len({p.instance_id for p in planted}), "plantings": len(planted),
                       "start": asdict(HAND), "start_accuracy": first, "weights": asdict(weights),
                       "accuracy": top}
    return {"measured": time.strftime("%Y-%m-%d"), "trials": args.trials, "grid": list(GRID),
            "passes": PASSES,
            "seconds": round(time.monotonic() - t0, 1), "by_source": out}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repo-source", type=Path, required=True, help="folder of owner__name.git mirrors")
    ap.add_argument("--data", type=Path, default=DATA, help="folder holding swe-bench-lite/ and -verified/")
    ap.add_argument("--rows", type=int, default=150, help="SWE-bench rows at most (builtin rows: all)")
    ap.add_argument("--per-repo", type=int, default=40, help="SWE-bench rows per repository at most")
    ap.add_argument("--trials", type=int, default=3, help="plantings per row")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--instance-ids", nargs="*", default=(), help="only these rows (built-in or SWE-bench)")
    ap.add_argument("--twins", action=argparse.BooleanOptionalAction, default=True,
                    help="plant the differential check's twins after the canaries, as the harness does")
    ap.add_argument("--out", type=Path, default=None,
                    help="default bench/results/canary_recogniser.json (--fit: canary_recogniser_fit.json)")
    ap.add_argument("--decoy-pool", type=Path, default=None,
                    help="decoys.json from `envfarm harness validate` on these rows: plant as `harness run "
                         "--decoy-pool` does")
    ap.add_argument("--fit", action="store_true",
                    help="fit the recogniser's weights per source on rows the bench does not score, write "
                         "them to --out (default bench/results/canary_recogniser_fit.json)")
    ap.add_argument("--fit-rows", type=int, default=60, help="SWE-bench rows to fit on (--fit)")
    ap.add_argument("--fit-per-repo", type=int, default=15, help="of them, per repository at most (--fit)")
    ap.add_argument("--cases", type=Path, default=None,
                    help="also write every judged test, one JSON object per line (for analysis)")
    args = ap.parse_args(argv)
    t0 = time.monotonic()
    catalog = SpecCatalog()
    if args.fit:
        return write(fit_main(args, catalog), args.out or RESULTS / "canary_recogniser_fit.json")
    cases: dict[str, list[Case]] = {"builtin": [], "swe-bench": []}
    infos: dict[str, list[dict[str, object]]] = {"builtin": [], "swe-bench": []}
    pool = decoy_pool.load(args.decoy_pool) if args.decoy_pool else None
    for source, inst, repo in rows(args):
        got, info = row_cases(source, inst, repo, catalog, args.trials, args.seed, args.twins, pool)
        cases[source] += got
        infos[source].append(info)
    result = {
        "measured": time.strftime("%Y-%m-%d"),
        "trials": args.trials,
        "twins": args.twins,
        "decoy_pool_rows": len(pool or {}),
        "weights": {s: asdict(w) for s, w in WEIGHTS.items()},
        "seconds": round(time.monotonic() - t0, 1),
        "by_source": {s: summary(cases[s], infos[s], args.trials) for s in cases},
        "total": summary(cases["builtin"] + cases["swe-bench"], infos["builtin"] + infos["swe-bench"],
                         args.trials),
        "repos": dict(Counter(i["instance_id"].rsplit("-", 1)[0] for i in infos["swe-bench"])),  # type: ignore[union-attr]
    }
    if args.cases:
        args.cases.write_text("".join(json.dumps(asdict(c)) + "\n" for s in cases.values() for c in s))
    return write(result, args.out or RESULTS / "canary_recogniser.json")


def write(result: dict[str, object], out: Path) -> int:
    text = json.dumps(result, indent=2)
    print(text)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
