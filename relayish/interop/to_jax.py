"""rl.to_jax: a relayish program as a jax function whose derivatives are relayish's.

    jf = rl.to_jax(f_or_mod)      # jf(*arrays) under jax.jit, vmap, grad, jvp, hessian, scan

The design: two jax primitives, each carrying a relayish program with tensor parameters and a
tuple of tensors as result (a "flat" program; `_Program` builds it from the user's tuples):

    relayish_call(P)(x...)           P(x), run by P's compiled jax lowering
    relayish_linear(P)(x..., v...)   J_P(x) v: relayish's forward mode (rl.jvp) of P, linear
                                     in v

    jvp of relayish_call(P)          (relayish_call(P)(x), relayish_linear(P)(x, dx))
    transpose of relayish_linear(P)  relayish_call(V_P)(x, ct), V_P(x, ct) = the backpropagator
                                     of rl.vjp(P) applied to ct: relayish's reverse mode
    jvp of relayish_linear(P)        the jvp of relayish_call(T_P), T_P the tangent program
    vmap of either                   the same primitive with one more batch level (jax.vmap of
                                     the lowering; relayish's AD rules commute with it)

So jax.grad is relayish's reverse AD (jax's linearize gives relayish_linear, whose transpose is
the compiled gradient program), jax.jvp is relayish's forward mode, and each derivative is
again a relayish program in one of the primitives, differentiable in turn (the closure
property): jax.hessian is relayish's forward over reverse. jax.custom_vjp could give the first
two only one at a time (a custom_vjp function has no jvp, and a custom_jvp function's
transpose would be jax's AD of relayish's forward lowering, which cannot reverse a loop).

Batch levels: `levels` is a tuple of (in_axes, out_axes) per vmap, innermost first; an out
axis None means "summed over the batch" (a cotangent for an input that was not batched).
A loop's rows (the steps a gradient's loop records) cannot grow inside a jax trace as
rl.compile's `run` grows them: there they are fixed (1,024 steps unless capacity= says), and a
run past them raises an EvaluationError from a host callback (jax reports it as a
JaxRuntimeError quoting the message) -- never a wrong or NaN value. Called on concrete arrays,
outside any trace, the primitive runs rl.compile's `run`, whose rows grow.
"""
from __future__ import annotations

import threading

import numpy as np

from relayish.errors import CompileError, EvaluationError
from relayish.ir.expr import Call, Function, Let, Tuple, TupleGetItem, Var
from relayish.ir.link import link_program
from relayish.ir.module import Module
from relayish.ir.types import TensorType, TupleType
from relayish.ir.typecheck import infer_type
from relayish.ir.analysis import CallGraph, free_vars
from relayish.ops import api as rop
from relayish.interop.trees import leaf_exprs, rebuild


def to_jax(f_or_mod, capacity=None):
    """A jax function computing the relayish Function or Module `f_or_mod` (its @main).

    `capacity` is rl.compile's, for the program and each of its derivative programs:
    `{"steps": S}` bounds the iterations of a loop that records rows for a backward pass
    (1,024 by default: rows cannot grow inside a jax trace as `rl.compile`'s do), whose
    buffers each gradient call fills; a bound near the real trip count makes the gradient's
    loop cheaper. A run past it raises an EvaluationError when the jax program runs.

    Parameters and results are tensors and (nested) tuples of them, which the jax function
    takes and returns as tuples of arrays. Its jax.grad/vjp is relayish's reverse mode, its
    jax.jvp relayish's forward mode; jax.jit, jax.vmap and jax.lax.scan work on it. A float64
    program needs jax's 64-bit mode (`jax.config.update("jax_enable_x64", True)`).

    >>> jf = rl.to_jax(rl.from_jax(lambda x: jnp.sum(jnp.sin(x)), np.ones(3)))
    >>> jax.grad(jf)(jnp.zeros(3))                      # relayish's gradient program
    """
    if isinstance(f_or_mod, (Function, Module)):
        f_or_mod = link_program(f_or_mod)        # called Modules' globals merged
    program = _Program.of(f_or_mod, capacity)
    _primitives()

    def fn(*args):
        leaves = program.check_arguments(args)
        outs = _CALL.bind(*leaves, prog=program, levels=())
        return program.rebuild_result(list(outs))
    fn.relayish_program = program.user
    return fn


