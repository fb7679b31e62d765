"""Tuples of tensors as flat lists, both ways: jax passes pytrees as lists of leaves, relayish
passes them as (nested) tuples. Leaves are in order, depth first (jax's order for tuples)."""
from __future__ import annotations

from relayish.ir.expr import Tuple, TupleGetItem
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
