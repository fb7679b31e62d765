"""The reference interpreter: numpy semantics for every construct, at any recursion depth.

    evaluate(f_or_mod, *args) -> value

Scheme. Each Function is COMPILED once (cached per Function object, or per Module) into a
`Code`: a frame layout and a graph of basic blocks. A block is a tuple of straight-line *steps*
followed by one *terminator*:

    step(slots)       a Python closure doing one thing with precomputed slot indices:
                      `slots[3] = impl(numpy, slots[1], slots[2])` for an op call, tuples,
                      projections, refs, constructor values, closure creation
    terminator        JUMP | BRANCH (If) | MATCH | CALL | TAILCALL | RETURN

A frame is a flat Python list of slots: [params..., captured values..., locals/constants...];
constants and globals are written into the frame's template at compile time, so reading them
costs nothing at run time. Vars are compiled away into slot indices (each slot is written at
most once per frame: there are no backward jumps, so `let y = x` just aliases x's slot).

IR calls never recurse in Python: CALL pushes (caller slots, return block) on an explicit list
and jumps to the callee's entry block; RETURN pops; TAILCALL replaces the frame. A 20,000-deep
non-tail recursion is a 20,000-long Python list. The compiler walks let-chains (and else-if and
tail chains) with loops and runs under `run_deep` as the safety net for other deep nesting.

Why not a tree-walking evaluator: re-dispatching on node types costs several Python calls per
node on every execution; here a let-bound op call costs one closure call plus the op's impl.
Why not plain nested closures (eval = closure(env)): IR calls would then be Python calls, and
deep recursion would overflow the Python stack.
"""
from __future__ import annotations

import inspect
import sys
import weakref
from operator import itemgetter

import numpy as np

from relayish.errors import EvaluationError, RelayishError
from relayish.ir.expr import (Call, Constant, Constructor, Expr, Function, If, Let, Match,
                              RefRead, Var)
from relayish.ir.module import Module
from relayish.ir.op import Op
from relayish.ir.types import TensorType
from relayish.ir.analysis import FreeVars
from relayish.ir.visitor import ExprFunctor, no_gc, run_deep
from relayish.ops._common import numpy_fast_impl, static_type
from relayish.backend.values import Closure, ConstructorValue, RefValue
from relayish.backend.runtime.args import Parameters, ValueChecker
from relayish.backend.runtime.bindings import compile_pattern
from relayish.backend.runtime.check import checked
from relayish.backend.runtime.describe import node_text, short, value_text, value_type_text

__all__ = ["evaluate", "InterpreterClosure"]

MAX_CALL_DEPTH = 2_000_000          # IR frames on the explicit stack before we give up
_MAX_EXTRA_CAPTURES = 16            # tuple fields a closure may capture besides its free vars

_ndarray = np.ndarray
_new_object = object.__new__

# terminator kinds
_JUMP, _BRANCH, _MATCH, _CALL, _TAILCALL, _RETURN = range(6)


# ---- compiled code ---------------------------------------------------------------------------

class _Block:
    """Straight-line steps, then one terminator (its fields depend on `kind`)."""

    __slots__ = ("steps", "kind", "src", "args", "gather", "dst", "target", "other", "clauses",
                 "node", "code")

    def __init__(self, code):
        self.steps = []
        self.kind = None
        self.src = None        # BRANCH: cond slot; MATCH: data slot; CALL: callee; RETURN: value
        self.args = ()         # CALL/TAILCALL: argument slots
        self.gather = None     # CALL/TAILCALL with 2+ arguments: itemgetter of their slots
        self.dst = None        # CALL: the slot receiving the result
        self.target = None     # JUMP/CALL: next block; BRANCH: then-block
        self.other = None      # BRANCH: else-block
        self.clauses = ()      # MATCH: ((matcher, block), ...)
        self.node = None       # the expression, for error messages
        self.code = code       # the Code it belongs to, for error messages


class Code:
    """A compiled function: its frame layout and entry block."""

    __slots__ = ("name", "func", "nparams", "ncaptures", "rest", "entry", "params", "nslots",
                 "__weakref__")

    def __init__(self, name, func):
        self.name = name
        self.func = func
        self.nparams = 0
        self.ncaptures = 0
        self.rest = []           # the frame beyond params and captures: constants, then Nones
        self.entry = None
        self.params = None       # runtime.args.Parameters: names, types, argument checking
        self.nslots = 0

    def __repr__(self):
        return f"<Code {self.name}: {self.nparams} params, {self.nslots} slots>"


class InterpreterClosure(Closure):
    """A function value of the interpreter: compiled code plus its captured values.

    Calling it from Python checks and converts the arguments and runs the function:
    `rl.evaluate(fn_returning_fn)(np.ones(3))`.
    """

    __slots__ = ("code", "env")

    def __init__(self, code, env):
        self.code = code
        self.env = env

    @property
    def func(self):
        f = self.code.func
        return f() if isinstance(f, weakref.ref) else f

    def __call__(self, *args):
        code = self.code
        frame = code.params.convert(args)
        frame += self.env
        frame += code.rest
        return _execute(code, frame)

    def __repr__(self):
        return f"<Closure {self.code.name}>"


