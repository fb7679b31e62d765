"""The JAX backend: lowering relayish to one XLA computation by abstract evaluation.

    run = rl.compile(f_or_mod, backend="jax", device="cpu")
    run(*args)            # jax arrays out; traced once per argument structure

Scheme. A relayish program is evaluated once, under `jax.jit`, by a tree-walking evaluator whose
tensors are jax traced values (or numpy arrays where they are known at trace time: constants and
everything computed from constants only). Every other value is a Python object at trace time:

    Tensor        -> jax tracer | numpy array (a trace-time constant)
    (a, b)        -> Python tuple
    Cons(h, t)    -> _JAdt (a ConstructorValue) of trace-time values
    fn (...) {..} -> _JClosure(function, captured free variables)
    ref(v)        -> _JRef (a mutable Python cell)
    join          -> _JUnion(index tracer, alternatives)  (see below)

so the closures and references that reverse AD introduces vanish from the XLA program: only the
tensor operations they perform are recorded. An `if` whose condition is a trace-time constant
(numpy) takes its branch at trace time; recursion over trace-time structure (Nat, lists, trees)
unrolls.

Joins. An `if` on a traced condition (and a `match` on a joined ADT value, and a call of a joined
closure) becomes `lax.switch`. Each alternative is first traced on its own (`jax.make_jaxpr`, the
*probe*), which gives its result and the references it wrote as trace-time objects. The joiner
walks the alternatives' results side by side: equal objects stay, tensors become outputs of the
switch, tuples / same-constructor ADT values / closures of the same function join field by field,
and anything else (different constructors, different functions, different references) becomes a
tagged union: an int32 index output plus every alternative's own tensors (zeros where another
alternative ran). Then `lax.switch` runs each probe's jaxpr and pads it to the joined outputs. A
reference written in any alternative gets the joined content afterwards. Tail calls leave an
alternative as a pending call instead of being traced inside it (joined like any value), so a
backpropagator chain after an `if` is traced once, not once per branch.

Recursion whose depth depends on a traced value would nest joins forever: past a bound on the
activations of one function inside traced joins this raises a CompileError naming the function.
Joins nested in the program text (a deep if-else nest) are not bounded: past MAX_SWITCH_NESTING
they are traced inline and selected instead of nesting XLA conditionals.
"""
from __future__ import annotations

import itertools
import operator
import threading
import time

import numpy as np

from relayish.errors import CompileError, EvaluationError, RelayishError
from relayish.ir.expr import (Call, Clause, Constant, Constructor, Expr, Function, GlobalVar, If,
                              Let, Match, PatternConstructor, PatternTuple, PatternVar,
                              PatternWildcard, RefCreate, RefRead, RefWrite, Tuple, TupleGetItem,
                              Var, _short_text)
from relayish.ir.module import Module
from relayish.ir.op import Op
from relayish.ir.types import (FuncType, RefType, TensorType, TupleType, Type, TypeCall, TypeVar,
                               substitute, walk_type)
from relayish.ir.analysis import FreeVars
from relayish.ir.visitor import ExprVisitor, run_deep
from relayish.backend.values import Closure, ConstructorValue, RefValue
from relayish.backend.jax_zeros import ZeroTracker

# Traced joins nested deeper than this are not lax.switch but every alternative inlined and a
# select: XLA's compiler recurses once per nested conditional, slowly and then into a crash
# (measured with nested ifs: 100 nested switches compile in 4 s, 150 in 8 s, 200 in 24 s, 300
# segfault in the MLIR-to-HLO lowering). Nesting in the program text is not recursion, so it
# is bounded only by TRACE_LIMITS (max_depth), like any other program.
MAX_SWITCH_NESTING = 16
# Activations of one function inside traced joins beyond which recursion is taken to depend on a
# traced value (it would nest joins forever).
MAX_ACTIVATIONS_UNDER_JOIN = 512

# Bounds on one trace and on the program handed to XLA (notes/jax-backend.md has the
# measurements). Override per call with rl.compile(..., limits={"max_depth": ...}) or for the
# process by assigning to this dict.
#   max_depth:   the longest chain of dependent operations in the traced program. XLA's compiler
#                crashes the process (segfault) on deep chains: a chain of 40,000 (and 28,000)
#                dependent elementwise ops did, 20,000 compiled (10 s); half of that is the bound.
#   max_ops:     tensor operations recorded in one trace (unrolled recursion over a long list, a
#                non-terminating recursion): bounds the trace's memory.
#   max_seconds: wall time of one trace (a recursion that records nothing but never ends).
TRACE_LIMITS = {"max_depth": 10_000, "max_ops": 200_000, "max_seconds": 300.0}


def _jax():
    import jax
    import jax.extend.core  # noqa: F401  jaxpr_as_fun
    return jax


# ---- trace-time values -----------------------------------------------------------------------

_serials = itertools.count()
_serial_lock = threading.Lock()


def _next_serial():
    with _serial_lock:
        return next(_serials)


class _JClosure:
    """A function value at trace time: the Function and the values of its free variables."""
    __slots__ = ("func", "env", "name", "serial")

    def __init__(self, func, env, name, serial):
        self.func, self.env, self.name, self.serial = func, env, name, serial


class _JPrimFn:
    """An Op or a Constructor used as a value (`map(Some, l)`)."""
    __slots__ = ("target", "serial")

    def __init__(self, target):
        self.target, self.serial = target, -1


class _JRef:
    __slots__ = ("value", "serial")

    def __init__(self, value, serial):
        self.value, self.serial = value, serial


class _JAdt(ConstructorValue):
    """An ADT value at trace time; `serial` tells values built before a join from new ones."""

    def __init__(self, constructor, fields, serial):
        super().__init__(constructor, fields)
        self.serial = serial


class _JUnion:
    """One of `alts`, chosen by the traced int32 `index`: the join of values of different shapes.

    `start` is the serial at which the join that made it began: calling a joined closure in tail
    position runs each alternative until it reaches a function older than that, so chains that
    were split by the join meet again.
    """
    __slots__ = ("index", "alts", "start", "serial")

    def __init__(self, index, alts, start, serial):
        self.index, self.alts, self.start, self.serial = index, alts, start, serial


class _TailCall:
    """A call in tail position, returned to the caller's trampoline instead of being made."""
    __slots__ = ("callee", "args")

    def __init__(self, callee, args):
        self.callee, self.args = callee, args


def _is_tensor(v):
    return isinstance(v, np.ndarray) or _is_jax_value(v)


def _is_jax_value(v):
    jax = _jax()
    return isinstance(v, (jax.Array, jax.core.Tracer))


_NDARRAY = np.ndarray
_DTYPE_OF = operator.attrgetter("dtype")
_ARRAY_CLASS = []


def _jax_array_class():
    if not _ARRAY_CLASS:
        _ARRAY_CLASS.append(type(_jax().numpy.zeros(())))
    return _ARRAY_CLASS[0]


def _is_traced(v):
    return isinstance(v, _jax().core.Tracer)


def _serial_of(v):
    return getattr(v, "serial", -1)


def _describe(v):
    if isinstance(v, _JClosure):
        return f"function {_closure_name(v)}"
    if isinstance(v, ConstructorValue):
        return f"constructor {v.constructor.name_hint}"
    if isinstance(v, _JRef):
        return "reference"
    if isinstance(v, tuple):
        return f"tuple of {len(v)}"
    if _is_tensor(v):
        return f"tensor {tuple(v.shape)} {np.dtype(v.dtype).name}"
    return type(v).__name__


# ---- the evaluator ---------------------------------------------------------------------------

class _Frame:
    """The references written inside one alternative of a join, with their earlier contents."""
    __slots__ = ("start", "log", "reads", "finals")

    def __init__(self, start, track_reads=False):
        self.start, self.log = start, {}
        self.reads = set() if track_reads else None
        self.finals = None


class _Unsplit(Exception):
    """Raised by the pattern matcher when it must look inside a joined (union) value."""

    def __init__(self, union):
        super().__init__()
        self.union = union


def _captured(func, cache):
    """The free variables of `func` (what a closure of it captures), from the compiled program's
    FreeVars table: one walk per outermost function (a free_vars walk per Function literal was
    quadratic in the nesting depth of closures: 27.7 s for 3,000 nested fn literals)."""
    return cache(func)


def _closure_name(closure):
    if closure.name is None:
        closure.name = _short_text(closure.func, 60)
    return closure.name