# ---- flat programs ---------------------------------------------------------------------------

def _leaf_types(typ, out):
    if isinstance(typ, TupleType):
        for t in typ.fields:
            _leaf_types(t, out)
    elif isinstance(typ, TensorType):
        out.append(typ)
    else:
        raise CompileError(f"rl.to_jax takes programs of tensors and tuples of tensors; this "
                           f"one has a value of type {typ}")
    return out


def _is_float(t):
    return np.dtype(t.dtype).kind == "f"


def _entry(prog):
    """(the entry Function, the module or None) of a Function or Module."""
    if isinstance(prog, Module):
        if "main" not in prog:
            raise CompileError("rl.to_jax: the module has no @main")
        return prog["main"], prog
    if isinstance(prog, Function):
        return prog, None
    raise CompileError(f"rl.to_jax takes a relayish Function or Module, got "
                       f"{type(prog).__name__}")


def _around(prog, build):
    """A program of the same kind whose entry is `build(entry)`: the entry is called, as a
    function value, from the new one (a Module keeps its other globals)."""
    entry, mod = _entry(prog)
    if mod is None:
        return build(entry)
    if "main" in CallGraph(mod).recursive():
        raise CompileError("rl.to_jax: @main calls itself; move its recursion into another "
                           "global that @main calls")
    out = Module()
    for data in mod.type_definitions.values():
        out.add_type(data)
    for gv, func in mod.functions.items():
        if gv.name_hint != "main":
            out[gv] = func
    out["main"] = build(entry)
    return out


def _flat(prog, in_types, out_type):
    """fn(leaves of the parameters) -> Tuple(leaves of the result) around prog."""
    def build(entry):
        params = [Var(f"a{k}", t) for k, t in enumerate(
            leaf for t in in_types for leaf in _leaf_types(t, []))]
        it = iter(params)
        args = [rebuild(t, it) for t in in_types]
        r = Var("r")
        return Function(params, Let(r, Call(entry, args), Tuple(leaf_exprs(r, out_type, []))))
    return _around(prog, build)