class _CheckedCallable(Closure):
    """A Python callable passed where the program expects a function of type `ftype`.

    Its results are checked (and Python scalars/lists converted) against the declared return
    type on every call, so a string or a wrong-shaped array never flows on as a program value.
    `what` names it in messages ("parameter %f of @main").
    """

    __slots__ = ("fn", "ftype", "what", "checker")

    def __init__(self, fn, ftype, what, checker):
        self.fn, self.ftype, self.what, self.checker = fn, ftype, what, checker

    def __call__(self, *args):
        n = len(self.ftype.arg_types)
        if len(args) != n:
            raise EvaluationError(f"the Python function passed for {self.what} takes {n} "
                                  f"argument(s), got {len(args)}")
        result = self.fn(*args)
        return self.checker.to_value(
            result, self.ftype.ret_type,
            f"the result of the Python function passed for {self.what}",
            subject=f"the Python function passed for {self.what} returned a bad result")

    def __repr__(self):
        return f"<Closure {self.what}: {short(self.fn)}>"


def _accepts(fn, n):
    """False when `fn`'s signature says it cannot take n positional arguments (True if unknown)."""
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):         # builtins, ufuncs: no signature to read
        return True
    try:
        signature.bind(*range(n))
    except TypeError:
        return False
    return True


def _function_conforms(v, t):
    """An interpreter closure of the right arity passes for a function type unchanged."""
    return isinstance(v, InterpreterClosure) and v.code.nparams == len(t.arg_types)


def _convert_function(checker, v, t, where, fail):
    """A function argument (runtime.args' hook): interpreter closures are checked for arity,
    constructors used as values are typed already, Python callables are wrapped so that their
    results are checked (_CheckedCallable)."""
    n = len(t.arg_types)
    if isinstance(v, InterpreterClosure):
        if v.code.nparams != n:
            fail(f"a function of {v.code.nparams} parameter(s)")
        return v
    if isinstance(v, _CheckedCallable):
        if v.ftype == t:
            return v
    elif isinstance(v, Closure):
        return v
    if not _accepts(v, n):
        fail(f"a Python function that cannot take {n} argument(s)")
    return _CheckedCallable(v, t, where, checker)


def _value_checker():
    return ValueChecker(function_conforms=_function_conforms, convert_function=_convert_function)


class _ConstructorClosure(Closure):
    """A constructor used as a first-class function (`map(Some, xs)`)."""

    def __init__(self, ctor):
        self.ctor = ctor

    def __call__(self, *args):
        if len(args) != len(self.ctor.inputs):
            raise EvaluationError(f"constructor {self.ctor.name_hint} takes {len(self.ctor.inputs)} "
                                  f"field(s), got {len(args)}")
        return ConstructorValue(self.ctor, list(args))

    def __repr__(self):
        return f"<Closure {self.ctor.name_hint}>"


# ---- the machine -------------------------------------------------------------------------------

def _execute(code, slots):
    """Run `code` on the frame `slots` until its outermost RETURN; returns the value.

    Float faults follow IEEE (log(-1) is nan, 1/0. is inf, exp(1000.) is inf) without numpy's
    RuntimeWarnings, as XLA computes them: one errstate per run, not one per op (it costs
    about 3 us, several times a small op). notes/ops.md."""
    with np.errstate(all="ignore"):
        return _run(code, slots)


def _run(code, slots):
    stack = []                       # (caller slots, CALL block) per active IR call
    push, pop = stack.append, stack.pop
    block = code.entry
    try:
        while True:
            for step in block.steps:
                step(slots)
            kind = block.kind
            if kind is _RETURN:
                value = slots[block.src]
            elif kind is _CALL or kind is _TAILCALL:
                fn = slots[block.src]
                if fn.__class__ is InterpreterClosure:
                    callee = fn.code
                    argslots = block.args
                    n = len(argslots)
                    if n != callee.nparams:
                        raise _arity_error(callee, n, block.node)
                    if n == 1:
                        frame = [slots[argslots[0]], *fn.env, *callee.rest]
                    elif n == 0:
                        frame = [*fn.env, *callee.rest]
                    else:
                        frame = [*block.gather(slots), *fn.env, *callee.rest]
                    if kind is _CALL:
                        if len(stack) >= MAX_CALL_DEPTH:
                            raise EvaluationError(f"IR call depth exceeded {MAX_CALL_DEPTH} frames "
                                                  f"(unbounded recursion?) at {node_text(block.node)}")
                        push((slots, block))
                    slots = frame
                    block = callee.entry
                    continue
                value = _call_foreign(fn, [slots[i] for i in block.args], block.node)
                if kind is _CALL:
                    slots[block.dst] = value
                    block = block.target
                    continue
            elif kind is _JUMP:
                block = block.target
                continue
            elif kind is _BRANCH:
                block = block.target if slots[block.src] else block.other
                continue
            else:  # _MATCH
                value = slots[block.src]
                for matcher, target in block.clauses:
                    if matcher is None or matcher(value, slots):
                        block = target
                        break
                else:
                    raise EvaluationError(f"no clause matches the value {value_text(value)} in "
                                          f"{node_text(block.node, 300)}")
                continue
            # a RETURN (or a foreign tail call) produced `value`
            if not stack:
                return value
            slots, caller = pop()
            slots[caller.dst] = value
            block = caller.target
    except RelayishError as exc:
        _add_trace(exc, block, stack)
        raise
    except Exception as exc:  # noqa: BLE001 - a fault in a terminator of an ill-typed program
        error = EvaluationError(f"{type(exc).__name__}: {exc} in {node_text(block.node)}")
        _add_trace(error, block, stack)
        raise error from exc


