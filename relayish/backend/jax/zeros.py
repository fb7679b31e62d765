"""Zero adjoints at trace time: what the jax backend folds before XLA sees it.

Scheme. Reverse AD starts every adjoint as `zero_adjoint(shape=.., dtype=..)` (an op whose record
says symbolic_zero: zeros that stand for "nothing was added here") and adds into it; an adjoint
nothing was added to is read as those zeros and multiplied into the chain rule (`g * x`). jax's
own AD keeps such cotangents symbolic and never emits the product. XLA cannot remove `x * 0`
(IEEE: inf * 0 is nan), so in a compiled rl.hessian of Rosenbrock every one of them stayed in
the fused loop, recomputed per output element (1.4-1.5x jax.jit(jax.hessian) on the CPU;
notes/jax-backend.md).

`ZeroTracker` marks the trace-time (numpy) arrays that are zero adjoints: what a symbolic_zero
op computes, and what ops linear in them (their records' linear_in, bilinear) make of marked
zeros alone. The marks survive the optimizing passes, which keep `zero_adjoint(..)` a call
(ir/passes/simplify.py folds the same products first). Zeros a program makes itself
(`zeros(..)`, `zeros_like(x) * y`, a literal, a zero stored in a reference) are not marked: they
compute as written, IEEE included, on both backends.
With a traced operand, by the op's record (no op is named here: a new op folds by what its
register_op call declares):

    traced operands only at constant_in or shape_only_in positions
        zeros_like(t), ones_like(t), broadcast_to_like(c, t), reshape_like(c, t) ...
                                     -> the numpy impl, zeros standing in for t (exact)
    identity_in fill 0 at a marked zero z
        add(t, z), add(z, t), subtract(t, z)
                                     -> t, when z does not change t's shape (exact up to -0.0)
    bilinear with a marked zero operand, or linear_in with marked zeros in all those positions
        multiply(t, z), matmul(z, t), nn.dense ..., divide(z, t)
                                     -> marked zeros of the call's checked type: **not IEEE**
                                        where t is inf or nan (or 0 for divide)

The last rule is the departure: a compiled program computes 0 where the interpreter computes
nan, as jax's symbolic zeros do: a program that multiplies an adjoint nothing was added to into
an inf or nan gets 0 compiled and nan on the interpreter (the optimized program gets 0 on both:
simplify folds it). Only marked zeros fold: a literal `x * 0f64`, `zeros_like(x) * y` or a
tensor literal of zeros is computed as written. A marked array is checked to be all zeros
before each use, so an array changed in place is never taken for a zero.
"""
from __future__ import annotations

import weakref

import numpy as np

from relayish.ir.types import TensorType


def _unchanged(t, z):
    """`t` for `t + z` with z a marked zero, when z changes neither t's shape nor its dtype
    (exact up to -0.0); None otherwise."""
    if not hasattr(t, "shape") or not hasattr(t, "dtype") or np.dtype(t.dtype) != z.dtype or \
            np.broadcast_shapes(np.shape(z), tuple(t.shape)) != tuple(t.shape):
        return None
    return t


class ZeroTracker:
    """The zero adjoints of one trace; `fold` before an op on traced values, `note` after an
    op on trace-time values."""

    def __init__(self):
        # weak: a dead array's id may be reused, and its entry must go with it
        self._marked = weakref.WeakValueDictionary()

    def mark(self, a):
        self._marked[id(a)] = a
        return a

    def is_zero(self, a):
        return isinstance(a, np.ndarray) and self._marked.get(id(a)) is a and not a.any()

    def fold(self, op, args, attrs, out_type=None):
        """The result of `op` on `args` (some traced) without tracing it, or None (trace it).
        `out_type`: the call's checked type, if known. The rules read the op's record only."""
        traced = [i for i, a in enumerate(args) if not isinstance(a, np.ndarray)]
        static = set(op.constant_in) | set(op.shape_only_in)
        if all(i in static for i in traced):
            return self._at_trace_time(op, args, attrs, traced)
        if len(args) == 2:
            for i, fill in op.identity_in.items():
                if fill == 0 and self.is_zero(args[i]):
                    return _unchanged(args[1 - i], args[i])
        if self._linear_in_zeros(op, args) and not op.effects:
            if not (isinstance(out_type, TensorType) and all(isinstance(d, int)
                                                             for d in out_type.shape)):
                return None
            return self.mark(np.zeros(out_type.shape, out_type.dtype))
        return None

    def _linear_in_zeros(self, op, args):
        """Whether the op's record makes its result zero from marked zeros in `args`: bilinear
        with one marked operand, or marked zeros in all its linear_in positions."""
        if op.bilinear and len(args) >= 2:
            return self.is_zero(args[0]) or self.is_zero(args[1])
        return bool(op.linear_in) and all(i < len(args) and self.is_zero(args[i])
                                          for i in op.linear_in)

    def _at_trace_time(self, op, args, attrs, traced):
        """The numpy result of a call whose traced arguments count only by shape and dtype
        (zeros_like(t), broadcast_to_like(c, t)): zeros stand in for them (exact)."""
        args = list(args)
        for i in traced:
            t = args[i]
            if not hasattr(t, "shape") or not hasattr(t, "dtype"):
                return None
            args[i] = np.zeros(tuple(t.shape), np.dtype(t.dtype))
        try:
            with np.errstate(all="ignore"):
                out = np.asarray(op.impl(np, *args, **attrs))
        except Exception:  # noqa: BLE001 - not folded: the traced call reports it with its text
            return None
        self.note(op, args, out)          # broadcast_to_like of a marked zero stays marked
        return out

    def note(self, op, args, out):
        """Mark the trace-time result `out` of `op` when it is a zero adjoint: the op's record
        says symbolic_zero (`zero_adjoint(..)`), or that it is linear in arguments that are all
        marked zeros (`linear_in`: add's two, the first of divide or broadcast_to_like), or
        bilinear with one marked zero operand."""
        if not isinstance(out, np.ndarray):
            return
        if op.symbolic_zero:
            self.mark(out)
        elif self._linear_in_zeros(op, args) and not out.any():   # 0 * inf is nan: not a zero
            self.mark(out)
