"""Byte-level tokenizer of the built-in model: ids 0..255 are the bytes of UTF-8 text, then a few specials.

    tok = ByteTokenizer()
    tok.encode("<|user|>hi<|eot|>")   # [259, 104, 105, 257]: special strings in the text become their ids
    tok.decode([104, 105, 257])       # "hi<|eot|>"

No vocabulary file, nothing downloaded. ``eos_id`` is the end-of-turn token that closes every message of the
built-in chat template (``trainer/chat.py``); a completion ends with it.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

PAD = "<|pad|>"
EOT = "<|eot|>"
SYSTEM = "<|system|>"
USER = "<|user|>"
ASSISTANT = "<|assistant|>"
TOOL = "<|tool|>"
SPECIALS: tuple[str, ...] = (PAD, EOT, SYSTEM, USER, ASSISTANT, TOOL)
"""Special tokens, ids 256 upwards in this order."""


class ByteTokenizer:
    """UTF-8 bytes plus :data:`SPECIALS`; satisfies :class:`~envfarm.trainer.base.Tokenizer`."""

    def __init__(self) -> None:
        self.special_ids: dict[str, int] = {s: 256 + i for i, s in enumerate(SPECIALS)}
        self.special_text: dict[int, str] = {i: s for s, i in self.special_ids.items()}
        self.vocab_size = 256 + len(SPECIALS)
        self.pad_id = self.special_ids[PAD]
        self.eos_id = self.special_ids[EOT]
        self._split = re.compile("(" + "|".join(re.escape(s) for s in SPECIALS) + ")")

    def encode(self, text: str) -> list[int]:
        """Ids of ``text``; occurrences of the special strings become their single ids."""
        ids: list[int] = []
        for part in self._split.split(text):
            if part in self.special_ids:
                ids.append(self.special_ids[part])
            elif part:
                ids.extend(part.encode("utf-8"))
        return ids

    def decode(self, ids: Sequence[int]) -> str:
        """Text of ``ids``; specials are spelt out, invalid UTF-8 becomes U+FFFD."""
        out: list[str] = []
        run = bytearray()
        for i in ids:
            i = int(i)
            if i < 256:
                run.append(i)
                continue
            out.append(run.decode("utf-8", errors="replace"))
            run.clear()
            out.append(self.special_text.get(i, ""))
        out.append(run.decode("utf-8", errors="replace"))
        return "".join(out)

    def token_bytes(self, token_id: int) -> bytes:
        """The bytes one token stands for (a special's spelling for specials)."""
        if token_id < 256:
            return bytes([token_id])
        return self.special_text.get(token_id, "").encode("utf-8")

    def is_special(self, token_id: int) -> bool:
        return token_id >= 256


__all__ = ["ASSISTANT", "EOT", "PAD", "SPECIALS", "SYSTEM", "TOOL", "USER", "ByteTokenizer"]
