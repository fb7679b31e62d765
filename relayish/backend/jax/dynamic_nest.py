"""The gradient of a nested loop: a loop that records rows for a backward pass (reverse AD's
`@loop_ad`, dynamic_tail._RowsLoop) inside another such loop's body, under a traced if, or in
a fold's clause -- compiled by replaying the inner loop in the backward pass.

    value = forward(ev, loop, name, args)     # dynamic_tail.tail_call's hook where it nests
    result = replay(ev, info, closure)        # TraceEvaluator.enter's, when the tape is called

The inner loop's rows (its pools and its backpropagator family) cannot outlive the outer
iteration or the branch they are traced in. So the forward runs the inner loop as usual (its
rows are tensors of that iteration, dead once it ends: jax drops the loop's unused carries)
and leaves in the backpropagator reference, instead of the inner tape, a **replay closure**:
a JClosure of a Function of no parameters whose environment is the inner call's arguments,
the backpropagator's content before the call (`base`) and, per reference of the call's result,
a fresh reference `R` made in the enclosing context (a pool slot of the outer loop's row: the
adjoint the code after the call accumulates into). Being an ordinary closure of tensors,
references and closures, it is stored in the outer loop's family rows, joined by traced ifs
and decoded by the outer backward loop like any backpropagator -- O(1) residuals per outer
iteration, the inner loop's inputs.

Called (TraceEvaluator.enter; at the point of the backward pass where the inner tape would
run), it runs the inner loop again from its arguments with a fresh backpropagator reference
holding `base`, adds each R into the corresponding result reference of that run, and tail-
calls the run's tape: dynamic_rows' backward loop over the replayed rows, which ends by
calling `base`. The inner forward is computed twice (the classic recomputation of an inner
solve in its adjoint), and the inner rows exist once, inside the backward step that uses them:
memory is one inner tape, not one per outer iteration; costs follow the trip counts taken.

Inside an outer backward loop the step's pool slots live in per-step cells (dynamic_defer
`Guard.cache`); the replay writes the changed cells to their tables first (`_spill`), runs
the inner loop and its backward loop on the tables, and reads the cells back (`_reload`)
before the outer step goes on. An outer weight gradient the inner
backward loop adds to is then not deferred by the outer loop (`Undefer`: carried instead).

Refused (a CompileError naming the inner function, as before): an inner loop that writes
references other than its backpropagator (a carried tensor reference: its forward effects would
run twice), one with several families, and one over a node table (a left fold's gradient).
"""
from __future__ import annotations

from relayish.errors import CompileError
from relayish.ir.expr import Function, Tuple, Var
from relayish.ir.types import RefType, TupleType, is_tensor_tree
from relayish.backend.jax.dynamic_defer import _tmap
from relayish.backend.jax.dynamic_rows import _at, _set
from relayish.backend.jax.dynamic_tables import JCursor
from relayish.backend.jax.dynamic_tail import _RowsLoop, _zeros
from relayish.backend.jax.values import JClosure, JRef, JUnion, TailCall, next_serial


class ReplayInfo:
    """What the replay closure of one loop holds: the Vars of its environment (the call's
    arguments, the result's fresh references, the backpropagator before the call), and which
    argument is the backpropagator reference."""

    def __init__(self, loop, name, n_args, n_refs):
        self.loop, self.name = loop, name
        self.arg_vars = [Var(f"arg{k}") for k in range(n_args)]
        self.ref_vars = [Var(f"adjoint{k}") for k in range(n_refs)]
        self.base_var = Var("base")
        self.func = Function([], Tuple([]))
        self.end = Function([], Tuple([]))      # the replayed tape's base: returns ()
        self.bp_index = None


def _ref_positions(t, value, out):
    """The references of a result of type `t` (a tuple tree): (path, value) pairs."""
    stack = [((), t, value)]
    while stack:
        path, t, v = stack.pop()
        if isinstance(t, TupleType):
            stack.extend((path + (k,), f, v[k]) for k, f in enumerate(t.fields))
        elif isinstance(t, RefType):
            out.append((path, t, v))
    out.sort(key=lambda x: x[0])
    return out


def _replace(value, path, new):
    if not path:
        return new
    k = path[0]
    return tuple(_replace(x, path[1:], new) if j == k else x for j, x in enumerate(value))


def _refused(name, why):
    return CompileError(f"{name}: a loop whose trip count is traced and that records rows for "
                        f"a backward pass (a gradient's loop) {why}; not compiled as a loop "
                        "yet (the gradient of a nested loop): use rl.evaluate")


