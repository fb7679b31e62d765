"""The operators of the text format, read by both the parser and the printer.

Which op is written as an operator is a fact of its Op record (ir/op.py): `infix=Infix("+",
"add")`, `prefix="-"`. This module turns those records into the tables the parser and printer
read (`BY_SYMBOL`, `BY_OP`, `PREFIX_BY_SYMBOL`, `PREFIX_BY_OP`): live views of the registry,
rebuilt when it changes, so an op registered later (a user's, a test's) parses and prints as an
operator with no edit here. `tables()` gives the current four dicts at once: the printer reads
it once per print (a view checks the registry's generation on every lookup). The one operator
that is not an op, `:=` (a RefWrite node), is written here.

Precedence, loosest first (Relay's parser has the same order for the operators it has:
`* /` 12, `+ -` 10, `< > <= >=` 8, `== !=` 7, all read left to right):

    :=          a reference write (relayish only; Relay writes ref_write(r, v))
    == !=       "equality"
    < > <= >=   "order"
    + -         "add"
    * /         "mul"
    -e !e       prefix: negative (an op's `prefix`), a reference read
    f(x) t.0    postfix: a call, a tuple projection

The parser reads every level left to right: `a - b - c` is `(a - b) - c`, `a < b < c` is
`(a < b) < c`, and `1 == 1 < 2` is `1 == (1 < 2)`. The printer parenthesizes an operand whose
precedence is below what its side needs (`left_need`, `right_need`), derived from the record's
associativity: "left" (a run of `+ -` or `* /` prints without parentheses down its left side) or
"none" (a comparison's operands that are comparisons, or `:=`, always get them, so
`(a < b) == c` and `a == (b < c)` are never written bare).

A symbol must be one token of the lexer (lexer.py's punct), and not `:=`; a table that cannot
be built (an unknown level or associativity, a symbol two ops claim) is a RelayishError naming
the ops.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from relayish.errors import RelayishError
from relayish.ir.op import get_op, list_ops, registry_generation
from relayish.ir.text.lexer import Source, tokenize

PREC_BLOCK = 0      # fn, if, match, let blocks: parenthesized as operands or callees
PREC_ASSIGN = 1     # a := b
PREC_EQUALITY = 2   # == !=
PREC_ORDER = 3      # < > <= >=
PREC_ADD = 4        # + -
PREC_MUL = 5        # * /
PREC_UNARY = 6      # -a  !a
PREC_POSTFIX = 7    # f(a)  t.0
PREC_ATOM = 8

LEVELS = {"equality": PREC_EQUALITY, "order": PREC_ORDER, "add": PREC_ADD, "mul": PREC_MUL}
_ABOVE_COMPARISONS = PREC_ADD   # what a non-associative operator's operands need


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


REF_WRITE = Infix(":=", None, PREC_ASSIGN, PREC_EQUALITY, PREC_EQUALITY)


def _one_token(symbol) -> bool:
    try:
        toks = [t for t in tokenize(Source(symbol)) if t[0] != "eof"]
    except RelayishError:
        return False
    return len(toks) == 1 and toks[0][0] == "punct" and toks[0][1] == symbol


def _build():
    """The four tables from the registry's records (an alias is its target's entry)."""
    by_symbol, by_op = {REF_WRITE.symbol: REF_WRITE}, {}
    prefix_by_symbol, prefix_by_op = {}, {}
    for op in {id(op): op for op in map(get_op, list_ops())}.values():   # aliases once
        if op.infix is not None:
            spec = op.infix
            prec = LEVELS.get(spec.precedence)
            if prec is None or spec.associativity not in ("left", "none"):
                raise RelayishError(
                    f"operator '{op.name}': infix precedence must be one of "
                    f"{', '.join(LEVELS)} and associativity 'left' or 'none', got "
                    f"{spec.precedence!r}, {spec.associativity!r}")
            taken = by_symbol.get(spec.symbol)
            if taken is not None or not _one_token(spec.symbol):
                raise RelayishError(f"operator '{op.name}': infix symbol {spec.symbol!r} is "
                                    + (f"taken ({taken.op or 'a reference write'})"
                                       if taken is not None
                                       else "not one token of the text format"))
            need = (prec, prec + 1) if spec.associativity == "left" else \
                (_ABOVE_COMPARISONS, _ABOVE_COMPARISONS)
            by_symbol[spec.symbol] = by_op[op.name] = Infix(spec.symbol, op.name, prec, *need)
        if op.prefix is not None:
            taken = prefix_by_symbol.get(op.prefix, "a reference read" if op.prefix == "!"
                                         else None)
            if taken is not None or not _one_token(op.prefix):
                raise RelayishError(f"operator '{op.name}': prefix symbol {op.prefix!r} is "
                                    + (f"taken ({taken})" if taken is not None
                                       else "not one token of the text format"))
            prefix_by_symbol[op.prefix] = op.name
            prefix_by_op[op.name] = op.prefix
    return by_symbol, by_op, prefix_by_symbol, prefix_by_op


class Tables(NamedTuple):
    by_symbol: dict          # symbol -> Infix (":=" included)
    by_op: dict              # op name -> Infix
    prefix_by_symbol: dict   # "-" -> "negative"
    prefix_by_op: dict       # "negative" -> "-"


class _Tables:
    """The tables, rebuilt when registry_generation() moves (one int compare per lookup)."""

    def __init__(self):
        self.generation = None
        self.tables = Tables({}, {}, {}, {})

    def current(self) -> Tables:
        gen = registry_generation()
        if gen != self.generation:
            self.tables = Tables(*_build())
            self.generation = gen
        return self.tables

    def get(self, which):
        return self.current()[which]


_TABLES = _Tables()


def tables() -> Tables:
    """The four tables for the registry as it is now; read them once per print or parse (do
    not keep them: an op registered later is missing from them)."""
    return _TABLES.current()


class _View(Mapping):
    """One table as a read-only mapping that always answers for the current registry."""

    def __init__(self, which):
        self._which = which

    def __getitem__(self, key):
        return _TABLES.get(self._which)[key]

    def get(self, key, default=None):
        return _TABLES.get(self._which).get(key, default)

    def __contains__(self, key):
        return key in _TABLES.get(self._which)

    def __iter__(self):
        return iter(_TABLES.get(self._which))

    def __len__(self):
        return len(_TABLES.get(self._which))


BY_SYMBOL = _View(0)          # the parser's view: symbol -> Infix (":=" included)
BY_OP = _View(1)              # the printer's view: op name -> Infix
PREFIX_BY_SYMBOL = _View(2)   # "-" -> "negative"
PREFIX_BY_OP = _View(3)       # "negative" -> "-"
