"""Checkpoints: safetensors weights + optimizer state + the loop's state, written atomically.

    CKPT/
      model.safetensors       the module's state dict
      optimizer.safetensors   AdamW tensors, keyed ``state.<param index>.<name>``
      state.json              optimizer step, param groups, and the loop's own state (phase, version,
                              ingest cursor, ...)
      rng.safetensors         torch's RNG state
      policy/                 optional: what ``extra`` wrote (the trainer's ``save_policy`` folder)

A checkpoint is written into ``CKPT.tmp-<pid>`` and renamed into place, so a crash mid-write leaves the
previous one intact; ``checkpoints/latest`` (written the same way) names the newest. ``load_checkpoint`` puts
weights, optimizer and step back into a :class:`Learner` and returns the loop's state.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from envfarm.errors import CheckpointError

from .learner import Learner

LATEST = "latest"
STATE_FILE = "state.json"


def save_checkpoint(folder: Path, learner: Learner, state: Mapping[str, Any],
                    extra: Callable[[Path], None] | None = None) -> Path:
    """Write ``learner`` and ``state`` (JSON-ready) to ``folder`` atomically; blocking."""
    folder = Path(folder)
    tmp = folder.with_name(f"{folder.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    module_state = {k: v.detach().contiguous().cpu() for k, v in learner.module.state_dict().items()}
    save_file(_unshare(module_state), tmp / "model.safetensors")
    tensors, groups = _optimizer_tensors(learner.optimizer)
    save_file(tensors, tmp / "optimizer.safetensors")
    save_file({"torch_rng": torch.get_rng_state()}, tmp / "rng.safetensors")
    meta = {"learner_step": learner.step, "param_groups": groups, "loop": dict(state)}
    (tmp / STATE_FILE).write_text(json.dumps(meta, indent=1, default=_json_default) + "\n")
    if extra is not None:
        extra(tmp)
    _fsync_tree(tmp)
    old = folder.with_name(f"{folder.name}.old-{os.getpid()}")
    if folder.exists():
        folder.rename(old)
    tmp.rename(folder)
    shutil.rmtree(old, ignore_errors=True)
    _write_pointer(folder.parent, folder.name)
    return folder


def load_checkpoint(folder: Path, learner: Learner, restore_rng: bool = True) -> dict[str, Any]:
    """Weights, optimizer state and step back into ``learner``; returns the loop's state. Blocking."""
    folder = Path(folder)
    try:
        meta = json.loads((folder / STATE_FILE).read_text())
        weights = load_file(folder / "model.safetensors", device=str(learner.device))
        opt = load_file(folder / "optimizer.safetensors", device=str(learner.device))
        rng = load_file(folder / "rng.safetensors")
    except (OSError, ValueError, RuntimeError, SafetensorError) as e:
        raise CheckpointError(f"checkpoint {folder} is missing or damaged ({type(e).__name__}: {e}); resume "
                              "from another one in its checkpoints folder, or start again") from e
    try:
        learner.module.load_state_dict(weights)
    except RuntimeError as e:
        raise CheckpointError(f"checkpoint {folder} does not fit this model: {str(e)[:300]}") from e
    learner.optimizer.load_state_dict(_optimizer_state(opt, meta["param_groups"]))
    learner.step = int(meta["learner_step"])
    if restore_rng:
        torch.set_rng_state(rng["torch_rng"])
    return dict(meta.get("loop", {}))


def latest_checkpoint(root: Path) -> Path | None:
    """The folder ``root/latest`` names, or None when there is none yet."""
    pointer = Path(root) / LATEST
    if not pointer.is_file():
        return None
    folder = Path(root) / pointer.read_text().strip()
    if not (folder / STATE_FILE).is_file():
        raise CheckpointError(f"{pointer} names {folder}, which holds no checkpoint; point it at another "
                              f"folder in {root} or delete it to start again")
    return folder


def read_state(folder: Path) -> dict[str, Any]:
    """The loop's state stored in a checkpoint, without loading tensors."""
    try:
        return dict(json.loads((Path(folder) / STATE_FILE).read_text()).get("loop", {}))
    except (OSError, ValueError) as e:
        raise CheckpointError(f"checkpoint {folder} is damaged ({e})") from e


def prune(root: Path, keep: int, prefix: str = "step-") -> None:
    """Delete all but the newest ``keep`` checkpoints named ``prefix*`` (never the one ``latest`` names)."""
    pointer = Path(root) / LATEST
    current = pointer.read_text().strip() if pointer.is_file() else ""
    names = sorted(p.name for p in Path(root).glob(f"{prefix}*") if p.is_dir() and ".tmp-" not in p.name
                   and ".old-" not in p.name)
    for name in names[:-keep] if keep > 0 else names:
        if name != current:
            shutil.rmtree(Path(root) / name, ignore_errors=True)


def _optimizer_tensors(opt: torch.optim.Optimizer) -> tuple[dict[str, torch.Tensor], list[dict[str, Any]]]:
    sd = opt.state_dict()
    tensors: dict[str, torch.Tensor] = {}
    for index, slots in sd["state"].items():
        for name, value in slots.items():
            t = value if isinstance(value, torch.Tensor) else torch.tensor(value)
            tensors[f"state.{index}.{name}"] = t.detach().contiguous().cpu()
    return tensors, sd["param_groups"]


def _optimizer_state(tensors: Mapping[str, torch.Tensor], groups: list[dict[str, Any]]) -> dict[str, Any]:
    state: dict[int, dict[str, torch.Tensor]] = {}
    for key, value in tensors.items():
        _, index, name = key.split(".", 2)
        state.setdefault(int(index), {})[name] = value
    for g in groups:
        if isinstance(g.get("betas"), list):
            g["betas"] = tuple(g["betas"])
    return {"state": state, "param_groups": groups}


def _unshare(tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses tensors sharing memory (tied embeddings): give each its own copy."""
    seen: set[int] = set()
    out = {}
    for k, v in tensors.items():
        ptr = v.untyped_storage().data_ptr()
        out[k] = v.clone() if ptr in seen else v
        seen.add(ptr)
    return out


def _write_pointer(root: Path, name: str) -> None:
    tmp = root / f"{LATEST}.tmp-{os.getpid()}"
    tmp.write_text(name + "\n")
    tmp.replace(root / LATEST)


def _fsync_tree(folder: Path) -> None:
    for path in folder.rglob("*"):
        if path.is_file():
            with path.open("rb") as f:
                os.fsync(f.fileno())


def _json_default(value: Any) -> Any:
    if isinstance(value, tuple | set):
        return list(value)
    if isinstance(value, Path):
        return str(value)
    raise TypeError(f"{type(value).__name__} is not JSON-ready")


__all__ = ["latest_checkpoint", "load_checkpoint", "prune", "read_state", "save_checkpoint"]
