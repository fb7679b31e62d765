"""Running the pending program: collect, key structurally, build once, run many times.

Contract. `run_pending()` computes every live handle whose node is pending, as ONE relayish
program `fn(leaves...) -> (outputs...)`:

1. collect: walk back from the outputs (an explicit stack), stopping at nodes with a value
   (they become the program's parameters) -- bindings only dead handles needed are never
   reached, so never computed;
2. normalise and key: every leaf is a parameter known by its type alone (constants and
   Python scalars included), bindings are numbered in creation order, so the key
   `(param types, (kind, op, attrs, arg numbers) per binding, output numbers)` is the same
   for every iteration of a training loop whatever its data;
3. look the key up: the first sighting runs the program on the interpreter (no compile
   cost for one-off work); a repeat builds it once more, shares repeated pure
   subexpressions (rl.passes.cse), compiles it with the jax backend and caches the
   compiled callable, so later sightings pay only the run;
4. store the results: outputs get their values; the derivation of every binding that does
   not require gradients is dropped (the pending graph goes back to nothing), while bindings
   recorded with gradients keep theirs for `re.grad`, and their non-differentiable
   arguments are outputs too, so the kept graph never needs an uncomputed value.

The same collect/key/build serves `re.pending()` and `re.grad` (autodiff.py).
"""
from __future__ import annotations

import itertools
import operator
import time

from relayish.errors import RelayishError
from relayish.eager.graph import STATE, TRIE_RESET_HOOKS
from relayish.ir.expr import Call, Function, Let, Tuple, TupleGetItem, Var
from relayish.ir.op import get_op

STATS = {"runs": 0, "hits": 0, "misses": 0, "compiles": 0, "bindings_run": 0,
         "interpret_s": 0.0, "compile_s": 0.0, "gradient_s": 0.0}
_CACHE: dict = {}          # walked program's key -> _Entry
_SEGMENTS: dict = {}       # (segment state, output positions) -> _Entry


class _Entry:
    __slots__ = ("func", "compiled", "seen")

    def __init__(self, func):
        self.func = func
        self.compiled = None
        self.seen = 0


class Program:
    """A collected piece of the graph: `params` (nodes given as arguments), `bindings` (nodes
    computed, in creation order), `outputs` (nodes returned), and its structural key."""
    __slots__ = ("params", "bindings", "outputs", "key")

    def __init__(self, params, bindings, outputs, keyed=True):
        self.params, self.bindings, self.outputs = params, bindings, outputs
        self.key = None
        if keyed:
            self._stamp()

    def _stamp(self):
        params, bindings, outputs = self.params, self.bindings, self.outputs
        # numbers stamped on the nodes (`num`): no dictionary keyed by id on the hot path
        rows = []
        for i, n in enumerate(params):
            n.num = i
            rows.append(("p", n.type))
        i = len(params)
        for n in bindings:
            n.num = i
            i += 1
            rows.append((n.shape_key, tuple([a.num for a in n.args])))
        rows.append(("out", tuple([n.num for n in outputs])))
        self.key = tuple(rows)

    def function(self, single=False, perturb=()) -> Function:
        """The program as a relayish Function (result: a tuple of the outputs, or the one
        output when `single`). `perturb`: bindings whose value every later reader sees plus
        a new parameter (`d_i`, placed first, in this order): differentiating with respect
        to it gives the gradient at that binding, while the paths through it still reach
        what computed it (re.grad's total derivatives)."""
        var_of = {}
        params = []
        offsets = {}
        for i, n in enumerate(perturb):
            d = Var(f"d{i}", n.type)
            offsets[id(n)] = d
            params.append(d)
        for i, n in enumerate(self.params):
            v = Var(f"x{i}", n.type)
            var_of[id(n)] = v
            params.append(v)
        lets = []
        for n in self.bindings:
            args = [var_of[id(a)] for a in n.args]
            if n.kind == "op":
                value, hint = Call(n.op, args, dict(n.attrs)), n.op.name.replace(".", "_")
            elif n.kind == "call":
                # let-bound, so rl.passes.inline may open it up and cse share its forward
                # values with the recorded ones
                fv = Var("fn", None)
                lets.append((fv, n.op.main if isinstance(n.op, (Embedded, Checkpointed))
                               else n.op))
                value, hint = Call(fv, args), "call"
            elif n.kind == "tuple":
                value, hint = Tuple(args), "tup"
            else:
                value, hint = TupleGetItem(args[0], n.attrs), "field"
            v = Var(hint, n.type)
            var_of[id(n)] = v
            lets.append((v, value))
            d = offsets.get(id(n))
            if d is not None:
                seen = Var(hint, n.type)
                lets.append((seen, Call(get_op("add"), [v, d], {})))
                var_of[id(n)] = seen
        outs = [var_of[id(n)] for n in self.outputs]
        body = outs[0] if single else Tuple(outs)
        for v, value in reversed(lets):       # built inside out: no recursion down the chain
            body = Let(v, value, body)
        return Function(params, body)


    def program(self, single=False, perturb=()):
        """`function()`, or a Module whose @main it is when a call embeds a Module's @main
        that calls other globals (their definitions are copied in; see Embedded)."""
        func = self.function(single, perturb)
        embedded = list({id(n.op): n.op for n in self.bindings
                         if n.kind == "call" and isinstance(n.op, Embedded)}.values())
        if not embedded:
            return func
        from relayish.ir.module import Module
        mod = Module()
        from relayish.ir.structural import structural_equal
        for e in embedded:
            for gv, f in e.mod.functions.items():
                name = gv.name_hint
                if name == "main":
                    continue
                if name in mod:
                    # a gradient Module keeps the globals of the Module it differentiates
                    if mod[name] is f or structural_equal(mod[name], f):
                        continue
                    raise RelayishError(f"two embedded Modules define @{name} differently: "
                                        f"one recorded program cannot hold both")
                mod[gv] = f
            for data in e.mod.type_definitions.values():
                if data.header.name not in {t.name for t in mod.type_definitions}:
                    mod.add_type(data)
        mod["main"] = func
        return mod


