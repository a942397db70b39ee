"""A safe exact calculator, run inside the sandbox as ``python3 calc_program.py EXPR`` (stdlib only).

Grammar (no names, no calls, no attribute access: nothing of Python's ``eval``):

    expr   := term (("+" | "-") term)*
    term   := factor (("*" | "/" | "//" | "%") factor)*
    factor := ("+" | "-") factor | power
    power  := atom ("**" | "^") factor | atom
    atom   := NUMBER | "(" expr ")"
    NUMBER := digits ["." digits]   (leading zeros are fine: 08 is 8)

Arithmetic is exact (fractions). The result prints as an integer when whole, else as a reduced fraction and
its decimal value. Errors print one line on stderr and exit 1.
"""

import re
import sys
from fractions import Fraction

TOKEN = re.compile(r"\s*(?:(\d+(?:\.\d+)?|\.\d+)|(\*\*|//|[-+*/%^()]))")
MAX_EXPONENT = 10_000
MAX_DIGITS = 5_000


class CalcError(Exception):
    pass


def tokenize(text):
    pos, out = 0, []
    text = text.rstrip()
    while pos < len(text):
        m = TOKEN.match(text, pos)
        if not m:
            raise CalcError("unexpected character %r at position %d" % (text[pos], pos))
        out.append(("num", m.group(1)) if m.group(1) else ("op", m.group(2)))
        pos = m.end()
    if not out:
        raise CalcError("empty expression")
    return out


class Parser:
    def __init__(self, tokens):
        self.tokens, self.i = tokens, 0

    def peek(self):
        return self.tokens[self.i][1] if self.i < len(self.tokens) else None

    def take(self):
        tok = self.tokens[self.i]
        self.i += 1
        return tok

    def parse(self):
        value = self.expr()
        if self.i != len(self.tokens):
            raise CalcError("unexpected %r after a complete expression" % self.peek())
        return value

    def expr(self):
        value = self.term()
        while self.peek() in ("+", "-"):
            value = value + self.term() if self.take()[1] == "+" else value - self.term()
        return value

    def term(self):
        value = self.factor()
        while self.peek() in ("*", "/", "//", "%"):
            op, rhs = self.take()[1], self.factor()
            value = apply(op, value, rhs)
        return value

    def factor(self):
        if self.peek() in ("+", "-"):
            return -self.factor() if self.take()[1] == "-" else self.factor()
        return self.power()

    def power(self):
        base = self.atom()
        if self.peek() in ("**", "^"):
            self.take()
            exp = self.factor()
            if exp.denominator != 1 or abs(exp) > MAX_EXPONENT:
                raise CalcError("exponents must be whole numbers up to %d" % MAX_EXPONENT)
            if base == 0 and exp < 0:
                raise CalcError("division by zero")
            digits = max(len(str(base.numerator)), len(str(base.denominator))) * abs(int(exp))
            if digits > MAX_DIGITS * 2:
                raise CalcError("result too large")
            return base ** int(exp)
        return base

    def atom(self):
        if self.i >= len(self.tokens):
            raise CalcError("expression ends too early")
        kind, text = self.take()
        if kind == "num":
            return Fraction(text)
        if text == "(":
            value = self.expr()
            if self.peek() != ")":
                raise CalcError("missing closing parenthesis")
            self.take()
            return value
        raise CalcError("unexpected %r" % text)


def apply(op, lhs, rhs):
    if op == "*":
        return lhs * rhs
    if rhs == 0:
        raise CalcError("division by zero")
    if op == "/":
        return lhs / rhs
    return Fraction(lhs // rhs) if op == "//" else lhs % rhs


def render(value):
    if value.denominator == 1:
        return str(value.numerator)
    return "%s/%s (= %s)" % (value.numerator, value.denominator, format(float(value), ".10g"))


def evaluate(text: str) -> Fraction:
    value = Parser(tokenize(text)).parse()
    if len(str(value.numerator)) > MAX_DIGITS:
        raise CalcError("result too large")
    return value


def main(argv):
    if len(argv) != 2:
        sys.stderr.write("usage: calc EXPR\n")
        return 2
    try:
        print(render(evaluate(argv[1])))
    except CalcError as e:
        sys.stderr.write("calc error: %s\n" % e)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