class _Program:
    """A flat relayish program (tensor parameters, a tuple of tensors as result), its compiled
    jax function and the programs derived from it (memoized: each is built and compiled once)."""

    _lock = threading.Lock()

    def __init__(self, flat, user=None, in_types=None, out_type=None, name="main",
                 capacity=None):
        self.flat = infer_type(flat)
        entry, _ = _entry(self.flat)
        ftype = entry.checked_type
        self.in_leaf_types = list(ftype.arg_types)
        self.out_leaf_types = list(ftype.ret_type.fields)
        self.user = user
        self.user_in_types = in_types
        self.user_out_type = out_type
        self.name = name
        self.capacity = capacity
        self._run = None
        self._growing = None             # run_concrete's compilation (rows that grow)
        self.fault_messages = []
        self._tangent = None
        self._vjp = None

    @classmethod
    def of(cls, f_or_mod, capacity=None):
        entry, _ = _entry(f_or_mod)
        unbound = free_vars(entry)
        if unbound:
            names = ", ".join("%" + v.name_hint for v in unbound)
            raise CompileError(f"rl.to_jax: the function has free variables ({names}); bind "
                               "them (a let around it, or constants) or make them parameters")
        checked = infer_type(f_or_mod)
        entry, _ = _entry(checked)
        ftype = entry.checked_type
        in_types, out_type = list(ftype.arg_types), ftype.ret_type
        for t in in_types + [out_type]:
            _leaf_types(t, [])
        return cls(_flat(checked, in_types, out_type), checked, in_types, out_type,
                   capacity=capacity)

    def __repr__(self):
        return f"<relayish program {self.name}>"

    # ---- the user's structure ----------------------------------------------------------
    def check_arguments(self, args):
        import jax.numpy as jnp
        if len(args) != len(self.user_in_types):
            raise CompileError(f"the relayish function takes {len(self.user_in_types)} "
                               f"argument(s), got {len(args)}")
        leaves = []
        for k, (a, t) in enumerate(zip(args, self.user_in_types)):
            self._flatten_argument(a, t, leaves, f"argument {k}")
        out = []
        for a, t in zip(leaves, self.in_leaf_types):
            a = jnp.asarray(a)
            if tuple(a.shape) != tuple(t.shape):
                raise CompileError(f"an argument of shape {tuple(a.shape)} where the relayish "
                                   f"program takes {t}")
            if np.dtype(a.dtype) != np.dtype(t.dtype):
                if np.dtype(t.dtype).itemsize == 8 and np.dtype(a.dtype).itemsize == 4:
                    raise CompileError(f"the relayish program takes {t}; jax gives "
                                       f"{a.dtype}: enable jax's 64-bit mode "
                                       "(jax.config.update('jax_enable_x64', True))")
                a = a.astype(t.dtype)
            out.append(a)
        return out

    def _flatten_argument(self, a, t, leaves, what):
        if isinstance(t, TupleType):
            if not isinstance(a, (tuple, list)) or len(a) != len(t.fields):
                raise CompileError(f"{what}: the relayish program takes a tuple of "
                                   f"{len(t.fields)} for it ({t})")
            for k, (ak, tk) in enumerate(zip(a, t.fields)):
                self._flatten_argument(ak, tk, leaves, f"{what}[{k}]")
        else:
            leaves.append(a)

    def rebuild_result(self, outs):
        def build(t, it):
            if isinstance(t, TupleType):
                return tuple(build(f, it) for f in t.fields)
            return next(it)
        return build(self.user_out_type, iter(outs))

    # ---- running --------------------------------------------------------------------------
    def run(self):
        """The compiled program for jax traces: fixed rows (a trace cannot grow them)."""
        with self._lock:
            if self._run is None:
                from relayish.backend.api import compile as rl_compile
                self._run = rl_compile(self.flat, backend="jax", capacity=self.capacity)
                if "steps" not in (self.capacity or {}):
                    # a loop's rows grow by retracing in `run`, which a jax trace cannot do:
                    # fixed rows (DEFAULT_ROW_STEPS, as under rl.vmap), not the first 16
                    self._run.row_steps = None
            return self._run

    def run_concrete(self, *leaves):
        """The program on concrete arrays (no jax trace around the call): rl.compile's `run`,
        whose loops' rows grow by themselves and whose failed checks raise."""
        with self._lock:
            if self._growing is None:
                from relayish.backend.api import compile as rl_compile
                self._growing = rl_compile(self.flat, backend="jax", capacity=self.capacity)
        return tuple(self._growing(*leaves))

    def jax_call(self, *leaves):
        """The program on jax values, inside the caller's trace: (tuple of arrays, the
        run-time checks' flags: a bool vector, or None when the program has none)."""
        out, flags, messages = self.run().call_in_trace(*leaves)
        self.fault_messages = messages
        return tuple(out), flags

    def check(self, flags):
        """Raise the failed checks among `flags` (their messages: a loop past its capacity):
        now when the flags are concrete, else when the jax program runs (a host callback,
        called only on a failure; jax raises it as a JaxRuntimeError quoting the message)."""
        import jax
        if not isinstance(flags, jax.core.Tracer):
            self._raise_failed(flags)
            return
        jax.lax.cond(flags.any(), lambda f: jax.debug.callback(self._raise_failed, f),
                     lambda f: None, flags)

    def _raise_failed(self, flags):
        failed = [m for m, f in zip(self.fault_messages, np.asarray(flags)) if f]
        if failed:
            raise EvaluationError(
                f"rl.to_jax: {'; '.join(failed)}. Inside a jax trace the rows cannot grow as "
                "rl.compile's do: pass rl.to_jax(..., capacity={\"steps\": N}) with N above "
                "the loop's trip count")

    # ---- derived programs -------------------------------------------------------------------
    def float_inputs(self):
        return [k for k, t in enumerate(self.in_leaf_types) if _is_float(t)]

    def float_outputs(self):
        return [k for k, t in enumerate(self.out_leaf_types) if _is_float(t)]

    def tangent(self):
        """T(x..., v for the float x...) = J(x) v for the float outputs (rl.jvp's tangent)."""
        with self._lock:
            if self._tangent is None:
                from relayish.ad.api import jvp
                fi, fo = self.float_inputs(), self.float_outputs()
                ins = self.in_leaf_types

                def build(entry):
                    xs = [Var(f"x{k}", t) for k, t in enumerate(ins)]
                    vs = {k: Var(f"v{k}", ins[k]) for k in fi}
                    tangents = [vs[k] if k in vs else rop.zeros_like(xs[k])
                                for k in range(len(ins))]
                    r = Var("r")
                    body = Let(r, Call(entry, xs + tangents),
                               Tuple([TupleGetItem(TupleGetItem(r, 1), j) for j in fo]))
                    return Function(xs + [vs[k] for k in fi], body)
                self._tangent = _Program(_around(jvp(self.flat), build),
                                         name=f"jvp({self.name})", capacity=self.capacity)
            return self._tangent

    def vjp(self):
        """V(x..., ct for the float outputs...) = the cotangents of the float inputs."""
        with self._lock:
            if self._vjp is None:
                from relayish.ad.api import vjp
                fi, fo = self.float_inputs(), self.float_outputs()
                ins, outs = self.in_leaf_types, self.out_leaf_types

                def build(entry):
                    xs = [Var(f"x{k}", t) for k, t in enumerate(ins)]
                    cts = {j: Var(f"ct{j}", outs[j]) for j in fo}
                    r, g = Var("r"), Var("g")
                    seed = Tuple([cts[j] if j in cts else rop.zeros_like(TupleGetItem(
                        TupleGetItem(r, 0), j)) for j in range(len(outs))])
                    body = Let(r, Call(entry, xs),
                               Let(g, Call(TupleGetItem(r, 1), [seed]),
                                   Tuple([TupleGetItem(g, k) for k in fi])))
                    return Function(xs + [cts[j] for j in fo], body)
                self._vjp = _Program(_around(vjp(self.flat), build),
                                     name=f"vjp({self.name})", capacity=self.capacity)
            return self._vjp


