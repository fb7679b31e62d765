"""The uses in a program: which child expressions a node uses, and how often each node is used.

    operands(node) -> [Expr]         the expressions a node uses: its EXPR / EXPRS fields and
                                     its clauses' right-hand sides (fields.py's declarations);
                                     the Vars it binds (VAR / VARS, patterns) are not uses
    reference_counts(expr) -> dict   id(node) -> the edges into it from the distinct nodes of
                                     `expr`: a Var's count is its uses, a node shared at two
                                     places counts 2 (programs are DAGs)

Both read the field declarations, so a new node class needs no edit here. reference_counts is
a loop with a stack: linear in the number of distinct nodes, whatever the depth.
"""
from __future__ import annotations

from relayish.ir.expr import Var
from relayish.ir.fields import CLAUSES, EXPR, EXPRS, fields_of

__all__ = ["operands", "reference_counts"]

_USE_FIELDS: dict = {}     # node class -> its ((name, kind), ...) of kinds EXPR, EXPRS, CLAUSES


def operands(node) -> list:
    """The child expressions `node` uses, in field order (bound Vars and patterns left out)."""
    # the fields to read, per class: every pass walks with this, so no per-node generator
    cls = type(node)
    fields = _USE_FIELDS.get(cls)
    if fields is None:
        fields = _USE_FIELDS[cls] = tuple((name, kind) for name, kind in fields_of(cls)
                                          if kind in (EXPR, EXPRS, CLAUSES))
    out = []
    for name, kind in fields:
        value = getattr(node, name)
        if kind == EXPR:
            out.append(value)
        elif kind == EXPRS:
            out.extend(value)
        else:
            for clause in value:
                out.extend(operands(clause))
    return out


def reference_counts(expr) -> dict:
    """id(node) -> the edges into it from the distinct nodes of `expr` (`expr` itself absent)."""
    counts: dict[int, int] = {}
    work = [expr]
    while work:
        node = work.pop()
        for child in operands(node):
            key = id(child)
            if key in counts:
                counts[key] += 1
            else:
                counts[key] = 1
                if not isinstance(child, Var):
                    work.append(child)
    return counts
