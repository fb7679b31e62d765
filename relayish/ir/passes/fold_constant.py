"""Constant folding as Relay's FoldConstant: `rl.passes.fold_constant`, `fold_constants(expr)`.

Rules, bottom-up, once (nothing else is evaluated: no function is called, no reference read):

    op(c1, ..., cn) -> its value       an op call whose arguments are all Constants (or tuples
                                       of them: concatenate's), computed by
                                       the op's numpy impl as the interpreter would (NaN and Inf
                                       as IEEE gives them); an op that may fail folds only when
                                       it runs without error now (otherwise it stays, and fails
                                       at run time); a zero adjoint (symbolic_zero) stays, as
                                       the AD's marker it is
    let %v = c; body -> body[c/%v]     a let of a Constant, put at every use (Relay's fold_let)
    (e1, .., en).i -> ei               a projection of a tuple written in place, when the other
                                       fields are pure (dropping them drops no effect)

Size: a folded value has at most max(FOLD_LIMIT, the elements of its arguments) elements, so
folding never makes the program text larger than what it replaces by more than a small
constant: `full(1f, shape=[8, 9, 10])` and `zeros(shape=..)` stay calls (Relay's test_fold_full:
a fill materialized as a 720-element constant is worse than the call). Calls without arguments
are not folded for the same reason.

Types are kept (a folded Constant has the call's checked type). Let-chains are loops (the
ExprMutator), other nesting recurses under `run_deep`. `fold_call` is the one place an op is
run at compile time: partial_eval and simplify fold through it too.
"""
from __future__ import annotations

import numpy as np

from relayish.ir.expr import Call, Constant, Let, Tuple, TupleGetItem, Var
from relayish.ir.op import Op
from relayish.ir.passes.base import TYPED, Pass, keep_type, map_globals, typed_let_chain
from relayish.ir.types import TensorType
from relayish.ir.visitor import ExprMutator, no_gc, run_deep

__all__ = ["FoldConstant", "fold_constants", "fold_call", "is_pure", "static_tensor_type",
           "FOLD_LIMIT"]

FOLD_LIMIT = 16          # a folded constant of at most this many elements is always allowed


def fold_call(op, attrs, arrays, out_type):
    """The value of `op(*arrays, **attrs)` computed now with the op's numpy impl, or None when
    it cannot be: no impl, the impl raises (left to run time), or the value's shape or dtype is
    not `out_type`'s (a static TensorType, the call's checked type)."""
    if op.impl is None:
        return None
    try:
        with np.errstate(all="ignore"):     # IEEE values, as the interpreter computes them
            value = np.asarray(op.impl(np, *arrays, **attrs))
    except Exception:  # noqa: BLE001 - it fails (or cannot run) now: left to run time
        return None
    if value.shape != tuple(out_type.shape) or value.dtype != np.dtype(out_type.dtype):
        return None
    return value


def static_tensor_type(e):
    """The checked type of `e` when it is a TensorType of known dimensions, else None."""
    t = getattr(e, "_checked_type", None)
    if isinstance(t, TensorType) and all(isinstance(d, int) for d in t.shape):
        return t
    return None


class _Fold(ExprMutator):
    def __init__(self):
        super().__init__()
        self.subst: dict[int, Constant] = {}     # id(let-bound Var) -> its Constant

    def visit(self, expr):
        return keep_type(super().visit(expr), expr)

    def visit_Var(self, e):
        return self.subst.get(id(e), e)

    def visit_Call(self, e):
        new = super().visit_Call(e)
        op = new.op
        if not isinstance(op, Op) or op.symbolic_zero or not new.args:
            return new
        arrays = [_constant_value(a) for a in new.args]
        out_type = static_tensor_type(e)
        if out_type is None or any(a is None for a in arrays):
            return new
        size = int(np.prod(out_type.shape, dtype=np.int64))
        if size > max(FOLD_LIMIT, sum(np.size(x) for a in arrays for x in _leaves(a))):
            return new
        value = fold_call(op, new.attrs, arrays, out_type)
        return new if value is None else Constant(value)

    def visit_TupleGetItem(self, e):
        value = self.visit(e.tuple_value)
        if isinstance(value, Tuple) and all(
                k == e.index or is_pure(f) for k, f in enumerate(value.fields)):
            return value.fields[e.index]
        return e if value is e.tuple_value else TupleGetItem(value, e.index)

    def visit_Let(self, e):
        chain = []
        while isinstance(e, Let):
            value = self.visit(e.value)
            if isinstance(value, Constant) and e.var.type_annotation is None:
                self.subst[id(e.var)] = value
            else:
                chain.append((e.var, value))
            e = e.body
        return typed_let_chain(chain, self.visit(e))


def _constant_value(e):
    """An argument's value known now: a Constant's array, a tuple of them (concatenate's
    argument) as a tuple; else None."""
    if isinstance(e, Constant):
        return e.data
    if isinstance(e, Tuple) and all(isinstance(f, Constant) for f in e.fields):
        return tuple(f.data for f in e.fields)
    return None


def _leaves(value):
    return value if isinstance(value, tuple) else (value,)


def is_pure(e) -> bool:
    """Whether leaving `e` out changes nothing: atoms, and effect-free op calls and tuples of
    such (a conservative test)."""
    stack = [e]
    while stack:
        e = stack.pop()
        if isinstance(e, (Var, Constant)):
            continue
        if isinstance(e, Call) and isinstance(e.op, Op) and not e.op.effects:
            stack.extend(e.args)
            continue
        if isinstance(e, Tuple):
            stack.extend(e.fields)
            continue
        return False
    return True


def fold_constants(expr):
    """`expr` (type-checked) with its constant subexpressions folded (the module text)."""
    with no_gc():
        return run_deep(_Fold().visit, expr)


class FoldConstant(Pass):
    """`rl.passes.fold_constant`: Relay's FoldConstant (fold_constant.py's text).

        >>> f = rl.parse_expr("fn (%x: float32) { let %c = 1f + 1f; %x + %c * 3f }")
        >>> print(rl.passes.fold_constant(f))
        fn (%x: float32) { %x + 6f }
    """

    name = "fold_constant"
    requires = frozenset([TYPED])       # folded values are checked against the call's type
    preserves = frozenset([TYPED])

    def run(self, mod):
        return map_globals(mod, fold_constants, self.name)