class TraceEvaluator:
    """Evaluates relayish expressions over trace-time values (see the module docstring).

    `eval(expr, env, tail)` returns a value, or a _TailCall when `tail` and the expression ends
    in a call; `call(callee, args)` runs the trampoline to a value.
    """

    def __init__(self, mod, batching=True, captured=None, limits=None):
        self.mod = mod
        self.batching = batching
        self.captured = FreeVars() if captured is None else captured   # free variables table
        self.frames: list[_Frame] = []       # one per alternative being probed
        self.join_depth = 0
        self.active: dict = {}               # Function -> its activations inside joins
        self.names: dict = {}                # Function -> a closure of it (for its name)
        self.globals: dict[str, _JClosure] = {}
        self._dispatch = {}
        self._batch_plans: dict = {}
        self.limits = TRACE_LIMITS if limits is None else limits
        self.calls: dict = {}                # Function -> its activations in this trace
        self.ops = 0                         # traced tensor operations recorded
        self.started = time.monotonic()
        self.zeros = ZeroTracker()           # zero adjoints, folded before XLA (jax_zeros.py)

    # ---- entry ------------------------------------------------------------------------------
    def eval(self, expr, env, tail=False):
        method = self._dispatch.get(type(expr))
        if method is None:
            method = getattr(self, "visit_" + type(expr).__name__, None)
            if method is None:
                raise CompileError(f"the jax backend cannot evaluate {type(expr).__name__} nodes: "
                                   f"{_short_text(expr)}")
            self._dispatch[type(expr)] = method
        return method(expr, env, tail)

    def call(self, callee, args, stop=None):
        return self.finish(_TailCall(callee, args), stop)

    def finish(self, result, stop=None):
        """Run pending tail calls; with `stop`, leave one whose callee is older than `stop`."""
        while isinstance(result, _TailCall):
            if stop is not None and _serial_of(result.callee) < stop:
                return result
            result = self.enter(result.callee, result.args)
        return result

    def enter(self, callee, args):
        """One function body, evaluated in tail position (may return a _TailCall)."""
        if isinstance(callee, _JClosure):
            func = callee.func
            if len(args) != len(func.params):
                raise CompileError(f"{_closure_name(callee)} takes {len(func.params)} argument(s), got "
                                   f"{len(args)}")
            env = dict(callee.env)
            for p, a in zip(func.params, args):
                env[p] = a
            calls = self.calls.get(func, 0) + 1
            self.calls[func] = calls
            if calls == 1:
                self.names.setdefault(func, callee)
            elif not calls & 255:
                self.check_budget()
            if not self.join_depth:
                return self.eval(func.body, env, True)
            count = self.active.get(func, 0) + 1
            if count > MAX_ACTIVATIONS_UNDER_JOIN:
                raise self._unbounded(_closure_name(callee))
            if count == 1:
                self.names[func] = callee
            self.active[func] = count
            try:
                return self.eval(func.body, env, True)
            finally:
                self.active[func] -= 1
        if isinstance(callee, _JUnion):
            return self.switch(callee.index,
                               [lambda stop, alt=alt: self.finish(self.enter(alt, args), stop)
                                for alt in callee.alts], tail_stop=callee.start)
        if isinstance(callee, _JPrimFn):
            target = callee.target
            if isinstance(target, Constructor):
                return _JAdt(target, list(args), _next_serial())
            return self.apply_op(target, list(args), dict(target.attr_defaults), target)
        raise CompileError(f"cannot call a {_describe(callee)}")

    def unrolled(self):
        """The name of the function with the most activations in this trace (or None)."""
        if not self.calls:
            return None
        func = max(self.calls, key=self.calls.get)
        return f"{_closure_name(self.names[func])} ({self.calls[func]} calls unrolled)"

    def check_budget(self):
        """A CompileError once the trace records too many operations or runs too long."""
        limits = self.limits
        elapsed = time.monotonic() - self.started
        if self.ops <= limits["max_ops"] and elapsed <= limits["max_seconds"]:
            return
        what = (f"recorded more than {limits['max_ops']} tensor operations"
                if self.ops > limits["max_ops"] else
                f"ran for more than {limits['max_seconds']:g} s")
        raise CompileError(
            f"tracing for XLA {what} while unrolling {self.unrolled() or 'the program'}: "
            "recursion over a long list (or one that never ends) unrolls into one huge XLA "
            "program. Run it with rl.evaluate or rl.compile(..., backend=\"interpreter\"), or "
            "raise the bound: rl.compile(..., limits={\"max_ops\": ..., \"max_seconds\": ...})")

    def _unbounded(self, name=None):
        if name is None:
            if self.active:
                func = max(self.active, key=self.active.get)
                name = _closure_name(self.names[func])
            else:
                name = "the program"
        return CompileError(
            f"recursion in {name} does not terminate at trace time: how deep it goes depends on a "
            f"traced value (a condition on tensor data), so it cannot become one XLA program. Run "
            f"it with rl.evaluate (the interpreter), or make the bound static (recurse over a Nat, "
            f"a list or a tree argument instead of a tensor condition)")

    # ---- nodes ------------------------------------------------------------------------------
    def visit_Var(self, e, env, tail):
        try:
            return env[e]
        except KeyError:
            raise CompileError(f"unbound variable %{e.name_hint}") from None

    def visit_GlobalVar(self, e, env, tail):
        name = e.name_hint
        closure = self.globals.get(name)
        if closure is None:
            if self.mod is None or name not in self.mod:
                raise CompileError(f"unknown global function @{name}: compile the Module that "
                                   f"defines it")
            closure = _JClosure(self.mod[name], {}, "@" + name, -1)
            self.globals[name] = closure
        return closure

    def visit_Constant(self, e, env, tail):
        return e.data

    def visit_Tuple(self, e, env, tail):
        if len(e.fields) >= 2:
            batched = self._batched_calls(e, env)
            if batched is not None:
                return batched
        return tuple(self.eval(f, env) for f in e.fields)

    def _batched_calls(self, e, env):
        if not self.batching:
            return None
        hit = self._batch_plans.get(id(e))
        if hit is None or hit[0] is not e:
            hit = (e, _batch_plan(e))
            self._batch_plans[id(e)] = hit
        plan = hit[1]
        if plan is None:
            return None
        callee_expr, k, fixed, varying = plan
        callee = self.eval(callee_expr, env)
        if not isinstance(callee, _JClosure):
            return None
        fixed_values = {pos: self.eval(x, env) for pos, x in fixed.items()}
        jax = _jax()
        n_args = len(fixed) + len(varying)
        positions = sorted(varying)
        stacked = [varying[pos] for pos in positions]

        def batched(frame, carried):
            def one(*cs):
                args = [None] * n_args
                for pos, value in fixed_values.items():
                    args[pos] = value
                for pos, c in zip(positions, cs):
                    args[pos] = c
                self.frames.append(frame)
                try:
                    result = self.call(callee, args)
                finally:
                    self.frames.pop()
                if k is not None:
                    result = result[k] if isinstance(result, tuple) else None
                finals = tuple(ref.value for ref in carried)
                if not _is_tensor_tree(result) or not _is_tensor_tree(finals):
                    raise _NotBatchable()
                return result, finals
            try:
                return jax.vmap(one)(*stacked)
            except Exception:  # noqa: BLE001
                return None
            finally:
                frame.finals = {key: ref.value for key, (ref, _) in frame.log.items()}
                for ref, old in frame.log.values():
                    ref.value = old

        # first pass: which references do the calls write, and which do they read first?
        frame = _Frame(_next_serial(), track_reads=True)
        if batched(frame, ()) is None:
            return None
        read_first, carried = [], []
        for key, (ref, old) in frame.log.items():
            if key not in frame.reads:
                carried.append(ref)            # written before read: no call sees another's
            elif not _same_state(frame.finals[key], old):
                read_first.append(ref)         # read, then left changed (an accumulator)
            # else: read, then restored (zeroed after use): every call starts the same
        if read_first and not self._independent_of(read_first, carried, batched):
            return None
        outcome = batched(_Frame(_next_serial()), carried)
        if outcome is None:
            return None
        out, finals = outcome
        n = len(e.fields)
        for ref, final in zip(carried, finals):   # as the last call leaves them
            self.write(ref, jax.tree_util.tree_map(lambda a: a[n - 1], final))
        for ref in read_first:                    # accumulated over the calls: not computed
            self.write(ref, _POISON)
        return tuple(jax.tree_util.tree_map(lambda a, i=i: a[i], out) for i in range(n))

    def _independent_of(self, read_first, carried, batched):
        """Do the batched results and the carried references' final contents not depend on the
        contents of `read_first` (references each call reads, then writes, e.g. an accumulator
        `r := !r + g`)? Checked on the jaxpr with those contents as inputs."""
        jax = _jax()
        inits = [ref.value for ref in read_first]
        if not all(_is_tensor_tree(v) for v in inits):
            return False

        def probe(*leaves):
            flat_inits = jax.tree_util.tree_unflatten(treedef, leaves)
            saved = [ref.value for ref in read_first]
            for ref, v in zip(read_first, flat_inits):
                ref.value = v
            try:
                outcome = batched(_Frame(_next_serial()), carried)
            finally:
                for ref, v in zip(read_first, saved):
                    ref.value = v
            if outcome is None:
                raise _NotBatchable()
            return outcome

        leaves, treedef = jax.tree_util.tree_flatten(list(inits))
        try:
            closed = jax.make_jaxpr(probe)(*[jax.numpy.asarray(v) for v in leaves])
        except Exception:  # noqa: BLE001 - not batchable
            return False
        return not _outputs_depend_on(closed.jaxpr, closed.jaxpr.invars)

    def visit_TupleGetItem(self, e, env, tail):
        value = self.eval(e.tuple_value, env)
        if not isinstance(value, tuple) or not 0 <= e.index < len(value):
            raise CompileError(f"cannot project field {e.index} of a {_describe(value)} in "
                               f"{_short_text(e)}")
        return value[e.index]

    def visit_Function(self, e, env, tail, name=None):
        captured = {}
        for v in _captured(e, self.captured):
            try:
                captured[v] = env[v]
            except KeyError:
                raise CompileError(f"unbound variable %{v.name_hint} in {_short_text(e)}") from None
        return _JClosure(e, captured, name, _next_serial())   # name: None = its text, lazily

    def visit_Op(self, e, env, tail):
        return _JPrimFn(e)

    def visit_Constructor(self, e, env, tail):
        if not e.inputs:
            return _JAdt(e, [], -1)
        return _JPrimFn(e)

    def visit_Call(self, e, env, tail):
        op = e.op
        if isinstance(op, Op):
            return self.apply_op(op, [self.eval(a, env) for a in e.args], e.attrs, e)
        if isinstance(op, Constructor):
            return _JAdt(op, [self.eval(a, env) for a in e.args], _next_serial())
        callee = self.eval(op, env)
        args = [self.eval(a, env) for a in e.args]
        if tail:
            return _TailCall(callee, args)
        return self.call(callee, args)

    def apply_op(self, op, args, attrs, where):
        if op.impl is None:
            raise CompileError(f"operator '{op.name}' has no implementation")
        concrete = all(_all_numpy(a) for a in args)
        if concrete:
            xp = np
        else:
            import jax.numpy as xp
        if not concrete:
            folded = self.zeros.fold(op.name, args)
            if folded is not None:
                return folded
            self.ops += 1
            if not self.ops & 1023:
                self.check_budget()
        try:
            with np.errstate(all="ignore"):   # IEEE nan/inf without warnings, as XLA computes
                out = op.impl(xp, *args, **attrs)
        except RelayishError:
            raise
        except Exception as exc:  # noqa: BLE001 - an impl fault names the call
            kind = EvaluationError if concrete else CompileError
            raise kind(f"operator '{op.name}' failed in {_short_text(where, 200)}: "
                       f"{type(exc).__name__}: {exc}") from None
        if concrete:
            if not isinstance(out, np.ndarray):
                out = np.asarray(out)
            self.zeros.note(op.name, args, out)
        return out

    def visit_Let(self, e, env, tail):
        while isinstance(e, Let):           # a loop down the chain, never recursion
            value = e.value
            if isinstance(value, Function):
                if any(v is e.var for v in _captured(value, self.captured)):    # let rec
                    closure = _JClosure(value, {}, "%" + e.var.name_hint, _next_serial())
                    env[e.var] = closure
                    for v in _captured(value, self.captured):
                        closure.env[v] = env[v] if v in env else None
                        if v not in env:
                            raise CompileError(f"unbound variable %{v.name_hint} in "
                                               f"{_short_text(value)}")
                    e = e.body
                    continue
                env[e.var] = self.visit_Function(value, env, False, name="%" + e.var.name_hint)
            else:
                env[e.var] = self.eval(value, env)
            e = e.body
        return self.eval(e, env, tail)

    def visit_If(self, e, env, tail):
        cond = self.eval(e.cond, env)
        if not _is_traced(cond):
            if not _is_tensor(cond) or np.shape(cond) != ():
                raise CompileError(f"the condition of an if must be a bool scalar, got "
                                   f"{_describe(cond)} in {_short_text(e)}")
            return self.eval(e.true_branch if bool(cond) else e.false_branch, env, tail)
        import jax.numpy as jnp
        index = jnp.asarray(cond).astype(jnp.int32)
        if tail:
            stop = self.serial_now()
            branches = [lambda s, b=b: self.finish(self.eval(b, env, True), s)
                        for b in (e.false_branch, e.true_branch)]
            return self.switch(index, branches, tail_stop=stop)
        branches = [lambda s, b=b: self.eval(b, env) for b in (e.false_branch, e.true_branch)]
        return self.switch(index, branches)

    def visit_Match(self, e, env, tail, subst=None):
        data = self.eval(e.data, env)
        return self._match(e, data, env, tail, {} if subst is None else subst)

    def _match(self, e, data, env, tail, subst):
        for clause in e.clauses:
            bound = {}
            try:
                ok = self._bind(clause.lhs, data, bound, subst)
            except _Unsplit as split:
                u = split.union
                if tail:
                    stop = self.serial_now()
                    alts = [lambda s, a=a: self.finish(
                        self._match(e, data, env, True, {**subst, id(u): a}), s) for a in u.alts]
                    return self.switch(u.index, alts, tail_stop=stop)
                alts = [lambda s, a=a: self._match(e, data, env, False, {**subst, id(u): a})
                        for a in u.alts]
                return self.switch(u.index, alts)
            if ok:
                env.update(bound)
                return self.eval(clause.rhs, env, tail)
        text = _short_text(e, 200)
        if self.join_depth:
            raise CompileError(f"no clause of {text} matches a value that a traced condition "
                               f"may produce ({_describe(data)}); the jax backend cannot report "
                               f"this at run time: use rl.evaluate")
        raise EvaluationError(f"no clause of {text} matches the value {_describe(data)}")

    def _bind(self, p, v, out, subst):
        if isinstance(p, PatternWildcard):
            return True
        if isinstance(p, PatternVar):
            out[p.var] = v
            return True
        if isinstance(v, _JUnion):
            if id(v) not in subst:
                raise _Unsplit(v)
            v = subst[id(v)]
        if isinstance(p, PatternTuple):
            if not isinstance(v, tuple) or len(v) != len(p.patterns):
                raise CompileError(f"tuple pattern against a {_describe(v)}")
            return all(self._bind(sp, sv, out, subst) for sp, sv in zip(p.patterns, v))
        if isinstance(p, PatternConstructor):
            if not isinstance(v, ConstructorValue):
                raise CompileError(f"constructor pattern {p.constructor.name_hint} against a "
                                   f"{_describe(v)}")
            if v.constructor is not p.constructor:
                return False
            return all(self._bind(sp, sv, out, subst) for sp, sv in zip(p.patterns, v.fields))
        raise CompileError(f"unknown pattern {type(p).__name__}")

    def visit_RefCreate(self, e, env, tail):
        return _JRef(self.zeros.stored(self.eval(e.value, env)), _next_serial())

    def visit_RefRead(self, e, env, tail):
        return self.read(self.eval(e.ref, env))

    def visit_RefWrite(self, e, env, tail):
        ref = self.eval(e.ref, env)
        self.write(ref, self.zeros.stored(self.eval(e.value, env)))
        return ()

    def read(self, ref):
        if isinstance(ref, _JRef):
            for frame in self.frames:        # batching frames note reads, even inside joins
                if frame.reads is not None and ref.serial < frame.start and \
                        id(ref) not in frame.log:
                    frame.reads.add(id(ref))
            value = ref.value
            if value is _POISON:
                raise _Restart()
            return value
        if isinstance(ref, _JUnion):
            contents = _tensor_contents(ref)
            if contents is not None:             # tensors only: a select, no switch needed
                for alt in ref.alts:
                    self.read(alt)               # (notes the reads for batching)
                return _select_tree(ref.index, contents)
            return self.switch(ref.index, [lambda s, a=a: self.read(a) for a in ref.alts])
        raise CompileError(f"cannot read a {_describe(ref)} as a reference")

    def write(self, ref, value):
        if isinstance(ref, _JRef):
            if self.frames:
                frame = self.frames[-1]
                if ref.serial < frame.start and id(ref) not in frame.log:
                    frame.log[id(ref)] = (ref, ref.value)
            ref.value = value
            return
        if isinstance(ref, _JUnion):
            contents = _tensor_contents(ref)
            if contents is not None and _same_tree_type(value, contents[0]):
                import jax.numpy as jnp
                for i, alt in enumerate(ref.alts):   # the chosen one gets value, others keep theirs
                    chosen = (ref.index == i).astype(jnp.int32)
                    self.write(alt, _select_tree(chosen, [alt.value, value]))
                return
            self.switch(ref.index, [lambda s, a=a: self.write(a, value) or () for a in ref.alts])
            return
        raise CompileError(f"cannot write to a {_describe(ref)} as a reference")

    @staticmethod
    def serial_now():
        return _next_serial()

    # ---- joins ------------------------------------------------------------------------------
    def switch(self, index, alternatives, tail_stop=None):
        """Run alternative `index` (an int32 scalar); each is `alt(stop) -> value | _TailCall`.

        A trace-time index picks the alternative. A traced one probes every alternative, joins
        their results and written references, and emits one lax.switch.
        """
        if not _is_traced(index):
            return alternatives[int(np.asarray(index))](tail_stop)
        inline = self.join_depth >= MAX_SWITCH_NESTING
        start = _next_serial()
        probes = [self._probe(alt, start, tail_stop, inline) for alt in alternatives]
        if tail_stop is not None:
            pending = [isinstance(p.result, _TailCall) for p in probes]
            if any(pending) and not all(pending):     # values and calls do not join: finish calls
                probes = [self._probe(alt, start, None, inline) if pend else p
                          for alt, p, pend in zip(alternatives, probes, pending)]
        return self._join(index, probes, start)

    def _probe(self, alternative, start, stop, inline=False):
        """Trace one alternative on its own (a jaxpr), or with `inline` into the current trace
        (its tensors are then the current trace's, and `jaxpr` is None)."""
        jax = _jax()
        probe = _Probe()
        frame = _Frame(start)

        def traced():
            self.frames.append(frame)
            self.join_depth += 1
            try:
                probe.result = alternative(stop)
                probe.writes = [(ref, ref.value) for ref, _ in frame.log.values()]
                leaves, seen = [], set()
                _walk_fresh(probe.result, start, leaves, seen)
                for _, value in probe.writes:
                    _walk_fresh(value, start, leaves, seen)
                probe.leaves = leaves
                return leaves
            finally:
                self.join_depth -= 1
                self.frames.pop()
                for ref, old in frame.log.values():     # the next alternative starts afresh
                    ref.value = old

        if inline:
            traced()
            probe.jaxpr = None
        else:
            probe.jaxpr = jax.make_jaxpr(traced)()
        probe.position = {id(leaf): i for i, leaf in enumerate(probe.leaves)}
        probe.restore = [(ref, old) for ref, old in frame.log.values()]
        return probe

    def _join(self, index, probes, start):
        jax = _jax()
        import jax.numpy as jnp
        from jax import lax
        refs, seen = [], set()
        for p in probes:
            for ref, _ in p.writes:
                if id(ref) not in seen:
                    seen.add(id(ref))
                    refs.append(ref)
        joiner = _Joiner(len(probes), start)
        old = {id(ref): old for p in probes for ref, old in p.restore}
        positions = [[p.result] + [_written(p, ref, old[id(ref)]) for ref in refs] for p in probes]
        templates = [joiner.join([pos[k] for pos in positions]) for k in range(len(refs) + 1)]
        slots = joiner.slots

        def branch(i):
            probe = probes[i]
            if probe.jaxpr is None:                  # inlined: its leaves are the outputs
                run = probe.leaves.copy
            else:
                run = jax.extend.core.jaxpr_as_fun(probe.jaxpr)

            def fn():
                outs = run()
                result = []
                for slot in slots:
                    src = slot.sources[i]
                    if src is None:
                        value = jnp.zeros(slot.shape, slot.dtype)
                    elif isinstance(src, _Const):
                        value = jnp.asarray(src.value, slot.dtype)
                    elif isinstance(src, _Offset):
                        pos = probe.position.get(id(src.value))
                        value = (outs[pos] if pos is not None else src.value) + src.offset
                    else:
                        pos = probe.position.get(id(src))
                        value = outs[pos] if pos is not None else src
                    result.append(lax.convert_element_type(value, slot.dtype))
                return result
            return fn

        branches = [branch(i) for i in range(len(probes))]
        if not slots:
            outs = []
        elif probes[0].jaxpr is None:
            # past MAX_SWITCH_NESTING: every alternative was traced inline, select the outputs.
            # Same values (tensor code has no effects; the references are joined below), at the
            # cost of computing the alternatives not taken.
            cases = [b() for b in branches]
            outs = [lax.select_n(index, *column) for column in zip(*cases)]
        else:
            outs = lax.switch(index, branches)
        rebuilt = _Rebuilder(outs, start)
        values = [rebuilt.build(t) for t in templates]
        for ref, value in zip(refs, values[1:]):
            self.write(ref, value)
        return values[0]


