"""The AD entry points: gradient, grad, value_and_grad, vjp, hessian, hvp (jvp: forward.py).

Every result is an ordinary relayish program (the closure property): it type-checks, prints,
parses, runs on any backend and can be differentiated again, so `rl.grad(rl.grad(f))` works.

Input and output kinds:
  * a Function             -> a Function (when it needs nothing from a module);
  * a Module               -> a Module whose "main" is the result for the module's "main"
                              (globals it calls are lifted to `@<name>_ad`, recursion included);
  * a Function with mod=m  -> a Module like the above, with the function as its "main".
A Function that calls globals must come with its module (mod=, or pass the Module). A Function
whose gradient needs generated global helpers (ADT inputs or outputs: converting a List of
tensors into a List of (tensor, ref) pairs is a recursive function) gives a Module too.
"""
from __future__ import annotations

import gc

import numpy as np

from relayish.errors import GradientError
from relayish.ir.expr import Call, Constant, Function, Let, Tuple, TupleGetItem, Var
from relayish.ir.module import Module
from relayish.ir.op import make_call
from relayish.ir.types import TensorType
from relayish.ir.visitor import ExprVisitor, run_deep
from relayish.ad.reverse import ReverseAD, build_entry
from relayish.ad.forward import jvp  # noqa: F401  forward mode lives beside reverse mode

__all__ = ["gradient", "grad", "value_and_grad", "vjp", "hessian", "hvp", "jvp", "jacobian",
           "derivative"]


def gradient(f, mod=None):
    """`fn(T1..Tn) -> R` to `fn(T1..Tn) -> (R, (dT1..dTn))`.

    R is a float tensor (or a tuple whose first field is one); that tensor is seeded with ones,
    so the gradients are those of the sum of its elements. Inputs may be tensors, tuples and ADT
    values (gradients keep their structure); integer and bool inputs get zero gradients.

        x = rl.var("x", shape=(3,), dtype="float64")
        g = rl.gradient(rl.Function([x], rl.sum(x * x)))
        value, (dx,) = rl.evaluate(g, np.arange(3.0))      # dx == 2 * x
    """
    return _transform(f, mod, "gradient")


def grad(f, argnums=0, mod=None):
    """`fn(T1..Tn) -> scalar` to `fn(T1..Tn) -> gradient` w.r.t. argnums (int, or tuple -> tuple).

        df = rl.grad(f)                  # d f / d x0
        d2f = rl.grad(rl.grad(f))        # any order (for scalar -> scalar functions)
    """
    return _transform(f, mod, "grad", argnums)


def value_and_grad(f, argnums=0, mod=None):
    """`fn(T1..Tn) -> scalar` to `fn(T1..Tn) -> (value, gradient w.r.t. argnums)`."""
    return _transform(f, mod, "value_and_grad", argnums)


def vjp(f, mod=None):
    """`fn(T1..Tn) -> R` to `fn(T1..Tn) -> (R, fn(R) -> (T1..Tn))`.

    The returned backpropagator maps an output cotangent to the input gradients and may be
    called any number of times with different cotangents.
    """
    return _transform(f, mod, "vjp")


def hessian(f, mod=None):
    """`fn(Tensor[(n,)]) -> scalar` to `fn(x) -> Tensor[(n, n)]` (reverse over reverse).

    Row i is the vector-Jacobian product of the gradient program with the i-th basis vector.
    """
    func, src, x_t = _one_vector_input(f, mod, "hessian")
    if len(x_t.shape) != 1:
        raise GradientError(f"hessian needs a function of one vector Tensor[(n,), float]; "
                            f"its parameter has type {x_t}")
    back_prog = vjp(grad(f, mod=mod), mod=None)
    n = x_t.shape[0]

    def build(vjp_func):
        x = Var("x", x_t)
        r, back = Var("r"), Var("back")
        eye = np.eye(n, dtype=x_t.dtype)
        rows = [TupleGetItem(Call(back, [Constant(eye[i])]), 0) for i in range(n)]
        body = make_call("stack", [Tuple(rows)], {"axis": 0}) if n else \
            make_call("zeros", [], {"shape": (0, 0), "dtype": x_t.dtype})
        return Function([x], Let(r, Call(vjp_func, [x]), Let(back, TupleGetItem(r, 1), body)))
    return _wrap(back_prog, build)


