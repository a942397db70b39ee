"""A :class:`Policy`: the module, its tokenizer and chat template, and where it came from.

    policy = load_policy("tiny-cpu")                         # built-in preset, random init (seeded)
    policy = load_policy(path="runs/x/ckpt/000100")          # checkpoint: spec.json + model.safetensors
    policy = load_policy(path="models/my-hf-model")          # a Hugging Face folder (config.json), needs [hf]
    ids = policy.encode_prompt(messages, tools)              # what the server feeds the model
    ids = policy.encode_completion(assistant_message)        # what it should answer, ending with eos
    save_policy(policy, "out/policy")                        # spec.json + model.safetensors (or HF files)

The learner's SFT uses ``encode_prompt``/``encode_completion`` so demo tokens are exactly what the server
would sample; ``prompt + completion`` of turn k is a prefix of the prompt of turn k+1 (built-in template).
"""

from __future__ import annotations

import dataclasses
import json
import logging
from collections.abc import Mapping
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from envfarm.errors import ConfigError

from .base import Policy, PolicySpec, WeightVersion
from .chat import BuiltinTemplate
from .model import ModelConfig, Transformer, preset_config
from .tokenizer import ByteTokenizer
from .weights import decode_state, encode_state, load_into

log = logging.getLogger(__name__)

SPEC_FILE = "spec.json"
WEIGHTS_FILE = "model.safetensors"
DEFAULT_PRESET = "tiny-cpu"


def clone_policy(policy: Policy, device: str | torch.device | None = None) -> Policy:
    """A copy with its own module (e.g. the server's copy while the learner trains the original)."""
    import copy

    dev = policy.device if device is None else resolve_device(device)
    module = copy.deepcopy(policy.module).to(dev).eval()
    return dataclasses.replace(policy, module=module, device=dev)


def resolve_device(device: str | torch.device | None) -> torch.device:
    """``None`` -> cuda when available, else cpu; a ConfigError for an unusable name."""
    if device is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        dev = torch.device(device)
    except RuntimeError as e:
        raise ConfigError(f"unknown device {device!r} ({e}); use cpu, cuda or cuda:N") from e
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ConfigError(f"device {device!r} asked for, but torch sees no CUDA device; use --device cpu")
    return dev


def builtin_policy(config: ModelConfig, *, device: torch.device, seed: int = 0, preset: str | None = None,
                   path: str | None = None) -> Policy:
    """A freshly initialised built-in transformer (deterministic for a seed) with the byte tokenizer."""
    tok = ByteTokenizer()
    if config.vocab_size < tok.vocab_size:
        raise ConfigError(f"vocab_size {config.vocab_size} < the byte tokenizer's {tok.vocab_size}")
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        module = Transformer(config)
    spec = PolicySpec(kind="builtin", preset=preset, path=path, config=config.to_dict())
    name = f"envfarm-{preset}" if preset else "envfarm"
    return Policy(module.to(device).eval(), tok, BuiltinTemplate(tool_list=True), spec, device,
                  config.max_context, name=name)


def load_policy(preset: str | None = None, path: str | Path | None = None, device: str | None = None,
                seed: int = 0, overrides: Mapping[str, Any] | None = None) -> Policy:
    """A policy from a built-in ``preset`` (random init), or from ``path``: an envfarm checkpoint folder
    (``spec.json`` + ``model.safetensors``) or a Hugging Face folder (``config.json``). ``overrides``
    change preset hyper-parameters (e.g. a tiny test model)."""
    dev = resolve_device(device)
    if path is None:
        config = preset_config(preset or DEFAULT_PRESET, **dict(overrides or {}))
        return builtin_policy(config, device=dev, seed=seed, preset=preset or DEFAULT_PRESET)
    folder = Path(path)
    if not folder.is_dir():
        raise ConfigError(f"policy folder {str(folder)!r} does not exist; give a checkpoint folder "
                          f"({SPEC_FILE} + {WEIGHTS_FILE}) or a Hugging Face model folder (config.json)")
    if not (folder / SPEC_FILE).is_file() and (folder / "policy" / SPEC_FILE).is_file():
        folder = folder / "policy"  # a learner checkpoint: the policy is saved in its policy/ folder
    if (folder / SPEC_FILE).is_file():
        return _load_checkpoint(folder, dev, seed)
    if (folder / "config.json").is_file():
        from .hf import load_hf

        return load_hf(folder, device=dev)
    raise ConfigError(f"{str(folder)!r} has neither {SPEC_FILE} (an envfarm checkpoint) nor config.json "
                      "(a Hugging Face model)")


def _load_checkpoint(folder: Path, device: torch.device, seed: int) -> Policy:
    try:
        data = json.loads((folder / SPEC_FILE).read_text())
        version = data.pop("weight_version", 0)
        spec = PolicySpec(**data)
    except (json.JSONDecodeError, TypeError) as e:
        raise ConfigError(f"{folder / SPEC_FILE} is not a policy spec ({e})") from e
    if spec.kind == "hf":
        from .hf import load_hf

        policy = load_hf(folder, device=device)
        policy.version = version
        return policy
    if spec.kind != "builtin":
        raise ConfigError(f"{folder / SPEC_FILE}: unknown policy kind {spec.kind!r} (builtin or hf)")
    policy = builtin_policy(ModelConfig.from_dict(dict(spec.config)), device=device, seed=seed,
                            preset=spec.preset, path=str(folder))
    weights = folder / WEIGHTS_FILE
    if not weights.is_file():
        raise ConfigError(f"checkpoint {str(folder)!r} has no {WEIGHTS_FILE}")
    load_into(policy, decode_state(weights.read_bytes()), version)
    return policy


def save_policy(policy: Policy, folder: str | Path) -> Path:
    """Write ``policy`` so :func:`load_policy` (and ``envfarm policy serve --checkpoint``) can rebuild it."""
    out = Path(folder)
    out.mkdir(parents=True, exist_ok=True)
    if policy.spec.kind == "hf":
        from .hf import save_hf

        save_hf(policy, out)
    else:
        tmp = out / (WEIGHTS_FILE + ".tmp")
        tmp.write_bytes(encode_state(policy.module))
        tmp.replace(out / WEIGHTS_FILE)
    spec = {**asdict(policy.spec), "config": dict(policy.spec.config), "weight_version": policy.version}
    (out / SPEC_FILE).write_text(json.dumps(spec, indent=2) + "\n")
    return out


__all__ = ["DEFAULT_PRESET", "SPEC_FILE", "WEIGHTS_FILE", "Policy", "WeightVersion", "builtin_policy",
           "clone_policy", "load_policy", "resolve_device", "save_policy"]