class _NotBatchable(Exception):
    pass


class _Restart(Exception):
    """A batched call's accumulated reference was read later: trace again without batching."""


class _Poison:
    """The content of a reference whose value batching did not compute (see _batched_calls)."""

    def __repr__(self):
        return "<not computed>"


_POISON = _Poison()


def _outputs_depend_on(jaxpr, inputs):
    """Does any output of `jaxpr` depend on one of `inputs`? (Sub-jaxprs count as a whole.)"""
    from jax.extend.core import Literal
    tainted = set(inputs)
    for eqn in jaxpr.eqns:
        if any(not isinstance(v, Literal) and v in tainted for v in eqn.invars):
            tainted.update(eqn.outvars)
    return any(not isinstance(v, Literal) and v in tainted for v in jaxpr.outvars)


def _batch_plan(e):
    calls, k = [], None
    for i, f in enumerate(e.fields):
        index = None
        if isinstance(f, TupleGetItem):
            index, f = f.index, f.tuple_value
        if not isinstance(f, Call) or not isinstance(f.op, Var) or f.attrs:
            return None
        if i == 0:
            k = index
        elif index != k:
            return None
        calls.append(f)
    first = calls[0]
    if any(c.op is not first.op or len(c.args) != len(first.args) for c in calls):
        return None
    fixed, varying = {}, {}
    for pos, a in enumerate(first.args):
        column = [c.args[pos] for c in calls]
        if all(x is a for x in column):
            fixed[pos] = a
        elif all(isinstance(x, Constant) and x.data.shape == column[0].data.shape
                 and x.data.dtype == column[0].data.dtype for x in column):
            varying[pos] = np.stack([x.data for x in column])
        else:
            return None
    if not varying:
        return None
    return first.op, k, fixed, varying