def hvp(f, mod=None):
    """`fn(x) -> scalar` to `fn(x, v) -> H(x) v`.

    Forward over reverse (Pearlmutter): the jvp of the gradient program, from forward.py; a
    small constant times the cost of a gradient. `hvp_reverse` is the reverse-over-reverse one.
    """
    from relayish.ad.forward import hvp_forward_over_reverse
    _one_vector_input(f, mod, "hvp")
    return hvp_forward_over_reverse(f, mod=mod)


def hvp_reverse(f, mod=None):
    """`fn(x) -> scalar` to `fn(x, v) -> H(x) v`, as the vjp of the gradient program with v."""
    func, src, x_t = _one_vector_input(f, mod, "hvp")
    back_prog = vjp(grad(f, mod=mod), mod=None)

    def build(vjp_func):
        x, v = Var("x", x_t), Var("v", x_t)
        r = Var("r")
        return Function([x, v], Let(r, Call(vjp_func, [x]),
                                    TupleGetItem(Call(TupleGetItem(r, 1), [v]), 0)))
    return _wrap(back_prog, build)


def jacobian(f, mod=None):
    """`fn(x: Tensor[s, float]) -> Tensor[t, float]` to `fn(x) -> Tensor[t + s]` (forward mode).

    Entry [i.., j..] is d out[i..] / d x[j..]: the trailing axes follow x, as in jax.jacfwd.
    The slice for x's element j is the jvp with the j-th basis vector, so the program makes
    one jvp call per element of x.

        x = rl.var("x", shape=(3,), dtype="float64")
        J = rl.jacobian(rl.Function([x], rl.sin(x) * rl.sum(x)))
        rl.evaluate(J, np.ones(3))               # shape (3, 3)
    """
    func, src, x_t = _one_vector_input(f, mod, "jacobian")
    out_t = func.checked_type.ret_type
    if not (isinstance(out_t, TensorType) and out_t.is_float):
        raise GradientError(f"jacobian needs a function returning a float tensor; this one "
                            f"returns {out_t}")
    shape = tuple(out_t.shape) + tuple(x_t.shape)
    size = int(np.prod(x_t.shape, dtype=np.int64))
    basis = np.eye(size, dtype=x_t.dtype).reshape((size,) + tuple(x_t.shape))

    def build(jvp_func):
        x, jv = Var("x", x_t), Var("jvp")
        slices = [TupleGetItem(Call(jv, [x, Constant(np.array(basis[k]))]), 1) for k in range(size)]
        if size == 0:
            body = make_call("zeros", [], {"shape": shape, "dtype": out_t.dtype})
        elif x_t.shape == ():
            body = slices[0]
        else:
            body = make_call("stack", [Tuple(slices)], {"axis": len(out_t.shape)})
            if len(x_t.shape) > 1:
                body = make_call("reshape", [body], {"newshape": shape})
        return Function([x], Let(jv, jvp_func, body))
    return _wrap(jvp(f, mod=mod), build)


def derivative(f, order=1, mod=None):
    """The `order`-th derivative tensor of `f: fn(x: Tensor[s, float]) -> float scalar`.

    Returns fn(x) -> Tensor[s * order]: order 1 the gradient (as rl.grad), order 2 the Hessian
    (shape (n, n) for x of shape (n,)), order 3 the (n, n, n) tensor of third derivatives, ...
    Order k > 1 is the forward-mode jacobian (rl.jacobian) of order k - 1.

        x = rl.var("x", shape=(2,), dtype="float64")
        d3 = rl.derivative(rl.Function([x], rl.sum(x * x * x)), order=3)
        rl.evaluate(d3, np.ones(2))              # shape (2, 2, 2): 6 on the diagonal
    """
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order < 1:
        raise GradientError(f"derivative: order must be an int of at least 1, got {order!r}")
    func, src, x_t = _one_vector_input(f, mod, "derivative")
    out_t = func.checked_type.ret_type
    if not (isinstance(out_t, TensorType) and out_t.is_float and out_t.shape == ()):
        raise GradientError(f"derivative needs a function returning a float scalar; this one "
                            f"returns {out_t}")
    d = grad(f, mod=mod)
    for _ in range(order - 1):
        d = jacobian(d)
    return d


