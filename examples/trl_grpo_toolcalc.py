"""TRL's GRPOTrainer training on ``envfarm/ToolCalc-v0`` served by envfarm over OpenEnv, on CPU.

    envfarm envs serve --env envfarm/ToolCalc-v0 --backend bwrap --port 8010 --max-sessions 16 \\
        --env-kwargs '{"difficulty": 1, "tool_help": false}' &
    HF_HUB_OFFLINE=1 python examples/trl_grpo_toolcalc.py --url http://127.0.0.1:8010 --steps 5

TRL's environments mode (``environment_factory``) drives the episodes: the model's tool calls (``calc``,
``submit``) become OpenEnv ``step`` messages, and envfarm's reward is the GRPO reward (``get_reward``).

The model is made here, from a config, so nothing is downloaded: a 2-layer Qwen2 with a toy tokenizer whose
vocabulary holds the chat markup plus one token per ``submit`` call body (the JSON between ``<tool_call>`` and
``</tool_call>``) for the answers of the training tasks. A few supervised steps teach it the call format with
answers drawn at random, so it then submits a right answer now and then: GRPO sees rewards that differ and
takes real steps. The markup tags stay tokens of their own because transformers' response parser (>= 5.25)
takes ``<tool_call>`` as a delimiter only where it was generated as its own token id. With a real model,
pass ``--model`` (a local Hugging Face folder of a tool-calling chat model, e.g. a Qwen3 download) and the
tokenizer is the model's own.
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
from typing import Any

import numpy as np

CHAT_SPECIAL = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
CHAT_MARKUP = ["<tool_call>", "</tool_call>", "<tool_response>", "</tool_response>", "<think>", "</think>"]
PROMPT = "Solve this task with the tools."


def toolcalc_answers(seeds: list[int], difficulty: int) -> list[str]:
    """The answers of the ToolCalc tasks of ``seeds`` (the tasks are generated from the seed alone)."""
    import gymnasium

    from envfarm.envs.tool_use.toolcalc import ToolCalcEnv

    env = ToolCalcEnv(difficulty=difficulty, backend="bwrap")
    answers = []
    for seed in seeds:
        gymnasium.Env.reset(env, seed=seed)
        answers.append(str(env.generate(env.np_random).problem.answer))
    return answers


def submit_body(answer: str) -> str:
    """The text between ``<tool_call>`` and ``</tool_call>`` of a ``submit`` call (one token in the toy
    vocabulary)."""
    return f'\n{json.dumps({"name": "submit", "arguments": {"answer": answer}})}\n'


def toy_model(answers: list[str], seed: int = 0) -> tuple[Any, Any]:
    """A 2-layer Qwen2 and a word-level tokenizer with the Qwen3 chat template (see the docstring)."""
    import torch
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers
    from transformers import AddedToken, PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM
    from trl.chat_template_utils import qwen3_chat_template

    chars = sorted(set("assistant\n"))  # the chat header round-trips: TRL's response parser reads it
    backend = Tokenizer(models.WordLevel(vocab={"[UNK]": 0} | {c: i + 1 for i, c in enumerate(chars)},
                                         unk_token="[UNK]"))
    backend.pre_tokenizer = pre_tokenizers.Split(Regex("[\\s\\S]"), "isolated")  # one character per token
    backend.decoder = decoders.Fuse()
    tokenizer = PreTrainedTokenizerFast(tokenizer_object=backend, unk_token="[UNK]", eos_token="<|im_end|>",
                                        pad_token="<|endoftext|>", padding_side="left")
    tokenizer.add_special_tokens({"additional_special_tokens": CHAT_SPECIAL})
    bodies = [submit_body(a) for a in sorted(set(answers))]
    tokenizer.add_tokens([AddedToken(t, normalized=False, special=False) for t in CHAT_MARKUP + bodies])
    tokenizer.chat_template = qwen3_chat_template
    torch.manual_seed(seed)
    config = Qwen2Config(vocab_size=len(tokenizer), hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                         num_attention_heads=2, num_key_value_heads=1, max_position_embeddings=4096,
                         tie_word_embeddings=True, pad_token_id=tokenizer.pad_token_id,
                         eos_token_id=tokenizer.eos_token_id, bos_token_id=None)
    model = Qwen2ForCausalLM(config)
    teach_call_format(model, tokenizer, bodies, seed)
    return model, tokenizer


def teach_call_format(model: Any, tokenizer: Any, bodies: list[str], seed: int, steps: int = 60) -> None:
    """Supervised steps on ``<tool_call>``, a ``submit`` body drawn at random, ``</tool_call><|im_end|>``,
    after chat prompts of random length (TRL's prompt carries the tool schemas, which the toy vocabulary reads
    as unknown characters): the model learns the format, not the answer."""
    import torch

    rng = np.random.default_rng(seed)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    model.train()
    for _ in range(steps):
        batch = []
        for _ in range(8):
            user = PROMPT + "x" * int(rng.integers(0, 2000))
            prompt = tokenizer.apply_chat_template([{"role": "user", "content": user}], tokenize=False,
                                                   add_generation_prompt=True)
            call = "<tool_call>" + bodies[int(rng.integers(len(bodies)))] + "</tool_call><|im_end|>"
            prompt_ids = tokenizer.encode(prompt, add_special_tokens=False)
            batch.append((prompt_ids + tokenizer.encode(call, add_special_tokens=False), len(prompt_ids)))
        loss = sum(_completion_loss(model, ids, start) for ids, start in batch) / len(batch)
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    model.eval()


def _completion_loss(model: Any, ids: list[int], start: int) -> Any:
    import torch

    tensor = torch.tensor([ids])
    logits = model(tensor).logits[0, start - 1:-1]
    return torch.nn.functional.cross_entropy(logits, tensor[0, start:])


def train(url: str, steps: int = 5, seeds: list[int] | None = None, difficulty: int = 1,
          model_path: str | None = None, output_dir: str | None = None,
          seed: int = 0) -> list[dict[str, Any]]:
    """Run GRPO for ``steps`` steps against the env served at ``url``; TRL's log history."""
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from envfarm.openenv.trl import environment_factory

    seeds = seeds if seeds is not None else [0, 1, 2, 3]
    if model_path:
        model, tokenizer = AutoModelForCausalLM.from_pretrained(model_path), AutoTokenizer.from_pretrained(
            model_path)
    else:
        model, tokenizer = toy_model(toolcalc_answers(seeds, difficulty), seed)
    rng = np.random.default_rng(seed)
    rows = [int(s) for s in rng.choice(seeds, size=8 * steps)]
    dataset = Dataset.from_dict({"prompt": [[{"role": "user", "content": PROMPT}]
                                            for _ in rows], "seed": rows})
    args = GRPOConfig(output_dir=output_dir or tempfile.mkdtemp(prefix="envfarm-grpo-"), max_steps=steps,
                      per_device_train_batch_size=8, num_generations=4, max_completion_length=16,
                      max_tool_calling_iterations=2, learning_rate=1e-3, beta=0.0, logging_steps=1,
                      save_strategy="no", report_to="none", use_cpu=True, bf16=False, seed=seed,
                      dataloader_num_workers=0)
    factory = environment_factory(url)
    try:
        trainer = GRPOTrainer(model=model, processing_class=tokenizer, args=args, train_dataset=dataset,
                              environment_factory=factory)
        trainer.train()
    finally:
        factory.close()
    return list(trainer.state.log_history)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--url", default="http://127.0.0.1:8010", help="the envfarm OpenEnv server")
    parser.add_argument("--steps", type=int, default=5, help="GRPO steps")
    parser.add_argument("--difficulty", type=int, default=1, help="the server's ToolCalc difficulty")
    parser.add_argument("--model", default=None, help="a local Hugging Face model folder (default: toy)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    history = train(args.url, args.steps, difficulty=args.difficulty, model_path=args.model, seed=args.seed)
    for entry in history:
        if "reward" in entry:
            print(json.dumps({k: entry[k] for k in ("step", "reward", "reward_std", "loss") if k in entry}))


if __name__ == "__main__":
    main()