# ---- the primitives ---------------------------------------------------------------------------

_CALL = None
_LINEAR = None


def _batched(fn, in_axes, out_axes):
    import jax
    import jax.numpy as jnp

    def g(*args):
        outs, flags = jax.vmap(fn, in_axes=in_axes, out_axes=0)(*args)
        outs = tuple(o.sum(axis=0) if ax is None else jnp.moveaxis(o, 0, ax)
                     for o, ax in zip(outs, out_axes))
        return outs, None if flags is None else flags.any(axis=0)     # failed for any element
    return g


def _function(prog, levels):
    """fn(*args) -> (results, check flags or None): prog's jax call under the batch levels."""
    fn = prog.jax_call
    for in_axes, out_axes in levels:
        fn = _batched(fn, in_axes, out_axes)
    return fn


def _primitives():
    global _CALL, _LINEAR
    if _CALL is not None:
        return
    import jax
    from jax.extend.core import Primitive
    from jax.interpreters import ad, batching, mlir

    call = Primitive("relayish_call")
    linear = Primitive("relayish_linear")
    for p in (call, linear):
        p.multiple_results = True

    def program_of(prim, prog):
        return prog if prim is call else prog.tangent()

    def impl_of(prim):
        def impl(*args, prog, levels):
            p = program_of(prim, prog)
            if not levels and not any(isinstance(a, jax.core.Tracer) for a in args):
                return list(p.run_concrete(*args))      # called outside any jax trace
            outs, flags = _function(p, levels)(*args)
            if flags is not None:
                p.check(flags)
            return list(outs)
        return impl

    def abstract_of(prim):
        def abstract(*avals, prog, levels):
            fn = _function(program_of(prim, prog), levels)
            shapes = jax.eval_shape(lambda *a: fn(*a)[0],
                                    *[jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals])
            return [jax.core.ShapedArray(s.shape, s.dtype) for s in shapes]
        return abstract

    def batch_of(prim):
        def batch(args, dims, *, prog, levels):
            n_out = len(program_of(prim, prog).out_leaf_types)
            level = (tuple(int(d) if isinstance(d, (int, np.integer)) else None for d in dims),
                     (0,) * n_out)
            outs = prim.bind(*args, prog=prog, levels=levels + (level,))
            return outs, [0] * n_out
        return batch

    def call_jvp(prog, levels, primals, tangents):
        """jvp of relayish_call(prog): its value, and relayish_linear(prog) of the tangents."""
        outs = call.bind(*primals, prog=prog, levels=levels)
        fi, fo = prog.float_inputs(), prog.float_outputs()
        zero = [ad.Zero(jax.core.ShapedArray(o.shape, o.dtype).to_tangent_aval()) for o in outs]
        if all(type(tangents[k]) is ad.Zero for k in fi) or not fo:
            return outs, zero
        dx = [ad.instantiate_zeros(tangents[k]) for k in fi]
        lin_levels = tuple((ins + tuple(ins[k] for k in fi), tuple(out[j] for j in fo))
                           for ins, out in levels)
        lin = linear.bind(*primals, *dx, prog=prog, levels=lin_levels)
        for j, t in zip(fo, lin):
            zero[j] = t
        return outs, zero

    def jvp_call(primals, tangents, *, prog, levels):
        return call_jvp(prog, levels, primals, tangents)

    def jvp_linear(primals, tangents, *, prog, levels):
        return call_jvp(prog.tangent(), levels, primals, tangents)

    def transpose_linear(cts, *args, prog, levels):
        n = len(prog.in_leaf_types)
        xs, vs = args[:n], args[n:]
        if any(ad.is_undefined_primal(x) for x in xs):
            raise CompileError("relayish_linear is linear in its tangents only; jax asked to "
                               "transpose it in a primal")
        fi, fo = prog.float_inputs(), prog.float_outputs()
        cts = [ad.instantiate_zeros(c) if type(c) is ad.Zero else c for c in cts]
        # the cotangent program's batch levels: x's axes, then each output's (summed outputs
        # were unbatched, so are their cotangents), and back to the tangents' axes
        v_levels = []
        for ins, out in levels:
            x_axes = ins[:n]
            v_levels.append((x_axes + tuple(out), tuple(ins[n + i] for i in range(len(fi)))))
        grads = call.bind(*xs, *cts, prog=prog.vjp(), levels=tuple(v_levels))
        return [None] * n + [g if ad.is_undefined_primal(v) else None
                             for g, v in zip(grads, vs)]

    for prim in (call, linear):
        prim.def_impl(impl_of(prim))
        prim.def_abstract_eval(abstract_of(prim))
        mlir.register_lowering(prim, mlir.lower_fun(impl_of(prim), multiple_results=True))
        batching.primitive_batchers[prim] = batch_of(prim)
    ad.primitive_jvps[call] = jvp_call
    ad.primitive_jvps[linear] = jvp_linear
    ad.primitive_transposes[linear] = transpose_linear
    _CALL, _LINEAR = call, linear
