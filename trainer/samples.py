"""Trajectories -> training samples -> padded batches.

    samples, counts = rl_samples(groups, current_version=v, max_staleness=k)   # GRPO: one per assistant turn
    samples = sft_samples(demos, policy)                                       # teacher demos, rendered
    for batch in micro_batches(samples, pad_id, max_tokens=8192, device=dev):  # tensors on the device
        ...

One :class:`TokenSample` is a token sequence with the completion spans to train on. An assistant turn is
``prompt`` (the conversation so far, rendered by the chat template) then ``completion`` (ending in eos); the
turns of one episode are packed into one sequence when each prompt continues the previous prompt +
completion (the built-in template's guarantee), so an episode's shared prefix goes through the model once.
RL samples carry the behaviour log-probabilities the server returned and the episode's group-relative
advantage; SFT samples carry neither.

GRPO groups are the attempts at one task (same run, same seed): ``A_i = (r_i - mean(r)) / (std(r) + eps)``
over the group's *completed* episodes. A group whose rewards are all equal gives 0 to everyone (no signal).
Episodes broken by the infrastructure or by the policy server (``infra_error``, ``policy_error``, ``error``,
``interrupted``) are never scored as reward 0: they are dropped and counted. Turns without token ids
(a server that returned none) are dropped and counted; so are turns older than ``max_staleness`` versions.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import torch

from envfarm.rollout.trajectory import Trajectory

if TYPE_CHECKING:
    from .policy import Policy

ADV_EPS = 1e-6


@dataclass(frozen=True)
class TokenSample:
    """One token sequence to train on: the turns of one episode packed together when each turn's prompt
    continues the previous turn's prompt + completion (the built-in template guarantees it), else one turn."""

    ids: tuple[int, ...]
    """Prompt of the first turn, its completion, the next turn's new prompt tokens, its completion, ..."""
    spans: tuple[tuple[int, int], ...]
    """[start, end) of each completion inside ``ids``: the tokens trained on."""
    logprobs: tuple[float, ...] | None = None
    """Behaviour log-probabilities of the span tokens, concatenated (RL); None for SFT."""
    advantage: float = 0.0
    version: int | None = None
    """The oldest weight version among the turns trained on."""
    episode_id: str = ""

    def __len__(self) -> int:
        return len(self.ids)

    @property
    def targets(self) -> int:
        """Completion tokens that are predicted (a completion at position 0 has nothing before it)."""
        return sum(end - max(start, 1) for start, end in self.spans if end > max(start, 1))

    @classmethod
    def turn(cls, prompt: tuple[int, ...], completion: tuple[int, ...],
             logprobs: tuple[float, ...] | None = None, advantage: float = 0.0, version: int | None = None,
             episode_id: str = "") -> TokenSample:
        """One turn as a sample."""
        n = len(prompt)
        return cls(prompt + completion, ((n, n + len(completion)),), logprobs, advantage, version, episode_id)

    def extend(self, prompt: tuple[int, ...], completion: tuple[int, ...],
               logprobs: tuple[float, ...] | None, version: int | None) -> TokenSample | None:
        """This sample with the next turn packed in, or None when ``prompt`` does not continue ``ids``."""
        n = len(self.ids)
        if len(prompt) < n or prompt[:n] != self.ids:
            return None
        ids = prompt + completion
        spans = (*self.spans, (len(prompt), len(ids)))
        lps = None if self.logprobs is None or logprobs is None else self.logprobs + logprobs
        versions = [v for v in (self.version, version) if v is not None]
        return TokenSample(ids, spans, lps, self.advantage, min(versions) if versions else None,
                           self.episode_id)


