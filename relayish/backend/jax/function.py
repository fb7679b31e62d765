"""Compiled functions: `rl.compile(f, backend="jax")` returns a JaxFunction.

    run = compile_jax(f_or_mod, device="cpu", limits=None)
    run(*args)              # traced once per argument structure, then XLA
    run.jax_function()      # the pure jitted function (tensor parameters and results)
    run.effects(*args)      # {"read": [...], "written": [...]} by parameter name

Cache: one `jax.jit` per argument structure (the constructors of ADT arguments and the aliasing
of RefValue arguments; shapes and dtypes are fixed by the parameter types). A program with
tensor parameters only has one entry and a fast path in `__call__` (no flattening, one dtype
list comparison, no extra Python frame). The trace (`_trace`) rebuilds the arguments
(arguments.py), runs the TraceEvaluator (trace.py) on @main and encodes the result; the
traced jaxpr's chain depth is checked against the limits (limits.py) before XLA compiles it.
RefValue arguments the program assigns are extra outputs, written back after the call (their
buffers donated on a non-CPU device). 64-bit programs (dtypes.py) are traced and run inside
`jax.enable_x64(True)`.
"""
from __future__ import annotations

import operator
import threading

import numpy as np

from relayish.errors import CompileError, EvaluationError
from relayish.ir.expr import Expr
from relayish.ir.module import Module
from relayish.ir.types import TensorType
from relayish.ir.analysis import FreeVars
from relayish.ir.visitor import run_deep
from relayish.backend.runtime.check import checked
from relayish.backend.runtime.describe import type_text
from relayish.backend.jax.arguments import (build_arg, decode, encode, flatten_arg, is_pure,
                                            leaf_indices, parameters, pure_tree, ref_paths)
from relayish.backend.jax.devices import resolve_device
from relayish.backend.jax.dtypes import program_uses64
from relayish.backend.jax.dynamic_rule import dynamic_params, find_folds, find_tail_loops
from relayish.backend.jax.dynamic_tables import JTable, NodeTable, TableSpec
from relayish.backend.jax.dynamic_tail import DEFAULT_ROW_STEPS, FIRST_ROW_STEPS, MAX_ROW_STEPS
from relayish.backend.jax.index_checks import uses_index_ops
from relayish.backend.jax.limits import chain_depth, trace_limits
from relayish.backend.jax.trace import TraceEvaluator
from relayish.backend.jax.values import JClosure, Restart, jax_array_class, load_jax


_NDARRAY = np.ndarray
_DTYPE_OF = operator.attrgetter("dtype")


class NotTensorFunction(CompileError):
    """jax_function()'s refusal: a parameter or a result that is not tensors. The program is
    fine (`run` takes and decodes such values); a caller may choose another way to run it."""


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
        self.faults = []                 # messages of run-time checks (a flag output each)
        self.growable = set()            # those a doubled capacity may pass (JaxFunction._grow)
        self.row_steps = None            # the capacity of loops with rows it was traced with


class _Overflow(Exception):
    """A run went past a capacity the function grows by itself (a loop's rows): retrace."""