def _add_trace(exc, block, stack):
    """Note the IR call stack (innermost first) on an error, once."""
    if getattr(exc, "_relayish_traced", False):
        return
    exc._relayish_traced = True
    names = [block.code.name] + [caller.code.name for _, caller in reversed(stack[-8:])]
    more = f" ... ({len(stack) - 8} more)" if len(stack) > 8 else ""
    exc.add_note("IR call stack (innermost first): " + " <- ".join(names) + more)


def _call_foreign(fn, args, node):
    """Call a function value that is not interpreter code: constructors, ops, other backends."""
    if not callable(fn):
        raise EvaluationError(f"cannot call a value of type {value_type_text(fn)} in {node_text(node)}")
    try:
        return fn(*args)
    except EvaluationError as exc:
        if isinstance(fn, _CheckedCallable) and not getattr(exc, "_relayish_traced", False):
            raise EvaluationError(f"{exc} in {node_text(node)}") from None
        raise
    except RelayishError:
        raise
    except Exception as exc:  # noqa: BLE001 - a Python callable passed in by the user
        raise EvaluationError(f"{type(exc).__name__} in the function called by {node_text(node)}: "
                              f"{exc}") from exc


def _arity_error(code, n, node):
    return code.params.arity_error(n, f" in {node_text(node)}")


def _fix_scalar(r):
    """numpy turns 0-d results into numpy scalars; the runtime wants 0-d arrays."""
    return np.asarray(r) if isinstance(r, np.generic) else r


# ---- steps -----------------------------------------------------------------------------------

def _op_failure(node, exc):
    if isinstance(exc, EvaluationError):
        return exc
    return EvaluationError(f"operator '{node.op.name}' failed in {node_text(node)}: "
                           f"{type(exc).__name__}: {exc}")


def _op_step(node, dst, srcs):
    op = node.op
    impl = op.impl
    if impl is None:
        def missing(s):
            raise EvaluationError(f"operator '{op.name}' has no implementation, in {node_text(node)}")
        return missing
    attrs = node.attrs
    xp = np
    t = getattr(node, "_checked_type", None)
    never_scalar = isinstance(t, TensorType) and len(t.shape) >= 1   # numpy gives an ndarray
    fast = numpy_fast_impl(op, attrs, t if isinstance(t, TensorType) else None)
    if fast is not None:
        return _fast_op_step(node, fast, dst, srcs, never_scalar)
    if not attrs and len(srcs) == 2 and never_scalar:
        a, b = srcs

        def step(s):
            try:
                s[dst] = impl(xp, s[a], s[b])
            except Exception as exc:  # noqa: BLE001 - reported with the call's text
                raise _op_failure(node, exc) from exc
    elif not attrs and len(srcs) == 1 and never_scalar:
        a, = srcs

        def step(s):
            try:
                s[dst] = impl(xp, s[a])
            except Exception as exc:  # noqa: BLE001
                raise _op_failure(node, exc) from exc
    elif not attrs and len(srcs) == 2:
        a, b = srcs

        def step(s):
            try:
                r = impl(xp, s[a], s[b])
            except Exception as exc:  # noqa: BLE001 - reported with the call's text
                raise _op_failure(node, exc) from exc
            s[dst] = r if r.__class__ is _ndarray else _fix_scalar(r)
    elif not attrs and len(srcs) == 1:
        a, = srcs

        def step(s):
            try:
                r = impl(xp, s[a])
            except Exception as exc:  # noqa: BLE001
                raise _op_failure(node, exc) from exc
            s[dst] = r if r.__class__ is _ndarray else _fix_scalar(r)
    elif len(srcs) == 1:
        a, = srcs

        def step(s):
            try:
                r = impl(xp, s[a], **attrs)
            except Exception as exc:  # noqa: BLE001
                raise _op_failure(node, exc) from exc
            s[dst] = r if r.__class__ is _ndarray else _fix_scalar(r)
    else:
        gather = itemgetter(*srcs) if len(srcs) >= 2 else (lambda s: ())

        def step(s):
            try:
                r = impl(xp, *gather(s), **attrs)
            except Exception as exc:  # noqa: BLE001
                raise _op_failure(node, exc) from exc
            s[dst] = r if r.__class__ is _ndarray else _fix_scalar(r)
    return step


def _fast_op_step(node, fn, dst, srcs, never_scalar):
    """An op step calling the op's direct numpy function (relayish.ops._common.numpy_fast):
    `s[dst] = fn(s[a], s[b])`, no impl wrapper, no attrs to pass."""
    n = len(srcs)
    if n == 2 and never_scalar:
        a, b = srcs

        def step(s):
            try:
                s[dst] = fn(s[a], s[b])
            except Exception as exc:  # noqa: BLE001 - reported with the call's text
                raise _op_failure(node, exc) from exc
    elif n == 1 and never_scalar:
        a, = srcs

        def step(s):
            try:
                s[dst] = fn(s[a])
            except Exception as exc:  # noqa: BLE001
                raise _op_failure(node, exc) from exc
    elif n == 0 and never_scalar:
        def step(s):
            s[dst] = fn()
    elif n == 2:
        a, b = srcs

        def step(s):
            try:
                r = fn(s[a], s[b])
            except Exception as exc:  # noqa: BLE001
                raise _op_failure(node, exc) from exc
            s[dst] = r if r.__class__ is _ndarray else _fix_scalar(r)
    elif n == 1:
        a, = srcs

        def step(s):
            try:
                r = fn(s[a])
            except Exception as exc:  # noqa: BLE001
                raise _op_failure(node, exc) from exc
            s[dst] = r if r.__class__ is _ndarray else _fix_scalar(r)
    else:
        gather = itemgetter(*srcs) if n >= 2 else (lambda s: ())
        multi = n >= 2

        def step(s):
            try:
                r = fn(*gather(s)) if multi else fn()
            except Exception as exc:  # noqa: BLE001
                raise _op_failure(node, exc) from exc
            s[dst] = r if r.__class__ is _ndarray else _fix_scalar(r)
    return step