class Checkpointed:
    """The Function of a `re.checkpoint` region, called from a recorded program: it runs as
    a call of `main`; re.grad recomputes it in the backward pass (eager/checkpoint.py). One
    object per structure: it stands in the structural key."""
    __slots__ = ("main", "ret")

    def __init__(self, main, ret):
        self.main = main
        self.ret = ret


class Embedded:
    """A Module's @main called from a recorded program (re.call of a Module, or a gradient
    that relayish's AD returns as a Module). The recorded program then becomes a Module with
    the other globals copied in and `main`'s Function let-bound and called; so `main` must not
    call @main itself. One object per Module: it stands in the structural key."""
    __slots__ = ("mod", "main")

    def __init__(self, mod):
        from relayish.ir.analysis import global_refs
        self.mod = mod
        self.main = mod["main"]
        if "main" in global_refs(self.main):
            raise RelayishError("a Module whose @main calls @main itself cannot be embedded "
                                "in a recorded program")


def collect(outputs, is_param, leading=()) -> Program:
    """Walk back from `outputs` (an explicit stack); `is_param(node)` stops the walk there.
    The parameters are `leading` (in that order), then the others in order of first use."""
    params, bindings = [], []
    epoch = next(_WALKS)        # stamped on each node reached (`mark`): no id set to fill
    stack = list(outputs)
    while stack:
        n = stack.pop()
        if n.mark == epoch:
            continue
        n.mark = epoch
        if is_param(n):
            params.append(n)
            continue
        if n.args is None:
            raise RelayishError("internal: a recorded value has neither a value nor a derivation")
        bindings.append(n)
        stack.extend(n.args)
    bindings.sort(key=_SERIAL)
    return Program(_first_use(params, bindings, outputs, leading), bindings, outputs)


_WALKS = itertools.count(1)
_SERIAL = operator.attrgetter("serial")


def _first_use(params, bindings, outputs, leading=()):
    """Parameters in the order the bindings first use them: a data-independent order."""
    wanted = {id(p) for p in params}
    ordered, placed = list(leading), {id(p) for p in leading}
    for n in [a for b in bindings for a in b.args] + list(outputs):
        if id(n) in wanted and id(n) not in placed:
            placed.add(id(n))
            ordered.append(n)
    return ordered


def pending_outputs() -> list:
    """The nodes of live handles that are not computed yet, in creation order (every one was
    recorded in the current segment: a run computes every live pending node)."""
    return [n for n in STATE.nodes if n.handles and n.value is None]


def pending_program() -> Program:
    return collect(pending_outputs(), _has_value)


def _has_value(n):
    return n.value is not None