@dataclass(frozen=True)
class Batch:
    """Padded tensors of one micro-batch; ``targets[:, t]`` is predicted from ``input_ids[:, :t+1]``."""

    input_ids: torch.Tensor
    """[B, T] long: prompt + completion without its last token."""
    targets: torch.Tensor
    """[B, T] long: the same shifted by one."""
    mask: torch.Tensor
    """[B, T] float: 1 where the target is a completion token."""
    old_logprobs: torch.Tensor
    """[B, T] float: behaviour log-probabilities at the completion targets (0 elsewhere)."""
    advantages: torch.Tensor
    """[B] float."""
    tokens: int
    """Completion tokens in the batch (a host int, known without a device sync)."""
    samples: int


def group_key(t: Trajectory) -> tuple[str, int]:
    """The GRPO group of a trajectory: its run (episode id prefix) and seed."""
    return t.episode_id.rsplit(":", 1)[0], t.seed


def group_advantages(rewards: Sequence[float], normalise_std: bool = True) -> list[float]:
    """Group-relative advantages: reward minus the group mean, over the std when ``normalise_std``.
    A group with one member or equal rewards gives zeros."""
    n = len(rewards)
    if n < 2:
        return [0.0] * n
    mean = sum(rewards) / n
    std = math.sqrt(sum((r - mean) ** 2 for r in rewards) / n)
    if std < ADV_EPS:
        return [0.0] * n
    scale = std + ADV_EPS if normalise_std else 1.0
    return [(r - mean) / scale for r in rewards]


def rl_samples(groups: Iterable[Sequence[Trajectory]], current_version: int | None = None,
               max_staleness: int | None = None, max_context: int | None = None,
               normalise_std: bool = True) -> tuple[list[TokenSample], Counter[str]]:
    """Per-turn samples of the completed episodes in ``groups``, with their group's advantage; plus counts
    of what was dropped and why (``not_completed``, ``no_tokens``, ``stale``, ``too_long``, ``zero_adv``)."""
    counts: Counter[str] = Counter()
    out: list[TokenSample] = []
    for group in groups:
        good = [t for t in group if t.status == "completed"]
        counts["not_completed"] += len(group) - len(good)
        counts["episodes"] += len(good)
        advantages = group_advantages([t.reward for t in good], normalise_std)
        if good and all(a == 0.0 for a in advantages):
            counts["zero_adv_groups"] += 1
        for traj, adv in zip(good, advantages, strict=True):
            out.extend(_turn_samples(traj, adv, current_version, max_staleness, max_context, counts))
    counts["samples"] = len(out)
    return out, counts


def _turn_samples(traj: Trajectory, adv: float, current: int | None, max_staleness: int | None,
                  max_context: int | None, counts: Counter[str]) -> Iterator[TokenSample]:
    """The episode's usable turns, packed into as few sequences as their prompts allow."""
    sample: TokenSample | None = None
    for turn in traj.turns:
        if not turn.token_ids or turn.prompt_token_ids is None or turn.logprobs is None \
                or len(turn.logprobs) != len(turn.token_ids):
            counts["no_tokens"] += 1
            continue
        version = turn.weight_version if isinstance(turn.weight_version, int) else None
        if (max_staleness is not None and current is not None and version is not None
                and current - version > max_staleness):
            counts["stale"] += 1
            continue
        prompt, completion = tuple(turn.prompt_token_ids), tuple(turn.token_ids)
        if max_context is not None and len(prompt) + len(completion) > max_context:
            counts["too_long"] += 1
            continue
        counts["turns"] += 1
        packed = sample.extend(prompt, completion, tuple(turn.logprobs), version) if sample else None
        if packed is None:
            if sample is not None:
                yield sample
            packed = TokenSample.turn(prompt, completion, tuple(turn.logprobs), adv, version, traj.episode_id)
        sample = packed
    if sample is not None:
        yield sample


def sft_samples(demos: Iterable[Trajectory], policy: Policy) -> list[TokenSample]:
    """One sample per assistant message of each completed demonstration, rendered with the policy's template
    (``encode_prompt`` of the messages before it, ``encode_completion`` of it). Whatever its reward: SFT
    imitates its teacher, mistakes included (an imperfect teacher's wrong demos are the point)."""
    out: list[TokenSample] = []
    for traj in demos:
        if traj.status != "completed":
            continue
        out.extend(render_messages(traj.messages, traj.tools, policy, traj.episode_id))
    return out