# ---- plumbing --------------------------------------------------------------------------------

def _wrap(prog, build):
    """Apply `build(entry_function) -> Function` to a Function, or to a Module's main."""
    if isinstance(prog, Module):
        out = _copy_without(prog, "main")
        out["main"] = build(prog["main"])
        return out
    return build(prog)


def _one_vector_input(f, mod, what):
    func, src, _ = _prepare(f, mod)
    if len(func.params) != 1:
        raise GradientError(f"{what} needs a function of one tensor parameter; this one has "
                            f"{len(func.params)}")
    p = func.params[0]
    t = getattr(p, "_checked_type", None) or p.type_annotation
    if not (isinstance(t, TensorType) and t.is_float):
        raise GradientError(f"{what} needs a function of one float tensor; its parameter "
                            f"%{p.name_hint} has type {t}")
    return func, src, t


def _prepare(f, mod):
    """Type-check f; return (the Function, its source module or None, whether it came as a Module)."""
    from relayish.ir.typecheck import infer_type
    if isinstance(f, Module):
        if mod is not None:
            raise GradientError("pass either a Module or a Function with mod=, not both")
        if "main" not in f:
            raise GradientError("the module has no @main function to differentiate")
        infer_type(f)
        return f["main"], f, True
    if not isinstance(f, Function):
        raise GradientError(f"AD takes a relayish Function or Module, got {type(f).__name__}")
    if mod is not None:
        if not isinstance(mod, Module):
            raise GradientError(f"mod= must be a relayish Module, got {type(mod).__name__}")
        infer_type(mod)
        infer_type(f, mod=mod)
    else:
        infer_type(f)
    return f, mod, False


def _transform(f, mod, mode, argnums=None):
    # The transform allocates many small nodes and frees none: the cyclic collector would rescan
    # the growing heap again and again (quadratic time on long programs), so it waits.
    enabled = gc.isenabled()
    gc.disable()
    try:
        return run_deep(_transform_deep, f, mod, mode, argnums)
    finally:
        if enabled:
            gc.enable()


def _transform_deep(f, mod, mode, argnums):
    func, src, _ = _prepare(f, mod)
    if src is None:
        out = Module()
        ad = ReverseAD(Module(), out)
    else:
        out = _copy_without(src, "main")
        ad = ReverseAD(src, out)
    entry = build_entry(ad, func, mode, argnums)
    ad.finish_globals()
    if src is None and not ad.generated:
        return entry
    out["main"] = entry
    return out


def _copy_without(src: Module, name: str) -> Module:
    """A copy of src without @name and without the globals that (transitively) call it."""
    calls = {}
    for gv, func in src.functions.items():
        finder = _GlobalRefs()
        run_deep(finder.visit, func)
        calls[gv.name_hint] = finder.names
    dropped = {name}
    changed = True
    while changed:
        changed = False
        for g, refs in calls.items():
            if g not in dropped and refs & dropped:
                dropped.add(g)
                changed = True
    out = Module()
    for data in src.type_definitions.values():
        out.add_type(data)
    for gv, func in src.functions.items():
        if gv.name_hint not in dropped:
            out[gv] = func
    return out


class _GlobalRefs(ExprVisitor):
    def __init__(self):
        super().__init__()
        self.names = set()

    def visit_GlobalVar(self, e):
        self.names.add(e.name_hint)
