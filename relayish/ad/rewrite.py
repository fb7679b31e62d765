"""What both AD modes do to the expressions an op's rule returns.

A rule (an op's gradient in reverse mode, its tangent in forward mode) is given the op call it
differentiates, typed, and builds its result from relayish expressions that may contain that
call. The transform has already bound the call's value to a variable, so it replaces the call
by that variable in the rule's result (no recomputation):

    with_checked_type(Call(op, args), t)    the call handed to the rule, its type readable
    replace_node(result, call, var)         the rule's result with `call` (by identity) -> `var`

The replacement is the generic ExprMutator of relayish/ir/visitor.py, so it enters every kind
of node; rebuilt nodes keep the checked type of the node they replace (rules read the types of
what they are given, and a later rule may be handed a rebuilt node).
"""
from __future__ import annotations

from relayish.ir.visitor import ExprMutator

__all__ = ["with_checked_type", "replace_node"]


def with_checked_type(expr, t):
    """`expr` with its checked type set to t, as the type checker would have set it."""
    expr._checked_type = t
    return expr


class _ReplaceNode(ExprMutator):
    def __init__(self, old, new):
        super().__init__()
        self.old, self.new = old, new

    def visit(self, expr):
        if expr is self.old:
            return self.new
        out = super().visit(expr)
        if out is not expr and getattr(out, "_checked_type", None) is None:
            t = getattr(expr, "_checked_type", None)
            if t is not None:
                out._checked_type = t
        return out


def replace_node(expr, old, new):
    """`expr` with every occurrence of the node `old` (by identity) replaced by `new`."""
    if expr is old:
        return new
    return _ReplaceNode(old, new).visit(expr)