def render_messages(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]],
                    policy: Policy, episode_id: str = "") -> list[TokenSample]:
    """The assistant turns of one transcript as samples (packed while they fit the context)."""
    out: list[TokenSample] = []
    sample: TokenSample | None = None
    for i, message in enumerate(messages):
        if message.get("role") != "assistant":
            continue
        prompt = tuple(policy.encode_prompt(list(messages[:i]), list(tools)))
        completion = tuple(policy.encode_completion(message))
        if len(prompt) + len(completion) > policy.max_context:
            continue  # too long for the model: the server could not have produced it either
        packed = sample.extend(prompt, completion, None, None) if sample else None
        if packed is None:
            if sample is not None:
                out.append(sample)
            packed = TokenSample.turn(prompt, completion, episode_id=episode_id)
        sample = packed
    if sample is not None:
        out.append(sample)
    return out


def micro_batches(samples: Sequence[TokenSample], pad_id: int, max_tokens: int,
                  device: torch.device | str = "cpu") -> list[Batch]:
    """``samples`` cut into padded micro-batches of at most ``max_tokens`` (rows x longest row) each, in a
    fixed order (by length, to waste little padding), moved to ``device``."""
    order = sorted(range(len(samples)), key=lambda i: (len(samples[i]), i))
    chunks: list[list[TokenSample]] = []
    current: list[TokenSample] = []
    for i in order:
        s = samples[i]
        longest = max([len(s), *(len(x) for x in current)]) - 1
        if current and longest * (len(current) + 1) > max_tokens:
            chunks.append(current)
            current = []
        current.append(s)
    if current:
        chunks.append(current)
    return [collate(chunk, pad_id, device) for chunk in chunks]


def collate(samples: Sequence[TokenSample], pad_id: int, device: torch.device | str = "cpu") -> Batch:
    """One padded batch (right padding) of ``samples``."""
    width = max(len(s) for s in samples) - 1
    n = len(samples)
    ids = torch.full((n, width + 1), pad_id, dtype=torch.long)
    mask = torch.zeros((n, width), dtype=torch.float32)
    old = torch.zeros((n, width), dtype=torch.float32)
    for row, s in enumerate(samples):
        ids[row, : len(s.ids)] = torch.tensor(s.ids, dtype=torch.long)
        offset = 0  # into s.logprobs
        for start, end in s.spans:
            first = max(start, 1)  # token j is the target at position j - 1
            if end > first:
                mask[row, first - 1 : end - 1] = 1.0
                if s.logprobs is not None:
                    lp = s.logprobs[offset + first - start : offset + end - start]
                    old[row, first - 1 : end - 1] = torch.tensor(lp, dtype=torch.float32)
            offset += end - start
    adv = torch.tensor([s.advantage for s in samples], dtype=torch.float32)
    tokens = sum(s.targets for s in samples)
    dev = torch.device(device)
    pin = dev.type == "cuda"

    def move(t: torch.Tensor) -> torch.Tensor:
        t = t.contiguous()
        return t.pin_memory().to(dev, non_blocking=True) if pin else t

    return Batch(move(ids[:, :-1]), move(ids[:, 1:]), move(mask), move(old), move(adv), tokens, n)


def tally_groups(trajectories: Iterable[Trajectory]) -> dict[tuple[str, int], list[Trajectory]]:
    """Trajectories by GRPO group, in arrival order."""
    groups: dict[tuple[str, int], list[Trajectory]] = defaultdict(list)
    for t in trajectories:
        groups[group_key(t)].append(t)
    return dict(groups)


__all__ = ["Batch", "TokenSample", "collate", "group_advantages", "group_key", "micro_batches",
           "render_messages", "rl_samples", "sft_samples", "tally_groups"]
