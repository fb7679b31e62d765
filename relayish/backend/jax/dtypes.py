"""float64 detection: does a program need jax's x64 mode to be traced and run?

    program_uses64(mod) -> bool

True when a 64-bit dtype appears anywhere: a checked type or annotation, a constant, a dtype
attribute of an op call, a constructor's field types. Such a program is traced and run inside
`jax.enable_x64(True)` (a scoped, thread-local context; function.py); jax's global configuration
is never touched, and float32 programs run without it.
"""
from __future__ import annotations

from relayish.ir.types import TensorType, walk_type
from relayish.ir.visitor import ExprVisitor, run_deep


def _dtype64(dtype):
    return isinstance(dtype, str) and dtype.endswith("64")


class _Uses64(ExprVisitor):
    """Does a program touch a 64-bit dtype anywhere (then it is traced and run with x64 on)?"""

    def __init__(self):
        super().__init__()
        self.found = False

    def visit(self, expr):
        if self.found:
            return None
        t = getattr(expr, "_checked_type", None)
        if t is not None and _type_uses64(t):
            self.found = True
        return super().visit(expr)

    def visit_Var(self, e):
        if e.type_annotation is not None and _type_uses64(e.type_annotation):
            self.found = True

    def visit_Constant(self, e):
        if _dtype64(e.data.dtype.name):
            self.found = True

    def visit_Call(self, e):
        for v in e.attrs.values():
            if isinstance(v, str) and _dtype64(v):
                self.found = True
        super().visit_Call(e)


def _type_uses64(t):
    return any(isinstance(s, TensorType) and _dtype64(s.dtype) for s in walk_type(t))


def program_uses64(mod):
    """Does any function or type definition of `mod` mention a 64-bit dtype?"""
    finder = _Uses64()
    for func in mod.functions.values():
        run_deep(finder.visit, func)
        if finder.found:
            return True
    for data in mod.type_definitions.values():
        for ctor in data.constructors:
            if any(_type_uses64(t) for t in ctor.inputs):
                return True
    return False