def run_pending() -> None:
    """Compute every pending live handle (see the module docstring)."""
    st = STATE
    if st.tracing:
        raise RelayishError("re.checkpoint: the function inspected a value (float(), bool(), "
                            "print, np.asarray) while it was recorded; a checkpointed function "
                            "must be a fixed computation of its tensors, without Python "
                            "control flow on their values")
    st.recorded_since_run = 0
    if not st.nodes:
        return
    if st.irregular:
        _run_walked()
    else:
        _run_segment()
    st.new_segment()


def _run_segment():
    """The fast path: the segment is the program, its key is `STATE.state`. Its outputs are
    the bindings with live handles and those a kept derivation reads."""
    st = STATE
    outputs = [n for n in st.nodes if n.handles or n.needed]
    if not outputs:
        return
    params = st.params
    key = (st.state, tuple([n.idx for n in outputs]))
    STATS["runs"] += 1
    entry = _SEGMENTS.get(key)
    if entry is not None and entry.compiled is not None:
        STATS["hits"] += 1
        entry.seen += 1
        results = entry.compiled(*[p.value for p in params])
    else:
        prog = Program(params, _live_bindings(st.nodes, outputs), outputs, keyed=False)
        if entry is None:
            STATS["misses"] += 1
            _SEGMENTS[key] = _Entry(None)
            results = _interpret(prog, [p.value for p in params])
        else:
            STATS["hits"] += 1
            entry.seen += 1
            t0 = time.perf_counter()
            entry.compiled = _compile(prog)
            _to_device(params)
            results = entry.compiled(*[p.value for p in params])   # jax traces, XLA compiles
            STATS["compile_s"] += time.perf_counter() - t0
    for n, value in zip(outputs, results):
        n.value = value
        if not n.requires_grad or n.leaf:
            n.args = None
    STATS["bindings_run"] += len(st.nodes)


def _to_device(params):
    """Numpy values read by a compiled program become jax arrays, once: jax copies a numpy
    argument to the device at every call (~3 us each), a jax array it takes as it is. The
    data, the leaves of Python numbers and the results of earlier steps are read again and
    again by a loop. (64-bit arrays stay numpy: jax would narrow them unless x64 is on.)
    On CPU they go to relayish's synchronous client (`run_device`), so the program runs
    there, and so do the next steps, which read its results."""
    import numpy as np
    from relayish.backend.jax.values import load_jax
    jax = None
    for p in params:
        v = p.value
        if v.__class__ is np.ndarray and v.dtype.itemsize <= 4:
            jax = jax or load_jax()
            p.value = jax.device_put(v, run_device())


_DEVICE = []        # [the device compiled steps run on, or None: jax's default]


def run_device():
    """The device of relayish's compiled steps: on CPU, the device of a CPU client of its own
    whose dispatch is synchronous (the program runs in the calling thread).

    Why: every run of a recorded step is followed at once by a wait for its result (a run
    happens because a value is inspected), so jax's default asynchronous CPU dispatch, which
    hands the program to a worker thread, can only add the hand-off -- and after a step's
    Python (tens of microseconds of recording) that worker has parked, so each call pays
    its wake-up and the result's (measured, notes/eager.md: the small MLP's call 120-130
    us async against 66 sync on a loaded machine; a 1024 x 1024 matmul chain the same both
    ways). jax's own flag (`jax_cpu_enable_async_dispatch`) is the process's, read once;
    this client leaves the user's jax code as it is. Arrays of the two clients mix freely
    in jax operations. None (jax's default device) where the default backend is not the
    CPU, where the user turned async dispatch off already, or if jax cannot make the
    client."""
    if _DEVICE:
        return _DEVICE[0]
    device = None
    try:
        import jax
        from jax._src.lib import xla_client
        if jax.default_backend() == "cpu" and jax.config.read("jax_cpu_enable_async_dispatch"):
            device = xla_client.make_cpu_client(asynchronous=False).local_devices()[0]
    except Exception:  # noqa: BLE001 - a private API of jax: without it, jax's default
        device = None
    _DEVICE.append(device)
    return device


def _live_bindings(nodes, outputs):
    """The bindings of the segment that the outputs need (backwards over it, no recursion)."""
    sid = STATE.seg_id
    need = {id(n) for n in outputs}
    kept = []
    for n in reversed(nodes):
        if id(n) in need:
            kept.append(n)
            for a in n.args:
                if a.seg == sid:
                    need.add(id(a))
    kept.reverse()
    return kept


