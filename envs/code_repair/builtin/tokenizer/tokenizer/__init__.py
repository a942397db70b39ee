"""A tokenizer for a small expression language.

Tokens carry their kind, text, value and 1-based line/column position.
"""
from .lexer import Token, TokenizeError, tokenize, KEYWORDS

__all__ = ["Token", "TokenizeError", "tokenize", "KEYWORDS"]
