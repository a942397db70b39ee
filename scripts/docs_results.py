"""Generate the docs' results pages from the committed measurements.

- ``docs/results/benchmarks.md`` from ``bench/results/*.json`` (what the ``bench/`` scripts write): one
  section per file with the command that reproduces it and the date it was measured.
- ``docs/results/swebench.md`` from ``docs/swebench/results.jsonl`` (the record of ``harness validate`` runs)
  and the per-set totals of ``docs/swebench/lite.md`` / ``verified.md`` (``bench/swebench.py`` writes those).
- ``docs/results/harbor.md`` from ``docs/harbor/*.json`` (``envfarm harbor validate`` reports of public
  Harbor datasets).

Usage: ``python scripts/docs_results.py`` (writes the pages) or ``--check`` (exit 1 if a page is stale;
``tests/test_docs.py`` does the same). A result file without a ``date`` field takes its date from
``MEASURED``: add a line there when committing a new one.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]

MEASURED: dict[str, str] = {
    "engine.json": "2026-12-01",
    "swebench/results.jsonl": "2026-12-02",
}
"""When each committed result was measured, for files that do not record it themselves."""


@dataclass(frozen=True)
class Bench:
    """What a ``bench/results/<name>.json`` file is and how to reproduce it."""

    title: str
    command: str
    render: Callable[[dict[str, Any]], list[str]]


def _fmt(value: object) -> str:
    """A number as the tables show it: thousands separated, at most 4 significant digits for floats."""
    if isinstance(value, bool) or value is None:
        return "-" if value is None else str(value).lower()
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.0f}" if abs(value) >= 1000 else f"{value:.4g}"
    return str(value)


def _ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1000:,.1f} ms"


def _table(header: list[str], rows: list[list[str]]) -> list[str]:
    lines = ["| " + " | ".join(header) + " |", "| " + " | ".join("---" for _ in header) + " |"]
    return lines + ["| " + " | ".join(row) + " |" for row in rows]


def _engine_row(arm: dict[str, Any]) -> dict[str, str]:
    farm, update, idle, busy = arm["farm"], arm["update"], arm["sync_idle"], arm["sync_under_load"]
    median, mismatch = update["median"], update["logprob_mismatch"]
    return {
        "start": "-" if not arm["start_s"] else f"{arm['start_s']:.0f} s",
        "farm": f"{_fmt(farm['tokens_per_s'])} tokens/s ({farm['wall_s']:.1f} s)",
        "idle": f"{_ms(idle['median_total_s'])} / {_ms(idle['max_total_s'])}",
        "load": f"{_ms(busy['median_total_s'])} / {_ms(busy['max_total_s'])}",
        "update": f"sampling {median['sampling_s']:.1f} s, learning {median['learning_s']:.1f} s, "
        f"sync {median['sync_s']:.3f} s",
        "logprob": f"max {mismatch['max']:.2g} over {_fmt(mismatch['tokens'])} tokens",
    }


def render_engine(data: dict[str, Any]) -> list[str]:
    """``bench/engine.py``: the built-in policy server against vLLM on one tiny model."""
    model, load, machine = data["model"], data["load"], data["machine"]
    builtin, vllm = _engine_row(data["builtin"]), _engine_row(data["vllm"])
    labels = {
        "start": "engine start",
        "farm": "farm sampling (completion tokens/s)",
        "idle": "weight sync, idle (median / max)",
        "load": "weight sync while the farm samples (median / max)",
        "update": "one RL update (median)",
        "logprob": "learner recompute vs the engine's logprobs",
    }
    rows = [[label, builtin[key], vllm[key]] for key, label in labels.items()]
    return [
        f"{model['kind']}, {_fmt(model['params'])} parameters, for both engines; {load['episodes']} "
        f"{load['env']} episodes at concurrency {load['concurrency']}, T={load['temperature']}, "
        f"{load['max_tokens']} tokens per turn, {load['backend']}; {machine['cpus']} CPUs, load average "
        f"{machine['load_avg_start']:.1f} at the start, {machine['load_avg_end']:.1f} at the end.",
        "",
        *_table(["", "built-in (`envfarm policy serve`)", "vLLM (`--engine vllm`)"], rows),
        "",
        f"vLLM over built-in, farm sampling: **{data['vllm_over_builtin_tokens_per_s']:.2f}x**.",
    ]


def render_faults(data: dict[str, Any]) -> list[str]:
    """``bench/faults.py``: the fault suites run again and again under load."""
    rows = [[f"`{r['command']}`", _fmt(r["runs"]), _fmt(r["failed_runs"]), f"{r['median_s']:.0f} s",
             f"{r['max_s']:.0f} s", f"{r['load_avg_median']:.1f} / {r['load_avg_max']:.1f}"]
            for r in data["suites"].values()]
    load = ", ".join(data["load"]) or "none"
    return [
        f"{data['cores']} cores; load beside the suites: {load}; {data['failed_runs']} failed runs in all.",
        "",
        *_table(["suite", "runs", "failed runs", "median", "max", "load average (median / max)"], rows),
    ]


def render_fork(data: dict[str, Any]) -> list[str]:
    """``bench/fork.py``: forking a sandbox that holds a prepared tree, against its exec step and a cold
    open + prepare."""
    rows = []
    for name, b in data["backends"].items():
        rows.append([name, f"{b['exec_step']['p50_ms']:.2f} ms", f"{b['fork']['p50_ms']:.0f} / "
                     f"{b['fork']['p99_ms']:.0f} ms", f"{b['fork_over_step_p50']:.0f}x",
                     f"{b['cold_open_prepare']['p50_ms']:.0f} ms", f"{b['cold_over_fork_p50']:.2f}x"])
    tree = data["tree"]
    return [
        f"{data['cpus']} cores; a parent holding {_fmt(tree['files'])} files ({tree['mb']} MB), "
        f"{data['children']} children per backend. Targets: fork p50 <= 10x the exec step (bwrap), <= 150x "
        "(docker); a fork >= 20x faster than a cold open + prepare.",
        "",
        *_table(["backend", "exec step p50", "fork p50 / p99", "fork / step", "cold open + prepare p50",
                 "cold / fork"], rows),
    ]


def render_live(data: dict[str, Any]) -> list[str]:
    """``bench/sandbox.py --live-only``: sandboxes held live at once, per backend."""
    rows, limits = [], data["limits"]
    for name, b in data["backends"].items():
        ksm = b.get("ksm", {})
        sharing = (f"on: {_fmt(ksm['pages_sharing'])} pages sharing, ksmd {ksm['ksmd_cpu_s']:.0f} CPU s"
                   if ksm.get("running") else "off")
        left = sum(b["left"].values())
        rows.append([f"{name} via {b['via']}", f"{_fmt(b['live'])} of {_fmt(b['target'])}",
                     f"{_fmt(b['answered'])} / {_fmt(b['lost'])}", f"{b['mib_per_sandbox']:.2f}",
                     f"{b['open_s']:.0f} s", sharing, "nothing" if not left else f"{left} items"])
    return [
        f"{data['cpus']} cores, {_fmt(data['mem_total_mib'])} MiB; sandboxes of {limits['memory_mb']} MiB / "
        f"{limits['pids']} pids / {limits['disk_mb']} MiB disk. MiB per sandbox is the "
        "host's MemAvailable drop over the live sandboxes.",
        "",
        *_table(["backend", "live", "answered / lost", "MiB per sandbox", "opening all", "page sharing (KSM)",
                 "left after"], rows),
    ]


def render_attempts(data: dict[str, Any]) -> list[str]:
    """``bench/attempts.py``: k attempts per task forked from one prepared env, against one attempt."""
    rows = []
    for name, r in data["runs"].items():
        s, m = r["sum"], r["median"]
        grouped = r["fork_groups"] and r["attempts"] > 1
        how = "forked from one reset" if grouped else "a reset each"
        grading = "one per distinct patch" if grouped and r.get("share_grades") else "each attempt"
        rows.append([name, str(r["attempts"]), how, grading, f"{r['wall_s']:.1f} s",
                     f"{s['preparing_s']:.1f} / {s['acting_s']:.1f} / {s['grading_s']:.1f} s",
                     f"{m['preparing_s']:.2f} / {m['acting_s']:.2f} / {m['grading_s']:.2f} s"])
    without = data.get("ratio_without_forks")
    return [
        f"{data['cpus']} cores (load {data['load_avg_1m']}); `{data['env_id']}`, {data['policy']} policy, "
        f"{data['tasks']} tasks on {data['backend']}, concurrency {data['concurrency']}. k=8 over k=1 wall: "
        f"**{data['ratio']:.2f}x** (target <= {data['target_ratio']:g}x)"
        + (f"; every attempt reset on its own: {without:.2f}x." if without is not None else "."),
        "",
        *_table(["run", "attempts per task", "attempts start", "grading", "wall",
                 "prepare / act / grade (sum)", "prepare / act / grade (median)"], rows),
    ]


def _leaves(data: object, prefix: str = "") -> Iterator[tuple[str, object]]:
    if isinstance(data, dict):
        for key, value in data.items():
            yield from _leaves(value, f"{prefix}.{key}" if prefix else str(key))
    elif not isinstance(data, list):
        yield prefix, data


def render_generic(data: dict[str, Any]) -> list[str]:
    """Any other result file: its scalar fields (lists left out), at most 60."""
    rows = [[f"`{key}`", _fmt(value)] for key, value in _leaves(data)][:60]
    return _table(["field", "value"], rows)


BENCHES: dict[str, Bench] = {
    "engine.json": Bench("Rollout engines: built-in server vs vLLM", "python bench/engine.py", render_engine),
    "sandbox.json": Bench("Sandboxes", "python bench/sandbox.py", render_generic),
    "farm.json": Bench("Rollout farm overhead", "python bench/farm.py", render_generic),
    "ray_farm.json": Bench("Farm on Ray", "python bench/ray_farm.py", render_generic),
    "harness.json": Bench("Harness", "python bench/harness.py", render_generic),
    "trainer.json": Bench("Learner", "python bench/trainer.py", render_generic),
    "serve.json": Bench("Policy server", "python bench/serve.py", render_generic),
    "openenv.json": Bench("OpenEnv server", "python bench/openenv.py", render_generic),
    "swebench.json": Bench("SWE-bench images and overhead", "python bench/swebench.py", render_generic),
    "faults.json": Bench("Fault suites under load", "python bench/faults.py", render_faults),
    "fork.json": Bench("Sandbox fork", "python bench/fork.py", render_fork),
    "attempts.json": Bench("Attempt groups from one state", "python bench/attempts.py", render_attempts),
    "harbor.json": Bench("Harbor task images and validation", "python bench/harbor.py --tasks TASKS "
                         "--task-ids IDS --max-workers 2 --backend docker", render_generic),
    "plant_time.json": Bench("Canary and twin planting time", "python bench/plant_time.py --repo-source "
                             "MIRRORS", render_generic),
    "canary_recogniser.json": Bench("Canary recogniser", "python bench/canary_recogniser.py --repo-source "
                                    "MIRRORS --rows 60 --trials 3", render_generic),
    "canary_recogniser_pool.json": Bench("Canary recogniser with a decoy pool",
                                         "python bench/canary_recogniser.py --repo-source MIRRORS --rows 60 "
                                         "--trials 3 --decoy-pool decoys.json --out "
                                         "bench/results/canary_recogniser_pool.json", render_generic),
    "canary_recogniser_fit.json": Bench("Canary recogniser weights, fitted",
                                        "python bench/canary_recogniser.py --repo-source MIRRORS --rows 60 "
                                        "--trials 3 --fit", render_generic),
    "sandbox_live_bwrap.json": Bench("Sandboxes live at once: bwrap",
                                     "python bench/sandbox.py --live-only --backends bwrap --live 5000",
                                     render_live),
}


def measured(name: str, data: dict[str, Any]) -> str:
    """The date a result was measured: its own ``date`` or ``measured`` field, else ``MEASURED``."""
    return str(data.get("date") or data.get("measured") or MEASURED.get(name, "not recorded"))


def bench_section(path: Path) -> list[str]:
    data = json.loads(path.read_text(encoding="utf-8"))
    bench = BENCHES.get(path.name, Bench(path.stem, f"python bench/{path.stem}.py", render_generic))
    return [
        f"## {bench.title}",
        "",
        f"Measured {measured(path.name, data)} with `{bench.command}` (`bench/results/{path.name}`).",
        "",
        *bench.render(data),
        "",
    ]


def committed_results(root: Path) -> list[Path]:
    """The ``bench/results/*.json`` files git tracks (a bench run leaves others beside them until one is
    committed with ``git add -f``); every one there when ``root`` is not a git checkout."""
    folder = root / "bench" / "results"
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", "bench/results/*.json"], cwd=root,
                             capture_output=True, check=True).stdout
    except (OSError, subprocess.CalledProcessError):
        return sorted(folder.glob("*.json"))
    return sorted(root / name for name in out.decode().split("\0") if name)


def render_benchmarks(root: Path) -> str:
    files = committed_results(root)
    lines = [
        "# Benchmark results",
        "",
        "Generated by `python scripts/docs_results.py` from `bench/results/*.json`; do not edit by hand.",
        "Each section names the command that reproduces it. How each benchmark works:",
        "[Benchmarks](../guides/benchmarks.md); figures without a committed JSON file:",
        "[Measurements](measurements.md).",
        "",
    ]
    for path in files:
        lines += bench_section(path)
    if not files:
        lines += ["No result files are committed yet.", ""]
    return "\n".join(lines)


def _set_total(page: Path) -> list[str] | None:
    """lite.md / verified.md's ``**mirrorable, total**`` row: rows, run, gold resolved, empty resolved."""
    if not page.is_file():
        return None
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("| **mirrorable, total**"):
            return [cell.strip() for cell in line.strip("|").split("|")][1:5]
    return None


def _repo_rows(rows: list[dict[str, Any]]) -> list[list[str]]:
    table = []
    for repo in sorted({row["repo"] for row in rows}):
        mine = [row for row in rows if row["repo"] == repo]
        reasons = Counter(row["reason"] for row in mine if row["reason"])
        table.append([
            repo,
            str(len(mine)),
            str(sum(row["validated"] for row in mine)),
            str(sum("resolved" in row["gold"] for row in mine)),
            str(sum(row["empty"] == "resolved" for row in mine)),
            ", ".join(f"{reason} {n}" for reason, n in sorted(reasons.items())) or "-",
        ])  # fmt: skip
    return table


def _swebench_rows(docs: Path) -> list[dict[str, Any]]:
    text = (docs / "results.jsonl").read_text(encoding="utf-8")
    return [json.loads(line) for line in text.splitlines() if line]


def render_swebench(root: Path) -> str:
    docs = root / "docs" / "swebench"
    rows = _swebench_rows(docs)
    sets = [(name, _set_total(docs / f"{name.lower()}.md")) for name in ("Lite", "Verified")]
    set_rows = [[name, *total] for name, total in sets if total]
    validated = sum(row["validated"] for row in rows)
    empty = sum(row["empty"] == "resolved" for row in rows)
    header = ["repository", "rows run", "validated", "gold resolved", "empty resolved", "reasons"]
    lines = [
        "# SWE-bench results",
        "",
        "Generated by `python scripts/docs_results.py` from `docs/swebench/results.jsonl`, the record",
        f"of `envfarm harness validate` runs (last measured {MEASURED['swebench/results.jsonl']}); do not",
        "edit by hand. A row validates when the gold patch resolves it and the unpatched code (test_patch",
        "applied, no fix) does not. How the runs were made and how to resume them:",
        "[SWE-bench runs](../swebench/README.md).",
        "",
        f"**{len(rows)} rows run, {validated} validate**; the unpatched code resolves {empty}.",
        "",
        "## Per set (the repositories that can be mirrored)",
        "",
        *_table(["set", "rows", "rows run", "gold resolved", "empty resolved"], set_rows),
        "",
        "Per (repo, version) and every row that does not validate: [Lite](../swebench/lite.md),",
        "[Verified](../swebench/verified.md); every row: [rows](../swebench/validated.md).",
        "",
        "## Per repository (Lite and Verified together)",
        "",
        *_table(header, _repo_rows(rows)),
        "",
    ]
    return "\n".join(lines)


NO_PACKAGE = "Debian has no package"
"""Begins the detail of a build that failed over a package name Debian lacks (``harbor_image.NO_PACKAGE``)."""
OFFLINE_REASONS = ("needs-network", "unsupported-base")
"""Reasons that say a task cannot be built offline at all (not counted among the buildable ones)."""


def _harbor_summary(rows: list[dict[str, Any]]) -> list[str]:
    """The issue's three figures: build rate of the offline-buildable tasks, no-op 0 on every built task,
    oracle 1 among the built tasks with a solution."""
    buildable = [r for r in rows if not _unloadable(r) and (r["built"] or r["reason"] not in OFFLINE_REASONS)
                 and NO_PACKAGE not in r["detail"]]
    built = [r for r in rows if r["built"]]
    noop_zero = [r for r in built if r["noop_reward"] == 0]
    with_oracle = [r for r in built if r["oracle_reward"] is not None]
    oracle_one = [r for r in with_oracle if r["oracle_reward"] == 1]
    unloadable = sum(_unloadable(r) for r in rows)
    return [
        f"- built: {len(built)} of {len(buildable)} tasks whose Dockerfile needs only Debian and PyPI "
        f"packages ({_pct(len(built), len(buildable))})",
        f"- no-op agent 0 on {len(noop_zero)} of {len(built)} built tasks",
        f"- oracle 1 on {len(oracle_one)} of {len(with_oracle)} built tasks with a solution "
        f"({_pct(len(oracle_one), len(with_oracle))}){_sound(oracle_one, with_oracle)}",
        f"- {len(rows) - len(buildable) - unloadable} need the network to build, an unsupported base or a "
        "package Debian lacks; "
        f"{unloadable} are not complete task folders (no tests/test.sh)",
    ]


def _roundtrip(found: dict[str, Any] | None) -> list[str]:
    """The round trip's own figures (``bench/harbor_roundtrip.py``): exported, loaded by Harbor's loader,
    oracle 1 and no-op 0 through envfarm/Harbor-v0."""
    if not found:
        return []
    return [f"- round trip: {found['exported']} exported; {found['loaded_by_harbor']} loaded by Harbor's own "
            "task loader; oracle 1 and no-op 0 through `envfarm/Harbor-v0` on "
            f"{found['oracle_1_and_noop_0']} (export {found['export_s']:.0f} s, validation "
            f"{found['validate_s']:.0f} s)"]


TASK_DEFECTS = ("task-incomplete", "needs-privileges")
"""Reasons that blame a failing oracle on the task itself (envs/harbor/defects.py)."""


def _sound(oracle_one: list[dict[str, Any]], with_oracle: list[dict[str, Any]]) -> str:
    """The oracle rate among the tasks without a task defect, when some have one."""
    defects = Counter(r["reason"] for r in with_oracle if r["reason"] in TASK_DEFECTS)
    if not defects:
        return ""
    sound = len(with_oracle) - sum(defects.values())
    named = ", ".join(f"{n} {k}" for k, n in sorted(defects.items()))
    return (f"; {len(oracle_one)} of {sound} ({_pct(len(oracle_one), sound)}) without a task defect "
            f"({named})")


def _unloadable(row: dict[str, Any]) -> bool:
    return not row["built"] and row["reason"] == "verifier-failed"


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}%" if whole else "-"


def render_harbor(root: Path) -> str:
    """``docs/results/harbor.md`` from ``docs/harbor/*.json`` (``envfarm harbor validate`` reports, the
    tasks folder written TASKS, with the dataset, its commit and the date)."""
    lines = ["# Harbor validation", "",
             "Generated by `python scripts/docs_results.py` from `docs/harbor/*.json`, each the",
             "`validate.json` of an `envfarm harbor validate` run over a public Harbor dataset; do not "
             "edit by hand.", ""]
    for path in sorted((root / "docs" / "harbor").glob("*.json")):
        data = json.loads(path.read_text(encoding="utf-8"))
        rows = data["rows"]
        reasons = Counter(r["reason"] for r in rows if r["reason"])
        size = f"{len(rows)} of {data['partial_of']:,} tasks so far" if data.get("partial_of") else \
            f"{len(rows)} tasks"
        lines += [f"## {data['dataset']} ({size})", "",
                  f"Measured {data['measured']} at the dataset's commit {data['commit']}, backend "
                  f"{data['backend']}: `{data['command']}` (`docs/harbor/{path.name}`).", "",
                  *([data["note"] + ".", ""] if data.get("note") else []),
                  *_roundtrip(data.get("roundtrip")), *_harbor_summary(rows), "",
                  *_table(["reason", "tasks"], [[k, str(v)] for k, v in reasons.most_common()]), "",
                  *_table(["task", "built", "oracle", "no-op", "python", "reason", "detail", "s"],
                          [[r["task"], "yes" if r["built"] else "no", _reward(r["oracle_reward"]),
                            _reward(r["noop_reward"]), r.get("python") or "-", r["reason"] or "ok",
                            r["detail"].replace("|", "/")[:140], f"{r['seconds']:.0f}"] for r in rows]), ""]
    return "\n".join(lines)


def _reward(value: float | None) -> str:
    return "-" if value is None else f"{value:g}"


def render_all(root: Path = ROOT) -> dict[Path, str]:
    """Every generated page and its text."""
    results = root / "docs" / "results"
    return {
        results / "benchmarks.md": render_benchmarks(root),
        results / "swebench.md": render_swebench(root),
        results / "harbor.md": render_harbor(root),
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="exit 1 if a generated page is out of date")
    args = parser.parse_args(argv)
    stale = []
    for path, text in render_all().items():
        if path.is_file() and path.read_text(encoding="utf-8") == text:
            continue
        stale.append(path)
        if not args.check:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")
    return 1 if args.check and stale else 0


if __name__ == "__main__":
    sys.exit(main())