def _guard(node, what):
    """An EvaluationError for a fault of a non-op step (only ill-typed programs get here)."""
    def fail(exc):
        return EvaluationError(f"{what} failed in {node_text(node)}: {type(exc).__name__}: {exc}")
    return fail


def _tuple_step(node, dst, srcs):
    if len(srcs) == 1:
        a, = srcs

        def step(s):
            s[dst] = (s[a],)
    else:
        gather = itemgetter(*srcs)         # a tuple of the slots' values, in C

        def step(s):
            s[dst] = gather(s)
    return step


def _getitem_step(node, dst, src, index):
    fail = _guard(node, "tuple projection")

    def step(s):
        try:
            s[dst] = s[src][index]
        except Exception as exc:  # noqa: BLE001
            raise fail(exc) from exc
    return step


def _move_step(dst, src):
    def step(s):
        s[dst] = s[src]
    return step


def _ref_create_step(dst, src):
    # object.__new__ plus one attribute store skips the Python-level __init__ call
    def step(s):
        r = _new_object(RefValue)
        r.value = s[src]
        s[dst] = r
    return step


# Shared zero tensors stored by `ref(zeros(shape, dtype))` steps, one per (shape, dtype), made
# read-only. Reading such a reference gives a fresh copy, so the shared array never reaches a
# program's results; an accumulation `r := !r + g` into it (g of the result's type) stores g.
_SHARED_ZEROS = {}
_SHARED_ZERO_IDS = set()


def _shared_zeros(shape, dtype):
    key = (tuple(shape), str(dtype))
    z = _SHARED_ZEROS.get(key)
    if z is None:
        z = np.zeros(key[0], dtype=key[1])
        z.flags.writeable = False
        _SHARED_ZEROS[key] = z
        _SHARED_ZERO_IDS.add(id(z))
    return z


def _ref_read_step(node, dst, src):
    fail = _guard(node, "reading a reference")
    shared = _SHARED_ZERO_IDS

    def step(s):
        try:
            v = s[src].value
        except Exception as exc:  # noqa: BLE001
            raise fail(exc) from exc
        s[dst] = v.copy() if id(v) in shared else v
    return step


def _ref_write_step(node, dst, ref, src):
    fail = _guard(node, "writing a reference")

    def step(s):
        r = s[ref]
        if r.__class__ is not RefValue:
            raise fail(TypeError(f"{value_type_text(r)} is not a reference"))
        r.value = s[src]
        s[dst] = ()
    return step


# sys.getrefcount of an array held only by a reference's `.value` and one local variable
# (the call's argument is the third). Such an array is the reference's own: nothing else can
# see it, so adding into it in place is the same as storing a new sum (CPython's refcount is
# the proof, as numpy's own elision of temporaries relies on). An array that any frame slot,
# tuple, view or earlier `!r` still holds has a higher count and is never mutated.
_REF_OWNED = 3


def _ref_owns(cur, shape, dtype):
    """Whether the reference's value `cur` (the caller's local) is its own array of this shape
    and dtype (this function's parameter is one more reference to it)."""
    return (cur.__class__ is _ndarray and sys.getrefcount(cur) == _REF_OWNED + 1
            and cur.base is None and cur.flags.writeable and cur.flags.c_contiguous
            and cur.shape == shape and cur.dtype == dtype)


def _accumulate_step(node, add_node, dst, ref, src, add, never_scalar, overwrite):
    """`overwrite`: g has the type of the sum, so adding it to a shared zero tensor is g.
    With `overwrite`, a value that the reference owns is added to in place (_ref_owns): a
    parameter's gradient reference allocates once per program run, not once per use."""
    fail = _guard(node, "writing a reference")
    shared = _SHARED_ZERO_IDS

    def step(s):
        r = s[ref]
        if r.__class__ is not RefValue:
            raise fail(TypeError(f"{value_type_text(r)} is not a reference"))
        cur = r.value
        if overwrite:
            if id(cur) in shared:
                r.value = s[src]
                s[dst] = ()
                return
            g = s[src]
            if g.__class__ is _ndarray and _ref_owns(cur, g.shape, g.dtype):
                np.add(cur, g, out=cur)
                s[dst] = ()
                return
        try:
            v = add(cur, s[src])
        except Exception as exc:  # noqa: BLE001 - reported with the call's text
            raise _op_failure(add_node, exc) from exc
        r.value = v if never_scalar or v.__class__ is _ndarray else _fix_scalar(v)
        s[dst] = ()
    return step


