"""The ``envfarm`` command line: one root typer app; each sub-app lives in ``envfarm/commands/<name>.py``.

Commands parse their options and call library code. A :class:`~envfarm.errors.FarmError` raised anywhere
below is printed once, here, as a red ``error:`` line (plus the log tail it carries) with exit code 2,
never as a traceback.

One grammar (``tests/test_cli_grammar.py`` walks the whole tree, hidden aliases included, and holds it):

- Noun, then verb: ``images build|list|prune`` (``--harness``: the harness's images),
  ``envs list|check|serve``, ``policy serve``, ``sandbox exec|gc|list``, ``tasks mine|recipes|repos|export``,
  ``harness run|validate|plan``, ``harbor check|validate``, ``farm run|receive``; the day-to-day verbs stand
  alone: ``eval``, ``train``, ``demo``, ``doctor``, ``dashboard``. ``list``, never ``ls``.
- One meaning per option name, in every command: a flag everywhere or a value of one type everywhere.
  ``--out DIR`` is always a folder the command writes into; a single file a command writes is named for what
  it holds: ``--report FILE`` (the command's JSON report, also written), ``--summary FILE``,
  ``--trajectories FILE`` (JSONL), ``--instances FILE`` (task instance rows, read or mined). ``--json`` is a
  flag (print JSON instead of a table); ``--env ID`` a registered env id; ``--episodes N`` counts episodes and
  ``--num-tasks N`` tasks; ``--tasks DIR`` is a folder of Harbor task directories; ``--backend`` defaults
  to ``DEFAULT_BACKEND`` (bwrap) everywhere.
- An old spelling stays for one release as a hidden command or option running the same code, after a
  one-line note on stderr naming the new spelling (``envfarm.commands.options.alias`` / ``old_spelling``):
  ``serve`` (``policy serve``), ``openenv serve`` (``envs serve``), ``harness images build|list|prune``
  (``images ... --harness``; its ``--json FILE``: ``--report``, ``--images``: ``--each``, ``--env``:
  ``--all``), ``sandbox ls`` (``sandbox list``), ``sandbox gc --backend B`` (``sandbox gc B``), ``farm run
  --out FILE`` (``--trajectories``), ``eval --episodes N``/``--out FILE`` (``--num-tasks``/``--report``),
  ``tasks mine --package P --out FILE`` (``--instances``), ``tasks repos --tasks FILE`` (``--instances``).
"""

from __future__ import annotations

import logging
import sys
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.logging import RichHandler
from rich.markup import escape
from typer.core import TyperGroup

from envfarm.errors import FarmError

EXIT_FARM_ERROR = 2
EXIT_INTERRUPTED = 130

err_console = Console(stderr=True)


def report_error(error: FarmError) -> None:
    """Print ``error`` as one red line (its first line) followed by any detail lines, to stderr."""
    first, _, rest = str(error).partition("\n")
    line = f"[bold red]error:[/bold red] [red]{escape(first)}[/red]"
    err_console.print(line, highlight=False, soft_wrap=True)
    if rest.strip():
        err_console.print(escape(rest.rstrip()), style="dim", highlight=False, soft_wrap=True)


class FarmGroup(TyperGroup):
    """The root group: maps FarmError from any subcommand to :func:`report_error` + exit code 2."""

    def invoke(self, ctx: typer.Context) -> Any:  # type: ignore[override]  # typer.Context is the same
        # object click passes (typer vendors click as typer._click; its Context is not public)
        try:
            return super().invoke(ctx)
        except FarmError as e:
            report_error(e)
            raise typer.Exit(EXIT_FARM_ERROR) from None


app = typer.Typer(
    cls=FarmGroup,
    name="envfarm",
    help="Sandboxed agent environment farm: sandboxes, images, envs, harness, rollouts.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)


@app.callback()
def root(
    verbose: Annotated[
        int, typer.Option("--verbose", "-v", count=True, help="Log more: -v for INFO, -vv for DEBUG.")
    ] = 0,
) -> None:
    """Sandboxed agent environment farm."""
    level = logging.WARNING if verbose == 0 else logging.INFO if verbose == 1 else logging.DEBUG
    handler = RichHandler(console=err_console, show_path=False, rich_tracebacks=False)
    logging.basicConfig(level=level, format="%(name)s: %(message)s", handlers=[handler])
    if verbose < 2:
        for noisy in ("urllib3", "docker"):
            logging.getLogger(noisy).setLevel(logging.WARNING)


# ------------------------------------------------------------------------------------ sub-commands
# One line per sub-app, each defined in envfarm/commands/<name>.py.
from envfarm.commands import dashboard as _dashboard  # noqa: E402
from envfarm.commands import demo as _demo  # noqa: E402
from envfarm.commands import doctor as _doctor  # noqa: E402
from envfarm.commands import envs as _envs  # noqa: E402
from envfarm.commands import farm as _farm  # noqa: E402
from envfarm.commands import harbor as _harbor  # noqa: E402
from envfarm.commands import harness as _harness  # noqa: E402
from envfarm.commands import images as _images  # noqa: E402
from envfarm.commands import openenv as _openenv  # noqa: E402
from envfarm.commands import serve as _serve  # noqa: E402
from envfarm.commands import tasks as _tasks  # noqa: E402
from envfarm.commands import train as _train  # noqa: E402
from envfarm.commands.options import alias as _alias  # noqa: E402
from envfarm.commands.sandbox import sandbox_app  # noqa: E402

app.add_typer(_images.app, name="images")
app.add_typer(sandbox_app, name="sandbox")
app.add_typer(_envs.app, name="envs")
app.command(name="doctor")(_doctor.doctor)
app.command(name="demo")(_demo.demo)
app.add_typer(_farm.app, name="farm")
app.command(name="eval")(_farm.eval_command)
app.add_typer(_harness.app, name="harness")
app.add_typer(_harbor.app, name="harbor")
app.command(name="train")(_train.train)
app.add_typer(_tasks.app, name="tasks")
app.command(name="dashboard")(_dashboard.dashboard)
app.add_typer(_serve.app, name="policy")
# old spellings, hidden, for one release (the grammar above)
app.command(name="serve", hidden=True)(_alias(_serve.serve, "serve", "policy serve"))
app.add_typer(_openenv.app, name="openenv", hidden=True)
# ------------------------------------------------------------------------------------------------


def main() -> None:
    """Entry point of the ``envfarm`` script."""
    try:
        app()
    except FarmError as e:  # raised outside a command (e.g. while building the app); normally FarmGroup
        report_error(e)
        sys.exit(EXIT_FARM_ERROR)
    except KeyboardInterrupt:
        err_console.print("[red]interrupted[/red]")
        sys.exit(EXIT_INTERRUPTED)


if __name__ == "__main__":
    main()
