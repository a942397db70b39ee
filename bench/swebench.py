"""SWE-bench Lite and Verified in this environment: per repository, how many rows ran, resolved with gold and
resolved unpatched, with the reason of every row that does not validate (from `envfarm harness validate`).

    python bench/swebench.py --validate REPORTS                       # every */validate.json under it
    python bench/swebench.py --validate REPORTS --docs docs/swebench --out bench/results/swebench.json

Starts from the committed record of every row validated so far (``docs/swebench/results.jsonl``, one row of a
``validate.json`` per line with its run id: report folders do not outlive a machine, this file does), then
reads every ``validate.json`` given (files, or folders searched recursively); a row validated by several runs
takes the newest result. Each dataset's rows are counted per repository and per (repo, version), with
django, matplotlib and scikit-learn marked not mirrorable here (their histories exceed what a mirror can hold
on this machine). Prints and writes JSON (``--out``); ``--docs DIR`` writes ``lite.md``, ``verified.md``,
``validated.md`` (every row run, both sets) and the merged record (``results.jsonl``) there. REPORTS is the
``--report-dir`` of the ``envfarm harness validate`` runs.
"""

from __future__ import annotations

import argparse
import json
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import pandas as pd

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT.parent / "shared" / "data"
DATASETS = {
    "lite": ("SWE-bench Lite", DATA / "swe-bench-lite" / "test.parquet"),
    "verified": ("SWE-bench Verified", DATA / "swe-bench-verified" / "test.parquet"),
}
HISTORY = ROOT / "docs" / "swebench" / "results.jsonl"
"""Every row validated so far, committed (``--docs`` rewrites it; ``--history`` names another)."""
# the folder of repository mirrors in a row's detail: the record says MIRRORS, not the machine's path
MIRROR_DIR = re.compile(r"(?<![\w.])/[^\s:'\"]*/(?=[\w.-]+__[\w.-]+\.git\b)")
NOT_MIRRORABLE = ("django/django", "matplotlib/matplotlib", "scikit-learn/scikit-learn")
"""Repositories whose histories (637-873 MB) exceed what a mirror can hold here (docs: DESIGN.md)."""


@dataclass
class Tally:
    """Rows of one repository (or one repo/version) in one dataset and what their validation found."""

    rows: int = 0
    run: int = 0
    gold_resolved: int = 0
    empty_resolved: int = 0
    validated: int = 0
    reasons: Counter[str] = field(default_factory=Counter)

    def add(self, result: dict[str, object] | None) -> None:
        self.rows += 1
        if result is None:
            return
        self.run += 1
        self.gold_resolved += all(g == "resolved" for g in result["gold"])  # type: ignore[union-attr]
        self.empty_resolved += result["empty"] == "resolved"
        self.validated += bool(result["validated"])
        if result.get("reason"):
            self.reasons[str(result["reason"])] += 1

    def as_json(self) -> dict[str, object]:
        return {**asdict(self), "reasons": dict(sorted(self.reasons.items()))}


def validate_files(paths: Iterable[Path]) -> list[Path]:
    """``validate.json`` files named or found under folders, oldest first (the newest wins per row)."""
    found: set[Path] = set()
    for path in paths:
        if not path.exists():
            raise SystemExit(f"error: --validate {path}: no such file or folder")
        found.update(path.rglob("validate.json") if path.is_dir() else [path])
    return sorted(found, key=lambda p: p.stat().st_mtime)


def results(files: Sequence[Path], history: Path | None = None) -> dict[str, dict[str, object]]:
    """instance id -> its row of the newest validate.json naming it (plus the run id), over ``history``."""
    out: dict[str, dict[str, object]] = {}
    if history is not None and history.is_file():
        for line in history.read_text(encoding="utf-8").splitlines():
            if line.strip():
                row = json.loads(line)
                out[row["instance_id"]] = row
    for path in files:
        data = json.loads(path.read_text(encoding="utf-8"))
        for row in data["rows"]:
            detail = MIRROR_DIR.sub("MIRRORS/", str(row.get("detail") or ""))
            out[row["instance_id"]] = {**row, "detail": detail, "run_id": data["run_id"]}
    return out