def _take_accumulate_step(node, dst, ref, gs, ids, axis):
    """`r := !r + take_backward(g, idx, like, axis)`: the rows of g are added into the
    reference's value in place when it owns it (_ref_owns), else into a fresh copy (a fresh
    zeros for the shared zero tensor), which the reference then owns: no dense |V| x D gradient
    per embedding lookup, no new sum per accumulation."""
    fail = _guard(node, "writing a reference")
    shared = _SHARED_ZERO_IDS

    def step(s):
        r = s[ref]
        if r.__class__ is not RefValue:
            raise fail(TypeError(f"{value_type_text(r)} is not a reference"))
        cur, g, idx = r.value, s[gs], s[ids]
        try:
            if not _ref_owns(cur, cur.shape, cur.dtype):
                cur = (np.zeros(cur.shape, dtype=cur.dtype) if id(cur) in shared
                       else np.array(cur, dtype=cur.dtype, order="C"))
            if axis is None:
                flat = cur.reshape(-1)
                if idx.ndim == 0:
                    flat[idx] += g
                else:
                    np.add.at(flat, idx.reshape(-1), g.reshape(-1))
            elif axis == 0 and idx.ndim == 0:      # an embedding row: no axis moves
                cur[idx] += g
            else:
                k = idx.ndim
                target = np.moveaxis(cur, axis, 0)
                vals = np.moveaxis(g, tuple(range(axis, axis + k)), tuple(range(k)))
                if k == 0:
                    target[idx] += vals
                else:
                    np.add.at(target, idx, vals)
        except Exception as exc:  # noqa: BLE001 - reported with the accumulation's text
            raise _op_failure(node, exc) from exc
        r.value = cur
        s[dst] = ()
    return step


def _constructor_step(ctor, dst, srcs):
    if len(srcs) >= 2:
        gather = itemgetter(*srcs)

        def step(s):
            s[dst] = ConstructorValue(ctor, gather(s))
    else:
        def step(s):
            s[dst] = ConstructorValue(ctor, [s[i] for i in srcs])
    return step


def _closure_step(code, dst, srcs):
    if dst in srcs:
        # letrec: `let %f = fn(..) { .. %f(..) .. }` captures itself, so the closure must be in
        # its slot before its environment is read.
        def step(s):
            c = _new_object(InterpreterClosure)
            c.code = code
            s[dst] = c
            c.env = tuple([s[i] for i in srcs])
    elif len(srcs) == 1:
        a, = srcs

        def step(s):
            c = _new_object(InterpreterClosure)
            c.code = code
            c.env = (s[a],)
            s[dst] = c
    elif not srcs:
        def step(s):
            c = _new_object(InterpreterClosure)
            c.code = code
            c.env = ()
            s[dst] = c
    else:
        gather = itemgetter(*srcs)

        def step(s):
            c = _new_object(InterpreterClosure)
            c.code = code
            c.env = gather(s)
            s[dst] = c
    return step


# ---- the compiler ----------------------------------------------------------------------------

class _Program:
    """The compile context of one evaluation target: the module's globals as closures."""

    def __init__(self, mod):
        self.mod = mod
        self.globals = {}       # name -> InterpreterClosure (its Code filled by drain())
        self.pending = []
        # what each fn literal captures, found in one walk of the outermost function that holds
        # it (a walk per literal was quadratic in the nesting depth of closures)
        self.free_vars = FreeVars()

    def global_closure(self, gv):
        name = gv.name_hint
        clo = self.globals.get(name)
        if clo is None:
            if self.mod is None or name not in self.mod:
                where = "no module was given" if self.mod is None else "the module does not define it"
                raise EvaluationError(f"the program refers to the global @{name}, but {where}")
            func = self.mod[name]
            code = Code("@" + name, func)
            clo = InterpreterClosure(code, ())
            self.globals[name] = clo
            self.pending.append((code, func))
        return clo

    def compile_function(self, func, name, captures=(), ncaptures=None, tuple_fields=None):
        code = Code(name, func)
        _FunctionCompiler(self, code, func.params, captures, ncaptures,
                          tuple_fields).compile_body(func.body)
        return code

    def drain(self):
        while self.pending:
            code, func = self.pending.pop()
            _FunctionCompiler(self, code, func.params, ()).compile_body(func.body)


