"""What the readers of other frameworks' graphs share: a let-chain built binding by binding
(LetChain), rule tables (rule_registrar), and tuples of tensors as flat lists, both ways: jax
passes pytrees as lists of leaves, relayish passes them as (nested) tuples. Leaves are in
order, depth first (jax's order for tuples)."""
from __future__ import annotations

from relayish.ir.expr import Constant, Let, Tuple, TupleGetItem, Var
from relayish.ir.types import TupleType


def leaf_exprs(expr, typ, out):
    """Append the projections of `expr` (of type `typ`) down to its tensors to `out`."""
    if isinstance(typ, TupleType):
        for k, t in enumerate(typ.fields):
            leaf_exprs(TupleGetItem(expr, k), t, out)
    else:
        out.append(expr)
    return out


def rebuild(typ, leaves):
    """The inverse of leaf_exprs: a (nested) Tuple of the next leaves of the iterator."""
    if isinstance(typ, TupleType):
        return Tuple([rebuild(t, leaves) for t in typ.fields])
    return next(leaves)


class LetChain:
    """The let-bindings of one block (a graph, a branch, a loop step), in order; `close(e)`
    nests them around e (a loop, never a recursion: blocks are long)."""

    def __init__(self):
        self.bindings = []

    def bind(self, name, value):
        """A variable bound to value (variables and constants are used as they are)."""
        if isinstance(value, (Var, Constant)):
            return value
        v = Var(name)
        self.bindings.append((v, value))
        return v

    def close(self, result):
        body = result
        for v, value in reversed(self.bindings):
            body = Let(v, value, body)
        return body


def rule_registrar(table):
    """`@rule("name", ...)` puts a function in `table` under each name (one rule per
    primitive or operator)."""
    def rule(*names):
        def register(fn):
            for name in names:
                table[name] = fn
            return fn
        return register
    return rule