def _same_state(a, b):
    """Is reference content `a` (after a call) the content `b` it had before?"""
    if a is b:
        return True
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same_state(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b))
    return False


def _is_tensor_tree(v):
    if isinstance(v, tuple):
        return all(_is_tensor_tree(x) for x in v)
    return _is_tensor(v)


def _tensor_contents(union):
    """The contents of a union of references when they are tensor trees of one type (else None)."""
    if not _is_traced(union.index) or not all(isinstance(a, _JRef) for a in union.alts):
        return None
    contents = [a.value for a in union.alts]
    if not all(_is_tensor_tree(c) and _same_tree_type(c, contents[0]) for c in contents):
        return None
    return contents


def _same_tree_type(a, b):
    if isinstance(a, tuple):
        return isinstance(b, tuple) and len(a) == len(b) and \
            all(_same_tree_type(x, y) for x, y in zip(a, b))
    return _is_tensor(a) and _is_tensor(b) and tuple(np.shape(a)) == tuple(np.shape(b)) and \
        np.dtype(a.dtype) == np.dtype(b.dtype)


def _select_tree(index, cases):
    """lax.select_n over tensor trees of one type: cases[index]."""
    from jax import lax
    if isinstance(cases[0], tuple):
        return tuple(_select_tree(index, [c[k] for c in cases]) for k in range(len(cases[0])))
    return lax.select_n(index, *cases)


class _Probe:
    __slots__ = ("result", "writes", "leaves", "jaxpr", "position", "restore")


def _written(probe, ref, old):
    for r, value in probe.writes:
        if r is ref:
            return value
    return old


def _all_numpy(v):
    if isinstance(v, np.ndarray):
        return True
    if isinstance(v, tuple):
        return all(_all_numpy(x) for x in v)
    return False


def _walk_fresh(value, start, leaves, seen):
    """Collect the jax tensors of the parts of `value` built after serial `start`."""
    stack = [value]
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        if isinstance(v, np.ndarray):
            continue
        if isinstance(v, tuple):
            stack.extend(v)
            continue
        if _is_jax_value(v):
            seen.add(id(v))
            leaves.append(v)
            continue
        if _serial_of(v) < start and not isinstance(v, _TailCall):
            continue                              # built before the join: unchanged by it
        seen.add(id(v))
        if isinstance(v, _JClosure):
            stack.extend(v.env.values())
        elif isinstance(v, ConstructorValue):
            stack.extend(v.fields)
        elif isinstance(v, _JRef):
            stack.append(v.value)
        elif isinstance(v, _JUnion):
            stack.append(v.index)
            stack.extend(v.alts)
        elif isinstance(v, _TailCall):
            stack.append(v.callee)
            stack.extend(v.args)