class _top_level:
    """The inner loop's machinery runs as at the top of a trace: no enclosing fold loop, join
    depth or backward step (its writes are still logged in the enclosing frames)."""

    def __init__(self, ev):
        self.ev = ev

    def __enter__(self):
        ev = self.ev
        self.saved = ev.loop, ev.join_depth, ev.guard
        ev.loop, ev.join_depth, ev.guard = None, 0, None

    def __exit__(self, *exc):
        self.ev.loop, self.ev.join_depth, self.ev.guard = self.saved
        return False


def _run_rows(ev, loop, name, args):
    """The inner loop with rows, run at the top level; (its value or None to unroll, the
    loop object)."""
    rows = _RowsLoop(ev, loop, name, args)
    with _top_level(ev):
        value = rows.run()
    for fam in rows.families:
        fam.local = True             # its backward loop runs inside the replay's step/branch
    return value, rows


def forward(ev, loop, name, args):
    """The value of the inner loop's call where it nests (module docstring); None to unroll."""
    if any(isinstance(a, JCursor) for a in args):
        raise _refused(name, "over a node table inside another loop or under a traced if")
    bp = [a for a in args if isinstance(a, JRef)]
    before = {id(r): r.value for r in bp}
    value, rows = _run_rows(ev, loop, name, args)
    if value is None:
        return None
    if not rows.families:
        return value                 # it recorded no closure: nothing to replay
    carried = [r for r in rows.carried if not ev.is_fault_cell(r)]
    fams = rows.families
    if len(fams) != 1 or carried or not any(fams[0].ref is a for a in args):
        raise _refused(name, "that writes references other than its backpropagator, inside "
                             "another loop or under a traced if")
    ref = fams[0].ref
    info = ev.replays_of.get(loop)
    refs = _ref_positions(loop.ret, value, [])
    if not all(is_tensor_tree(t.value) for _, t, _ in refs):
        raise _refused(name, "returning a reference to references, inside another loop or "
                             "under a traced if")
    if info is None:
        info = ev.replays_of[loop] = ReplayInfo(loop, name, len(args), len(refs))
        ev.replays[info.func] = info
    info.bp_index = next(k for k, a in enumerate(args) if a is ref)
    env = dict(zip(info.arg_vars, args))
    env[info.base_var] = before[id(ref)]
    for var, (path, t, _) in zip(info.ref_vars, refs):
        fresh = ev.new_ref(_zeros(t.value))
        env[var] = fresh
        value = _replace(value, path, fresh)
    ev.write(ref, JClosure(info.func, env, f"{name} (replayed)", next_serial()))
    return value


def _guards(guard):
    """The guard and those enclosing it (a row -1 step's covers some pools only)."""
    out = []
    while guard is not None:
        out.append(guard)
        guard = guard.outer
    return out


def _spill(ev, guard):
    """Write the step's changed pool-slot cells to their tables, and let the step's closures
    read and write the tables directly until `_reload` (Guard.direct)."""
    for g in _guards(guard):
        if g.direct:
            continue
        for e in g.cache.values():
            if e.cell.value is e.original:
                continue
            tables = ev.read(e.pool.cell)
            ev.write(e.pool.cell, _tmap(lambda t, v: _set(t, e.slot, v), tables,
                                        e.pool.store(e.cell.value)))
        g.direct = "spilled"


def _reload(ev, guard):
    """The step's cells read back from the tables the replayed loop wrote."""
    for g in _guards(guard):
        if g.direct != "spilled":
            continue
        g.direct = False
        for e in g.cache.values():
            ev.write(e.cell, e.pool.load(_tmap(lambda t: _at(t, e.slot), ev.read(e.pool.cell))))


def replay(ev, info, closure):
    """Call a replay closure (module docstring): run the inner loop again, add the adjoints
    accumulated after the call into its result's references, run its tape, and tail-call
    the backpropagator from before the call. The tape runs to its end here, inside the
    call (its rows and pools are values of this trace only), not as a pending tail call."""
    env = closure.env
    args = [env[v] for v in info.arg_vars]
    guard = ev.guard
    if guard is not None:
        _spill(ev, guard)
    tape = JRef(JClosure(info.end, {}, "the end of a replayed tape", next_serial()),
                next_serial())
    args[info.bp_index] = tape
    value, _ = _run_rows(ev, info.loop, info.name, args)
    if value is None:
        raise CompileError(f"internal: {info.name}'s replayed loop unrolled")
    with _top_level(ev):        # tables written directly (spilled above)
        for var, (_, _, ref) in zip(info.ref_vars, _ref_positions(info.loop.ret, value, [])):
            added = env[var]
            ev.write(ref, _tmap(lambda a, b: a + b, ev.read(ref), ev.read(added)))
    ev.call(tape.value, [])
    if guard is not None:
        _reload(ev, guard)
    return TailCall(env[info.base_var], [])


__all__ = ["forward", "replay"]