def run_node(node) -> None:
    """Compute `node` if running the segment did not (a handle made on a node recorded before
    the last run, when no handle was alive on it)."""
    run_pending()
    if node.value is None:
        _run_walked([node])


def _run_walked(outputs=None):
    """The general path: walk back from the live pending nodes (a segment that reads an
    uncomputed value of an earlier one, left by a run inside an api function's recording)."""
    outputs = pending_outputs() if outputs is None else outputs
    if not outputs:
        return
    prog = collect(outputs, _has_value)
    # values a kept derivation reads must exist once this run is over
    extra = {}
    for n in prog.bindings:
        if n.requires_grad:
            for a in n.args:
                if not a.requires_grad and a.value is None and id(a) not in extra:
                    extra[id(a)] = a
    if extra:
        outs = {id(n): n for n in outputs}
        outs.update(extra)
        prog = Program(prog.params, prog.bindings,
                       sorted(outs.values(), key=lambda n: n.serial))
    results = execute(prog, [n.value for n in prog.params])
    for n, value in zip(prog.outputs, results):
        n.value = value
        # only a computed node forgets its derivation: an intermediate without a value may
        # still be read by a recording in flight (an api function's, when a run fell in it)
        if not n.requires_grad or n.leaf:
            n.args = None
    STATS["bindings_run"] += len(prog.bindings)


def execute(prog: Program, args) -> tuple:
    """Run `prog` on `args` through the structural cache (keyed by the walked program)."""
    STATS["runs"] += 1
    entry = _CACHE.get(prog.key)
    if entry is None:
        STATS["misses"] += 1
        entry = _CACHE[prog.key] = _Entry(None)
        entry.seen = 1
        return _interpret(prog, args)
    STATS["hits"] += 1
    entry.seen += 1
    if entry.compiled is None:
        t0 = time.perf_counter()
        entry.compiled = _compile(prog)
        try:
            return entry.compiled(*args)          # jax traces, XLA compiles
        finally:
            STATS["compile_s"] += time.perf_counter() - t0
    return entry.compiled(*args)


def _interpret(prog, args):
    """A first sighting: the interpreter (no compile cost for one-off work). Its time, the
    program's building included, is counted in STATS["interpret_s"]."""
    from relayish.backend.interp.api import evaluate
    t0 = time.perf_counter()
    try:
        return evaluate(prog.program(), *args)
    finally:
        STATS["interpret_s"] += time.perf_counter() - t0


def _compile(prog):
    """The compiled callable of a repeated program: the jitted function behind the jax
    backend's JaxFunction (its `jax_function()`), called directly -- the structural key fixes
    every argument's shape and dtype, so the checks of the JaxFunction's own call are the
    key's -- or, where that is refused (a 64-bit program run without x64 on), the
    JaxFunction itself."""
    from relayish.backend.api import compile as compile_program
    from relayish.backend.jax.function import NotTensorFunction
    STATS["compiles"] += 1
    run = compile_program(optimized(prog.program()), backend="jax")
    if getattr(run, "uses_x64", True):
        return run
    try:
        return run.jax_function()
    except NotTensorFunction:
        return run


def optimized(func):
    """What a repeated program is compiled from: embedded calls (gradient programs, re.call)
    inlined and their references evaluated away (partial_eval), so that cse shares the
    forward values a gradient program recomputes with the recorded ones; `zeros + g` of the
    gradient's accumulators simplified; what is left unused removed. (Measured on the large
    MLP of benchmarks/eager.py: the compiled step went from 1.9x to about 1x jax.jit's.)"""
    from relayish.ir.passes.api import CSE, dead_code, inline, partial_eval, simplify
    # merged values bound by lets (the default pipeline's cse): computed once on any backend
    return dead_code(simplify(CSE(bind=True)(partial_eval(inline(func)))))


STATE.auto_run = run_pending
TRIE_RESET_HOOKS.append(_SEGMENTS.clear)       # keyed by states the table no longer knows


CLEAR_HOOKS: list = []      # the caches of other modules (autodiff's gradient programs)


def clear_cache() -> None:
    """Forget every compiled program and gradient program, and zero the counters (tests,
    benchmarks)."""
    _CACHE.clear()
    _SEGMENTS.clear()
    for hook in CLEAR_HOOKS:
        hook()
    for k in STATS:
        STATS[k] = 0