class JaxFunction:
    """A relayish function compiled with JAX: `run(*args)`.

    Attributes: `trace_count` (how many times the program was traced), `device`, `uses_x64`.
    `effects(*args)` says which parameters the program only reads and which references it writes.
    `jax_function()` gives the pure jax function behind `run` (tensor parameters and results).
    """

    def __init__(self, mod, main, device="cpu", limits=None, capacity=None, check_indices=True):
        self.mod = mod
        self.main = main
        self.device = resolve_device(device)
        self.limits = trace_limits(limits)
        jax = load_jax()
        self._default_device = self.device == jax.devices()[0]
        self.params = list(main.params)
        self.parameters = parameters(main)   # argument checking and conversion (runtime/args.py)
        self.param_types = self.parameters.types
        self._captured = FreeVars()      # free variables per Function, shared by the traces
        unbound = run_deep(self._captured, main)
        if unbound:
            names = ", ".join("%" + v.name_hint for v in unbound)
            raise CompileError(f"the compiled function has free variables ({names}); compile a "
                               "closed function")
        self.uses_x64 = program_uses64(mod)
        self._traces = 0
        self._cache: dict = {}
        self._lock = threading.Lock()
        tensor_params = all(sig is not None for sig in self.parameters.tensors)
        self._tensor_sig = list(self.parameters.tensors) if tensor_params else None
        self._fast = None                # set once the tensor-only specialization is traced
        self.select_joins = False        # traced joins as selects (set by rl.vmap, batching.py)
        # issue 17: recursive-ADT parameters that recognized folds consume are node tables,
        # folded by one loop for every shape (dynamic_rule.py has the rule)
        self.capacity = dynamic_capacity(capacity)
        # the rows of a loop that records them (dynamic_tail._RowsLoop): unless capacity=
        # fixes them, a small table first, doubled and retraced when a run overflows it, so a
        # call's fixed cost (zeroing and copying the tables) follows the longest run so far
        self.row_steps = None if "steps" in self.capacity else FIRST_ROW_STEPS
        self.growths = 0                 # how many times row_steps doubled (explain())
        folds = find_folds(mod)
        self._tables = {k: TableSpec(mod, adt, orders)
                        for k, (adt, orders) in dynamic_params(mod, main, folds).items()}
        self._folds = folds if self._tables else {}
        self._tail_loops = find_tail_loops(mod)
        # index checks (index_checks.py) only where an op could index out of range: a program
        # without one is traced and jitted as before
        self.check_indices = bool(check_indices) and uses_index_ops(mod)
        self._unchecked = None           # its twin without checks (jax_function)

    def __repr__(self):
        return f"<relayish JaxFunction on {self.device}>"

    @property
    def trace_count(self):
        """How many times the program was traced (its unchecked twin's traces included)."""
        return self._traces + (self._unchecked.trace_count if self._unchecked else 0)

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
        while True:
            entry = self._entry(key, tree, len(leaves), refs)
            try:
                if not entry.traced:
                    out, writes = run_deep(self._first_run, entry, leaves)
                    self._install_fast_path(entry, key)
                else:
                    out, writes = self._run(entry, leaves)
                break
            except _Overflow:
                self._grow(entry)
        for (k, desc), content in zip(entry.written, writes):
            refs[k].value = decode(desc, content, refs, entry)
        return out if entry.pure else decode(entry.out_desc, out, refs, entry)

    def call_in_trace(self, *args):
        """run(*args) from inside another jax trace (rl.vmap's jax.vmap of this program,
        backend/batching.py): (result, flags, messages), the run-time checks (a loop's
        capacity) returned rather than raised: `flags` a bool vector of that trace (None when
        the program has no checks), `messages` their texts, for the caller to check after its
        own run. A program that writes its reference arguments is a CompileError here."""
        leaves, key, tree, refs = self._flatten_args(args)
        entry = self._entry(key, tree, len(leaves), refs)
        if not entry.traced:
            # run_deep traces on a thread of its own, which does not see the caller's x64 mode
            run_deep(self._ensure_traced_in_mode, entry, leaves)
        outcome, flags = entry.jitted(*leaves), None
        if entry.faults:
            outcome, flags = outcome
        if entry.written:
            raise CompileError("a program that writes its reference arguments cannot run "
                               "inside another trace (rl.vmap); use rl.evaluate")
        out, _ = _with_writes_unchecked(entry, outcome)
        return (out if entry.pure else decode(entry.out_desc, out, refs, entry),
                flags, list(entry.faults))

    def _grow(self, entry):
        """Double the rows of loops with rows after `entry` overflowed them: every
        specialization traces again (the next call of each), counted by `growths`."""
        with self._lock:
            if self.row_steps == entry.row_steps:      # not grown by another thread already
                self.row_steps *= 2
                self.growths += 1
                self._cache = {}
                self._fast = None

    def _install_fast_path(self, entry, key):
        if key != () or self._tensor_sig is None or entry.written or entry.faults:
            return
        jitted = entry.jitted
        if entry.pure:
            call = jitted                # the jitted function itself: no extra Python frame
        else:
            def call(*leaves):
                return decode(entry.out_desc, jitted(*leaves), [], entry)
        x64 = (load_jax().enable_x64, load_jax().config) if self.uses_x64 else None
        dtypes = [dtype for _, dtype in self._tensor_sig]
        self._fast = (dtypes, call, (np.ndarray, np.generic, jax_array_class()), x64)

    def _run(self, entry, leaves):
        jax = load_jax()
        if self.uses_x64:
            with jax.enable_x64(True):
                return _with_writes(entry, entry.jitted(*leaves))
        return _with_writes(entry, entry.jitted(*leaves))

    def _first_run(self, entry, leaves):
        jax = load_jax()
        if self.uses_x64:
            with jax.enable_x64(True):
                return self._trace_then_run(entry, leaves)
        return self._trace_then_run(entry, leaves)

    def _trace_then_run(self, entry, leaves):
        self._ensure_traced(entry, leaves)
        return _with_writes(entry, entry.jitted(*leaves))

    def _ensure_traced_in_mode(self, entry, leaves):
        """_ensure_traced inside jax's 64-bit mode when the program uses 64-bit values."""
        if self.uses_x64:
            with load_jax().enable_x64(True):
                self._ensure_traced(entry, leaves)
        else:
            self._ensure_traced(entry, leaves)

    def _ensure_traced(self, entry, leaves):
        if entry.traced:
            return
        try:
            traced = entry.jitted.trace(*leaves)
        except RecursionError:
            raise CompileError("the program nests too deeply to trace (a recursion depth that "
                               "depends on a traced value?); use rl.evaluate") from None
        depth = chain_depth(traced.jaxpr.jaxpr)
        if depth > self.limits["max_depth"]:
            # checked before XLA sees it: XLA's compiler segfaults on very deep programs
            raise CompileError(
                f"the traced program is a chain of {depth} dependent operations ({entry.ops} "
                f"in all, unrolling {entry.unrolled or 'the program'}), deeper than XLA compiles "
                f"safely (limit {self.limits['max_depth']}; deeper chains crash XLA's compiler). "
                "Run it with "
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
        A NotTensorFunction (a CompileError) when the program has a parameter that is not a
        tensor, or a result that is not tensors and tuples of them (closures, ADT values,
        references); a failure to trace the program is the CompileError it raises.
        """
        if self.check_indices:           # jax's own semantics, for jax's transformations
            return self._without_checks().jax_function()
        if self._tensor_sig is None:
            raise NotTensorFunction("jax_function() needs a function whose parameters are all "
                               "tensors; this one takes " + ", ".join(
                                   f"%{p.name_hint}: {type_text(t)}"
                                   for p, t in zip(self.params, self.param_types)
                                   if not isinstance(t, TensorType)))
        leaves = [np.zeros(shape, dtype) for shape, dtype in self._tensor_sig]
        _, key, tree, refs = self._flatten_args(leaves)
        entry = self._entry(key, tree, len(leaves), refs)
        if not entry.traced:
            run_deep(self._ensure_traced_in_mode, entry, leaves)
            self._install_fast_path(entry, key)
        if entry.faults:
            raise NotTensorFunction("jax_function() needs a program without run-time checks; "
                                    "this one checks a loop's capacity after each run, which "
                                    "only `run` does")
        if not entry.pure or entry.written:
            raise NotTensorFunction("jax_function() needs a result made of tensors and tuples of "
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
            jax = load_jax()
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

    def _without_checks(self):
        """This program compiled without index checks (made once, when first asked for)."""
        if self._unchecked is None:
            twin = JaxFunction(self.mod, self.main, self.device.platform, self.limits,
                               self.capacity, check_indices=False)
            twin.select_joins = self.select_joins
            self._unchecked = twin
        return self._unchecked

    # ---- specializations ----------------------------------------------------------------------
    def _entry(self, key, tree, n_leaves, refs):
        entry = self._cache.get(key)
        if entry is None:
            with self._lock:
                entry = self._cache.get(key)
                if entry is None:
                    entry = _Entry(tree, n_leaves, ref_paths(tree, len(self.params)))
                    entry.jitted = self._jit(entry)
                    self._cache[key] = entry
        return entry

    def _jit(self, entry, donate=()):
        jax = load_jax()
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
            self.parameters.convert(list(leaves))
        self._traces += 1
        try:
            return self._evaluate(entry, leaves, batching=True)
        except Restart:
            # a reference left uncomputed by a batched call was used after all
            return self._evaluate(entry, leaves, batching=False)

    def _evaluate(self, entry, leaves, batching):
        ev = TraceEvaluator(self.mod, batching=batching, captured=self._captured,
                            limits=self.limits)
        ev.folds, ev.tail_loops, ev.capacity = self._folds, self._tail_loops, self.capacity
        ev.select_joins = self.select_joins
        # under rl.vmap the flags come back to the batch, which cannot retrace: a fixed default
        ev.row_steps = DEFAULT_ROW_STEPS if self.select_joins or self.row_steps is None else \
            self.row_steps
        entry.row_steps = self.row_steps
        ev.check_indices = self.check_indices
        refs = []
        args = [JTable(t[1], [leaves[j] for j in t[2]]) if t[0] == "table" else
                build_arg(t, leaves, refs) for t in entry.tree]
        initial = [r.value for r in refs]
        main = JClosure(self.main, {}, "@main", -1)
        try:
            result = ev.call(main, args)
        except RecursionError:
            raise CompileError("the program nests too deeply to trace (a recursion depth that "
                               "depends on a traced value?); use rl.evaluate") from None
        entry.unrolled = ev.unrolled()
        entry.ops = ev.ops
        out_leaves = []
        ref_ids = {id(r): k for k, r in enumerate(refs)}
        desc = encode(result, out_leaves, ref_ids)
        written, writes = [], []
        for k, (r, init) in enumerate(zip(refs, initial)):
            if r.value is not init:
                content = []
                written.append((k, encode(r.value, content, ref_ids)))
                writes.append(content)
        entry.out_desc = desc
        entry.written = written
        entry.written_leaves = [i for k, _ in written for i in leaf_indices(entry.tree, k)]
        entry.pure = is_pure(desc)
        out = pure_tree(desc, out_leaves) if entry.pure else out_leaves
        entry.faults = [message for _, message in ev.faults]
        if not self.select_joins and self.row_steps is not None and \
                self.row_steps < MAX_ROW_STEPS:
            entry.growable = ev.growable
        if not entry.ref_paths or not any(entry.ref_paths):
            ret = out                    # no reference arguments: no write-back outputs
        else:
            ret = (out, writes)
        if not ev.faults:
            return ret
        import jax.numpy as jnp      # run-time checks (a loop's capacity): a flag each
        return ret, jnp.stack([jnp.asarray(flag) for flag, _ in ev.faults])

    # ---- arguments ----------------------------------------------------------------------------
    def node_tables(self):
        """{parameter index: TableSpec} of the parameters passed as node tables (issue 17)."""
        return dict(self._tables)

    def explain(self):
        """In words, what this compilation makes of the program's recursion: which structure
        arguments are node tables folded by one loop and which unroll per structure, and why
        (docs/dynamic.md)."""
        from relayish.backend.jax.dynamic_rule import explain
        text = explain(self.mod, self.main)
        if self.growths:
            text += (f"\ncapacity: a run went past the rows of a loop that records them "
                     f"{self.growths} time(s); each doubled them and traced again (now "
                     f"{self.row_steps} steps; capacity={{\"steps\": S}} fixes them)")
        return text

    def _converted(self, args):
        """parameters.convert(args), except that a node-table parameter may take a NodeTable
        built already: rl.vmap encodes the trees of a batch, stacks their tables and maps the
        program over them, so its leaves are tracers here (backend/batching.py)."""
        p = self.parameters
        if not self._tables or not any(isinstance(a, NodeTable) for a in args):
            return p.convert(args)
        if len(args) != len(p):
            raise p.arity_error(len(args))
        return [self._checked_table(k, a, f"parameter {name} of {p.name}")
                if k in self._tables and isinstance(a, NodeTable) else
                p.checker.to_value(a, t, f"parameter {name} of {p.name}")
                for k, (a, t, name) in enumerate(zip(args, p.types, p.names))]

    def _checked_table(self, k, table, where):
        """A NodeTable passed for parameter k, checked as encoding a value would be: the
        layout of this program's spec (a table of another ADT would be read as garbage), the
        fixed capacity (another one would compile a second program, which a fixed capacity
        promises not to), and its arrays' shapes and dtypes (the jitted function would
        otherwise retrace with them)."""
        spec, fixed = self._tables[k], self.capacity.get("nodes")
        layout = spec.layout(table.capacity)
        if table.spec is not spec and (table.spec.data.header.name != spec.data.header.name
                                       or table.spec.layout(table.capacity) != layout):
            raise EvaluationError(
                f"bad argument for {where}: a node table of {table.spec.data.header.name} "
                f"laid out for another program; this program takes "
                f"{spec.data.header.name} tables: encode them with its "
                f"node_tables()[{k}].encode(value)")
        if fixed is not None and table.capacity != fixed:
            raise EvaluationError(
                f"bad argument for {where}: a node table of {table.capacity} rows, but the "
                f"program was compiled for a capacity of {fixed}: encode it with "
                f"node_tables()[{k}].encode(value, {fixed})")
        got = [(tuple(np.shape(x)), np.dtype(x.dtype)) for x in table.leaves]
        if got != layout:
            raise EvaluationError(
                f"bad argument for {where}: the node table's arrays are "
                f"{_layout_text(got)}, not the {_layout_text(layout)} of a "
                f"{spec.data.header.name} table of {table.capacity} rows")
        return table

    def _flatten_args(self, args):
        """(tensor leaves, cache key, rebuild trees, argument references) of checked `args`."""
        leaves, key, refs, ref_ids = [], [], [], {}
        tree = []
        for k, v in enumerate(self._converted(args)):
            spec = self._tables.get(k)
            if spec is None:
                tree.append(flatten_arg(v, leaves, key, refs, ref_ids))
                continue
            table = v if isinstance(v, NodeTable) else spec.encode(
                v, self.capacity.get("nodes"), f"parameter %{self.params[k].name_hint} of @main")
            key.append(("table", table.capacity))
            tree.append(("table", spec, list(range(len(leaves), len(leaves) + len(table.leaves)))))
            leaves.extend(table.leaves)
        return leaves, tuple(key), tree, refs


def _with_writes(entry, outcome):
    """(result, written reference contents) from the jitted function's outputs; a run-time
    check that failed (entry.faults: a loop's capacity, an index) is an EvaluationError."""
    if entry.faults:
        outcome, flags = outcome
        if isinstance(flags, load_jax().core.Tracer):
            # called inside another trace (rl.vmap's jax.vmap of this function): the flags
            # are values of that trace, which must check them itself (notes/jax-backend.md)
            return _with_writes_unchecked(entry, outcome)
        failed = [m for m, f in zip(entry.faults, np.asarray(flags)) if f]
        if failed and all(m in entry.growable for m in failed):
            raise _Overflow()
        if failed:
            raise EvaluationError("; ".join(failed))
    return _with_writes_unchecked(entry, outcome)


def _with_writes_unchecked(entry, outcome):
    if not entry.ref_paths or not any(entry.ref_paths):
        return outcome, []
    return outcome


def _layout_text(layout):
    return "[" + ", ".join(f"{dtype.name}{list(shape)}" for shape, dtype in layout) + "]"


CAPACITY_KEYS = ("nodes", "steps")


def dynamic_capacity(capacity):
    """The checked capacity={"nodes": rows of a node table (default: the node count rounded
    up to a power of two, so a data set compiles once per bucket), "steps": iterations of a
    loop whose trip count is traced}."""
    if capacity is None:
        return {}
    from relayish.errors import RelayishError
    if not isinstance(capacity, dict):
        raise RelayishError(f"capacity must be a dict (keys {', '.join(CAPACITY_KEYS)}), got "
                            f"{type(capacity).__name__}")
    for key, value in capacity.items():
        if key not in CAPACITY_KEYS:
            raise RelayishError(f"unknown capacity {key!r}; the capacities are "
                                f"{', '.join(CAPACITY_KEYS)}")
        if isinstance(value, bool) or not isinstance(value, int) or value <= 0:
            raise RelayishError(f"capacity {key} must be a positive int, got {value!r}")
    return dict(capacity)


def compile_jax(f_or_mod, device="cpu", limits=None, capacity=None, check_indices=True):
    """`rl.compile(f_or_mod, backend="jax", device=..., limits=..., capacity=...,
    check_indices=...)`: see JaxFunction, TRACE_LIMITS, dynamic_capacity and index_checks.py.
    Type-checked once, by the rule every backend shares (runtime/check.py)."""
    mod = None
    if isinstance(f_or_mod, Expr):
        # the trace looks globals up in a Module: one whose @main is the function
        mod = Module.from_expr(f_or_mod)
        f_or_mod = mod["main"]
    mod, main = checked(f_or_mod, mod, who="rl.compile", error=CompileError)
    return JaxFunction(mod, main, device, limits, capacity, check_indices)