class _FunctionCompiler(ExprFunctor):
    """Compiles one function body into the blocks of `code`.

    `visit(e)` emits the code computing `e` into the current block and returns the slot holding
    its value. It does NOT memoize: a node shared by two branches must be computed on each path,
    and an effectful node (`!r`) shared at two places must run twice.
    """

    def __init__(self, program, code, params, captures, ncaptures=None, tuple_fields=None):
        """`captures`: the captured Vars, then (up to `ncaptures`) captured tuple fields that
        `tuple_fields` ({capture index: [capture indices of its fields]}) describes."""
        super().__init__()
        self.program = program
        self.code = code
        self.env = {}                    # id(Var) -> slot
        self.template = []               # initial frame contents
        self.atoms = {}                  # id(Constant/GlobalVar/...) -> slot holding its value
        self.keep = []                   # keeps nodes keyed by id alive while compiling
        self.tuple_fields = {}           # slot of a tuple built in this frame -> its field slots
        for p in params:
            self.env[id(p)] = self.new_slot()
        for v in captures:
            self.env[id(v)] = self.new_slot()
        ncaptures = len(captures) if ncaptures is None else ncaptures
        while len(self.template) < len(params) + ncaptures:
            self.new_slot()
        base = len(params)
        for i, fields in (tuple_fields or {}).items():
            self.tuple_fields[base + i] = [base + j for j in fields]
        code.nparams = len(params)
        code.ncaptures = ncaptures
        code.params = Parameters(code.name, params, _value_checker())
        self.block = code.entry = _Block(code)

    # ---- helpers -----------------------------------------------------------------------------
    def visit(self, expr):
        cls = expr.__class__
        if cls is Var:                      # the commonest operands, without dispatch
            slot = self.env.get(id(expr))
            return self.visit_Var(expr) if slot is None else slot
        if cls is Constant:
            slot = self.atoms.get(id(expr))
            return self.visit_Constant(expr) if slot is None else slot
        return self.dispatch(expr)

    def new_slot(self, value=None):
        self.template.append(value)
        return len(self.template) - 1

    def atom_slot(self, node, value):
        slot = self.atoms.get(id(node))
        if slot is None:
            slot = self.atoms[id(node)] = self.new_slot(value)
            self.keep.append(node)
        return slot

    def emit(self, step):
        self.block.steps.append(step)

    def new_block(self):
        return _Block(self.code)

    def end_block(self, kind, node, **fields):
        block = self.block
        block.kind = kind
        block.node = node
        for name, value in fields.items():
            setattr(block, name, value)
        if len(block.args) >= 2:
            block.gather = itemgetter(*block.args)

    def compile_body(self, body):
        self.compile_tail(body)
        code = self.code
        start = code.nparams + code.ncaptures
        code.rest = self.template[start:]
        code.nslots = len(self.template)
        _seal(code.entry)

    # ---- bindings ------------------------------------------------------------------------------
    def bind(self, var, value):
        if isinstance(value, Function):
            slot = self.env[id(var)] = self.new_slot()     # before compiling: it may recurse
            self.compile_closure(value, slot, "%" + var.name_hint)
        else:
            self.env[id(var)] = self.visit(value)
        self.keep.append(var)

    def compile_closure(self, func, dst, name="fn"):
        captures = self.program.free_vars(func)
        srcs = [self.visit_Var(v) for v in captures]
        # A captured tuple built in this frame also passes its fields, so that projections of it
        # inside the closure (the backpropagators of reverse AD read `%d.1`) cost nothing.
        inner_fields = {}
        i = 0
        while i < len(srcs) and len(srcs) <= len(captures) + _MAX_EXTRA_CAPTURES:
            fields = self.tuple_fields.get(srcs[i])
            if fields is not None and len(fields) <= _MAX_EXTRA_CAPTURES:
                inner_fields[i] = list(range(len(srcs), len(srcs) + len(fields)))
                srcs.extend(fields)
            i += 1
        code = self.program.compile_function(func, name, captures, len(srcs), inner_fields)
        self.emit(_closure_step(code, dst, srcs))

    # ---- tail position: a loop down let-chains, else-branches and last match clauses -----------
    def compile_tail(self, e):
        while True:
            if isinstance(e, Let):
                self.bind(e.var, e.value)
                e = e.body
            elif isinstance(e, If):
                cond = self.visit(e.cond)
                then_b, else_b = self.new_block(), self.new_block()
                self.end_block(_BRANCH, e, src=cond, target=then_b, other=else_b)
                self.block = then_b
                self.compile_tail(e.true_branch)
                self.block = else_b
                e = e.false_branch
            elif isinstance(e, Match) and e.clauses:
                heads = self.compile_match_head(e)
                for clause, (block, bindings) in list(zip(e.clauses, heads))[:-1]:
                    self.block = block
                    self.env.update(bindings)
                    self.compile_tail(clause.rhs)
                self.block, bindings = heads[-1]
                self.env.update(bindings)
                e = e.clauses[-1].rhs
            elif isinstance(e, Call) and not isinstance(e.op, (Op, Constructor)):
                fn = self.visit(e.op)
                args = tuple(self.visit(a) for a in e.args)
                self.end_block(_TAILCALL, e, src=fn, args=args)
                return
            else:
                self.end_block(_RETURN, e, src=self.visit(e))
                return

    def compile_match_head(self, e):
        """MATCH on the data; returns one (block, bindings) per clause.

        The same Var may be bound by the patterns of two clauses; each clause body is compiled
        with its own pattern's slots (`self.env.update(bindings)` before it).
        """
        data = self.visit(e.data)
        clauses, heads = [], []
        for clause in e.clauses:
            bindings = {}

            def bind(var, bindings=bindings):
                slot = bindings[id(var)] = self.new_slot()
                self.keep.append(var)
                return slot
            matcher = compile_pattern(clause.lhs, bind)
            block = self.new_block()
            clauses.append((matcher, block))
            heads.append((block, bindings))
        self.end_block(_MATCH, e, src=data, clauses=tuple(clauses))
        return heads

    # ---- value position ------------------------------------------------------------------------
    def visit_Var(self, e):
        slot = self.env.get(id(e))
        if slot is None:
            raise EvaluationError(f"free variable %{e.name_hint} in {self.code.name}: "
                                  "evaluate needs a closed program")
        return slot

    def visit_GlobalVar(self, e):
        return self.atom_slot(e, self.program.global_closure(e))

    def visit_Constant(self, e):
        return self.atom_slot(e, e.data)

    def visit_Constructor(self, e):
        # as the type checker has it: a bare nullary constructor is a value (`Nil`), any other
        # constructor used as a value is a function
        if not e.inputs:
            return self.atom_slot(e, ConstructorValue(e, []))
        return self.atom_slot(e, _ConstructorClosure(e))

    def visit_Tuple(self, e):
        srcs = [self.visit(f) for f in e.fields]
        if not srcs:
            return self.atom_slot(e, ())
        dst = self.new_slot()
        self.emit(_tuple_step(e, dst, srcs))
        self.tuple_fields[dst] = srcs
        return dst

    def visit_TupleGetItem(self, e):
        src = self.visit(e.tuple_value)
        fields = self.tuple_fields.get(src)
        if fields is not None and 0 <= e.index < len(fields):
            # a projection of a tuple built in this frame is its field's slot: slots are written
            # once per frame and the tuple's step dominates every use of its variable
            return fields[e.index]
        dst = self.new_slot()
        self.emit(_getitem_step(e, dst, src, e.index))
        return dst

    def visit_Function(self, e):
        dst = self.new_slot()
        self.compile_closure(e, dst)
        return dst

    def visit_Call(self, e):
        op = e.op
        if isinstance(op, Op):
            srcs = [self.visit(a) for a in e.args]
            dst = self.new_slot()
            self.emit(_op_step(e, dst, srcs))
            return dst
        if isinstance(op, Constructor):
            if len(e.args) != len(op.inputs):
                raise EvaluationError(f"constructor {op.name_hint} takes {len(op.inputs)} field(s), "
                                      f"got {len(e.args)} in {node_text(e)}")
            srcs = [self.visit(a) for a in e.args]
            dst = self.new_slot()
            self.emit(_constructor_step(op, dst, srcs))
            return dst
        fn = self.visit(op)
        args = tuple(self.visit(a) for a in e.args)
        dst = self.new_slot()
        after = self.new_block()
        self.end_block(_CALL, e, src=fn, args=args, dst=dst, target=after)
        self.block = after
        return dst

    def visit_Let(self, e):
        while isinstance(e, Let):
            self.bind(e.var, e.value)
            e = e.body
        return self.visit(e)

    def visit_If(self, e):
        cond = self.visit(e.cond)
        dst = self.new_slot()
        then_b, else_b, join = self.new_block(), self.new_block(), self.new_block()
        self.end_block(_BRANCH, e, src=cond, target=then_b, other=else_b)
        for block, branch in ((then_b, e.true_branch), (else_b, e.false_branch)):
            self.block = block
            self.emit(_move_step(dst, self.visit(branch)))
            self.end_block(_JUMP, e, target=join)
        self.block = join
        return dst

    def visit_Match(self, e):
        dst = self.new_slot()
        join = self.new_block()
        heads = self.compile_match_head(e)
        for clause, (block, bindings) in zip(e.clauses, heads):
            self.block = block
            self.env.update(bindings)
            self.emit(_move_step(dst, self.visit(clause.rhs)))
            self.end_block(_JUMP, e, target=join)
        self.block = join
        return dst

    def visit_RefCreate(self, e):
        v = e.value
        if (isinstance(v, Call) and isinstance(v.op, Op) and v.op.name == "zeros" and not v.args
                and numpy_fast_impl(v.op, v.attrs) is not None):
            # `ref(zeros(..))` (reverse AD's fresh gradient references): the shared read-only
            # zero tensor, so that the first accumulation into it can be a plain write
            dst = self.new_slot()
            self.emit(_ref_create_step(dst, self.atom_slot(
                e, _shared_zeros(v.attrs["shape"], v.attrs["dtype"]))))
            return dst
        src = self.visit(e.value)
        dst = self.new_slot()
        self.emit(_ref_create_step(dst, src))
        return dst

    def visit_RefRead(self, e):
        src = self.visit(e.ref)
        dst = self.new_slot()
        self.emit(_ref_read_step(e, dst, src))
        return dst

    def visit_RefWrite(self, e):
        step = self.accumulate_step(e)
        if step is not None:
            return step
        ref = self.visit(e.ref)
        src = self.visit(e.value)
        dst = self.new_slot()
        self.emit(_ref_write_step(e, dst, ref, src))
        return dst

    def accumulate_step(self, e):
        """`r := !r + g` (reverse AD's gradient accumulation) with `r` and `g` variables or
        constants: one step instead of a read, an add and a write. None for anything else."""
        v = e.value
        step = self.take_accumulate_step(e)
        if step is not None:
            return step
        if not (isinstance(v, Call) and isinstance(v.op, Op) and v.op.name == "add"
                and len(v.args) == 2 and isinstance(v.args[0], RefRead)
                and isinstance(v.args[1], (Var, Constant))):
            return None
        ref_expr = e.ref
        if not (isinstance(ref_expr, Var) and v.args[0].ref is ref_expr):
            return None
        t = getattr(v, "_checked_type", None)
        add = numpy_fast_impl(v.op, v.attrs, t if isinstance(t, TensorType) else None)
        if add is None:
            return None
        ref = self.visit(ref_expr)
        src = self.visit(v.args[1])
        dst = self.new_slot()
        tg = static_type(v.args[1])
        overwrite = (isinstance(t, TensorType) and isinstance(tg, TensorType)
                     and tg.shape == t.shape and tg.dtype == t.dtype)
        self.emit(_accumulate_step(e, v, dst, ref, src, add,
                                   isinstance(t, TensorType) and len(t.shape) >= 1, overwrite))
        return dst

    def take_accumulate_step(self, e):
        """`r := !r + take_backward(g, idx, like)` (reverse AD's gradient of take, left inline
        by the transform) with atoms as arguments and one float type throughout: one in-place
        scatter-add step. None for anything else."""
        v = e.value
        if not (isinstance(v, Call) and isinstance(v.op, Op) and v.op.name == "add"
                and len(v.args) == 2 and isinstance(v.args[0], RefRead)
                and isinstance(e.ref, Var) and v.args[0].ref is e.ref):
            return None
        tb = v.args[1]
        if not (isinstance(tb, Call) and isinstance(tb.op, Op) and tb.op.name == "take_backward"
                and all(isinstance(a, (Var, Constant)) for a in tb.args)):
            return None
        t, tt = getattr(v, "_checked_type", None), getattr(tb, "_checked_type", None)
        tl, tg = static_type(tb.args[2]), static_type(tb.args[0])
        if not (isinstance(t, TensorType) and t == tt and t == tl and t.dtype.startswith("float")
                and isinstance(tg, TensorType) and tg.dtype == t.dtype):
            return None
        axis = tb.attrs["axis"]
        ref = self.visit(e.ref)
        gs, ids = self.visit(tb.args[0]), self.visit(tb.args[1])
        dst = self.new_slot()
        self.emit(_take_accumulate_step(e, dst, ref, gs, ids,
                                        None if axis is None else axis % len(t.shape)))
        return dst

    def visit_default(self, node):
        raise EvaluationError(f"the interpreter cannot evaluate a {type(node).__name__} node")


