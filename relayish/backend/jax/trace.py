"""The trace evaluator: a relayish program evaluated once over trace-time values (values.py).

    ev = TraceEvaluator(mod, captured=free_vars, limits=limits)
    result = ev.call(JClosure(main, {}, "@main", -1), args)     # inside jax.jit's trace

One `visit_<Node>(expr, env, tail)` per node kind; let-chains are walked by a loop. Op calls run
`op.impl(jax.numpy, ...)` on traced operands and `op.impl(numpy, ...)` when every operand is a
trace-time constant (zeros.py folds zero adjoints first). Calls use a trampoline: a call in tail
position returns a TailCall to the caller's loop (`finish`), so a backpropagator chain of 10^5
closures is a loop, not 10^5 Python frames. An `if` on a trace-time condition takes its branch;
on a traced one it is a join (`switch`, joins.py), as are a match on a joined value, a call of
a joined closure and a read or write of a joined reference. A tuple of calls of one closure on
constants is traced as one jax.vmap where that is the same as the calls in order (batching.py).

The trace is bounded (limits.py): activations of one function inside joins (a recursion whose
depth depends on a traced value), tensor operations recorded, wall time. Each bound is a
CompileError naming the function unrolled most.
"""
from __future__ import annotations

import time

import numpy as np

from relayish.errors import CompileError, EvaluationError, RelayishError
from relayish.ir.expr import Constructor, Function
from relayish.ir.op import Op
from relayish.ir.analysis import FreeVars
from relayish.backend.runtime.bindings import bind_pattern, is_recursive, let_chain
from relayish.backend.runtime.describe import node_text
from relayish.backend.jax.batching import batched_calls
from relayish.backend.jax.dots import DotFolding
from relayish.backend.jax.dynamic_left import match_cursor
from relayish.backend.jax.dynamic_loops import fold_call
from relayish.backend.jax.dynamic_nest import forward as nested_forward, replay
from relayish.backend.jax.dynamic_rows import JPoolRef, JRow
from relayish.backend.jax.dynamic_tables import JCursor, JTable
from relayish.backend.jax.dynamic_tail import JSync, tail_call
from relayish.backend.jax.index_checks import check_call
from relayish.backend.jax.joins import select_tree, switch, tensor_contents
from relayish.backend.jax.limits import MAX_ACTIVATIONS_UNDER_JOIN, TRACE_LIMITS
from relayish.backend.jax.values import (POISON, Frame, JAdt, JClosure, JConstructorFn, JRef,
                                         JUnion, Restart, TailCall, closure_name, describe,
                                         is_tensor, is_traced, next_serial, same_tree_type,
                                         serial_of)
from relayish.backend.jax.zeros import ZeroTracker


class _Unsplit(Exception):
    """Raised by the pattern matcher when it must look inside a joined (union) value."""

    def __init__(self, union):
        super().__init__()
        self.union = union


def _split(subst):
    """The `resolve` hook of bind_pattern (runtime/bindings.py) inside a match: a joined value
    is read as the alternative `subst` chose for it; one not chosen yet stops the match
    (_Unsplit), which then runs once per alternative under a switch."""
    def resolve(v):
        if isinstance(v, JUnion):
            if id(v) not in subst:
                raise _Unsplit(v)
            return subst[id(v)]
        return v
    return resolve


def _captured(func, cache):
    """The free variables of `func` (what a closure of it captures), from the compiled program's
    FreeVars table: one walk per outermost function (a free_vars walk per Function literal was
    quadratic in the nesting depth of closures: 27.7 s for 3,000 nested fn literals)."""
    return cache(func)


