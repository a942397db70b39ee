"""Training metrics: ``DIR/metrics.jsonl`` (the dashboard reads it), TensorBoard, and the reward-curve PNG.

One JSON object per line, each with ``kind`` and ``time`` (unix seconds):

    {"kind": "update", "step": 3, "phase": "rl", "loss": 0.01, "reward_mean": 0.41, "kl": null,
     "clip_frac": 0.02, "lr": 0.0003, "samples": 256, "tokens": 9120, "version": 3, ...}
    {"kind": "publish", "version": 3, "bytes": 3342336, "seconds": 0.08}
    {"kind": "eval", "phase": "rl-greedy", "arm": "rl", "mode": "greedy", "mean_reward": 0.43,
     "episodes": 500}

Lines are appended and flushed as they happen; a resumed run appends to the same file. Extra keys may follow
the agreed ones (readers ignore what they do not know).
"""

from __future__ import annotations

import json
import logging
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

ARM_COLOURS = {"sft": "tab:red", "sft_more": "tab:orange", "rl": "tab:green"}

log = logging.getLogger(__name__)

Phase = Literal["sft", "rl", "sft_more"]


class Metrics:
    """Writes metrics.jsonl and TensorBoard scalars under ``out``. Blocking (small writes).

    ``keep``: on a resumed run, only the records it accepts stay (the lines written after the checkpoint the
    run resumes from are dropped, so a redone step is logged once)."""

    def __init__(self, out: Path, tensorboard: bool = True,
                 keep: Callable[[dict[str, Any]], bool] | None = None) -> None:
        self.out = Path(out)
        self.out.mkdir(parents=True, exist_ok=True)
        self.path = self.out / "metrics.jsonl"
        if keep is not None and self.path.exists():
            kept = [r for r in read_metrics(self.path) if keep(r)]
            tmp = self.path.with_name(self.path.name + ".tmp")
            tmp.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in kept))
            tmp.replace(self.path)
        self._file = self.path.open("a", encoding="utf-8")
        self._tb: Any = None
        if tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter

                self._tb = SummaryWriter(str(self.out / "tensorboard"))
            except ImportError as e:  # tensorboard is an extra; metrics.jsonl is enough
                log.warning("no TensorBoard logs (%s); metrics.jsonl is written", e)

    def update(self, *, step: int, phase: Phase, loss: float, reward_mean: float | None, kl: float | None,
               clip_frac: float | None, lr: float, samples: int, tokens: int, version: int,
               **extra: Any) -> None:
        self._write({"kind": "update", "step": step, "phase": phase, "loss": loss, "reward_mean": reward_mean,
                     "kl": kl, "clip_frac": clip_frac, "lr": lr, "samples": samples, "tokens": tokens,
                     "version": version, **extra})
        scalars = {"loss": loss, "reward_mean": reward_mean, "kl": kl, "clip_frac": clip_frac, "lr": lr,
                   **{k: v for k, v in extra.items() if isinstance(v, int | float)}}
        for name, value in scalars.items():
            if value is not None and self._tb is not None:
                self._tb.add_scalar(f"{phase}/{name}", value, step)

    def publish(self, *, version: int, bytes: int, seconds: float) -> None:
        self._write({"kind": "publish", "version": version, "bytes": bytes, "seconds": seconds})
        if self._tb is not None and seconds > 0:
            self._tb.add_scalar("publish/mb_per_s", bytes / seconds / 1e6, version)

    def eval(self, *, arm: str, mode: str, mean_reward: float, episodes: int, **extra: Any) -> None:
        """One arm's evaluation in one mode (``phase`` is "<arm>-<mode>", the name of its evals/ file)."""
        self._write({"kind": "eval", "phase": f"{arm}-{mode}", "arm": arm, "mode": mode,
                     "mean_reward": mean_reward, "episodes": episodes, **extra})
        if self._tb is not None:
            self._tb.add_scalar(f"eval/{arm}-{mode}", mean_reward, 0)

    def _write(self, record: dict[str, Any]) -> None:
        record = {"kind": record.pop("kind"), "time": round(time.time(), 3), **record}
        self._file.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._file.flush()

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None


def read_metrics(path: Path) -> list[dict[str, Any]]:
    """The records of a metrics.jsonl (a torn last line is skipped)."""
    out: list[dict[str, Any]] = []
    if not Path(path).exists():
        return out
    for line in Path(path).read_text(encoding="utf-8").splitlines():
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue
    return out


def plot_rewards(metrics_path: Path, png: Path, title: str = "") -> Path:
    """The RL reward curve (mean reward of each update's episodes, and a moving average) with the arms'
    evaluations as horizontal lines (dotted: greedy); SFT loss on a second panel. Blocking."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    records = read_metrics(metrics_path)
    rl = [r for r in records if r.get("kind") == "update" and r.get("phase") == "rl"
          and r.get("reward_mean") is not None]
    sft = [r for r in records if r.get("kind") == "update" and r.get("phase") == "sft"]
    evals = {r["phase"]: r for r in records if r.get("kind") == "eval"}
    fig, (ax, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    if rl:
        steps = [r["version"] for r in rl]
        rewards = [r["reward_mean"] for r in rl]
        ax.plot(steps, rewards, ".", alpha=0.4, label="update batch (RL samples)")
        ax.plot(steps, _moving(rewards, 8), "-", label="moving average (8)")
    for phase, r in evals.items():
        ax.axhline(r["mean_reward"], color=ARM_COLOURS.get(r.get("arm", ""), "k"),
                   ls=":" if r.get("mode") == "greedy" else "--",
                   label=f"eval {phase}: {r['mean_reward']:.3f} ({r['episodes']} eps)")
    ax.set_xlabel("RL update (weight version)")
    ax.set_ylabel("mean reward")
    ax.set_ylim(-0.02, 1.02)
    ax.set_title(title or "RL reward")
    ax.legend(loc="lower right", fontsize=8)
    if sft:
        ax2.plot([r["step"] for r in sft], [r["loss"] for r in sft], "-", color="tab:purple", label="sft")
        more = [r for r in records if r.get("kind") == "update" and r.get("phase") == "sft_more"]
        if more:  # continued from the SFT checkpoint: drawn after its last step
            last = sft[-1]["step"]
            ax2.plot([last + r["step"] for r in more], [r["loss"] for r in more], "-", color="tab:orange",
                     label="sft_more")
            ax2.legend(loc="upper right", fontsize=8)
        ax2.set_yscale("log")
        checks = [r for r in sft if r.get("held_out_match") is not None]
        if checks:
            ax3 = ax2.twinx()
            ax3.plot([r["step"] for r in checks], [r["held_out_match"] for r in checks], "o-",
                     color="tab:orange", ms=3)
            ax3.set_ylabel("held-out greedy match", color="tab:orange")
            ax3.set_ylim(-0.02, 1.02)
    else:
        ax2.text(0.5, 0.5, "no SFT in this run:\nRL started from a checkpoint", ha="center", va="center",
                 transform=ax2.transAxes, color="0.4")
    ax2.set_xlabel("SFT step")
    ax2.set_ylabel("SFT loss (per token)")
    ax2.set_title("warm start")
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)
    plt.close(fig)
    return png


def _moving(values: list[float], width: int) -> list[float]:
    out, acc = [], 0.0
    for i, v in enumerate(values):
        acc += v
        if i >= width:
            acc -= values[i - width]
        out.append(acc / min(i + 1, width))
    return out


__all__ = ["Metrics", "plot_rewards", "read_metrics"]