def _seal(entry):
    """Turn every reachable block's step list into a tuple (faster to iterate)."""
    seen, work = set(), [entry]
    while work:
        b = work.pop()
        if b is None or id(b) in seen:
            continue
        seen.add(id(b))
        b.steps = tuple(b.steps)
        work.append(b.target)
        work.append(b.other)
        work.extend(block for _, block in b.clauses)


# ---- compile cache ---------------------------------------------------------------------------

# Weak caches: a cached value must not refer to its key, or the key would never die. Code holds
# its top-level Function through a weakref, and a module's entry holds its main closure (whose
# code refers to the module's functions, never to the Module).
_FUNCTION_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()   # Function -> Code
_MODULE_CACHE: "weakref.WeakKeyDictionary" = weakref.WeakKeyDictionary()  # Module -> (snapshot, main)

def _compile_quietly(fn, *args):
    """run_deep(fn) with the cyclic garbage collector paused.

    Compiling allocates one closure per node and frees almost nothing, which makes CPython's
    collector rescan the whole (large) program repeatedly: about half the compile time of a
    10^5-node program. Nothing cyclic becomes garbage while compiling.
    """
    with no_gc():
        return run_deep(fn, *args)


def _compile_module(mod):
    """The closure of a Module's @main, compiled again when the module's functions change."""
    snapshot = tuple((gv.name_hint, f) for gv, f in mod.functions.items())
    state = _MODULE_CACHE.get(mod)
    if state is not None and len(state[0]) == len(snapshot) and all(
            a[0] == b[0] and a[1] is b[1] for a, b in zip(state[0], snapshot)):
        return state[1]
    mod, _ = checked(mod)
    program = _Program(mod)
    main = _compile_quietly(_compile_program, program)
    _MODULE_CACHE[mod] = (snapshot, main)
    return main


