"""A byte-level BPE tokenizer trained here and a tiny Qwen2 built on it (random init; nothing downloaded):
the models of the Hugging Face tests and of bench/engine.py. Needs the ``hf`` and ``train`` extras."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import torch
import transformers

from envfarm.envs.tool_use.word_problems import make_problem

CHATML = ("{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] or '' }}"
          "{% if m.get('tool_calls') %}{% for c in m['tool_calls'] %}<tool_call>\n"
          "{{ c['function'] | tojson }}\n</tool_call>{% endfor %}{% endif %}<|im_end|>\n{% endfor %}"
          "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}")
"""ChatML with Hermes-style tool calls (``<tool_call>{json}</tool_call>``, read by vLLM's hermes parser)."""

CORPUS = ("What is 3*4? Use the calc tool.", '{"name": "calc", "arguments": {"expr": "3*4"}}')


def bpe_tokenizer(chat_template: str | None, corpus: Sequence[str] = CORPUS,
                  vocab_size: int = 320) -> transformers.PreTrainedTokenizerFast:
    """A ChatML-style tokenizer (eos ``<|im_end|>``, pad ``<|endoftext|>``) trained on ``corpus``."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tk = Tokenizer(models.BPE())
    tk.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tk.decoder = decoders.ByteLevel()
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=specials,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tk.train_from_iterator(list(corpus), trainer)
    fast = transformers.PreTrainedTokenizerFast(  # type: ignore[no-untyped-call]  # transformers: untyped
        tokenizer_object=tk, eos_token="<|im_end|>", pad_token="<|endoftext|>")
    if chat_template:
        fast.chat_template = chat_template
    return fast


def toolcalc_corpus() -> list[str]:
    """ToolCalc problems and their calc tool calls (Hermes style): the default tokenizer corpus."""
    rng = np.random.default_rng(0)
    problems = [make_problem(rng, level) for level in (1, 2, 3) for _ in range(40)]
    return [p.text for p in problems] + [f'<tool_call>\n{{"name": "calc", "arguments": {{"expr": '
                                         f'"{p.expression}"}}}}\n</tool_call>' for p in problems]


def tiny_qwen2(folder: Path, hidden_size: int = 32, heads: int = 2, layers: int = 2,
               corpus: Sequence[str] | None = None) -> Path:
    """A random-init Qwen2 (one KV head, tied embeddings, 1024 positions) with a 600-token BPE tokenizer
    trained on ``corpus`` (default: ToolCalc problems and calc tool calls), saved to ``folder``. vLLM's CPU
    attention needs ``hidden_size / heads`` (the head size) of at least 32."""
    tok = bpe_tokenizer(CHATML, toolcalc_corpus() if corpus is None else corpus, vocab_size=600)
    cfg = transformers.Qwen2Config(vocab_size=len(tok), hidden_size=hidden_size,
                                   intermediate_size=2 * hidden_size, num_hidden_layers=layers,
                                   num_attention_heads=heads, num_key_value_heads=1,
                                   max_position_embeddings=1024, eos_token_id=tok.eos_token_id,
                                   tie_word_embeddings=True)
    torch.manual_seed(0)
    transformers.Qwen2ForCausalLM(cfg).save_pretrained(str(folder))
    tok.save_pretrained(str(folder))
    return folder