# ---- join templates ----------------------------------------------------------------------------
# A template describes the joined value: _Same(obj) | _Leaf(slot) | ("tuple", [t]) |
# ("adt", ctor, [t]) | ("closure", func, name, [(var, t)]) | ("ref", _JRef, t) |
# ("union", index slot, [t]) | ("tail", t, [t]).  Slots are the outputs of the lax.switch.

class _Const:
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class _Offset:
    """An alternative's own union index shifted past the alternatives of those before it."""
    __slots__ = ("value", "offset")

    def __init__(self, value, offset):
        self.value, self.offset = value, offset


class _Slot:
    __slots__ = ("sources", "shape", "dtype", "index")

    def __init__(self, n, shape, dtype, index):
        self.sources = [None] * n      # per alternative: a tensor, a _Const, or None (zeros)
        self.shape, self.dtype, self.index = shape, dtype, index


class _Same:
    __slots__ = ("value",)

    def __init__(self, value):
        self.value = value


class _Joiner:
    def __init__(self, n, start):
        self.n, self.start = n, start
        self.slots: list[_Slot] = []
        self.memo: dict = {}
        self.keep: list = []

    def slot(self, shape, dtype):
        s = _Slot(self.n, tuple(shape), np.dtype(dtype), len(self.slots))
        self.slots.append(s)
        return s

    def join(self, vals):
        """The template of the join of vals[i] (the value of alternative i at one position)."""
        first = vals[0]
        if all(v is first for v in vals):
            return _Same(first)
        if any(v is _POISON for v in vals):
            raise _Restart()
        key = tuple(id(v) for v in vals)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        self.keep.append(vals)
        if all(_is_tensor(v) for v in vals):
            shapes = {tuple(np.shape(v)) for v in vals}
            dtypes = {np.dtype(v.dtype) for v in vals}
            if len(shapes) != 1 or len(dtypes) != 1:
                raise CompileError("the branches of a traced if produce tensors of different "
                                   f"types: {', '.join(_describe(v) for v in vals)}")
            s = self.slot(shapes.pop(), dtypes.pop())
            for i, v in enumerate(vals):
                s.sources[i] = _Const(v) if isinstance(v, np.ndarray) else v
            out = s
        elif all(isinstance(v, tuple) for v in vals) and len({len(v) for v in vals}) == 1:
            out = ("tuple", [self.join([v[k] for v in vals]) for k in range(len(first))])
        elif all(isinstance(v, _TailCall) for v in vals) and len({len(v.args) for v in vals}) == 1:
            out = ("tail", self.join([v.callee for v in vals]),
                   [self.join([v.args[k] for v in vals]) for k in range(len(first.args))])
        elif (all(isinstance(v, ConstructorValue) for v in vals)
              and all(v.constructor is first.constructor for v in vals)):
            out = ("adt", first.constructor,
                   [self.join([v.fields[k] for v in vals]) for k in range(len(first.fields))])
        elif (all(isinstance(v, _JClosure) for v in vals)
              and all(v.func is first.func for v in vals)):
            out = ["closure", first.func, first.name, []]
            self.memo[key] = out                 # a let-rec closure captures itself
            out[3] = [(var, self.join([v.env[var] for v in vals])) for var in first.env]
        elif (all(isinstance(v, _JRef) and v.serial >= self.start for v in vals)
              and not any(("o", id(v)) in self.memo for v in vals)):
            # references each made by its own alternative: at run time only one of them exists,
            # so one new reference stands for all (writes through it reach every holder)
            out = ["ref", None, None]
            self.memo[key] = out
            for v in vals:
                self.memo[("o", id(v))] = out
            out[2] = self.join([v.value for v in vals])
        else:
            out = self.union(vals)
        self.memo[key] = out
        return out

    def union(self, vals):
        for v in vals:
            if isinstance(v, (tuple, _TailCall)) or _is_tensor(v):
                raise CompileError("the branches of a traced if produce values of different "
                                   f"kinds: {', '.join(_describe(v) for v in vals)}")
        index = self.slot((), np.int32)
        alts = []
        for i, v in enumerate(vals):
            if isinstance(v, _JUnion):
                offset = len(alts)
                alts.extend(self.export(a, i) for a in v.alts)
                if isinstance(v.index, np.ndarray):
                    index.sources[i] = _Const(np.asarray(int(v.index) + offset, np.int32))
                else:
                    index.sources[i] = _Offset(v.index, offset)
            else:
                index.sources[i] = _Const(np.asarray(len(alts), np.int32))
                alts.append(self.export(v, i))
        return ("union", index, alts)

    def export(self, v, i):
        """The template of alternative i's own value v (zeros in the other alternatives)."""
        if isinstance(v, np.ndarray):
            return _Same(v)
        if _is_jax_value(v):
            key = ("x", id(v), i)
            hit = self.memo.get(key)
            if hit is None:
                hit = self.slot(np.shape(v), v.dtype)
                hit.sources[i] = v
                self.memo[key] = hit
            return hit
        if isinstance(v, tuple):
            return ("tuple", [self.export(f, i) for f in v])
        if isinstance(v, _TailCall):
            return ("tail", self.export(v.callee, i), [self.export(a, i) for a in v.args])
        if _serial_of(v) < self.start:
            return _Same(v)
        key = ("o", id(v))
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        self.keep.append(v)
        if isinstance(v, _JRef):
            out = ["ref", v, None]
            self.memo[key] = out
            out[2] = self.export(v.value, i)
            return out
        if isinstance(v, ConstructorValue):
            out = ("adt", v.constructor, [self.export(f, i) for f in v.fields])
        elif isinstance(v, _JClosure):
            out = ["closure", v.func, v.name, []]
            self.memo[key] = out
            out[3] = [(var, self.export(x, i)) for var, x in v.env.items()]
        elif isinstance(v, _JUnion):
            index = self.export(v.index, i) if not isinstance(v.index, np.ndarray) else _Same(v.index)
            out = ("union", index, [self.export(a, i) for a in v.alts])
        else:
            out = _Same(v)
        self.memo[key] = out
        return out


class _Rebuilder:
    """Builds the joined trace-time value of a template from the lax.switch outputs."""

    def __init__(self, outs, start):
        self.outs, self.start = outs, start
        self.memo: dict = {}

    def build(self, t):
        if isinstance(t, _Same):
            return t.value
        if isinstance(t, _Slot):
            return self.outs[t.index]
        key = id(t)
        if key in self.memo:
            return self.memo[key]
        kind = t[0]
        if kind == "tuple":
            out = tuple(self.build(c) for c in t[1])
        elif kind == "tail":
            out = _TailCall(self.build(t[1]), [self.build(a) for a in t[2]])
        elif kind == "adt":
            out = _JAdt(t[1], [self.build(c) for c in t[2]], _next_serial())
        elif kind == "closure":
            out = _JClosure(t[1], {}, t[2], _next_serial())
            self.memo[key] = out
            for var, c in t[3]:
                out.env[var] = self.build(c)
        elif kind == "ref":
            # a reference made inside one alternative keeps its identity; merged ones are new
            out = t[1] if t[1] is not None else _JRef(None, 0)
            self.memo[key] = out
            out.serial = _next_serial()
            out.value = self.build(t[2])
        elif kind == "union":
            out = _JUnion(self.build(t[1]), [self.build(a) for a in t[2]], self.start,
                          _next_serial())
        else:
            raise CompileError(f"internal: unknown join template {kind!r}")
        self.memo[key] = out
        return out


# ---- compiled functions --------------------------------------------------------------------------

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


def _program_uses64(mod):
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


def resolve_device(device):
    """The jax device for "cpu" / "gpu" (CUDA), or a RelayishError saying why there is none."""
    jax = _jax()
    name = "cpu" if device is None else str(device).lower()
    if name in ("gpu", "cuda"):
        try:
            devices = jax.devices("gpu")
        except RuntimeError:
            devices = []
        if not devices:
            raise RelayishError(
                "device='gpu' was requested but jax has no CUDA device here (jax sees: "
                f"{', '.join(sorted({d.platform for d in jax.devices()}))}); install a CUDA "
                "build of jax on a machine with an NVIDIA GPU, or use device='cpu'")
        return devices[0]
    if name == "cpu":
        return jax.devices("cpu")[0]
    raise RelayishError(f"unknown device {device!r}; expected 'cpu' or 'gpu'")


class _Entry:
    """One compiled specialization: an argument structure and its jitted function."""

    def __init__(self, tree, n_leaves, ref_paths):
        self.tree = tree                 # how to rebuild the arguments from leaves at trace time
        self.n_leaves = n_leaves
        self.ref_paths = ref_paths       # the RefValue arguments, in order of first appearance
        self.jitted = None
        self.traced = False
        self.out_desc = None
        self.pure = False
        self.written = []                # (ref index, content descriptor)
        self.written_leaves = []
        self.unrolled = None             # the most-called function of the trace (for messages)
        self.ops = 0                     # tensor operations the trace recorded


