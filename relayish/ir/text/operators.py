"""The infix operators of the text format: one table, read by both the parser and the printer.

Precedence, loosest first (Relay's parser has the same order for the operators it has:
`* /` 12, `+ -` 10, `< > <= >=` 8, `== !=` 7, all read left to right):

    :=          a reference write (relayish only; Relay writes ref_write(r, v))
    == !=       equality
    < > <= >=   ordering
    + -
    * /
    -e !e       prefix: negative, a reference read
    f(x) t.0    postfix: a call, a tuple projection

The parser reads every level left to right: `a - b - c` is `(a - b) - c`, `a < b < c` is
`(a < b) < c`, and `1 == 1 < 2` is `1 == (1 < 2)`. The printer parenthesizes an operand whose
precedence is below what its side needs (`left_need`, `right_need`): a run of `+ -` (or `* /`)
prints without parentheses down its left side; a comparison's operands that are comparisons
(or `:=`) always get them, so `(a < b) == c` and `a == (b < c)` are never written bare.
"""
from __future__ import annotations

from typing import NamedTuple

PREC_BLOCK = 0      # fn, if, match, let blocks: parenthesized as operands or callees
PREC_ASSIGN = 1     # a := b
PREC_EQUALITY = 2   # == !=
PREC_ORDER = 3      # < > <= >=
PREC_ADD = 4        # + -
PREC_MUL = 5        # * /
PREC_UNARY = 6      # -a  !a
PREC_POSTFIX = 7    # f(a)  t.0
PREC_ATOM = 8


class Infix(NamedTuple):
    symbol: str
    op: str | None       # the op the parser calls; None for `:=` (a RefWrite node)
    prec: int
    left_need: int       # the printer parenthesizes a left operand of lower precedence
    right_need: int      # ... and a right operand of lower precedence

    @property
    def chains(self) -> bool:
        """A run of this level prints as `a + b - c`: the left operand needs no parentheses."""
        return self.left_need == self.prec


def _comparison(symbol, op, prec):
    return Infix(symbol, op, prec, PREC_ADD, PREC_ADD)


INFIX_OPERATORS = (
    Infix(":=", None, PREC_ASSIGN, PREC_EQUALITY, PREC_EQUALITY),
    _comparison("==", "equal", PREC_EQUALITY),
    _comparison("!=", "not_equal", PREC_EQUALITY),
    _comparison("<", "less", PREC_ORDER),
    _comparison(">", "greater", PREC_ORDER),
    _comparison("<=", "less_equal", PREC_ORDER),
    _comparison(">=", "greater_equal", PREC_ORDER),
    Infix("+", "add", PREC_ADD, PREC_ADD, PREC_MUL),
    Infix("-", "subtract", PREC_ADD, PREC_ADD, PREC_MUL),
    Infix("*", "multiply", PREC_MUL, PREC_MUL, PREC_UNARY),
    Infix("/", "divide", PREC_MUL, PREC_MUL, PREC_UNARY),
)

BY_SYMBOL = {i.symbol: i for i in INFIX_OPERATORS}               # the parser's view
BY_OP = {i.op: i for i in INFIX_OPERATORS if i.op is not None}   # the printer's view
REF_WRITE = BY_SYMBOL[":="]
