"""ieee_zeros: reverse AD's symbolic zero adjoints as ordinary zeros (issue 25, finding 11).

    ieee_zeros(func_or_mod) -> the same kind: each call of an op whose record says
                               symbolic_zero (`zero_adjoint(shape, dtype)`) becomes
                               `zeros(shape, dtype)`

Reverse AD starts every adjoint as a zero adjoint, and simplify and the jax backend fold
`g * zero_adjoint(..)` to a zero adjoint whatever g holds (notes/ad.md, "Zero adjoints"): where
g is inf or nan the optimized or compiled gradient gives 0 and the raw one nan. With ordinary
zeros nothing folds them: the program computes IEEE arithmetic after every pass and on every
backend, so a NaN is a NaN and debug_nans names the binding that makes it. This is what the AD
entry points' debug_nans=True and rl.compile(..., debug_nans=True) apply. The values and types
are unchanged; only the folding is.
"""
from __future__ import annotations

from relayish.ir.expr import Function
from relayish.ir.op import Op, make_call
from relayish.ir.passes.base import TYPED, FunctionPass, keep_type
from relayish.ir.visitor import ExprMutator, run_deep

__all__ = ["ieee_zeros", "IeeeZeros"]


class _Unmark(ExprMutator):
    def visit_Call(self, e):
        if isinstance(e.op, Op) and e.op.symbolic_zero:
            return keep_type(make_call("zeros", [], dict(e.attrs)), e)
        return super().visit_Call(e)


class IeeeZeros(FunctionPass):
    def __init__(self):
        super().__init__(name="ieee_zeros", preserves={TYPED})

    def transform_function(self, func, mod):
        return _Unmark().visit(func)


def ieee_zeros(func_or_mod):
    """`func_or_mod` with its zero adjoints as ordinary zeros (see the module docstring). A
    Function is rewritten directly (it may be open: a gradient taken inside a program)."""
    if isinstance(func_or_mod, Function):
        return run_deep(_Unmark().visit, func_or_mod)
    return IeeeZeros()(func_or_mod)