class TraceEvaluator:
    """Evaluates relayish expressions over trace-time values (see the module docstring).

    `eval(expr, env, tail)` returns a value, or a TailCall when `tail` and the expression ends
    in a call; `call(callee, args)` runs the trampoline to a value.
    """

    def __init__(self, mod, batching=True, captured=None, limits=None):
        self.mod = mod
        self.batching = batching
        self.captured = FreeVars() if captured is None else captured   # free variables table
        self.frames: list[Frame] = []       # one per alternative being probed
        self.join_depth = 0
        self.select_joins = False            # every traced join a select (rl.vmap, joins.py)
        self.active: dict = {}               # Function -> its activations inside joins
        self.names: dict = {}                # Function -> a closure of it (for its name)
        self.globals: dict[str, JClosure] = {}
        self._dispatch = {}
        self.batch_plans: dict = {}
        self.limits = TRACE_LIMITS if limits is None else limits
        self.calls: dict = {}                # Function -> its activations in this trace
        self.ops = 0                         # traced tensor operations recorded
        self.started = time.monotonic()
        self.zeros = ZeroTracker()           # zero adjoints, folded before XLA (zeros.py)
        self.dots = DotFolding()             # matmul(transpose(a), g) as one dot (dots.py)
        self.folds: dict = {}                # Function -> Fold run as a loop (dynamic_rule.py)
        self.loop = None                     # the fold loop being traced (dynamic_loops.py)
        self.guard = None                    # set while a backward loop traces (dynamic_defer)
        self.accumulations = None            # its deferrable gradient sums, found when needed
        self.fault_cells: dict = {}          # message -> its flag's cell (fault())
        self.growable: set = set()           # messages of checks a larger capacity passes
        self.row_steps = None                # rows of a loop with rows (function.py grows it)
        self.tail_loops: dict = {}           # Function -> TailLoop run as a while loop
        self.tail = None                     # the tail loop being traced (dynamic_tail.py)
        self.replays: dict = {}              # Function -> ReplayInfo (dynamic_nest.py)
        self.replays_of: dict = {}           # TailLoop -> ReplayInfo
        self.capacity: dict = {}             # rl.compile(..., capacity=...)
        self.check_indices = False           # trace index checks (index_checks.py)

    # ---- entry ------------------------------------------------------------------------------
    def eval(self, expr, env, tail=False):
        method = self._dispatch.get(type(expr))
        if method is None:
            method = getattr(self, "visit_" + type(expr).__name__, None)
            if method is None:
                raise CompileError(f"the jax backend cannot evaluate {type(expr).__name__} nodes: "
                                   f"{node_text(expr, 80)}")
            self._dispatch[type(expr)] = method
        return method(expr, env, tail)

    def call(self, callee, args, stop=None):
        return self.finish(TailCall(callee, args), stop)

    def finish(self, result, stop=None):
        """Run pending tail calls; with `stop`, leave one whose callee is older than `stop`."""
        while isinstance(result, TailCall):
            if stop is not None and serial_of(result.callee) < stop:
                return result
            result = self.enter(result.callee, result.args)
        return result

    def enter(self, callee, args):
        """One function body, evaluated in tail position (may return a TailCall)."""
        if isinstance(callee, JClosure):
            func = callee.func
            if func in self.replays:        # a nested gradient loop's tape (dynamic_nest)
                return replay(self, self.replays[func], callee)
            if func in self.folds:          # a fold over a node table: one loop (issue 17)
                looped = fold_call(self, self.folds[func], callee, args)
                if looped is not None:
                    return looped
            if func in self.tail_loops:     # a traced trip count: one while loop (issue 17)
                looped = tail_call(self, self.tail_loops[func], callee, args)
                if looped is not None:
                    return looped
            if len(args) != len(func.params):
                raise CompileError(f"{closure_name(callee)} takes {len(func.params)} "
                                   f"argument(s), got "
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
                raise self._unbounded(closure_name(callee))
            if count == 1:
                self.names[func] = callee
            self.active[func] = count
            try:
                return self.eval(func.body, env, True)
            finally:
                self.active[func] -= 1
        if isinstance(callee, JUnion):
            return self.switch(callee.index,
                               [lambda stop, alt=alt: self.finish(self.enter(alt, args), stop)
                                for alt in callee.alts], tail_stop=callee.start)
        if isinstance(callee, JConstructorFn):
            return JAdt(callee.constructor, list(args), next_serial())
        if isinstance(callee, JRow):        # closures a fold's loop left: the backward loop
            return callee.call(self, args)
        if isinstance(callee, JSync):       # around a state-keeping loop's chain (dynamic_tail)
            return callee.enter(self, args)
        raise CompileError(f"cannot call a {describe(callee)}")

    def unrolled(self):
        """The name of the function with the most activations in this trace (or None)."""
        if not self.calls:
            return None
        func = max(self.calls, key=self.calls.get)
        return f"{closure_name(self.names[func])} ({self.calls[func]} calls unrolled)"

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
                name = closure_name(self.names[func])
            else:
                name = "the program"
        # reverse AD names a global's derivative @<name>_ad: twice, a reverse derivative of a
        # loop's reverse derivative, whose backpropagators hold references to references
        second = name.count("_ad") >= 2
        hint = (" A second reverse-mode derivative of a loop (rl.grad of rl.grad) does not "
                "compile as a loop; a second derivative taken forward over reverse does "
                "(rl.hessian, rl.hvp, rl.derivative(f, 2)).") if second else ""
        return CompileError(
            f"recursion in {name} does not terminate at trace time: how deep it goes depends on a "
            f"traced value (a condition on tensor data), so it cannot become one XLA program. Run "
            f"it with rl.evaluate (the interpreter), or make the bound static (recurse over a Nat, "
            f"a list or a tree argument instead of a tensor condition).{hint}")

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
            closure = JClosure(self.mod[name], {}, "@" + name, -1)
            self.globals[name] = closure
        return closure

    def visit_Constant(self, e, env, tail):
        return e.data

    def visit_Tuple(self, e, env, tail):
        if len(e.fields) >= 2:
            batched = batched_calls(self, e, env)
            if batched is not None:
                return batched
        return tuple(self.eval(f, env) for f in e.fields)

    def visit_TupleGetItem(self, e, env, tail):
        value = self.eval(e.tuple_value, env)
        if not isinstance(value, tuple) or not 0 <= e.index < len(value):
            raise CompileError(f"cannot project field {e.index} of a {describe(value)} in "
                               f"{node_text(e, 80)}")
        return value[e.index]

    def visit_Function(self, e, env, tail, name=None):
        captured = {}
        for v in _captured(e, self.captured):
            try:
                captured[v] = env[v]
            except KeyError:
                raise CompileError(f"unbound variable %{v.name_hint} in "
                                   f"{node_text(e, 80)}") from None
        return JClosure(e, captured, name, next_serial())   # name: None = its text, lazily

    def visit_Constructor(self, e, env, tail):
        if not e.inputs:
            return JAdt(e, [], -1)
        return JConstructorFn(e)

    def visit_Call(self, e, env, tail):
        op = e.op
        if isinstance(op, Op):
            return self.apply_op(op, [self.eval(a, env) for a in e.args], e.attrs, e)
        if isinstance(op, Constructor):
            return JAdt(op, [self.eval(a, env) for a in e.args], next_serial())
        callee = self.eval(op, env)
        args = [self.eval(a, env) for a in e.args]
        if tail:
            return TailCall(callee, args)
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
            if self.check_indices and op.index_range is not None:
                check_call(self, op, args, attrs, where)    # jax would clamp (index_checks.py)
            folded = self.zeros.fold(op, args, attrs, getattr(where, "_checked_type", None))
            if folded is not None:
                return folded
            self.ops += 1
            if not self.ops & 1023:
                self.check_budget()
            if op.name == "matmul":
                dot = self.dots.matmul(*args)
                if dot is not None:
                    return dot
        try:
            with np.errstate(all="ignore"):   # IEEE nan/inf without warnings, as XLA computes
                out = op.impl(xp, *args, **attrs)
        except RelayishError:
            raise
        except Exception as exc:  # noqa: BLE001 - an impl fault names the call
            kind = EvaluationError if concrete else CompileError
            raise kind(f"operator '{op.name}' failed in {node_text(where)}: "
                       f"{type(exc).__name__}: {exc}") from None
        if concrete:
            if not isinstance(out, np.ndarray):
                out = np.asarray(out)
            self.zeros.note(op, args, out)
        elif op.name == "transpose":
            self.dots.note(out, args[0], attrs["axes"])
        return out

    def visit_Let(self, e, env, tail):
        bindings, body = let_chain(e)       # a loop down the chain, never recursion
        for var, value in bindings:
            if is_recursive(var, value, self.captured):
                # the closure exists before its environment is gathered: it captures itself
                closure = JClosure(value, {}, "%" + var.name_hint, next_serial())
                env[var] = closure
                for v in _captured(value, self.captured):
                    if v not in env:
                        raise CompileError(f"unbound variable %{v.name_hint} in "
                                           f"{node_text(value, 80)}")
                    closure.env[v] = env[v]
            elif isinstance(value, Function):
                env[var] = self.visit_Function(value, env, False, name="%" + var.name_hint)
            else:
                env[var] = self.eval(value, env)
        return self.eval(body, env, tail)

    def visit_If(self, e, env, tail):
        cond = self.eval(e.cond, env)
        if not is_traced(cond):
            if not is_tensor(cond) or np.shape(cond) != ():
                raise CompileError(f"the condition of an if must be a bool scalar, got "
                                   f"{describe(cond)} in {node_text(e, 80)}")
            return self.eval(e.true_branch if bool(cond) else e.false_branch, env, tail)
        import jax.numpy as jnp
        index = jnp.asarray(cond).astype(jnp.int32)
        if tail:
            stop = self.serial_now()
            branches = [lambda s, b=b: self.finish(self.eval(b, env, True), s)
                        for b in (e.false_branch, e.true_branch)]
            return self.switch(index, branches, tail_stop=stop)
        branches = [lambda s, b=b: self.eval(b, env) for b in (e.false_branch, e.true_branch)]
        return self.switch(index, branches, one_row=True)

    def visit_Match(self, e, env, tail, subst=None):
        data = self.eval(e.data, env)
        if isinstance(data, JCursor):       # a node of a table a tail loop carries (issue 17)
            return match_cursor(self, e, data, env, tail)
        if isinstance(data, JTable):
            # a table is read by the loop of the fold it is passed to; a match on it anywhere
            # else (a call of the fold the trace did not run as its loop) has no node to see
            raise CompileError(
                f"{node_text(e)} matches a tree or list argument that is passed as a node "
                f"table, outside the loop that folds it (a call of the fold that the trace did "
                f"not run as its loop); this is not compiled yet: run it with rl.evaluate")
        return self._match(e, data, env, tail, {} if subst is None else subst)

    def _match(self, e, data, env, tail, subst):
        resolve = _split(subst)
        for clause in e.clauses:
            bound = {}
            try:
                ok = bind_pattern(clause.lhs, data, bound, resolve)
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
        text = node_text(e)
        if self.join_depth:
            raise CompileError(f"no clause of {text} matches a value that a traced condition "
                               f"may produce ({describe(data)}); the jax backend cannot report "
                               f"this at run time: use rl.evaluate")
        raise EvaluationError(f"no clause of {text} matches the value {describe(data)}")

    def nested_tail_call(self, loop, name, args):
        """A gradient's loop inside another loop, a traced if or a backward step
        (dynamic_tail.tail_call): its tape is replayed in the backward pass (dynamic_nest)."""
        return nested_forward(self, loop, name, args)

    def visit_RefCreate(self, e, env, tail):
        return self.new_ref(self.eval(e.value, env))

    def new_ref(self, value):
        if self.loop is not None:           # made in a fold's iteration: a row of a pool
            return self.loop.new_ref(value)
        return JRef(value, next_serial())

    def visit_RefRead(self, e, env, tail):
        ref = self.eval(e.ref, env)
        if self.guard is not None:          # a deferred gradient sum is read only to add to
            self.guard.check_read(self, e, ref)
        return self.read(ref)

    def visit_RefWrite(self, e, env, tail):
        ref = self.eval(e.ref, env)
        if self.guard is not None and self.guard.defers(self, e, ref, env):
            return ()                       # recorded as a row of a deferred sum
        self.write(ref, self.eval(e.value, env))
        return ()

    def read(self, ref):
        if isinstance(ref, JRef):
            for frame in self.frames:        # batching frames note reads, even inside joins
                if frame.reads is not None and ref.serial < frame.start and \
                        id(ref) not in frame.log:
                    frame.reads.add(id(ref))
            value = ref.value
            if value is POISON:
                raise Restart()
            return value
        if isinstance(ref, JUnion):
            contents = tensor_contents(ref)
            if contents is not None:             # tensors only: a select, no switch needed
                for alt in ref.alts:
                    self.read(alt)               # (notes the reads for batching)
                return select_tree(ref.index, contents)
            return self.switch(ref.index, [lambda s, a=a: self.read(a) for a in ref.alts])
        if isinstance(ref, JPoolRef):
            return ref.read(self)
        raise CompileError(f"cannot read a {describe(ref)} as a reference")

    def write(self, ref, value):
        if isinstance(ref, JRef):
            if self.frames:
                frame = self.frames[-1]
                if ref.serial < frame.start and id(ref) not in frame.log:
                    frame.log[id(ref)] = (ref, ref.value)
            ref.value = value
            return
        if isinstance(ref, JUnion):
            contents = tensor_contents(ref)
            if contents is not None and same_tree_type(value, contents[0]):
                import jax.numpy as jnp
                for i, alt in enumerate(ref.alts):   # the chosen one gets value, others keep theirs
                    chosen = (ref.index == i).astype(jnp.int32)
                    self.write(alt, select_tree(chosen, [alt.value, value]))
                return
            self.switch(ref.index, [lambda s, a=a: self.write(a, value) or () for a in ref.alts])
            return
        if isinstance(ref, JPoolRef):
            ref.write(self, value)
            return
        raise CompileError(f"cannot write to a {describe(ref)} as a reference")

    def fault(self, flag, message, grows=False):
        """A run-time check: where `flag` (a traced bool) is set, the run is an EvaluationError
        saying `message`. The flag lives in a cell per message, a reference older than anything
        traced (serial -1), so that a join, or a loop's body, that raises it carries it out as
        it carries any reference it writes: a check inside a nested loop or under a traced if
        reaches the program's outputs (function.py) like one at the top. `grows`: the check
        is a capacity that the compiled function may double and retrace for (function.py)."""
        import jax.numpy as jnp
        if grows:
            self.growable.add(message)
        cell = self.fault_cells.get(message)
        if cell is None:
            cell = self.fault_cells[message] = JRef(np.asarray(False), -1)
        old = cell.value
        self.write(cell, flag if not is_traced(old) and not bool(old) else
                   jnp.logical_or(old, flag))

    def is_fault_cell(self, ref):
        """Is `ref` a check's flag cell (fault())? A loop carries those its body writes."""
        return any(ref is cell for cell in self.fault_cells.values())

    @property
    def faults(self):
        """[(flag, message)] of the run-time checks traced so far."""
        return [(cell.value, message) for message, cell in self.fault_cells.items()]

    @staticmethod
    def serial_now():
        return next_serial()

    # ---- joins ------------------------------------------------------------------------------
    def switch(self, index, alternatives, tail_stop=None, one_row=False):
        """Run alternative `index` (an int32 scalar); each is `alt(stop) -> value | TailCall`.
        A traced index joins the alternatives (joins.py)."""
        return switch(self, index, alternatives, tail_stop, one_row)


def _all_numpy(v):
    if isinstance(v, np.ndarray):
        return True
    if isinstance(v, tuple):
        return all(_all_numpy(x) for x in v)
    return False
