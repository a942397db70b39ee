"""``envfarm harness run|validate|plan``: SWE-bench-compatible evaluation (``envfarm.harness``).

The harness's images are built, listed and pruned by ``envfarm images build|list|prune --harness``
(``envfarm/commands/images.py``), which call :func:`build_env_images`, :func:`list_env_images` and
:func:`prune_env_images` here; ``envfarm harness images ...`` is their hidden alias for one release.
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, TypeVar

import typer
from pydantic import BaseModel, ValidationError
from rich.console import Console
from rich.markup import escape
from rich.progress import Progress, TaskID
from rich.table import Table

from envfarm.errors import ConfigError, SpecNotFound
from envfarm.sandbox.values import TIMEOUTS

from .options import deprecated, parse_ids, progress_bar

if TYPE_CHECKING:
    from envfarm.harness import Instance, Plan, RunReport
    from envfarm.harness.env_builds import EnvBuildOutcome

M = TypeVar("M", bound=BaseModel)

app = typer.Typer(
    name="harness",
    help="SWE-bench-compatible evaluation: instances + predictions in, reports out.",
    no_args_is_help=True,
)
images_app = typer.Typer(
    help="Deprecated: `envfarm images build|list|prune --harness`.", no_args_is_help=True
)
app.add_typer(images_app, name="images", hidden=True)
console = Console()
err = Console(stderr=True)

INSTANCES_HELP = "Task instances: JSON, JSONL, parquet or a datasets folder."
InstancesOpt = Annotated[Path, typer.Option("--instances", help=INSTANCES_HELP)]
IdsOpt = Annotated[
    list[str] | None,
    typer.Option("--instance-ids", help="Instance ids to evaluate: --instance-ids A B C (default: all)."),
]
SplitOpt = Annotated[str, typer.Option(help="Split to read from a datasets folder.")]
SpecsOpt = Annotated[
    list[Path] | None, typer.Option("--specs", help="Extra spec files/folders (before images/swebench/).")
]
RunIdOpt = Annotated[str, typer.Option("--run-id", help="Run id; the same id resumes a run.")]
RepoSourceOpt = Annotated[
    str | None,
    typer.Option(
        "--repo-source",
        help="Folder of git repos named owner__name(.git), or a git URL prefix (https://github.com/, "
        "git://HOST/): cloned once into $ENVFARM_HOME/harness/git, then the commits fetched.",
    ),
]
ImageSourceOpt = Annotated[
    str,
    typer.Option(
        "--image-source",
        help="build: build instance images here (offline); pull: pull each row's image (its `image` field, "
        "SWE-bench's official name by default) and check it holds the row's repo at its base commit; "
        "auto: pull, build where the pull or the check fails.",
    ),
]
RegistryOpt = Annotated[
    str | None,
    typer.Option(
        "--registry",
        help="Registry prefix for --image-source pull|auto (HOST:PORT, HOST/NAMESPACE): pulls "
        "PREFIX/<the row's image name> instead of Docker Hub.",
    ),
]
ReportDirOpt = Annotated[Path, typer.Option("--report-dir", help="Folder the reports go to.")]
WorkersOpt = Annotated[int, typer.Option("--max-workers", min=1, help="Parallel builds and runs.")]
TimeoutOpt = Annotated[float, typer.Option("--timeout", min=1, help="Test timeout per instance (s).")]
BuildWorkersOpt = Annotated[int, typer.Option("--max-workers", min=1, help="Docker builds at once.")]
ReportOpt = Annotated[Path | None, typer.Option(
    "--report", help="Also write every build's outcome as JSON to this file.")]
EachOpt = Annotated[bool, typer.Option(
    "--each", help="Also list every image (kind, tag, own and total size).")]
RepoOpt = Annotated[
    list[str] | None, typer.Option("--repo", help="Only this repo's images (owner/name; repeatable).")
]


DecoyPoolOpt = Annotated[
    Path | None,
    typer.Option(
        "--decoy-pool",
        help="decoys.json from `harness validate`: tests with no expected literal get decoys gold was seen "
        "to fail at any literal (harder for a forger to tell from the real test; another correct fix may "
        "pass one).",
    ),
]


@app.command("run", context_settings={"allow_extra_args": True})
def run(
    ctx: typer.Context,
    instances: InstancesOpt,
    predictions: Annotated[str, typer.Option("--predictions", help="Predictions JSON/JSONL, or `gold`.")],
    run_id: RunIdOpt,
    instance_ids: IdsOpt = None,
    repo_source: RepoSourceOpt = None,
    report_dir: ReportDirOpt = Path("reports"),
    max_workers: WorkersOpt = 4,
    timeout: TimeoutOpt = TIMEOUTS.tests_s,
    specs: SpecsOpt = None,
    tamper: Annotated[
        str, typer.Option(help="revert (default) | flag | off (SWE-bench behaviour).")
    ] = "revert",
    split: SplitOpt = "test",
    force_rebuild: Annotated[bool, typer.Option("--force-rebuild", help="Rebuild images.")] = False,
    canaries: Annotated[
        bool, typer.Option("--canaries/--no-canaries", help="Plant canary tests (off: SWE-bench grading).")
    ] = True,
    output_cap_mb: Annotated[
        int, typer.Option("--output-cap-mb", min=1, help="MiB of test output kept per instance.")
    ] = 32,
    image_source: ImageSourceOpt = "build",
    registry: RegistryOpt = None,
    strict: Annotated[
        bool, typer.Option("--strict", help="A suspect patch (static screening) is not resolved.")
    ] = False,
    decoy_pool: DecoyPoolOpt = None,
) -> None:
    """Build images, apply each prediction, run and grade its tests; write reports and the run summary."""
    from envfarm.harness import HarnessConfig, Policy, evaluate, load_instances, load_predictions

    try:
        policy = Policy(tamper)
    except ValueError:
        raise ConfigError(f"--tamper {tamper!r}: choose revert, flag or off") from None
    rows = load_instances(instances, parse_ids(instance_ids, ctx.args), split=split)
    source, specs = _sources(rows, repo_source, specs)
    options = {"run_id": run_id, "report_dir": report_dir, "repo_source": source}
    options |= {"specs": tuple(specs or ()), "max_workers": max_workers, "timeout_s": timeout}
    options |= {"canaries": canaries, "output_cap_mb": output_cap_mb, "strict": strict}
    options |= {"image_source": image_source, "registry": registry, "decoy_pool": decoy_pool}
    config = _valid(HarnessConfig, **options, tamper=policy, force_rebuild=force_rebuild)
    preds = load_predictions(predictions, rows)
    _check_specs([r for r in rows if r.instance_id in preds and not preds[r.instance_id].is_empty], specs)
    with _progress() as bar:
        task = bar.add_task("evaluating", total=len(preds))
        counts = {"resolved": 0, "unresolved": 0, "error": 0, "empty_patch": 0}

        def on_event(event: object) -> None:
            _advance(bar, task, event, counts)

        result = asyncio.run(evaluate(rows, preds, config, progress=on_event))
    _print_summary(result)
    _print_disk(result.images)


@app.command("audit", context_settings={"allow_extra_args": True})
def audit_cmd(
    ctx: typer.Context,
    instances: InstancesOpt,
    run_id: RunIdOpt = "audit",
    instance_ids: IdsOpt = None,
    repo_source: RepoSourceOpt = None,
    report_dir: ReportDirOpt = Path("reports"),
    max_workers: WorkersOpt = 4,
    timeout: TimeoutOpt = TIMEOUTS.tests_s,
    specs: SpecsOpt = None,
    split: SplitOpt = "test",
    strict: Annotated[
        bool, typer.Option("--strict", help="A suspect patch (static screening) is not resolved.")
    ] = False,
    decoy_pool: DecoyPoolOpt = None,
) -> None:
    """Red-team the grader on these rows: grade gold and every forgery of the suite that applies to each
    row's runner; print, per forgery class, how many resolved (must be 0) and whether gold still resolves;
    write <report-dir>/<run-id>/audit.json and audit.md. Exits 1 when the grader is fooled."""
    from envfarm.harness import HarnessConfig, load_instances
    from envfarm.testing.audit import audit, write_report

    rows = load_instances(instances, parse_ids(instance_ids, ctx.args), split=split)
    source, specs = _sources(rows, repo_source, specs)
    options = {"run_id": run_id, "report_dir": report_dir, "repo_source": source, "strict": strict}
    options |= {"specs": tuple(specs or ()), "max_workers": max_workers, "timeout_s": timeout}
    config = _valid(HarnessConfig, **options, decoy_pool=decoy_pool)
    with _progress() as bar:
        task = bar.add_task("gold, then each forgery", total=None)
        result = asyncio.run(
            audit(rows, config, progress=lambda name: bar.update(task, advance=1, description=name))
        )
    table = Table("class", "forgeries", "resolved by forgery (must be 0)", "suspect")
    for cls, (n, resolved, suspect) in result.by_class().items():
        table.add_row(str(cls), str(n), f"[{'red' if resolved else 'green'}]{resolved}[/]", str(suspect))
    console.print(table)
    gold = result.gold
    console.print(f"gold still resolves: {sum(gold.values())}/{len(gold)} rows", highlight=False)
    paths = write_report(result, report_dir)
    console.print(
        f"{'sound' if result.sound else 'NOT SOUND'}: {paths[0]}\n       {paths[1]}", highlight=False
    )
    if not result.sound:
        raise typer.Exit(1)


@app.command("validate", context_settings={"allow_extra_args": True})
def validate_cmd(
    ctx: typer.Context,
    instances: InstancesOpt,
    run_id: RunIdOpt,
    instance_ids: IdsOpt = None,
    repo_source: RepoSourceOpt = None,
    report_dir: ReportDirOpt = Path("reports"),
    max_workers: WorkersOpt = 4,
    timeout: TimeoutOpt = TIMEOUTS.tests_s,
    specs: SpecsOpt = None,
    repeat: Annotated[int, typer.Option("--repeat", min=1, help="Gold runs per row (flake rate).")] = 1,
    chunk: Annotated[
        int | None,
        typer.Option(
            "--chunk",
            min=1,
            help="Rows taken at a time (gold, then the unfixed code); validate.json is rewritten after each "
            "chunk with every row so far; a chunk ends with its slowest row. Default: 8 x --max-workers.",
        ),
    ] = None,
    split: SplitOpt = "test",
    image_source: ImageSourceOpt = "build",
    registry: RegistryOpt = None,
    probe: Annotated[
        bool,
        typer.Option("--probe-decoys/--no-probe-decoys",
                     help="Run gold once more with candidate decoys; write decoys.json (--decoy-pool)."),
    ] = True,
) -> None:
    """Check rows run here: gold must resolve (every --repeat run), the unfixed code must not; write
    validate.json and validate.md with a reason for every row that does not validate, and decoys.json
    (the decoys gold failed, for `harness run --decoy-pool`)."""
    from envfarm.harness import HarnessConfig, load_instances
    from envfarm.harness.validate import validate

    rows = load_instances(instances, parse_ids(instance_ids, ctx.args), split=split)
    source, specs = _sources(rows, repo_source, specs)
    options = {"run_id": run_id, "report_dir": report_dir, "repo_source": source}
    options |= {"specs": tuple(specs or ()), "max_workers": max_workers, "timeout_s": timeout}
    options |= {"image_source": image_source, "registry": registry}
    config = _valid(HarnessConfig, **options)
    with _progress() as bar:
        task = bar.add_task("validating", total=len(rows) * (repeat + 1 + probe))  # gold, base, probes
        counts = {"resolved": 0, "unresolved": 0, "error": 0, "empty_patch": 0}

        def on_event(event: object) -> None:
            _advance(bar, task, event, counts)

        size = chunk or 8 * max_workers
        run = validate(rows, config, repeat=repeat, progress=on_event, chunk=size, probe=probe)
        result = asyncio.run(run)
    table = Table("instance", "gold", "empty", "s", "reason")
    for r in result.rows:
        table.add_row(r.instance_id, "/".join(r.gold), r.empty, f"{r.seconds:.1f}", r.reason or "validated")
    console.print(table)
    console.print(
        f"validated {len(result.validated)}/{len(result.rows)}; {result.json_path}\n"
        f"          {result.markdown_path}"
        + (f"\n          {result.decoys_path}" if result.decoys_path else ""),
        highlight=False,
    )


def _sources(
    rows: list[Instance], given: str | None, specs: list[Path] | None
) -> tuple[Path | str | None, list[Path] | None]:
    """--repo-source checked (a folder, or a git URL prefix); without it, mined rows rebuild their own repos
    and specs."""
    from envfarm.harness.repos import parse_source

    try:
        repo_source = parse_source(given)
    except ConfigError as e:
        raise ConfigError(f"--repo-source {e}") from None
    if isinstance(repo_source, Path) and not repo_source.is_dir():
        raise ConfigError(
            f"--repo-source {repo_source} is not a folder; pass the folder holding the owner__name(.git) "
            "repositories, or a git URL prefix (https://github.com/, git://HOST/)"
        )
    if repo_source is None:
        return _mined_sources(rows, specs)
    return repo_source, specs


def _mined_sources(rows: list[Instance], specs: list[Path] | None) -> tuple[Path | None, list[Path] | None]:
    """Rows from ``envfarm tasks mine`` rebuild their repos and specs from PyPI (cached): no --repo-source."""
    from envfarm.envs.code_repair.factory.sources import rebuilt

    found = rebuilt(rows)
    if found is None:
        return None, specs
    repos, mined_specs = found
    console.print(f"mined rows: repos and specs rebuilt from their sdists in {repos.parent}", highlight=False)
    return repos, [*(specs or ()), mined_specs]


def _valid(model: type[M], **fields: object) -> M:
    """``model(**fields)``, a validation error as one ConfigError naming the option."""
    try:
        return model.model_validate(fields)
    except ValidationError as e:
        first = e.errors()[0]
        msg = str(first["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"--{str(first['loc'][0]).replace('_', '-')}: {msg}") from None


def _check_specs(rows: list[Instance], specs: list[Path] | None) -> None:
    """Refuse the run before anything is built when a row to evaluate has no environment spec."""
    from envfarm.harness import SpecCatalog, plan_all

    _, errors = plan_all(rows, SpecCatalog(specs or ()))
    if not errors:
        return
    missing = sorted({(r.repo, r.version) for r in rows if r.instance_id in errors})
    shown = ", ".join(f"{repo} {version}" for repo, version in missing[:4])
    more = f" and {len(missing) - 4} more" if len(missing) > 4 else ""
    first = str(next(iter(errors.values()))).splitlines()[0]
    raise SpecNotFound(
        f"{len(errors)} of {len(rows)} instances have no environment spec ({shown}{more}). {first}. "
        "`envfarm harness plan --instances F` lists what each row needs; --instance-ids selects the ready "
        "ones"
    )


def _print_summary(result: RunReport) -> None:
    s = result.summary
    lo, hi = s.resolved_rate_ci95
    console.print(
        f"[bold]{escape(result.model_name_or_path)}[/bold] run {escape(result.run_id)}: resolved "
        f"{s.resolved_instances}/{s.total_instances} ({100 * s.resolved_rate:.1f}%, 95% CI "
        f"{100 * lo:.1f}-{100 * hi:.1f}%); unresolved {s.unresolved_instances} "
        f"(partial {len(s.partial_ids)}), "
        f"empty {s.empty_patch_instances}, errors {s.error_instances} (infra {len(s.infra_error_ids)}, "
        f"timeout {len(s.timeout_ids)}), tamper rules fired on {len(s.tampered_ids)}, "
        f"suspect {len(s.suspect_ids)}",
        highlight=False,
    )
    for iid in s.error_ids[:10]:
        report = result.reports[iid]
        line = (report.error or "").splitlines()[0] if report.error else ""
        err.print(f"[red]{escape(iid)}[/red]: {report.error_kind}: {escape(line[:200])}", highlight=False)
    if len(s.error_ids) > 10:
        err.print(f"... and {len(s.error_ids) - 10} more errors (see the report.json files)")
    console.print(f"summary: {result.summary_path}\n         {result.markdown_path}", highlight=False)


def _progress() -> Progress:
    return progress_bar(err, disable=not err.is_terminal)


def _advance(bar: Progress, task: TaskID, event: object, counts: dict[str, int]) -> None:
    from envfarm.harness import Event

    assert isinstance(event, Event)
    if event.phase in ("done", "skipped") and event.report is not None:
        counts[event.report.outcome.value] += 1
        bar.advance(task)
        if not err.is_terminal:
            err.print(
                f"{event.instance_id}: {event.report.outcome} {event.report.status}"
                + (" (resumed)" if event.phase == "skipped" else ""),
                highlight=False,
            )
    elif event.phase == "retry":
        err.print(f"[yellow]{escape(event.instance_id)}: retrying after {escape(event.detail)}[/yellow]")
    text = " ".join(f"{k} {v}" for k, v in counts.items() if v)
    bar.update(task, description=f"{event.instance_id[:40]} {event.phase} | {text}")


def _print_disk(tags: tuple[str, ...]) -> None:
    from envfarm.harness.disk import list_images

    try:
        every = list_images()
    except Exception as e:  # disk use is informational; never fail a finished run over it
        err.print(f"[dim]disk use unavailable: {escape(str(e))}[/dim]")
        return
    used = [i for i in every if i.tag in tags]
    own, total = sum(i.own_bytes for i in used), sum(i.own_bytes for i in every)
    console.print(
        f"disk: this run's {len(used)} instance images {own / 1e6:.0f} MB; all {len(every)} harness images "
        f"{total / 1e6:.0f} MB (`envfarm images list --harness`, `envfarm images prune --harness`)",
        highlight=False,
    )


@app.command("plan", context_settings={"allow_extra_args": True})
def plan(
    ctx: typer.Context,
    instances: InstancesOpt,
    instance_ids: IdsOpt = None,
    specs: SpecsOpt = None,
    split: SplitOpt = "test",
) -> None:
    """Load every row and plan it: the env spec and test command, or the spec still to write."""
    from envfarm.harness import SpecCatalog, load_instances, plan_all
    from envfarm.harness.specs import eval_script_command

    rows = load_instances(instances, parse_ids(instance_ids, ctx.args), split=split)
    plans, errors = plan_all(rows, SpecCatalog(specs or ()))
    table = Table("instance", "repo version", "test command", "status", title=f"{len(rows)} instances")
    for p in plans:
        table.add_row(
            p.instance.instance_id,
            f"{p.instance.repo} {p.instance.version}",
            escape(p.test_command[:70]),
            f"[green]ready[/green] ({p.env.source.name})",
        )
    for inst in rows:
        if inst.instance_id in errors:
            cmd = eval_script_command(inst.eval_script) or ""
            table.add_row(
                inst.instance_id,
                f"{inst.repo} {inst.version}",
                escape(cmd[:70]),
                "[yellow]needs a spec[/yellow]",
            )
    console.print(table)
    console.print(_repo_table(plans))
    missing = sorted({(i.repo, i.version) for i in rows if i.instance_id in errors})
    console.print(f"{len(plans)} ready, {len(errors)} need a spec ({len(missing)} repo/versions)")
    for iid in list(errors)[:3]:
        console.print(f"  [dim]{escape(str(errors[iid]))}[/dim]")


def _repo_table(plans: list[Plan]) -> Table:
    """One line per repo/version of the planned rows: Python, Debian suite and where the spec came from."""
    from envfarm.sandbox.recipes import load_base_recipe

    default = load_base_recipe().suite
    groups: dict[tuple[str, str], list[Plan]] = {}
    for p in plans:
        groups.setdefault((p.instance.repo, p.instance.version), []).append(p)
    table = Table("repo", "version", "rows", "python", "suite", "spec", title="environments per repo/version")
    for (repo, version), group in sorted(groups.items()):
        env = group[0].env
        needs = env.requires_python or env.python
        table.add_row(
            repo,
            version,
            str(len(group)),
            env.python if needs == env.python else f"{needs}->{env.python}*",
            env.suite or default,
            "derived" if hasattr(env, "origin") else escape(env.source.name),
        )
    table.caption = "*the Python asked for, which no Debian suite ships: the nearest suite's is planned"
    return table


def build_env_images(instances: Path, ids: list[str] | None, specs: list[Path] | None, split: str,
                     max_workers: int, force: bool, report: Path | None) -> None:
    """Build the env image of every repo/version the rows need (``envfarm images build --harness``)."""
    import dataclasses
    import json

    from envfarm.harness import SpecCatalog, load_instances
    from envfarm.harness.env_builds import EnvBuild, build_envs, plan_envs

    rows = load_instances(instances, ids, split=split)
    targets, unplanned = plan_envs(rows, SpecCatalog(specs or ()))
    with _progress() as bar:
        task = bar.add_task("env images", total=len(targets))

        def on_build(b: EnvBuild) -> None:
            bar.advance(task)
            state = "failed" if b.error else "built" if b.built else "cached"
            bar.update(task, description=f"{b.repo} {b.version} {state}")
            if not err.is_terminal:
                err.print(f"{b.repo} {b.version}: {state} in {b.seconds:.0f}s", highlight=False)

        outcome = asyncio.run(build_envs(targets, unplanned, max_workers=max_workers, force=force,
                                         progress=on_build))  # fmt: skip
    _print_builds(outcome)
    if report is not None:
        report.parent.mkdir(parents=True, exist_ok=True)
        report.write_text(json.dumps(dataclasses.asdict(outcome), indent=2) + "\n", encoding="utf-8")
    if outcome.failed:
        raise typer.Exit(1)


@images_app.command("build", context_settings={"allow_extra_args": True})
def images_build(
    ctx: typer.Context,
    instances: InstancesOpt,
    instance_ids: IdsOpt = None,
    specs: SpecsOpt = None,
    split: SplitOpt = "test",
    max_workers: BuildWorkersOpt = 2,
    force: Annotated[
        bool, typer.Option("--force", help="Rebuild without docker's layer cache (wheels stay cached).")
    ] = False,
    report: ReportOpt = None,
    json_out: Annotated[Path | None, typer.Option(
        "--json", hidden=True, help="Deprecated: --report.")] = None,
) -> None:
    """Deprecated: `envfarm images build --harness`."""
    deprecated("harness images build", "images build --harness")
    if json_out is not None:
        deprecated("harness images build --json FILE", "images build --harness --report FILE")
    build_env_images(instances, parse_ids(instance_ids, ctx.args), specs, split, max_workers, force,
                     report or json_out)


def _print_builds(outcome: EnvBuildOutcome) -> None:
    """One line per env image (built, cached or failed) and per repo/version that cannot build."""
    table = Table("repo", "version", "python", "suite", "rows", "state", "s", "image or error")
    for b in outcome.builds:
        state = "[red]failed[/red]" if b.error else "built" if b.built else "cached"
        shown = escape(b.error.splitlines()[0][:120]) if b.error else escape(b.tag)
        table.add_row(b.repo, b.version, b.python, b.suite, str(b.rows), state, f"{b.seconds:.0f}", shown)
    for u in outcome.unplanned:
        table.add_row(u.repo, u.version, "-", "-", str(len(u.instance_ids)), f"[yellow]{u.reason}[/yellow]",
                      "-", escape(u.detail.splitlines()[0][:120]))  # fmt: skip
    console.print(table)
    built, failed = sum(b.built for b in outcome.builds), len(outcome.failed)
    console.print(
        f"{len(outcome.builds)} env images: {built} built, {len(outcome.builds) - built - failed} cached, "
        f"{failed} failed; {len(outcome.unplanned)} repo/versions not buildable; "
        f"{outcome.seconds:.0f}s",
        highlight=False,
    )


def list_env_images(as_json: bool, each: bool) -> None:
    """Disk use of the harness images per repo/version (``envfarm images list --harness``)."""
    import dataclasses
    import json

    from envfarm.harness.disk import by_env, list_images

    found = list_images()
    envs = by_env(found)
    if as_json:
        payload = {
            "environments": [{**dataclasses.asdict(e), "total_bytes": e.total_bytes} for e in envs],
            "images": [dataclasses.asdict(i) for i in found],
        }
        typer.echo(json.dumps(payload, indent=2))
        return
    if each:
        table = Table(title="envfarm harness images")
        for column in ("kind", "name", "tag", "own MB", "total MB", "created"):
            table.add_column(column, overflow="fold")
        for i in found:
            own, total = f"{i.own_bytes / 1e6:.0f}", f"{i.size_bytes / 1e6:.0f}"
            table.add_row(i.kind, escape(i.name), escape(i.tag), own, total, i.created[:19])
        console.print(table)
    table = Table(title="disk per repo/version (env image + its instance layers)")
    for column in ("repo", "version", "env images", "env MB", "instances", "instances MB", "total MB"):
        table.add_column(column, overflow="fold")
    for e in envs:
        table.add_row(
            escape(e.repo), escape(e.version), str(e.env_images), f"{e.env_bytes / 1e6:.0f}",
            str(e.instance_images), f"{e.instance_bytes / 1e6:.0f}", f"{e.total_bytes / 1e6:.0f}",
        )  # fmt: skip
    console.print(table)
    held = sum(e.total_bytes for e in envs)
    console.print(
        f"{len(found)} images in {len(envs)} repo/versions, {held / 1e6:.0f} MB of their own layers "
        "(the Debian bases not counted); `--each` lists each",
        highlight=False,
    )


def prune_env_images(include_env: bool, repos: list[str] | None) -> None:
    """Remove instance and pulled images, env images too with ``include_env`` (``envfarm images prune
    --harness [--all]``)."""
    from envfarm.harness.disk import prune

    bad = [r for r in repos or () if r.count("/") != 1]
    if bad:
        raise ConfigError(f"--repo {bad[0]!r}: write owner/name, as in the rows' repo field (pallets/flask)")
    removed, freed = prune(include_env=include_env, repos=tuple(repos or ()))
    for tag in removed:
        console.print(f"removed {escape(tag)}", highlight=False)
    console.print(f"{len(removed)} removed, {freed / 1e6:.0f} MB freed")


@images_app.command("list")
def images_list(
    as_json: Annotated[bool, typer.Option(
        "--json", help="Print JSON: per repo/version ('environments') and per image.")] = False,
    each: EachOpt = False,
    images: Annotated[bool, typer.Option("--images", hidden=True, help="Deprecated: --each.")] = False,
) -> None:
    """Deprecated: `envfarm images list --harness`."""
    deprecated("harness images list", "images list --harness")
    list_env_images(as_json, each or images)


@images_app.command("prune")
def images_prune(
    all_: Annotated[bool, typer.Option("--all", help="Remove env images too.")] = False,
    env: Annotated[bool, typer.Option("--env", hidden=True, help="Deprecated: --all.")] = False,
    repo: RepoOpt = None,
) -> None:
    """Deprecated: `envfarm images prune --harness`."""
    deprecated("harness images prune", "images prune --harness")
    prune_env_images(all_ or env, repo)