def tally(frame: pd.DataFrame, found: dict[str, dict[str, object]]) -> dict[str, object]:
    """Per repository and per (repo, version) tallies of one dataset."""
    repos: dict[str, Tally] = {}
    versions: dict[str, Tally] = {}
    for iid, repo, version in zip(frame.instance_id, frame.repo, frame.version, strict=True):
        result = found.get(iid)
        repos.setdefault(repo, Tally()).add(result)
        versions.setdefault(f"{repo} {version}", Tally()).add(result)
    failing = [found[i] for i in frame.instance_id if i in found and not found[i]["validated"]]
    return {
        "rows": len(frame),
        "per_repo": {r: t.as_json() for r, t in sorted(repos.items())},
        "per_version": {k: t.as_json() for k, t in sorted(versions.items(), key=lambda kv: _key(kv[0]))},
        "not_validating": [
            {k: r[k] for k in ("instance_id", "version", "gold", "empty", "reason", "detail", "run_id")}
            for r in sorted(failing, key=lambda r: str(r["instance_id"]))
        ],
    }


def _key(name: str) -> tuple[str, tuple[int, ...]]:
    repo, _, version = name.partition(" ")
    return repo, tuple(int(p) for p in version.split(".") if p.isdigit())


def _reasons(t: dict[str, object]) -> str:
    reasons: dict[str, int] = t["reasons"]  # type: ignore[assignment]
    return ", ".join(f"{k} {v}" for k, v in reasons.items()) or "-"