def _compile_program(program):
    main = program.global_closure(program.mod.get_global_var("main"))
    program.drain()
    return main


def _compile_closed(func, mod=None, cache=True):
    """The Code of a closed Function (globals resolved in `mod`), cached per Function."""
    cache = cache and mod is None
    if cache:
        code = _FUNCTION_CACHE.get(func)
        if code is not None:
            return code
    mod, func = checked(func, mod)
    program = _Program(mod)

    def build():
        code = program.compile_function(func, "fn")
        program.drain()
        return code
    code = _compile_quietly(build)
    if cache:
        code.func = weakref.ref(func)
        _FUNCTION_CACHE[func] = code
    return code


# ---- entry point -----------------------------------------------------------------------------

def evaluate(f_or_mod, *args, mod=None):
    """Run a program on the numpy interpreter and return its value.

    - a Module: runs @main on `args`;
    - a Function: calls it on `args` (globals it names are looked up in `mod=`);
    - any other closed expression: its value (if that is a function and args are given, it is
      called on them).

    >>> x = rl.var("x", shape=(2,), dtype="float64")
    >>> rl.evaluate(rl.Function([x], x * x), [1.0, 2.0])
    array([1., 4.])
    """
    if isinstance(f_or_mod, Module):
        return _compile_module(f_or_mod)(*args)
    if isinstance(f_or_mod, Function):
        return InterpreterClosure(_compile_closed(f_or_mod, mod), ())(*args)
    if isinstance(f_or_mod, Expr):
        # not cached: the compiled code refers to the expression's nodes, which would keep a
        # weakly cached expression alive forever
        code = _compile_closed(Function([], f_or_mod), mod, cache=False)
        value = _execute(code, list(code.rest))
        if args:
            if not callable(value):
                raise EvaluationError(f"evaluate was given {len(args)} argument(s) but the "
                                      f"expression evaluates to {value_type_text(value)}, "
                                      "not a function")
            return value(*args)
        return value
    raise RelayishError(f"evaluate takes a Function, Module or expression, "
                        f"got {type(f_or_mod).__name__}")
