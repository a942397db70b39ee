"""Helpers of the Hugging Face tests: a byte-level BPE tokenizer trained here (nothing downloaded)."""

from __future__ import annotations

from collections.abc import Sequence

import transformers

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
    fast = transformers.PreTrainedTokenizerFast(tokenizer_object=tk, eos_token="<|im_end|>",
                                                pad_token="<|endoftext|>")
    if chat_template:
        fast.chat_template = chat_template
    return fast
