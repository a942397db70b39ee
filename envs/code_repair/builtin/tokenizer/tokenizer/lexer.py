from __future__ import annotations

from dataclasses import dataclass
from typing import Any

KEYWORDS = frozenset({"let", "if", "then", "else", "and", "or", "not", "true", "false"})

# Longest operators first so that "==" wins over "=".
OPERATORS = ["==", "!=", "<=", ">=", "->", "+", "-", "*", "/", "%", "<", ">", "=", "(", ")", ",", ";"]

ESCAPES = {"n": "\n", "t": "\t", "\\": "\\", '"': '"'}


@dataclass(frozen=True)
class Token:
    kind: str  # NUMBER, STRING, IDENT, KEYWORD, OP, EOF
    text: str
    value: Any
    line: int
    col: int


class TokenizeError(Exception):
    def __init__(self, message: str, line: int, col: int):
        super().__init__(f"{message} at line {line}, column {col}")
        self.message = message
        self.line = line
        self.col = col


class _Lexer:
    def __init__(self, source: str):
        self.src = source
        self.pos = 0
        self.line = 1
        self.col = 1

    def peek(self, offset: int = 0) -> str:
        i = self.pos + offset
        return self.src[i] if i < len(self.src) else ""

    def advance(self) -> str:
        ch = self.src[self.pos]
        self.pos += 1
        if ch == "\n":
            self.line += 1
            self.col = 1
        else:
            self.col += 1
        return ch

    def error(self, message: str, line: int | None = None, col: int | None = None):
        raise TokenizeError(message, self.line if line is None else line, self.col if col is None else col)

    def skip_trivia(self) -> None:
        while self.pos < len(self.src):
            ch = self.peek()
            if ch in " \t\r\n":
                self.advance()
            elif ch == "#":
                while self.pos < len(self.src) and self.peek() != "\n":
                    self.advance()
            else:
                break

    def number(self) -> Token:
        line, col, start = self.line, self.col, self.pos
        while self.peek().isdigit():
            self.advance()
        is_float = False
        if self.peek() == "." and self.peek(1).isdigit():
            is_float = True
            self.advance()
            while self.peek().isdigit():
                self.advance()
        if self.peek() in ("e", "E"):
            nxt = self.peek(1)
            if nxt.isdigit() or (nxt in "+-" and nxt and self.peek(2).isdigit()):
                is_float = True
                self.advance()
                if self.peek() in "+-":
                    self.advance()
                while self.peek().isdigit():
                    self.advance()
        text = self.src[start:self.pos]
        if self.peek().isalpha() or self.peek() == "_":
            self.error(f"invalid number literal {text + self.peek()!r}", line, col)
        value = float(text) if is_float else int(text)
        return Token("NUMBER", text, value, line, col)

    def string(self) -> Token:
        line, col, start = self.line, self.col, self.pos
        self.advance()  # opening quote
        chars = []
        while True:
            if self.pos >= len(self.src) or self.peek() == "\n":
                self.error("unterminated string", line, col)
            ch = self.advance()
            if ch == '"':
                break
            if ch == "\\":
                if self.pos >= len(self.src):
                    self.error("unterminated string", line, col)
                esc_line, esc_col = self.line, self.col - 1
                esc = self.advance()
                if esc not in ESCAPES:
                    self.error(f"unknown escape \\{esc}", esc_line, esc_col)
                chars.append(ESCAPES[esc])
            else:
                chars.append(ch)
        return Token("STRING", self.src[start:self.pos], "".join(chars), line, col)

    def ident(self) -> Token:
        line, col, start = self.line, self.col, self.pos
        while self.peek().isalnum() or self.peek() == "_":
            self.advance()
        text = self.src[start:self.pos]
        if text in KEYWORDS:
            value = {"true": True, "false": False}.get(text, text)
            return Token("KEYWORD", text, value, line, col)
        return Token("IDENT", text, text, line, col)

    def operator(self) -> Token:
        line, col = self.line, self.col
        for op in OPERATORS:
            if self.src.startswith(op, self.pos):
                for _ in op:
                    self.advance()
                return Token("OP", op, op, line, col)
        self.error(f"unexpected character {self.peek()!r}")

    def tokens(self) -> list[Token]:
        out: list[Token] = []
        while True:
            self.skip_trivia()
            if self.pos >= len(self.src):
                out.append(Token("EOF", "", None, self.line, self.col))
                return out
            ch = self.peek()
            if ch.isdigit():
                out.append(self.number())
            elif ch == '"':
                out.append(self.string())
            elif ch.isalpha() or ch == "_":
                out.append(self.ident())
            else:
                out.append(self.operator())


def tokenize(source: str) -> list[Token]:
    """Split *source* into tokens; the list always ends with an EOF token."""
    return _Lexer(source).tokens()