def markdown(title: str, summary: dict[str, object], sources: Sequence[str]) -> str:
    """lite.md / verified.md: per repository, per (repo, version), then every row that does not validate."""
    per_repo: dict[str, dict[str, object]] = summary["per_repo"]  # type: ignore[assignment]
    lines = [
        f"# {title} in envfarm's offline environments",
        "",
        "Generated by `python bench/swebench.py --validate <report dirs> --docs docs/swebench` from "
        f"`envfarm harness validate` runs ({', '.join(sources) or 'none yet'}). A row validates when gold "
        "resolves it and the unpatched base (test_patch applied, no fix) does not; `rows run` counts rows "
        "validated so far (runs resume by --run-id; how they were run and resume: docs/swebench/README.md).",
        "",
        "| repository | rows | rows run | gold resolved | empty resolved | reasons |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    totals = Tally()
    for repo, t in per_repo.items():
        if repo in NOT_MIRRORABLE:
            lines.append(f"| {repo} | {t['rows']} | not mirrorable here | - | - | no-repository |")
            continue
        lines.append(
            f"| {repo} | {t['rows']} | {t['run']} | {t['gold_resolved']} | {t['empty_resolved']} | "
            f"{_reasons(t)} |"
        )
        for name in ("rows", "run", "gold_resolved", "empty_resolved"):
            setattr(totals, name, getattr(totals, name) + int(t[name]))  # type: ignore[call-overload]
    lines += [
        f"| **mirrorable, total** | {totals.rows} | {totals.run} | {totals.gold_resolved} | "
        f"{totals.empty_resolved} | |",
        "",
        "## Per (repo, version)",
        "",
        "| repo version | rows | rows run | gold resolved | empty resolved | reasons |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    per_version: dict[str, dict[str, object]] = summary["per_version"]  # type: ignore[assignment]
    for name, t in per_version.items():
        if name.split(" ")[0] in NOT_MIRRORABLE:
            continue
        lines.append(
            f"| {name} | {t['rows']} | {t['run']} | {t['gold_resolved']} | {t['empty_resolved']} | "
            f"{_reasons(t)} |"
        )
    lines += [
        "",
        "## Rows that do not validate",
        "",
        "| instance | version | gold | empty | reason | detail |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for r in summary["not_validating"]:  # type: ignore[attr-defined]
        detail = str(r["detail"]).replace("|", "\\|")[:300]
        lines.append(
            f"| {r['instance_id']} | {r['version']} | {'/'.join(r['gold'])} | {r['empty']} | {r['reason']} | "
            f"{detail} |"
        )
    return "\n".join(lines) + "\n"


def rows_markdown(found: dict[str, dict[str, object]], membership: dict[str, list[str]]) -> str:
    """validated.md: every row run, the sets it belongs to, its outcome and reason."""
    lines = [
        "# SWE-bench rows validated here",
        "",
        "Generated by `python bench/swebench.py --docs docs/swebench`; per repository: lite.md, "
        "verified.md; how the runs were made and resume: README.md. `gold` lists each gold run's outcome; "
        "`seconds`: wall time of the row's runs, waits for a worker and image builds included.",
        "",
        "| instance | sets | gold | empty | seconds | reason | run |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for iid in sorted(found):
        r = found[iid]
        sets = "+".join(membership.get(iid, [])) or "-"
        lines.append(
            f"| {iid} | {sets} | {'/'.join(r['gold'])} | {r['empty']} | {float(r['seconds']):.0f} | "  # type: ignore[arg-type]
            f"{r['reason'] or 'validated'} | {r['run_id']} |"
        )
    return "\n".join(lines) + "\n"


def history_lines(found: dict[str, dict[str, object]]) -> str:
    """results.jsonl: one row per instance, sorted (stable diffs when runs add rows)."""
    return "".join(json.dumps(found[iid], sort_keys=True) + "\n" for iid in sorted(found))


def env_builds(labelled: Sequence[str]) -> dict[str, object]:
    """``LABEL=FILE`` pairs of ``envfarm images build --harness --report`` outputs (cold, warm, ...): per
    label and repository the images, how many were built (not found), their build seconds (sum, max),
    failures."""
    out: dict[str, object] = {}
    for item in labelled:
        label, _, name = item.partition("=")
        if not name:
            raise SystemExit(f"error: --builds {item!r}: write LABEL=FILE (cold=/tmp/cold.json)")
        data = json.loads(Path(name).read_text(encoding="utf-8"))
        repos: dict[str, dict[str, float]] = {}
        for b in data["builds"]:
            zero = {"images": 0, "built": 0, "failed": 0, "seconds": 0.0, "max_s": 0.0}
            r = repos.setdefault(b["repo"], zero)
            r["images"] += 1
            r["built"] += bool(b["built"])
            r["failed"] += bool(b["error"])
            r["seconds"] = round(r["seconds"] + b["seconds"], 1)
            r["max_s"] = round(max(r["max_s"], b["seconds"]), 1)
        out[label] = {
            "wall_s": round(data["seconds"], 1),
            "images": len(data["builds"]),
            "built": sum(bool(b["built"]) for b in data["builds"]),
            "failed": [
                f"{b['repo']} {b['version']}: {b['error'][:200]}" for b in data["builds"] if b["error"]
            ],
            "unplanned": [f"{u['repo']} {u['version']}: {u['reason']}" for u in data["unplanned"]],
            "per_repo": dict(sorted(repos.items())),
        }
    return out


def disk() -> dict[str, object]:
    """Bytes of the harness images per (repo, version) (env image + its instance layers) and in total."""
    from envfarm.harness.disk import by_env, list_images

    envs = by_env(list_images())
    per = {
        f"{e.repo} {e.version}": {
            "env_bytes": e.env_bytes,
            "instance_images": e.instance_images,
            "instance_bytes": e.instance_bytes,
        }
        for e in envs
    }
    return {"per_version": per, "total_bytes": sum(e.total_bytes for e in envs)}


def _need_rows(args: argparse.Namespace, flag: str) -> None:
    if args.instances is None or args.repo_source is None:
        raise SystemExit(f"error: {flag} needs --instances F and --repo-source DIR")


def run_overhead(args: argparse.Namespace) -> dict[str, object]:
    import asyncio
    import tempfile

    from swebench_overhead import overhead

    from envfarm.harness import load_instances

    _need_rows(args, "--overhead")
    insts = load_instances(args.instances, args.overhead)
    with tempfile.TemporaryDirectory(prefix="bench-swebench-") as tmp:
        return asyncio.run(overhead(insts, args.repo_source, Path(tmp), turns=args.turns))


def run_coderepair(args: argparse.Namespace) -> dict[str, object]:
    from swebench_coderepair import coderepair

    _need_rows(args, "--coderepair")
    return coderepair(args.coderepair, args.instances, args.repo_source)


def main(argv: Sequence[str] | None = None) -> dict[str, object]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--validate",
        type=Path,
        nargs="*",
        default=[],
        help="validate.json files or folders holding them (none: the docs from the history alone)",
    )
    parser.add_argument(
        "--history",
        type=Path,
        default=HISTORY,
        help="the record to start from (default: docs/swebench/results.jsonl; a missing file: none)",
    )
    parser.add_argument("--out", type=Path, default=None, help="write the JSON here")
    parser.add_argument(
        "--docs", type=Path, default=None, help="write lite.md, verified.md, validated.md here"
    )
    parser.add_argument(
        "--builds",
        nargs="*",
        default=[],
        metavar="LABEL=FILE",
        help="`images build --harness --report` outputs to summarise (cold=F warm=F)",
    )
    parser.add_argument("--disk", action="store_true", help="disk of the harness images per repo/version")
    parser.add_argument(
        "--overhead",
        nargs="*",
        default=[],
        metavar="ID",
        help="rows to time: the harness, then the same tests in a plain container",
    )
    parser.add_argument(
        "--coderepair",
        nargs="*",
        default=[],
        metavar="ID",
        help="rows to play in CodeRepair-v0: the gold patch must earn 1.0, the untouched code 0.0",
    )
    parser.add_argument("--instances", type=Path, default=None, help="rows file (--overhead, --coderepair)")
    parser.add_argument("--repo-source", type=Path, default=None, help="mirrors (--overhead, --coderepair)")
    parser.add_argument("--turns", type=int, default=3, help="alternating timed turns per --overhead row")
    args = parser.parse_args(argv)
    files = validate_files(args.validate)
    found = results(files, args.history)
    sources = sorted({str(r["run_id"]) for r in found.values()})
    summary: dict[str, object] = {"validate_files": [str(f) for f in files], "runs": sources}
    membership: dict[str, list[str]] = {}
    for key, (title, path) in DATASETS.items():
        frame = pd.read_parquet(path, columns=["instance_id", "repo", "version"])
        for iid in frame.instance_id:
            membership.setdefault(iid, []).append(key)
        summary[key] = tally(frame, found)
        if args.docs:
            args.docs.mkdir(parents=True, exist_ok=True)
            (args.docs / f"{key}.md").write_text(markdown(title, summary[key], sources), encoding="utf-8")  # type: ignore[arg-type]
    if args.docs:
        table = rows_markdown(found, membership)
        (args.docs / "validated.md").write_text(table, encoding="utf-8")
        (args.docs / "results.jsonl").write_text(history_lines(found), encoding="utf-8")
    if args.builds:
        summary["env_builds"] = env_builds(args.builds)
    if args.disk:
        summary["disk"] = disk()
    if args.overhead:
        summary["overhead"] = run_overhead(args)
    if args.coderepair:
        summary["coderepair"] = run_coderepair(args)
    text = json.dumps(summary, indent=2)
    print(text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n", encoding="utf-8")
    return summary


if __name__ == "__main__":
    main()
