"""Every AD entry point: gradient, grad, value_and_grad, vjp, jvp, hvp, hessian, jacobian, ...

The transforms are reverse.py (reverse mode) and forward.py (forward mode); this module type-checks
the input, runs a transform (or composes them: hvp is jvp of gradient) and wraps the result.

Every entry point takes `optimize=True`: its result goes through rl.optimize's default pipeline
(ir/passes/manager.py), which removes most of the references and closures the transforms build;
`optimize=False` gives the raw transform. Composed entry points optimize what they compose once
more only where it shrinks the next transform's input (grad before its vjp in hessian).

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

import numpy as np

from relayish.errors import GradientError, RelayishError
from relayish.ir.analysis import CallGraph, FreeVars, free_vars, global_refs, walk
from relayish.ir.expr import (Call, Constant, Function, GlobalVar, Let, Tuple, TupleGetItem, Var,
                              const)
from relayish.ir.link import link
from relayish.ir.module import Module
from relayish.ir.op import make_call
from relayish.ir.types import TensorType, TupleType
from relayish.ir.visitor import no_gc, run_deep
from relayish.ad import forward
from relayish.ad.reverse import ReverseAD
from relayish.ad.reverse_entry import build_entry
from relayish.ad.structure import is_float_tensor

__all__ = ["gradient", "grad", "value_and_grad", "vjp", "hessian", "hvp", "jvp", "jacobian",
           "derivative", "hvp_forward_over_reverse", "hvp_reverse", "hessian_forward"]


def gradient(f, argnums=None, mod=None, checkpoint=None, optimize=True, debug_nans=False):
    """`fn(T1..Tn) -> R` to `fn(T1..Tn) -> (R, (dT1..dTn))`.

    argnums (an int or a tuple; None: every parameter) selects the gradients: `argnums=1` gives
    `(R, dT2)`, `argnums=(0, 2)` gives `(R, (dT1, dT3))`; the other parameters are constants.

    R is a float tensor (or a tuple whose first field is one); that tensor is seeded with ones,
    so the gradients are those of the sum of its elements. Inputs may be tensors, tuples and ADT
    values (gradients keep their structure); integer and bool inputs get zero gradients.

        x = rl.var("x", shape=(3,), dtype="float64")
        g = rl.gradient(rl.Function([x], rl.sum(x * x)))
        value, (dx,) = rl.evaluate(g, np.arange(3.0))      # dx == 2 * x

    checkpoint= (ad/checkpoint.py): recompute forward values in the backward pass instead of
    keeping them; the result is a Module whose @main is the gradient (same values and type).
    For a Function's let-chain, k: cut every k bindings ("sqrt": k = sqrt(n));
    "revolve" or ("revolve", snapshots): Griewank's binomial schedule, O(log n) kept states.
    For a Module whose @main is a recursion over a List or Nat, a tail recursion
    (ad/checkpoint_loop.py) or a foldr (ad/checkpoint_foldr.py), k: keep the state every k
    iterations ("sqrt": k = sqrt(n), n the list's length when it runs); a tail recursion
    also takes "revolve" or ("revolve", snapshots), the schedule computed when it runs.
    With checkpoint=, optimize= applies to each step's derivative program, never to the
    schedule's globals (inlining them would keep every state alive in one frame).
    debug_nans=True (here and in grad, value_and_grad, vjp): the adjoints start as ordinary
    zeros, not symbolic zero adjoints (ir/passes/ieee_zeros.py), so that neither the passes
    nor the jax backend fold `g * 0` where g is inf or nan: the gradient gives the raw
    transform's nan rather than 0, and running it with debug_nans=True names the binding.
    """
    if checkpoint is not None:
        _no_argnums_with_checkpoint(argnums, "gradient")
        return _run_transform(_checkpointed, f, mod, checkpoint, optimize, "gradient", None,
                              debug_nans)
    return _optimized(_transform(f, mod, "gradient", argnums), optimize, debug_nans)


def _no_argnums_with_checkpoint(argnums, what):
    if argnums is not None:
        raise GradientError(f"{what}: argnums= with checkpoint= is not supported; rl.grad and "
                            "rl.value_and_grad take both")


def _checkpointed(f, mod, spec, optimize, mode="gradient", argnums=None, debug_nans=False):
    """gradient, grad, value_and_grad or vjp (`mode`) with checkpoint=spec: a Module."""
    from relayish.ad.checkpoint import (checkpoint_options, checkpointed_gradient,
                                        checkpointed_vjp, select_gradients)
    if mod is not None:
        raise GradientError("checkpoint= takes a Function (its let-chain is cut) or a Module "
                            "whose @main is a loop, not a Function with mod=")
    if isinstance(f, Module):
        from relayish.ad.checkpoint_foldr import checkpointed_module
        func, _, _ = _prepare(f, None)
        out = checkpointed_module(f, spec, mode == "vjp", *_step_transforms(optimize, debug_nans))
        if mode == "vjp":
            return _ieee(out, debug_nans)
    else:
        checkpoint_options(spec)             # a bad value is reported before anything runs
        func, _, _ = _prepare(f, None)
        if mode == "vjp":
            return _ieee(checkpointed_vjp(func, spec, _step_transforms(optimize, debug_nans)[0]),
                         debug_nans)
        out = checkpointed_gradient(func, spec, *_step_transforms(optimize, debug_nans))
    out = out if mode == "gradient" else select_gradients(out, func, mode, argnums)
    return _ieee(out, debug_nans)


def _step_transforms(optimize, debug_nans=False):
    return (lambda g, mod=None: vjp(g, mod=mod, optimize=optimize, debug_nans=debug_nans),
            lambda g, mod=None: gradient(g, mod=mod, optimize=optimize, debug_nans=debug_nans))


def grad(f, argnums=0, mod=None, checkpoint=None, optimize=True, debug_nans=False):
    """`fn(T1..Tn) -> scalar` to `fn(T1..Tn) -> gradient` w.r.t. argnums (int, or tuple -> tuple).

        df = rl.grad(f)                  # d f / d x0
        d2f = rl.grad(rl.grad(f))        # any order (for scalar -> scalar functions)

    checkpoint=, debug_nans=: as rl.gradient's (checkpoint=: a Module whose @main is the result).
    """
    if checkpoint is not None:
        return _run_transform(_checkpointed, f, mod, checkpoint, optimize, "grad", argnums,
                              debug_nans)
    return _optimized(_transform(f, mod, "grad", argnums), optimize, debug_nans)


def value_and_grad(f, argnums=0, mod=None, checkpoint=None, optimize=True, debug_nans=False):
    """`fn(T1..Tn) -> scalar` to `fn(T1..Tn) -> (value, gradient w.r.t. argnums)`.

    checkpoint=, debug_nans=: as rl.gradient's (checkpoint=: a Module whose @main is the
    result)."""
    if checkpoint is not None:
        return _run_transform(_checkpointed, f, mod, checkpoint, optimize, "value_and_grad",
                              argnums, debug_nans)
    return _optimized(_transform(f, mod, "value_and_grad", argnums), optimize, debug_nans)


def vjp(f, argnums=None, mod=None, checkpoint=None, optimize=True, debug_nans=False):
    """`fn(T1..Tn) -> R` to `fn(T1..Tn) -> (R, fn(R) -> (T1..Tn))`.

    The returned backpropagator maps an output cotangent to the input gradients and may be
    called any number of times with different cotangents. argnums (an int or a tuple; None:
    every parameter) selects what it returns, as in rl.gradient.

    checkpoint=: as rl.gradient's (a Module whose @main is the result); the forward runs once
    keeping nothing, and each call of the backpropagator runs the schedule from the inputs.
    debug_nans=: as rl.gradient's.
    """
    if checkpoint is not None:
        _no_argnums_with_checkpoint(argnums, "vjp")
        return _run_transform(_checkpointed, f, mod, checkpoint, optimize, "vjp", None,
                              debug_nans)
    return _optimized(_transform(f, mod, "vjp", argnums), optimize, debug_nans)


def hessian(f, argnums=0, mod=None, optimize=True):
    """`fn(Tensor[(n,)]) -> scalar` to `fn(x) -> Tensor[(n, n)]` (reverse over reverse).

    argnums (an int): the parameter to differentiate twice, a float vector; the function may
    have others (`fn(x1..xm) -> H`, the block of parameter argnums).
    Row i is the vector-Jacobian product of the gradient program with the i-th basis vector.
    A program that recurses (a loop: a global that reaches itself, or a let-bound function
    that calls itself) gets forward over reverse instead, `hessian_forward`: the jax backend
    compiles the forward-mode transform of the gradient's loop as one loop, where the vjp of
    the loop's backpropagators (closures that hold references to references) it cannot.
    """
    func, src, k, x_t = _float_param(f, mod, "hessian", argnums)
    if len(x_t.shape) != 1:
        raise GradientError(f"hessian needs a function of a vector Tensor[(n,), float]; its "
                            f"parameter %{func.params[k].name_hint} has type {x_t}")
    if _recurses(func, src):
        return hessian_forward(f, argnums=k, mod=mod, optimize=optimize)
    back_prog = vjp(grad(f, argnums=k, mod=mod, optimize=optimize), argnums=k, mod=None,
                    optimize=optimize)
    n = x_t.shape[0]
    types = func.checked_type.arg_types

    def build(vjp_func):
        xs = [Var(p.name_hint, t) for p, t in zip(func.params, types)]
        r, back = Var("r"), Var("back")
        eye = np.eye(n, dtype=x_t.dtype)
        rows = [Call(back, [Constant(eye[i])]) for i in range(n)]
        body = make_call("stack", [Tuple(rows)], {"axis": 0}) if n else \
            make_call("zeros", [], {"shape": (0, 0), "dtype": x_t.dtype})
        return Function(xs, Let(r, Call(vjp_func, xs), Let(back, TupleGetItem(r, 1), body)))
    # The vjp is optimized, not the rows: the pipeline would inline the backpropagator into each
    # of the n rows and fold a basis vector into each copy, leaving `0 * x` products of the
    # basis (a user's zeros: IEEE, XLA keeps them) and n copies for the jax backend to trace,
    # where n calls of one closure are batched into one vmapped call (notes/ad.md)
    return _wrap(back_prog, build)


def hvp(f, argnums=0, mod=None, optimize=True):
    """`fn(x) -> scalar` to `fn(x, v) -> H(x) v`.

    Forward over reverse (Pearlmutter): the jvp of the gradient program; a small constant times
    the cost of a gradient. `hvp_reverse` is the reverse-over-reverse one. With several
    parameters, `fn(x1..xm, v) -> H v` for the block of parameter argnums (an int).
    """
    _, _, k, _ = _float_param(f, mod, "hvp", argnums)
    return hvp_forward_over_reverse(f, mod=mod, optimize=optimize, argnums=k)


def hvp_reverse(f, mod=None, optimize=True):
    """`fn(x) -> scalar` to `fn(x, v) -> H(x) v`, as the vjp of the gradient program with v."""
    func, src, x_t = _one_vector_input(f, mod, "hvp")
    back_prog = vjp(grad(f, mod=mod, optimize=optimize), mod=None, optimize=False)

    def build(vjp_func):
        x, v = Var("x", x_t), Var("v", x_t)
        r = Var("r")
        return Function([x, v], Let(r, Call(vjp_func, [x]),
                                    TupleGetItem(Call(TupleGetItem(r, 1), [v]), 0)))
    return _optimized(_wrap(back_prog, build), optimize)


def jvp(f, argnums=None, mod=None, optimize=True):
    """Forward mode: `rl.jvp(f)` is fn(x1..xn, v1..vn) -> (f(x), J(x) v).

    argnums (an int or a tuple; None: every parameter): the parameters that get a tangent,
    `rl.jvp(f, argnums=1)` is fn(x1..xn, v2) -> (f(x), d f / d x2 . v2) (the others' tangents
    are symbolic zeros; they must be tensors or tuples of them).

        x = rl.var("x", shape=(3,), dtype="float64")
        j = rl.jvp(rl.Function([x], rl.sum(rl.sin(x))))
        value, tangent = rl.evaluate(j, np.ones(3), np.arange(3.0))

    A Module (or a Function with mod=) gives a Module whose @main is that function (globals
    become @<name>_jvp).
    """
    if argnums is not None:
        return _optimized(_jvp_of(f, mod, argnums), optimize)
    f = _with_module(f, mod)
    if isinstance(f, Module):
        return _optimized(_run_transform(forward.transform_module, f), optimize)
    _check_function(f, "jvp")
    return _optimized(_run_transform(forward.transform_function, f), optimize)


def _jvp_of(f, mod, argnums):
    """fn(x1..xn, v_k for k in argnums) -> (f(x), J v): the full jvp with zero tangents for
    the other parameters."""
    func, _, _ = _prepare(f, mod)
    ks = _argnum_list(argnums, len(func.params))
    types = func.checked_type.arg_types

    def build(jvp_func):
        xs = [Var(p.name_hint, t) for p, t in zip(func.params, types)]
        vs = {k: Var("v_" + func.params[k].name_hint, types[k]) for k in ks}
        tangents = [vs[i] if i in vs else _zero_tangent(func.params[i], types[i])
                    for i in range(len(xs))]
        return Function(xs + [vs[k] for k in dict.fromkeys(ks)], Call(jvp_func, xs + tangents))
    return _wrap(jvp(f, mod=mod, optimize=False), build)


def _argnums(argnums, n):
    """argnums normalized (non-negative; an int or a tuple), or a GradientError."""
    from relayish.ad.reverse_entry import _normalize_argnums
    return _normalize_argnums(argnums, n)


def _argnum_list(argnums, n):
    k = _argnums(argnums, n)
    return [k] if isinstance(k, int) else list(k)


def _zero_tangent(param, t):
    """The tangent of a parameter outside argnums: symbolic zeros for float tensors (the passes
    and the jax backend fold what they multiply), zeros otherwise."""
    from relayish.ad.lifted import zeros_of
    if isinstance(t, TensorType):
        return zeros_of(t) if is_float_tensor(t) else Constant(np.zeros(t.shape, t.dtype))
    if isinstance(t, TupleType):
        return Tuple([_zero_tangent(param, f) for f in t.fields])
    raise GradientError(f"argnums: parameter %{param.name_hint} of type {t}, outside argnums, "
                        "needs a zero tangent; only tensors and tuples of them have one here")


def hvp_forward_over_reverse(f, mod=None, optimize=True, argnums=None):
    """fn(x, v) -> H(x) v, as jvp of the gradient program (Pearlmutter's trick).

    f: fn(x) -> float scalar (one parameter; with several, the result is the tuple of the
    blocks of H v, one per parameter; argnums=k: fn(x1..xn, v) -> the block of parameter k
    times v). A Module (or a Function with mod=) gives a Module.
    """
    f = _with_module(f, mod)
    if isinstance(f, Module):
        return _optimized(run_deep(_hvp_module, f, optimize, argnums), optimize)
    _check_function(f, "hvp")
    return _optimized(run_deep(_hvp_function, f, optimize, argnums), optimize)


def hessian_forward(f, argnums=0, mod=None, optimize=True):
    """fn(x) -> H(x) for f: fn(Tensor[(n), float]) -> float scalar: the rows H e_i by
    forward-over-reverse, stacked (n Hessian-vector products in one program). argnums: as
    rl.hessian's."""
    f = _with_module(f, mod)
    if isinstance(f, Module):
        def build(mod):
            mod = _infer(mod)
            types, k = _hessian_params(mod["main"], argnums)
            hmod = _hvp_module(mod, optimize, k)
            hmod["main_hvp"] = hmod["main"]
            hmod["main"] = _stack_hvps(types, k, lambda xs, e: Call(GlobalVar("main_hvp"),
                                                                    xs + [e]))
            return hmod
        return _optimized(run_deep(build, f), optimize)
    _check_function(f, "hessian")

    def build_fn(f):
        f = _infer(f)
        types, k = _hessian_params(f, argnums)
        hv = _optimized(_hvp_function(f, optimize, k), optimize)
        hv_var = Var("hvp", None)
        inner = _stack_hvps(types, k, lambda xs, e: Call(hv_var, xs + [e]))
        return Function(inner.params, Let(hv_var, hv, inner.body))
    # the HVP is optimized, not the rows (as in hessian: the pipeline would copy it into each)
    return run_deep(build_fn, f)


def jacobian(f, argnums=0, mod=None, optimize=True):
    """`fn(x: Tensor[s, float]) -> Tensor[t, float]` to `fn(x) -> Tensor[t + s]` (forward mode).

    Entry [i.., j..] is d out[i..] / d x[j..]: the trailing axes follow x, as in jax.jacfwd.
    The slice for x's element j is the jvp with the j-th basis vector, so the program makes
    one jvp call per element of x. argnums (an int or a tuple) names the parameter(s) x of a
    function of several tensors: `fn(x1..xn) -> J` for an int, a tuple of Jacobians for a
    tuple (the other parameters' tangents are zeros).

        x = rl.var("x", shape=(3,), dtype="float64")
        J = rl.jacobian(rl.Function([x], rl.sin(x) * rl.sum(x)))
        rl.evaluate(J, np.ones(3))               # shape (3, 3)
    """
    func, _, _ = _prepare(f, mod)
    ks = _argnum_list(argnums, len(func.params))
    types = func.checked_type.arg_types
    for k in ks:
        if not is_float_tensor(types[k]):
            raise GradientError(f"jacobian needs float tensor parameters at argnums; "
                                f"%{func.params[k].name_hint} has type {types[k]}")
    out_t = func.checked_type.ret_type
    if not is_float_tensor(out_t):
        raise GradientError(f"jacobian needs a function returning a float tensor; this one "
                            f"returns {out_t}")

    def jacobian_of(jv, xs, k):
        x_t = types[k]
        shape = tuple(out_t.shape) + tuple(x_t.shape)
        size = int(np.prod(x_t.shape, dtype=np.int64))
        basis = np.eye(size, dtype=x_t.dtype).reshape((size,) + tuple(x_t.shape))
        zeros = [_zero_tangent(p, t) for p, t in zip(func.params, types)]

        def tangents(j):
            return zeros[:k] + [Constant(np.array(basis[j]))] + zeros[k + 1:]
        slices = [TupleGetItem(Call(jv, xs + tangents(j)), 1) for j in range(size)]
        if size == 0:
            return make_call("zeros", [], {"shape": shape, "dtype": out_t.dtype})
        if x_t.shape == ():
            return slices[0]
        body = make_call("stack", [Tuple(slices)], {"axis": len(out_t.shape)})
        if len(x_t.shape) > 1:
            body = make_call("reshape", [body], {"newshape": shape})
        return body

    def build(jvp_func):
        xs = [Var(p.name_hint, t) for p, t in zip(func.params, types)]
        jv = Var("jvp")
        blocks = [jacobian_of(jv, xs, k) for k in ks]
        body = blocks[0] if isinstance(_argnums(argnums, len(xs)), int) else Tuple(blocks)
        return Function(xs, Let(jv, jvp_func, body))
    return _optimized(_wrap(jvp(f, mod=mod, optimize=False), build), optimize)


def derivative(f, order=1, argnums=0, mod=None, optimize=True):
    """The `order`-th derivative tensor of `f: fn(x: Tensor[s, float]) -> float scalar`.

    Returns fn(x) -> Tensor[s * order]: order 1 the gradient (as rl.grad), order 2 the Hessian
    (shape (n, n) for x of shape (n,)), order 3 the (n, n, n) tensor of third derivatives, ...
    Order k > 1 is the forward-mode jacobian (rl.jacobian) of order k - 1; with optimize=True
    each order is optimized before the next differentiates it (each stays small).

        x = rl.var("x", shape=(2,), dtype="float64")
        d3 = rl.derivative(rl.Function([x], rl.sum(x * x * x)), order=3)
        rl.evaluate(d3, np.ones(2))              # shape (2, 2, 2): 6 on the diagonal
    """
    if isinstance(order, bool) or not isinstance(order, (int, np.integer)) or order < 1:
        raise GradientError(f"derivative: order must be an int of at least 1, got {order!r}")
    func, src, k, x_t = _float_param(f, mod, "derivative", argnums)
    out_t = func.checked_type.ret_type
    if not (is_float_tensor(out_t) and out_t.shape == ()):
        raise GradientError(f"derivative needs a function returning a float scalar; this one "
                            f"returns {out_t}")
    d = grad(f, argnums=k, mod=mod, optimize=optimize)
    for _ in range(order - 1):
        d = jacobian(d, argnums=k, optimize=optimize)
    return d


# ---- plumbing --------------------------------------------------------------------------------

def _ieee(prog, debug_nans):
    """prog with its zero adjoints as ordinary zeros when `debug_nans` (ir/passes/ieee_zeros)."""
    if not isinstance(debug_nans, bool):
        raise GradientError(f"debug_nans= must be True or False, got {debug_nans!r}")
    if not debug_nans:
        return prog
    from relayish.ir.passes.ieee_zeros import ieee_zeros
    return ieee_zeros(prog)


def _optimized(prog, optimize, debug_nans=False):
    """prog through rl.optimize's default pipeline when `optimize` is true (after _ieee).

    A Module's globals that @main does not reach (a prelude's, mostly) are left as they are:
    optimizing them would cost time on every derivative and change nothing it computes."""
    if not isinstance(optimize, bool):
        raise GradientError(f"optimize= must be True or False, got {optimize!r}")
    prog = _ieee(prog, debug_nans)
    if not optimize:
        return prog
    from relayish.ir.passes.manager import optimize as run_pipeline
    if not isinstance(prog, Module):
        if free_vars(prog):
            # an open Function (a gradient taken inside another program, its free variables
            # bound there): the passes take closed programs; it is optimized with the
            # program that closes it
            return prog
        return run_pipeline(prog)
    reached = CallGraph(prog).reachable("main")
    part = Module()
    for data in prog.type_definitions.values():
        part.add_type(data)
    for name in reached:
        part[name] = prog[name]
    done = run_pipeline(part)
    out = prog.copy()
    for gv, func in done.functions.items():
        out[gv.name_hint] = func
    return out


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
    _, _, _, t = _float_param(func, None, what, 0, prepared=(func, src))
    return func, src, t


def _float_param(f, mod, what, argnums, prepared=None):
    """(the type-checked Function, its module or None, k, the type of parameter k) for the one
    argnum k (an int) of an entry point that differentiates one float tensor parameter."""
    func, src = prepared or _prepare(f, mod)[:2]
    if isinstance(argnums, (tuple, list)):
        raise GradientError(f"{what} takes one parameter to differentiate (argnums an int), "
                            f"got argnums={argnums!r}")
    k = _argnums(argnums, len(func.params))
    p = func.params[k]
    t = getattr(p, "_checked_type", None) or p.type_annotation
    if not is_float_tensor(t):
        raise GradientError(f"{what} needs a float tensor parameter; its parameter "
                            f"%{p.name_hint} has type {t}")
    return func, src, k, t


def _prepare(f, mod):
    """Type-check f; return (the Function, its source module or None, whether it came as a
    Module)."""
    from relayish.ir.typecheck import infer_type
    if isinstance(f, Module) and mod is not None:
        raise GradientError("pass either a Module or a Function with mod=, not both")
    if isinstance(f, (Function, Module)):
        f, mod = link(f, mod)              # called Modules' globals merged (ir/link.py)
    if isinstance(f, Module):
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


def _run_transform(fn, *args):
    # a transform allocates many small long-lived nodes and frees none
    with no_gc():
        return run_deep(fn, *args)


def _transform(f, mod, mode, argnums=None):
    return _run_transform(_transform_deep, f, mod, mode, argnums)


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


def _recurses(func, src) -> bool:
    """Whether func (with its module src, or None) can call itself again: it reaches a global
    that reaches itself, or a function it reaches has a let-bound function that refers to
    itself."""
    bodies = [func]
    if src is not None:
        graph = CallGraph(src)
        reached = list(dict.fromkeys(m for n in global_refs(func) if n in src
                                     for m in graph.reachable(n)))
        if graph.recursive().intersection(reached):
            return True
        bodies += [src[name] for name in reached]
    table = FreeVars()             # one table: a walk per function would be quadratic in depth
    return any(isinstance(node, Let) and isinstance(node.value, Function)
               and any(v is node.var for v in table(node.value))
               for body in bodies for node in walk(body))


def _copy_without(src: Module, name: str) -> Module:
    """A copy of src without @name and without the globals that (transitively) call it."""
    dropped = CallGraph(src).callers_of({name})
    out = Module()
    for data in src.type_definitions.values():
        out.add_type(data)
    for gv, func in src.functions.items():
        if gv.name_hint not in dropped:
            out[gv] = func
    return out


# ---- forward-mode plumbing --------------------------------------------------------------------

def _infer(x):
    from relayish.ir.typecheck import infer_type
    return infer_type(x)


def _check_function(func, what):
    if not isinstance(func, Function):
        raise RelayishError(f"{what} takes a relayish Function or Module, got "
                            f"{type(func).__name__}")


def _with_module(f, mod):
    """A Function that calls globals comes with its module: f becomes that module's @main."""
    if mod is not None and not isinstance(mod, Module):
        raise RelayishError(f"mod= must be a relayish Module, got {type(mod).__name__}")
    if isinstance(f, (Function, Module)):
        f, mod = link(f, mod)              # called Modules' globals merged (ir/link.py)
    if mod is None:
        return f
    _check_function(f, "forward mode")
    out = mod.copy()
    out["main"] = f
    return out


def _hvp_function(f, optimize, argnums=None):
    f = _infer(f)
    _check_scalar_objective(f)
    jg = forward.transform_function(_infer(gradient(f, argnums=argnums, optimize=optimize)))
    xs, vs, tangents = _hvp_arguments(f, argnums)
    return Function(xs + vs, _hvp_block(Call(jg, xs + tangents), len(xs), argnums))


def _hvp_module(mod, optimize, argnums=None):
    mod = _infer(mod)
    main = mod["main"]
    _check_scalar_objective(main)
    out = forward.transform_module(gradient(mod, argnums=argnums, optimize=optimize),
                                   entry_name="main_grad_jvp_entry")
    xs, vs, tangents = _hvp_arguments(main, argnums)
    entry = Call(GlobalVar("main_grad_jvp_entry"), xs + tangents)
    out["main"] = Function(xs + vs, _hvp_block(entry, len(xs), argnums))
    return out


def _hvp_arguments(f, argnums):
    """The HVP's parameters xs and vs (one v per parameter; argnums=k: one, for parameter k)
    and the tangents the jvp of the gradient gets (zeros outside argnums)."""
    types = f.checked_type.arg_types
    xs = [Var(p.name_hint, t) for p, t in zip(f.params, types)]
    if argnums is None:
        vs = [Var("v_" + p.name_hint, t) for p, t in zip(f.params, types)]
        return xs, vs, vs
    v = Var("v_" + f.params[argnums].name_hint, types[argnums])
    return xs, [v], [v if i == argnums else _zero_tangent(p, t)
                     for i, (p, t) in enumerate(zip(f.params, types))]


def _hvp_block(jvp_call, n, argnums):
    """H v from the jvp of the gradient program: the tangent of its gradients (the one of
    parameter argnums when given; of a one-parameter function, that one)."""
    grads_tangent = TupleGetItem(TupleGetItem(jvp_call, 1), 1)
    return TupleGetItem(grads_tangent, 0) if argnums is None and n == 1 else grads_tangent


def _check_scalar_objective(f):
    ft = f.checked_type
    if not (is_float_tensor(ft.ret_type) and ft.ret_type.shape == ()):
        raise GradientError(f"the function must return a float scalar to have a Hessian; "
                            f"it returns {ft.ret_type}")


def _hessian_params(f, argnums):
    """(the parameter types, k): parameter k (argnums) is a float vector or scalar."""
    types = f.checked_type.arg_types
    k = _argnums(argnums, len(types))
    if isinstance(k, tuple) or not is_float_tensor(types[k]) or len(types[k].shape) > 1:
        shown = ", ".join(str(t) for t in types)
        raise GradientError(f"hessian takes a function of a float vector or scalar (argnums an "
                            f"int naming it), fn(Tensor[(n), float]) -> float; got fn({shown}) "
                            f"with argnums={argnums!r}")
    return types, k


def _stack_hvps(types, k, hv_of):
    """fn(xs) { stack((hv(xs, e_0), .., hv(xs, e_n-1))) } for xs : types, e_i of types[k]."""
    xs = [Var(f"x{i}" if len(types) > 1 else "x", t) for i, t in enumerate(types)]
    xt = types[k]
    if xt.shape == ():
        return Function(xs, hv_of(xs, const(np.ones((), xt.dtype))))
    n = xt.shape[0]
    eye = np.eye(n, dtype=xt.dtype)
    rows = [hv_of(xs, const(eye[i])) for i in range(n)]
    return Function(xs, make_call("stack", [Tuple(rows)], {"axis": 0}))