class JaxFunction:
    """A relayish function compiled with JAX: `run(*args)`.

    Attributes: `trace_count` (how many times the program was traced), `device`, `uses_x64`.
    `effects(*args)` says which parameters the program only reads and which references it writes.
    `jax_function()` gives the pure jax function behind `run` (tensor parameters and results).
    """

    def __init__(self, mod, main, device="cpu", limits=None):
        self.mod = mod
        self.main = main
        self.device = resolve_device(device)
        self.limits = _trace_limits(limits)
        jax = _jax()
        self._default_device = self.device == jax.devices()[0]
        self.params = list(main.params)
        self.param_types = [_param_type(p) for p in self.params]
        self._captured = FreeVars()      # free variables per Function, shared by the traces
        unbound = run_deep(self._captured, main)
        if unbound:
            names = ", ".join("%" + v.name_hint for v in unbound)
            raise CompileError(f"the compiled function has free variables ({names}); compile a "
                               "closed function")
        self.uses_x64 = _program_uses64(mod)
        self.trace_count = 0
        self._cache: dict = {}
        self._lock = threading.Lock()
        tensor_params = all(isinstance(t, TensorType) for t in self.param_types)
        self._tensor_sig = ([(t.shape, np.dtype(t.dtype)) for t in self.param_types]
                            if tensor_params else None)
        self._fast = None                # set once the tensor-only specialization is traced

    def __repr__(self):
        return f"<relayish JaxFunction on {self.device}>"

    # ---- calling ----------------------------------------------------------------------------
    def __call__(self, *args):
        fast = self._fast
        if fast is not None:
            # tensor parameters only, already traced: arrays of the parameters' dtypes go
            # straight to jax. Shapes are jax's signature check: a new shape re-enters _trace,
            # which rejects it naming the parameter. (dtypes are checked here because jax turns
            # float64 into float32 silently when x64 is off; a 64-bit program always runs with
            # x64 on, where a new dtype re-enters _trace like a new shape.)
            dtypes, call, array_types, x64 = fast
            try:
                if x64 is not None or list(map(_DTYPE_OF, args)) == dtypes:
                    for a in args:
                        if a.__class__ is not _NDARRAY and not isinstance(a, array_types):
                            break
                    else:
                        if x64 is None or x64[1].jax_enable_x64:
                            return call(*args)
                        # the scoped switch costs ~0.9 us, a sixth of a small Hessian's call:
                        # entered only when the caller has not enabled float64 already
                        with x64[0](True):
                            return call(*args)
            except AttributeError:
                pass
        return self._call(args)

    def _call(self, args):
        leaves, key, tree, refs = self._flatten_args(args)
        entry = self._entry(key, tree, len(leaves), refs)
        if not entry.traced:
            out, writes = run_deep(self._first_run, entry, leaves)
            self._install_fast_path(entry, key)
        else:
            out, writes = self._run(entry, leaves)
        for (k, desc), content in zip(entry.written, writes):
            refs[k].value = _decode(desc, content, refs, entry)
        return out if entry.pure else _decode(entry.out_desc, out, refs, entry)

    def _install_fast_path(self, entry, key):
        if key != () or self._tensor_sig is None or entry.written:
            return
        jitted = entry.jitted
        if entry.pure:
            call = jitted                # the jitted function itself: no extra Python frame
        else:
            def call(*leaves):
                return _decode(entry.out_desc, jitted(*leaves), [], entry)
        x64 = (_jax().enable_x64, _jax().config) if self.uses_x64 else None
        dtypes = [dtype for _, dtype in self._tensor_sig]
        self._fast = (dtypes, call, (np.ndarray, np.generic, _jax_array_class()), x64)

    def _run(self, entry, leaves):
        jax = _jax()
        if self.uses_x64:
            with jax.enable_x64(True):
                return _with_writes(entry, entry.jitted(*leaves))
        return _with_writes(entry, entry.jitted(*leaves))

    def _first_run(self, entry, leaves):
        jax = _jax()
        if self.uses_x64:
            with jax.enable_x64(True):
                return self._trace_then_run(entry, leaves)
        return self._trace_then_run(entry, leaves)

    def _trace_then_run(self, entry, leaves):
        self._ensure_traced(entry, leaves)
        return _with_writes(entry, entry.jitted(*leaves))

    def _ensure_traced(self, entry, leaves):
        if entry.traced:
            return
        try:
            traced = entry.jitted.trace(*leaves)
        except RecursionError:
            raise CompileError("the program nests too deeply to trace (a recursion depth that "
                               "depends on a traced value?); use rl.evaluate") from None
        depth = _chain_depth(traced.jaxpr.jaxpr)
        if depth > self.limits["max_depth"]:
            # checked before XLA sees it: XLA's compiler segfaults on very deep programs
            raise CompileError(
                f"the traced program is a chain of {depth} dependent operations ({entry.ops} "
                f"in all, unrolling {entry.unrolled or 'the program'}), deeper than XLA compiles safely (limit "
                f"{self.limits['max_depth']}; deeper chains crash XLA's compiler). Run it with "
                "rl.evaluate or rl.compile(..., backend=\"interpreter\"), or raise the bound at "
                "your own risk: rl.compile(..., limits={\"max_depth\": ...})")
        entry.traced = True
        if entry.written_leaves and self.device.platform != "cpu":
            # donate the buffers of the references the program writes (XLA CPU cannot)
            entry.jitted = self._jit(entry, donate=entry.written_leaves)
            entry.jitted.trace(*leaves)

    def jax_function(self):
        """The compiled program as a pure jax function of its tensor arguments, for jax
        transformations (jax.vmap, jax.jit, jax.grad) of the program as a whole.

        `fn(*arrays)` takes one array per parameter (the parameters' shapes and dtypes) and
        returns the result as jax arrays in nested tuples, the structure `run` returns. It is
        the jitted function `run` calls (traced here once if `run` was not called yet), so
        transforming it does not trace the relayish program again. When `uses_x64` is true the
        caller must call or trace it inside `jax.enable_x64(True)` (as `run` does).
        A CompileError when the program has a parameter that is not a tensor, or a result that
        is not tensors and tuples of them (closures, ADT values, references).
        """
        if self._tensor_sig is None:
            raise CompileError("jax_function() needs a function whose parameters are all "
                               "tensors; this one takes " + ", ".join(
                                   f"%{p.name_hint}: {_type_text(t)}"
                                   for p, t in zip(self.params, self.param_types)
                                   if not isinstance(t, TensorType)))
        leaves = [np.zeros(shape, dtype) for shape, dtype in self._tensor_sig]
        _, key, tree, refs = self._flatten_args(leaves)
        entry = self._entry(key, tree, len(leaves), refs)
        if not entry.traced:
            jax = _jax()

            def trace():
                if self.uses_x64:
                    with jax.enable_x64(True):
                        self._ensure_traced(entry, leaves)
                else:
                    self._ensure_traced(entry, leaves)
            run_deep(trace)
            self._install_fast_path(entry, key)
        if not entry.pure or entry.written:
            raise CompileError("jax_function() needs a result made of tensors and tuples of "
                               "tensors; this program returns other values (closures, ADT values "
                               "or references) that only `run` can decode")
        return entry.jitted

    def effects(self, *args):
        """{"read": [...], "written": [...]}: parameter names only read, and those written.

        A parameter is written when it holds a reference (RefValue) the program assigns.
        """
        leaves, key, tree, refs = self._flatten_args(args)
        entry = self._entry(key, tree, len(leaves), refs)
        if not entry.traced:
            jax = _jax()
            if self.uses_x64:
                def trace():
                    with jax.enable_x64(True):
                        self._ensure_traced(entry, leaves)
            else:
                def trace():
                    self._ensure_traced(entry, leaves)
            run_deep(trace)
        written_refs = {k for k, _ in entry.written}
        written = []
        for p, paths in zip(self.params, entry.ref_paths):
            if any(k in written_refs for k in paths):
                written.append(p.name_hint)
        return {"read": [p.name_hint for p in self.params if p.name_hint not in written],
                "written": written}

    # ---- specializations ----------------------------------------------------------------------
    def _entry(self, key, tree, n_leaves, refs):
        entry = self._cache.get(key)
        if entry is None:
            with self._lock:
                entry = self._cache.get(key)
                if entry is None:
                    ref_paths = _ref_paths(tree, len(self.params))
                    entry = _Entry(tree, n_leaves, ref_paths)
                    entry.jitted = self._jit(entry)
                    self._cache[key] = entry
        return entry

    def _jit(self, entry, donate=()):
        jax = _jax()
        kwargs = {}
        if donate:
            kwargs["donate_argnums"] = tuple(donate)
        if not self._default_device:
            from jax.sharding import SingleDeviceSharding
            sharding = SingleDeviceSharding(self.device)
            kwargs["in_shardings"] = sharding
            kwargs["out_shardings"] = sharding
        return jax.jit(lambda *leaves: self._trace(entry, leaves), **kwargs)

    def _trace(self, entry, leaves):
        """The function jax traces: rebuild the arguments, evaluate @main, encode the result."""
        if self._tensor_sig is not None:    # the fast path leaves shapes to jax: check them here
            if len(leaves) != len(self.params):
                raise EvaluationError(f"the function takes {len(self.params)} argument(s) "
                                      f"({', '.join('%' + p.name_hint for p in self.params)}), "
                                      f"got {len(leaves)}")
            for p, t, leaf in zip(self.params, self.param_types, leaves):
                if tuple(leaf.shape) != t.shape or np.dtype(leaf.dtype) != np.dtype(t.dtype):
                    raise EvaluationError(f"argument %{p.name_hint}: expected {_type_text(t)}, "
                                          f"got {_value_text(leaf)}")
        self.trace_count += 1
        try:
            return self._evaluate(entry, leaves, batching=True)
        except _Restart:
            # a reference left uncomputed by a batched call was used after all
            return self._evaluate(entry, leaves, batching=False)

    def _evaluate(self, entry, leaves, batching):
        ev = TraceEvaluator(self.mod, batching=batching, captured=self._captured,
                            limits=self.limits)
        refs = []
        args = [_build_arg(t, leaves, refs) for t in entry.tree]
        initial = [r.value for r in refs]
        main = _JClosure(self.main, {}, "@main", -1)
        try:
            result = ev.call(main, args)
        except RecursionError:
            raise CompileError("the program nests too deeply to trace (a recursion depth that "
                               "depends on a traced value?); use rl.evaluate") from None
        entry.unrolled = ev.unrolled()
        entry.ops = ev.ops
        out_leaves = []
        ref_ids = {id(r): k for k, r in enumerate(refs)}
        desc = _encode(result, out_leaves, ref_ids)
        written, writes = [], []
        for k, (r, init) in enumerate(zip(refs, initial)):
            if r.value is not init:
                content = []
                written.append((k, _encode(r.value, content, ref_ids)))
                writes.append(content)
        entry.out_desc = desc
        entry.written = written
        entry.written_leaves = [i for k, _ in written for i in _leaf_indices(entry.tree, k)]
        entry.pure = _is_pure(desc)
        out = _pure_tree(desc, out_leaves) if entry.pure else out_leaves
        if not entry.ref_paths or not any(entry.ref_paths):
            return out                   # no reference arguments: no write-back outputs
        return out, writes

    # ---- arguments ----------------------------------------------------------------------------
    def _flatten_args(self, args):
        if len(args) != len(self.params):
            raise EvaluationError(f"the function takes {len(self.params)} argument(s) "
                                  f"({', '.join('%' + p.name_hint for p in self.params)}), "
                                  f"got {len(args)}")
        leaves, key, refs, ref_ids = [], [], [], {}
        tree = []
        for p, t, a in zip(self.params, self.param_types, args):
            tree.append(_flatten_arg(a, t, "%" + p.name_hint, leaves, key, refs, ref_ids))
        return leaves, tuple(key), tree, refs


