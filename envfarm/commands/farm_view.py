"""The live view of ``envfarm farm run`` and ``envfarm eval``, and the closing summary table (CLI only)."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.progress_bar import ProgressBar
from rich.table import Table
from rich.text import Text

from envfarm.rollout.farm import Farm
from envfarm.rollout.summary import Summary


def _pct(split: dict[str, float]) -> str:
    return " · ".join(f"{name} {share * 100:.0f}%" for name, share in split.items())


def _reward(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


class FarmView:
    """Rendered by rich.live.Live on every refresh: reads the farm's counters, holds no state of its own."""

    def __init__(self, farm: Farm, title: str) -> None:
        self.farm = farm
        self.title = title

    def __rich__(self) -> RenderableType:
        live, tally = self.farm.live, self.farm.tally
        total = max(live.total, 1)
        head = Text.assemble((self.title, "bold"), f"  {tally.finished}/{live.total} episodes  ",
                             (f"{live.wall_s():.0f}s", "dim"))
        top = Table.grid(padding=(0, 2))
        top.add_row(head, ProgressBar(total=total, completed=tally.finished, width=40))
        grid = Table.grid(padding=(0, 2))
        grid.add_column(style="dim")
        grid.add_column()
        grid.add_row("active", f"{live.active} (max {live.max_active})")
        grid.add_row("steps/s", f"{live.steps_per_s():.1f}  ({live.steps} steps)")
        grid.add_row("mean reward", _reward(tally.mean_reward))
        errors = f"{tally.infra_errors} recorded, {tally.infra_retries} retried"
        grid.add_row("infra errors", Text(errors, style="red" if tally.infra_errors else ""))
        if tally.policy_errors or tally.errors:
            grid.add_row("other errors", f"{tally.policy_errors} policy, {tally.errors} env")
        grid.add_row("time goes to", _pct(tally.time_split()))
        for d in self.farm.deliveries:
            state = f"{d.cursor.count} delivered, {d.backlog} waiting"
            if d.failures:
                state += f" — failing for {d.stalled_for():.0f}s: {d.last_error[:80]}"
            grid.add_row(f"sink {d.sink.name}", state)
        if live.paused:
            grid.add_row("paused", Text(live.paused, style="yellow"))
        if self.farm.stopped:
            grid.add_row("stopping", Text(f"{self.farm.stopped}; {live.active} in flight (Ctrl-C again to "
                                          "cancel them)", style="yellow"))
        return Group(top, grid)


def _node_row(v: dict[str, Any]) -> str:
    row = (f"{v['episodes']} episodes ({v['episodes_per_s']:.1f}/s, {v['steps_per_s']:.1f} steps/s, "
           f"{v['slots']} slots)")
    return row + (f" — lost: {v['lost']}; {v['requeued']} requeued" if v.get("lost") else "")


def summary_table(s: Summary) -> Table:
    table = Table(title=f"{s.env_id} · {s.policy} · {s.backend}", show_header=False)
    table.add_column(style="dim")
    table.add_column()
    rows = [
        ("episodes", f"{s.episodes_completed} completed, {s.episodes_failed} failed, "
                     f"{s.episodes_interrupted} interrupted, {s.episodes_remaining} remaining of "
                     f"{s.episodes_requested}"),
        ("infra errors", f"{s.infra_errors} recorded, {s.infra_retries} retried"),
        ("mean reward", _reward(s.mean_reward)),
        ("steps", f"{s.steps} ({s.steps_per_s:.1f}/s)"),
        ("wall", f"{s.wall_s:.1f}s ({s.episodes_per_s:.1f} episodes/s, max {s.max_concurrent} concurrent)"),
        ("time goes to", _pct(s.time_split)),
    ]
    rows += [(f"sink {name}", f"{v['delivered']} delivered, {v['backlog']} waiting")
             for name, v in s.sinks.items()]
    rows += [(f"node {name}", _node_row(v)) for name, v in s.nodes.items()]
    if s.stopped:
        rows.append(("stopped", s.stopped))
    for k, v in rows:
        table.add_row(k, v)
    return table


__all__ = ["FarmView", "summary_table"]