def _trace_limits(limits):
    """TRACE_LIMITS updated with the `limits` given to rl.compile (checked)."""
    out = dict(TRACE_LIMITS)
    if limits is None:
        return out
    if not isinstance(limits, dict):
        raise RelayishError(f"limits must be a dict (keys {', '.join(TRACE_LIMITS)}), got "
                            f"{type(limits).__name__}")
    for key, value in limits.items():
        if key not in TRACE_LIMITS:
            raise RelayishError(f"unknown limit {key!r}; the limits are "
                                f"{', '.join(TRACE_LIMITS)}")
        if isinstance(value, bool) or not isinstance(value, (int, float)) or value <= 0:
            raise RelayishError(f"limit {key} must be a positive number, got {value!r}")
        out[key] = value
    return out


def _chain_depth(jaxpr):
    """The longest chain of dependent equations in a jaxpr (a loop; an equation with inner
    jaxprs, a switch or a loop, counts as its deepest inner chain plus one)."""
    depth = {}
    deepest = 0
    for eqn in jaxpr.eqns:
        inner = 0
        for param in eqn.params.values():
            for sub in (param if isinstance(param, (tuple, list)) else (param,)):
                sub = getattr(sub, "jaxpr", sub)        # ClosedJaxpr -> Jaxpr
                if hasattr(sub, "eqns"):
                    inner = max(inner, _chain_depth(sub))
        d = 1 + inner + max((depth.get(v, 0) for v in eqn.invars if not hasattr(v, "val")),
                            default=0)
        for v in eqn.outvars:
            depth[v] = d
        deepest = max(deepest, d)
    return deepest


def _with_writes(entry, outcome):
    """(result, written reference contents) from the jitted function's outputs."""
    if not entry.ref_paths or not any(entry.ref_paths):
        return outcome, []
    return outcome


def _param_type(p):
    t = getattr(p, "_checked_type", None) or p.type_annotation
    if t is None:
        raise CompileError(f"the type of parameter %{p.name_hint} is unknown")
    return t


def _type_text(t):
    try:
        return str(t)
    except Exception:  # noqa: BLE001 - error messages must not fail
        return repr(t)


def _value_text(v):
    if isinstance(v, np.ndarray) or _is_jax_value(v):
        return f"a tensor of shape {tuple(v.shape)} and dtype {np.dtype(v.dtype).name}"
    if isinstance(v, ConstructorValue):
        return f"the ADT value {v.constructor.name_hint}(...)"
    return f"{type(v).__name__} {v!r}"[:120]


def _flatten_arg(value, ty, name, leaves, key, refs, ref_ids):
    """Check one argument against its parameter type; returns its rebuild tree (no recursion).

    Paths inside the argument ("%l.Cons.1.Cons.0") are kept as (parent, step) links and
    spelled out only for an error: building each string would be quadratic in a list's length."""
    root = [None]
    stack = [(value, ty, name, root, 0)]
    while stack:
        v, t, path, parent, slot = stack.pop()
        if isinstance(t, TensorType):
            parent[slot] = ("t", len(leaves))
            leaves.append(_tensor_arg(v, t, path))
        elif isinstance(t, TupleType):
            if not isinstance(v, (tuple, list)) or len(v) != len(t.fields):
                raise EvaluationError(f"argument {_path_text(path)}: expected a tuple of type "
                                      f"{_type_text(t)}, got {_value_text(v)}")
            node = [None] * len(t.fields)
            parent[slot] = ("tuple", node)
            for k in reversed(range(len(t.fields))):
                stack.append((v[k], t.fields[k], (path, f".{k}"), node, k))
        elif isinstance(t, TypeCall):
            if not isinstance(v, ConstructorValue) or v.constructor.belong_to is None or \
                    v.constructor.belong_to.name != t.func.name:
                raise EvaluationError(f"argument {_path_text(path)}: expected a value of type "
                                      f"{_type_text(t)}, got {_value_text(v)}")
            ctor = v.constructor
            data = ctor.type_data
            if len(v.fields) != len(ctor.inputs):
                raise EvaluationError(f"argument {_path_text(path)}: {ctor.name_hint} takes "
                                      f"{len(ctor.inputs)} field(s), got {len(v.fields)}")
            subst = dict(zip(data.type_vars, t.args)) if data is not None else {}
            key.append(ctor)
            node = [None] * len(ctor.inputs)
            parent[slot] = ("adt", ctor, node)
            for k in reversed(range(len(ctor.inputs))):
                stack.append((v.fields[k], substitute(ctor.inputs[k], subst),
                              (path, f".{ctor.name_hint}.{k}"), node, k))
        elif isinstance(t, RefType):
            if not isinstance(v, RefValue):
                raise EvaluationError(f"argument {_path_text(path)}: expected a reference "
                                      f"(rl.RefValue) of type {_type_text(t)}, got "
                                      f"{_value_text(v)}")
            k = ref_ids.get(id(v))
            if k is not None:
                key.append(("alias", k))
                parent[slot] = ("refalias", k)
                continue
            k = len(refs)
            ref_ids[id(v)] = k
            refs.append(v)
            key.append("ref")
            node = [None]
            parent[slot] = ("ref", k, node)
            stack.append((v.value, t.value, ("!", path), node, 0))
        elif isinstance(t, FuncType):
            raise CompileError(f"argument {_path_text(path)}: the jax backend takes no function "
                               "arguments; close over the function inside the program, or use "
                               "rl.evaluate")
        else:
            raise CompileError(f"argument {_path_text(path)}: cannot pass a value of type "
                               f"{_type_text(t)}")
    return root[0]


def _path_text(path):
    """The text of a path built by _flatten_arg: a name, (parent, ".step") or ("!", parent)."""
    prefix, suffix = [], []
    while isinstance(path, tuple):
        if path[0] == "!":
            prefix.append("!")
            path = path[1]
        else:
            suffix.append(path[1])
            path = path[0]
    return "".join(prefix) + path + "".join(reversed(suffix))


def _tensor_arg(v, t, path):
    dtype = np.dtype(t.dtype)
    if isinstance(v, np.ndarray) or _is_jax_value(v):
        if tuple(v.shape) != t.shape or np.dtype(v.dtype) != dtype:
            raise EvaluationError(f"argument {_path_text(path)}: expected {_type_text(t)}, got "
                                  f"{_value_text(v)}")
        return v
    if isinstance(v, (bool, int, float, np.generic, list)):
        try:
            arr = np.asarray(v, dtype=dtype)
        except (TypeError, ValueError):
            raise EvaluationError(f"argument {_path_text(path)}: cannot convert {v!r} to "
                                  f"{_type_text(t)}") from None
        if arr.shape != t.shape:
            raise EvaluationError(f"argument {_path_text(path)}: expected {_type_text(t)}, got a "
                                  f"value of shape {arr.shape}")
        return arr
    raise EvaluationError(f"argument {_path_text(path)}: expected {_type_text(t)}, got "
                          f"{_value_text(v)}")


def _ref_paths(tree, n_params):
    """For each parameter, the indices of the references it holds."""
    out = []
    for node in tree:
        found, stack = [], [node]
        while stack:
            n = stack.pop()
            if n[0] == "ref":
                found.append(n[1])
                stack.append(n[2][0])
            elif n[0] == "refalias":
                found.append(n[1])
            elif n[0] == "tuple":
                stack.extend(n[1])
            elif n[0] == "adt":
                stack.extend(n[2])
        out.append(found)
    return out


def _leaf_indices(tree, ref_index):
    """The leaves inside argument reference number `ref_index` (their buffers can be donated)."""
    stack, out, inside = [(n, False) for n in tree], [], []
    while stack:
        n, within = stack.pop()
        kind = n[0]
        if kind == "t":
            if within:
                out.append(n[1])
        elif kind == "tuple":
            stack.extend((c, within) for c in n[1])
        elif kind == "adt":
            stack.extend((c, within) for c in n[2])
        elif kind == "ref":
            stack.append((n[2][0], within or n[1] == ref_index))
    return sorted(out)


def _rebuild(tree, leaves, make_adt, special):
    """The value a tree of ("t", leaf) / ("tuple", kids) / ("adt", ctor, kids) nodes describes,
    built with a loop (long lists are deep trees). `make_adt(ctor, n)` makes an ADT value whose
    `.fields` has n empty slots; `special[kind](node, target, slot, push)` builds the other node
    kinds, calling `push(node, target, slot)` for a child to build into `target[slot]`."""
    out = [None]
    stack = [(tree, out, 0)]

    def push(node, target, slot):
        stack.append((node, target, slot))
    while stack:
        item = stack.pop()
        if item[0] == "tuple-done":
            _, fields, target, slot = item
            target[slot] = tuple(fields)
            continue
        n, target, slot = item
        kind = n[0]
        if kind == "t":
            target[slot] = leaves[n[1]]
        elif kind == "tuple":
            fields = [None] * len(n[1])
            stack.append(("tuple-done", fields, target, slot))
            stack.extend((c, fields, k) for k, c in reversed(list(enumerate(n[1]))))
        elif kind == "adt":
            value = make_adt(n[1], len(n[2]))
            target[slot] = value
            stack.extend((c, value.fields, k) for k, c in reversed(list(enumerate(n[2]))))
        elif kind in special:
            special[kind](n, target, slot, push)
        else:
            raise CompileError(f"internal: unknown value tree node {kind!r}")
    return out[0]


def _build_arg(node, leaves, refs):
    """The trace-time value of one argument from its rebuild tree; `refs` collects the argument
    references by index (a "refalias" node is a reference seen before)."""
    def ref(n, target, slot, push):
        r = _JRef(None, -1)
        while len(refs) <= n[1]:
            refs.append(None)
        refs[n[1]] = r
        target[slot] = r
        push(n[2][0], _RefSlot(r), 0)

    def refalias(n, target, slot, push):
        target[slot] = refs[n[1]]
    return _rebuild(node, leaves, lambda ctor, k: _JAdt(ctor, [None] * k, -1),
                    {"ref": ref, "refalias": refalias})


class _RefSlot:
    """`slot[0] = v` stores into a reference: a place a rebuild loop can write a child to."""
    __slots__ = ("ref",)

    def __init__(self, ref):
        self.ref = ref

    def __setitem__(self, slot, value):
        self.ref.value = value


# ---- results -------------------------------------------------------------------------------------

def _encode(value, leaves, ref_ids, memo=None):
    """A descriptor of a trace-time result; its tensors are appended to `leaves` (depth first,
    left to right). A loop with an explicit stack: a 10^4-element list is 10^4 levels deep."""
    if memo is None:
        memo = {}
    out = [None]
    stack = [(value, out, 0)]
    while stack:
        v, target, slot = stack.pop()
        if isinstance(v, tuple):
            children = [None] * len(v)
            target[slot] = ("tuple", children)
            stack.extend((c, children, k) for k, c in reversed(list(enumerate(v))))
        elif _is_tensor(v):
            leaves.append(v)
            target[slot] = ("t", len(leaves) - 1)
        elif isinstance(v, ConstructorValue):
            children = [None] * len(v.fields)
            target[slot] = ("adt", v.constructor, children)
            stack.extend((c, children, k) for k, c in reversed(list(enumerate(v.fields))))
        elif isinstance(v, _JUnion):
            leaves.append(v.index)
            children = [None] * len(v.alts)
            target[slot] = ("union", len(leaves) - 1, children)
            stack.extend((c, children, k) for k, c in reversed(list(enumerate(v.alts))))
        elif isinstance(v, _JRef):
            if id(v) in ref_ids:
                target[slot] = ("argref", ref_ids[id(v)])
            elif id(v) in memo:
                target[slot] = memo[id(v)]
            else:
                node = ["ref", len(memo), None]
                memo[id(v)] = node
                target[slot] = node
                stack.append((v.value, node, 2))
        elif v is _POISON:
            raise _Restart()
        elif isinstance(v, (_JClosure, _JPrimFn)):
            raise CompileError("a compiled program cannot return a function (the jax backend "
                               "returns tensors, tuples, ADT values and references); call it "
                               "inside the program, or use rl.evaluate")
        else:
            raise CompileError(f"cannot return a {_describe(v)} from a compiled program")
    return out[0]


def _is_pure(desc):
    stack = [desc]
    while stack:
        d = stack.pop()
        if d[0] == "tuple":
            stack.extend(d[1])
        elif d[0] != "t":
            return False
    return True


def _pure_tree(desc, leaves):
    """Nested tuples of the leaves, as `desc` (tuples and tensors only) says."""
    return _decode(desc, leaves, [], None)


def _decode(desc, leaves, refs, entry, memo=None):
    """The host value of a result descriptor (the inverse of _encode): a "union" picks its
    alternative by a leaf's index, "argref" is an argument's reference, a "ref" seen twice is
    one RefValue (`memo`)."""
    if memo is None:
        memo = {}

    def union(d, target, slot, push):
        push(d[2][int(np.asarray(leaves[d[1]]))], target, slot)

    def argref(d, target, slot, push):
        target[slot] = refs[d[1]]

    def ref(d, target, slot, push):
        if d[1] in memo:
            target[slot] = memo[d[1]]
        else:
            r = memo[d[1]] = RefValue(None)
            target[slot] = r
            push(d[2], _RefSlot(r), 0)
    return _rebuild(desc, leaves, lambda ctor, k: ConstructorValue(ctor, [None] * k),
                    {"union": union, "argref": argref, "ref": ref})


# ---- entry point ---------------------------------------------------------------------------------

def compile_jax(f_or_mod, device="cpu", limits=None):
    """`rl.compile(f_or_mod, backend="jax", device=..., limits=...)`: see JaxFunction and
    TRACE_LIMITS."""
    from relayish.ir.typecheck import infer_type
    if isinstance(f_or_mod, Module):
        mod = f_or_mod
        if "main" not in mod:
            raise CompileError("the module has no @main to compile")
        if not all(getattr(f, "_checked_type", None) is not None for f in mod.functions.values()):
            infer_type(mod)
        main = mod["main"]
    elif isinstance(f_or_mod, Expr):
        func = f_or_mod if isinstance(f_or_mod, Function) else Function([], f_or_mod)
        mod = Module.from_expr(func)
        if getattr(func, "_checked_type", None) is None:
            infer_type(func, mod=mod)
        main = func
    else:
        raise RelayishError(f"rl.compile takes a Function or a Module, got "
                            f"{type(f_or_mod).__name__}")
    return JaxFunction(mod, main, device, limits)
