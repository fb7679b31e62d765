"""Shape B of issue 17: a tail recursion whose depth depends on traced values, as ONE
lax.while_loop -- its reverse-AD output too.

    value = tail_call(ev, loop, callee, args)   # TraceEvaluator.enter's hook; None: unroll

`@loop(x) = if (sum(x * x) > eps) { @loop(step(x)) } else { x }` unrolls forever at trace time
(each level is a traced join whose alternative recurses again; limits.py stops it with a
CompileError). A function dynamic_rule.find_tail_loops recognized (every use of itself a tail
call; a result of tensors, tuples and references to tensors) called with traced tensor
arguments runs instead as `lax.while_loop`. Its body is traced with two cells (JRefs made
before it, so the joins of the body's traced ifs join them like any reference): where the body
calls the function again, the call writes `continue := True` and `next := the arguments` and
gives a stand-in of the result type; where it returns a value, `continue` stays False and the
value is the loop's result. The loop runs while `continue`, at most `capacity["steps"]`
iterations; a loop still going after them sets a flag the host turns into an EvaluationError
naming the function and the bound, never a silent result.

**Plain loops** (`_run`): arguments and result are tensors and tuples; the loop carries the
arguments. Default bound DEFAULT_STEPS.

**Loops that leave rows** (`_RowsLoop`): arguments that hold references too -- reverse AD's
output `@loop_ad((x, %rx), eps, %bp)`, whose iteration makes `%r = ref(0)` (the adjoint of
its next x, passed on as the next `%rx`) and writes `%bp := fn() { ...; %prev() }`. What
outlives an iteration is a table row, with dynamic_rows.py's machinery (the fold's): `ref(v)`
in iteration i is slot i*K + k of a **pool** of its content type; an outer reference the
iteration writes a closure to is a **family** whose row i holds that closure (its captured
tensors stored at row i, `%prev` the previous row); outer references holding tensors are
carried. Calling the last row (`!%bp()` in the backward pass) is dynamic_rows' backward loop
over the rows. The loop carries its arguments by position: a tensor, a pool slot, or the
entry's own object where every iteration passes it on unchanged (`eps`, `%bp`, a weight and
its adjoint reference: kept out of the rows).
  * The first iteration is **peeled** (traced into the enclosing program; its references are
    slots of the pools' last row): it alone receives the caller's references (`%rx` made
    before the loop), so the loop's iterations, which receive pool references, are uniform
    rows. Its writes stay ordinary writes (`%bp` then holds its closure or the caller's: the
    family's row -1).
  * An iteration that writes no new closure (the exit branch writes no backpropagator) keeps
    the family's pointer (dynamic_rows._kept, as a fold's `Nil => h0` clause), so the
    backward loop skips its row.
  * The call's value joins the peeled iteration's result (zero trips) with the loop's.
  * Rows are tables: the bound is `capacity["steps"]` (rl.compile(..., capacity={"steps":
    N})), default DEFAULT_ROW_STEPS = 1,024 for such loops (100,000 rows of a float32[256]
    pool alone would be 100 MB); a longer run is the step-capacity EvaluationError.

Called with trace-time constant arguments the recursion unrolls as before (its depth is known
when tracing; small static loops stay unrolled), and so do arguments other than tensors,
tuples, references and closures (a Nat counter), and -- for a loop with references -- an
iteration whose condition is a trace-time constant (a constant int counter) though a tensor
argument is traced. A function whose every tail position calls itself never ends and is not a
loop either.

**Nesting.** A loop's body is traced as a function of its own (`_body_context`: no enclosing
loop or join is active inside it), so a plain loop may run anywhere -- inside another loop's
body, under a traced if (a probe of joins.py's switch), in a fold's clause -- as a nested
lax.while_loop, and a loop with rows may run inside a plain loop's body (its pools and
families live and die within that body's iteration: the gradient of an inner descent inside
an outer one, GradBench's saddle). Run-time checks (a loop past its capacity) are fault
cells (TraceEvaluator.fault): the nested loop carries those its body raises, a join joins
them like any written reference. A loop with rows inside a loop that records rows itself,
under a traced if or in a backward step (its rows would have to outlive the iteration or the
branch: the gradient of a nested loop) is replayed in the backward pass instead
(dynamic_nest.py, `TraceEvaluator.nested_tail_call`). CompileErrors naming the function: an
argument position that holds
different kinds of values across iterations (a reference made before the loop in some, one
made in the loop in others) -- except in a gradient's loop, whose iterations may keep their
state (`_adopt`: the caller's reference becomes a pool slot) -- or a value made in an
iteration other than a tensor or a pool reference passed to the next one (a closure); a result
that returns a reference made before the loop from inside it; an outer reference the loop
writes data holding its references to (the gradient of a loop accumulating into an outer
reference: `%acc := (v, %r)`); `ref(...)` of a non-tensor in an
iteration.
"""
from __future__ import annotations

import numpy as np

from relayish.errors import CompileError
from relayish.backend.jax.dynamic_defer import _is_tree, _key, _leaves, _tmap
from relayish.backend.jax.dynamic_loops import _content_key, _reachable
from relayish.backend.jax.dynamic_tables import JCursor, JTable
from relayish.backend.jax.dynamic_rows import (Family, JPoolRef, JRow, Pool, _cast as _cast_to,
                                               new_pool_ref, write_family_rows)
from relayish.backend.jax.values import (Frame, JClosure, JRef, JUnion, TailCall, closure_name,
                                         describe, is_tensor, is_traced, load_jax,
                                         next_serial, serial_of)

DEFAULT_STEPS = 100_000
DEFAULT_ROW_STEPS = 1_024      # a loop with rows under rl.vmap (which cannot retrace per call)
FIRST_ROW_STEPS = 16           # ... elsewhere, the first capacity, doubled on each overflow
MAX_ROW_STEPS = 1 << 20        # ... up to this (then the capacity's EvaluationError)


def _zeros(t):
    """Zeros of a result type made of tensors and tuples."""
    import jax.numpy as jnp
    from relayish.backend.runtime.args import NP_DTYPES
    from relayish.ir.types import TupleType
    if isinstance(t, TupleType):
        return tuple(_zeros(f) for f in t.fields)
    return jnp.zeros(t.shape, NP_DTYPES[t.dtype])


class _Active:
    """The loop being traced: the function, its two cells, and (a rows loop) the loop object;
    `calls` collects the arguments of the recursive calls traced."""

    def __init__(self, loop, cont, nxt, rows=None):
        self.loop, self.cont, self.nxt, self.rows = loop, cont, nxt, rows
        self.calls = []


def tail_call(ev, loop, callee, args):
    """The value of a call of the recognized tail recursion `loop` (module docstring), or
    None when it should unroll (constant arguments) -- or, inside the loop's own body, the
    recorded recursive call."""
    active = ev.tail
    if active is not None and active.loop is loop:
        # the body calls itself: continue with these arguments
        ev.write(active.cont, np.asarray(True))
        if active.rows is not None:
            active.calls.append(list(args))
            ev.write(active.nxt, tuple(args))
            return active.rows.stand_in(loop.ret)
        ev.write(active.nxt, tuple(_tmap(lambda v, o: _cast(v, o), a, o)
                                   for a, o in zip(args, active.nxt.value)))
        return _zeros(loop.ret)
    # a node table (reverse AD's left fold gets the lifted list): a cursor at its root, carried
    # by row like a pool slot (dynamic_tables.JCursor; `match` on it: dynamic_left.py)
    args = [JCursor(a, a.count - 1) if isinstance(a, JTable) else a for a in args]
    # constants unroll at trace time; so do arguments other than tensors, references and
    # closures (a Nat counter: a traced condition then ends in limits.py's CompileError)
    if not all(_loop_value(a) for a in args) or \
            not (any(is_traced(x) for x in _tensors(args)) or
                 any(isinstance(a, JCursor) for a in args)):
        return None
    name = closure_name(callee)
    from relayish.ir.types import is_tensor_tree
    if all(_is_tree(a) for a in args) and is_tensor_tree(loop.ret):
        return _run(ev, loop, name, [_tmap(lambda v: _cast(v, v), a) for a in args])
    # a loop that leaves rows inside a plain loop's body is at the top of that body's trace;
    # inside a loop that leaves rows itself, its rows would have to outlive the iteration
    # inside a loop that leaves rows itself, or under a traced if, its rows would have to
    # outlive the iteration or the branch: its backward pass replays it (dynamic_nest.py)
    if ev.loop is not None or ev.join_depth or ev.guard is not None:
        return ev.nested_tail_call(loop, name, args)
    return _RowsLoop(ev, loop, name, args).run()


class JSync:
    """A callable value: merges the references a state-keeping loop adopted with their pool
    slots, then calls `inner` (_RowsLoop._adopt). `to_ref`: each reference gets its slot's
    content. Else (`released`: each reference's content and its pool's tables as the forward
    loop left them) the slot gets what was added to the reference since: all of it when the
    pool is as the loop left it, the increment `ref - content then` when both copies were
    added to (a backpropagator's adjoints, whose writes are accumulations `r := !r + g`), and
    nothing when the reference is unchanged."""
    __slots__ = ("inner", "adopted", "to_ref", "released", "serial")

    def __init__(self, inner, adopted, to_ref, released=None):
        self.inner, self.adopted, self.to_ref = inner, adopted, to_ref
        self.released = released
        self.serial = next_serial()

    def enter(self, ev, args):
        for k, (ref, slot) in enumerate(self.adopted):
            if self.to_ref:
                ev.write(ref, slot.read(ev))
                continue
            then, tables = self.released[k]
            now = ev.read(ref)
            if now is then:
                continue
            if slot.pool.cell.value is tables:
                slot.write(ev, now)
            else:
                slot.write(ev, _tmap(lambda s, a, b: s + (a - b), slot.read(ev), now, then))
        return TailCall(self.inner, list(args))


def _backpropagators(v):
    """Is `v` closures of no parameters (a union of them too): what reverse AD's `%bp`
    holds?"""
    alts = v.alts if isinstance(v, JUnion) else [v]
    return all(isinstance(a, JClosure) and not a.func.params for a in alts)


def _loop_value(v):
    """Tensors, tuples, references and closures: what a loop's arguments may be."""
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, tuple):
            stack.extend(x)
        elif not (is_tensor(x) or isinstance(x, (JRef, JPoolRef, JClosure, JCursor))):
            return False
    return True


def _tensors(args):
    """The tensors among the arguments (not inside references or closures)."""
    out, stack = [], list(args)
    while stack:
        x = stack.pop()
        if isinstance(x, tuple):
            stack.extend(x)
        elif is_tensor(x):
            out.append(x)
    return out


def _cast(v, like):
    import jax.numpy as jnp
    from jax import lax
    return lax.convert_element_type(jnp.asarray(v), jnp.asarray(like).dtype)


def _run(ev, loop, name, args):
    jax = load_jax()
    import jax.numpy as jnp
    from jax import lax
    func = loop.func
    steps = ev.capacity.get("steps", DEFAULT_STEPS)
    start = next_serial()
    cont, nxt = JRef(np.asarray(False), start), JRef(tuple(args), start)
    checks = []                 # the fault cells (ev.fault) an iteration raises: carried

    def step(values, flags):
        """One iteration: (continue, next arguments, result, fault flags) of the body on
        `values`, traced as a function of its own: whatever encloses the loop (another loop, a
        traced if) is outside it, so the body is evaluated at the top level of its trace."""
        cont.value, nxt.value = np.asarray(False), tuple(values)
        for cell, flag in zip(checks, flags):
            cell.value = flag
        with _body_context(ev, _Active(loop, cont, nxt, None)):
            result = ev.eval(func.body, dict(zip(func.params, values)))
        if not _is_tree(result):
            raise CompileError(f"{name} returns a non-tensor value from a loop")
        return (jnp.asarray(cont.value), list(nxt.value),
                _tmap(lambda v, o: _cast(v, o), result, _zeros(loop.ret)),
                [jnp.asarray(cell.value, bool) for cell in checks])

    # trace once to find writes to references made before the loop (not carried yet)
    frame = Frame(start)
    saved_frames = ev.frames

    def probe():
        ev.frames = [frame]
        try:
            step(args, [])
        finally:
            ev.frames = saved_frames
            for ref, old in frame.log.values():
                ref.value = old
        return []
    jax.make_jaxpr(probe)()
    cells = {id(c) for c in ev.fault_cells.values()}
    outer = [ref for ref, _ in frame.log.values()
             if ref is not cont and ref is not nxt and id(ref) not in cells]
    if outer:
        raise CompileError(f"{name}: its loop writes a reference made outside it; a loop whose "
                           "trip count is traced is not compiled with such effects yet: use "
                           "rl.evaluate")
    checks.extend(ref for ref, _ in frame.log.values() if id(ref) in cells)
    flags0 = [jnp.asarray(cell.value, bool) for cell in checks]

    def body(state):
        i, going, values, _, flags = state
        saved = ev.frames
        ev.frames = []
        try:
            going, values, result, flags = step(values, flags)
        finally:
            ev.frames = saved
        return i + 1, going, values, result, flags
    state = (jnp.asarray(0, jnp.int32), jnp.asarray(True), list(args), _zeros(loop.ret), flags0)
    _, going, _, result, flags = lax.while_loop(lambda s: s[1] & (s[0] < steps), body, state)
    for cell, old, flag in zip(checks, flags0, flags):
        cell.value = old
        ev.write(cell, flag)
    ev.fault(going, f"{name} ran more than {steps} iterations, the loop's step "
                    "capacity (compile with a larger one: "
                    "rl.compile(..., capacity={\"steps\": N}))")
    return result


class _body_context:
    """While a loop's body traces: the loop is `active` (its recursive call continues it), and
    no enclosing loop or join is (the body is a function of its own, so a join or a loop
    inside it starts at the top level)."""

    def __init__(self, ev, active):
        self.ev, self.active = ev, active

    def __enter__(self):
        ev = self.ev
        self.saved = ev.tail, ev.loop, ev.guard, ev.join_depth
        ev.tail, ev.loop, ev.guard, ev.join_depth = self.active, None, None, 0

    def __exit__(self, *exc):
        ev = self.ev
        ev.tail, ev.loop, ev.guard, ev.join_depth = self.saved
        return False


# ---- loops that leave rows (reverse AD's output) ---------------------------------------------

def _flatten(v, out):
    """The leaves of a value by position (tuples opened), appended to `out`."""
    if isinstance(v, tuple):
        for x in v:
            _flatten(x, out)
    else:
        out.append(v)
    return out


def _shape(v):
    """The tuple structure of a value (its leaves as None)."""
    return tuple(_shape(x) for x in v) if isinstance(v, tuple) else None


def _rebuild(shape, it):
    if shape is None:
        return next(it)
    return tuple(_rebuild(s, it) for s in shape)


def _origin(v, start):
    """What a loop carries, in words."""
    if isinstance(v, JUnion):
        alts = ", ".join(_origin(a, start) for a in v.alts)
        return f"a value chosen by a traced condition ({alts})"
    if isinstance(v, JPoolRef):
        return "a reference made in the loop"
    if isinstance(v, JRef):
        return "a reference made before the loop" if v.serial < start else "a reference"
    if isinstance(v, JClosure):
        return f"the closure {closure_name(v)}"
    return "a " + describe(v)


def _holds_closure(v):
    """Does a reference's content hold a closure (a family's rows: a backpropagator)?"""
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, (JClosure, JRow)):
            return True
        if isinstance(x, tuple):
            stack.extend(x)
        elif isinstance(x, JUnion):
            stack.extend(x.alts)
    return False


class _RowsLoop:
    """A tail loop whose iterations make references and closures (module docstring).

    Positions of the arguments (leaves, tuples opened) are of one kind each: ("inv",) the
    entry's object, passed on unchanged by every iteration; ("t", shape, dtype) a carried
    tensor; ("pool", pool) a reference made in an earlier iteration, its slot carried; ("row",
    table) a node of a node table (a left fold's list, dynamic_tables.JCursor), its row
    carried. The result's positions are "t" or "pool" too."""

    def __init__(self, ev, loop, name, args):
        self.ev, self.loop, self.name, self.func = ev, loop, name, loop.func
        self.args = list(args)
        self.grows = "steps" not in ev.capacity and ev.row_steps is not None
        self.steps = ev.capacity.get("steps") or ev.row_steps or DEFAULT_ROW_STEPS
        tables = [a.table.capacity for a in self.args if isinstance(a, JCursor)]
        if tables and "steps" not in ev.capacity:
            # a left fold's gradient moves to a child every iteration: at most a row each
            self.grows, self.steps = False, max(tables)
        self.bound = self.steps - 1               # iterations after the peeled one
        self.rows = max(self.bound, 1)            # table rows (at least one, for shapes)
        self.start = next_serial()
        self.outer, self.outer_refs = _reachable(self.args)
        self.entry = _flatten(tuple(self.args), [])
        self.arg_shape = _shape(tuple(self.args))
        self.pools, self.counts = {}, {}
        self.carried, self.families = [], []
        self.i, self.valid, self.fold = None, None, None   # ev.loop's interface (dynamic_rows)
        self.cont = JRef(np.asarray(False), self.start)
        self.nxt = JRef((), self.start)
        self.arg_kinds = self.res_kinds = self.res_shape = None

    # -- ev.loop's interface: references made in an iteration ----------------------------------
    def pool(self, key):
        pool = self.pools.get(key)
        if pool is None:
            pool = self.pools[key] = Pool(key, self.rows + 1)   # + the peeled iteration
            pool.owner = self.name
            pool.cell.value = pool.zeros(1)
        return pool

    def new_ref(self, value):
        """`ref(value)` in an iteration: the next slot of its type's pool at row i."""
        import jax.numpy as jnp
        return new_pool_ref(
            self, value, lambda pool, k: jnp.asarray(self.i * (pool.per_row or 1) + k, jnp.int32),
            "a loop with a traced trip count")

    def spare(self, pool):
        import jax.numpy as jnp
        return jnp.asarray(pool.rows * (pool.per_row or 1) + pool.entries, jnp.int32)

    def stand_in(self, t):
        """The value of the recursive call inside the body (the iteration continues, so it is
        never the result): zeros, a reference a pool's spare slot."""
        from relayish.ir.types import RefType, TupleType
        if isinstance(t, TupleType):
            return tuple(self.stand_in(f) for f in t.fields)
        if isinstance(t, RefType):
            pool = self.pool(_content_key(t.value))
            return JPoolRef(pool, self.spare(pool))
        return _zeros(t)

    # -- one iteration ------------------------------------------------------------------------
    def _step(self, args, nxt0):
        """The body on `args`: (continue, the next arguments, the result)."""
        ev = self.ev
        self.counts = {}
        self.cont.value, self.nxt.value = np.asarray(False), tuple(nxt0)
        saved_tail, saved_loop = ev.tail, ev.loop
        active = _Active(self.loop, self.cont, self.nxt, self)
        ev.tail, ev.loop = active, self
        try:
            result = ev.eval(self.func.body, dict(zip(self.func.params, args)))
        finally:
            ev.tail, ev.loop = saved_tail, saved_loop
        return self.cont.value, list(self.nxt.value), result, active.calls

    def _kinds(self, leaves, what):
        kinds = []
        for k, v in enumerate(leaves):
            if what == "argument" and v is self.entry[k]:
                kinds.append(("inv",))
            elif isinstance(v, JPoolRef):
                kinds.append(("pool", v.pool))
            elif isinstance(v, JCursor):
                kinds.append(("row", v.table))
            elif is_tensor(v):
                kinds.append(("t", tuple(np.shape(v)), np.dtype(v.dtype)))
            else:
                raise CompileError(self._mixed(what, v, k))
        return kinds

    def _mixed(self, what, v, k=None):
        if what == "argument":
            where = "an argument of the next iteration"
            if k is not None:
                sizes = [len(_flatten(a, [])) for a in self.args]
                top = int(np.searchsorted(np.cumsum(sizes), k, side="right"))
                where = f"its argument %{self.func.params[top].name_hint} for the next iteration"
        else:
            where = "its result"
        return (f"{self.name}: an iteration of its loop leaves {_origin(v, self.start)} as "
                f"{where} where other iterations leave another kind of value; a loop with a "
                "traced trip count carries tensors, references made in it and values passed on "
                "unchanged (not a reference made before the loop in some iterations, nor a "
                "closure made in one): use rl.evaluate")

    def _carry(self, value, kinds, shape, what):
        """The carried tensors of a value of the loop's kinds at each position."""
        if _shape(value) != shape:
            raise CompileError(self._mixed(what, value))
        leaves, out = _flatten(value, []), []
        for k, (v, kind) in enumerate(zip(leaves, kinds)):
            if kind[0] == "inv":
                if v is not self.entry[k]:
                    raise CompileError(self._mixed(what, v, k))
            elif kind[0] == "pool":
                if not (isinstance(v, JPoolRef) and v.pool is kind[1]):
                    raise CompileError(self._mixed(what, v, k))
                out.append(v.slot)
            elif kind[0] == "row":
                if not (isinstance(v, JCursor) and v.table is kind[1]):
                    raise CompileError(self._mixed(what, v, k))
                out.append(_cast_to(v.row, (), np.dtype(np.int32)))
            elif is_tensor(v) and tuple(np.shape(v)) == kind[1]:
                out.append(_cast_to(v, kind[1], kind[2]))
            else:
                raise CompileError(self._mixed(what, v, k))
        return out

    def _value(self, carried, kinds, shape, entry=None):
        it, leaves = iter(carried), []
        for k, kind in enumerate(kinds):
            if kind[0] == "inv":
                leaves.append(entry[k])
            elif kind[0] == "pool":
                leaves.append(JPoolRef(kind[1], next(it)))
            elif kind[0] == "row":
                leaves.append(JCursor(kind[1], next(it)))
            else:
                leaves.append(next(it))
        return _rebuild(shape, iter(leaves))

    def _body(self, i, arg_leaves, pools, carried, ptrs, fam_tables):
        """Loop iteration i+1 (row i) on the state given; returns the new state."""
        import jax.numpy as jnp
        self.i = i
        for pool, tables in zip(self.pools.values(), pools):
            pool.cell.value = tables
        for ref, value in zip(self.carried, carried):
            ref.value = value
        for fam, ptr in zip(self.families, ptrs):
            fam.ref.value = JRow(fam, ptr)
        args = self._value(arg_leaves, self.arg_kinds, self.arg_shape, self.entry)
        going, nxt, result, _ = self._step(list(args), args)
        if self.res_kinds is None:
            self.res_shape = _shape(result)
            self.res_kinds = self._kinds(_flatten(result, []), "result")
        new_args = self._carry(tuple(nxt), self.arg_kinds, self.arg_shape, "argument")
        res = self._carry(result, self.res_kinds, self.res_shape, "result")
        fam_tables, pointers, encoded = write_family_rows(self, i, fam_tables)
        ptrs = [jnp.asarray(p, jnp.int32) for p in pointers]
        pools = [pool.cell.value for pool in self.pools.values()]
        carried = [_tmap(lambda v, o: _cast_to(v, np.shape(o), o.dtype), ref.value, old)
                   for ref, old in zip(self.carried, carried)]
        return (jnp.asarray(going), new_args, res, pools, carried, ptrs, fam_tables), encoded

    # -- the traces and the loop --------------------------------------------------------------
    def run(self):
        ev = self.ev
        jax = load_jax()
        import jax.numpy as jnp
        from jax import lax
        saved_frames = ev.frames
        saved = {id(r): (r, r.value) for r in self.outer_refs}

        def restore():
            for r, value in saved.values():
                r.value = value

        # trace D: the recursive call's arguments (which positions pass the entry's object on)
        # and the references an iteration makes (the pools' slots per row)
        calls, conts, written = [], [], []

        def discover():
            frame = Frame(self.start)
            try:
                ev.frames = [frame]
                self.i = np.int32(0)
                cont, _, _, found = self._step(self.args, self.args)
                calls.extend(found)
                conts.append(cont)
                written.extend((ref, ref.value) for ref, _ in frame.log.values())
            finally:
                ev.frames = saved_frames
                restore()
                for ref, old in frame.log.values():
                    if ev.is_fault_cell(ref):
                        ref.value = old
            return []
        jax.make_jaxpr(discover)()
        if not is_traced(conts[0]):
            # whether this iteration continues is known at trace time (a constant counter):
            # unroll it as before (None); a later call with a traced condition is the loop
            return None
        per_row = dict(self.counts)
        for key, pool in self.pools.items():
            pool.per_row = max(per_row.get(key, 0), 1)
            pool.cell.value = pool.zeros(pool.per_row)
        self._adopt(calls, written)

        # the peeled first iteration, into the enclosing trace
        self.i = np.int32(self.rows)
        cont0, args1, result0, _ = self._step(self.args, self._blank(calls[0]))
        if not is_traced(cont0) and not bool(cont0):
            self._release()
            return result0
        leaves1 = _flatten(tuple(args1), [])
        self.arg_kinds = self._kinds(leaves1, "argument")
        self.arg_shape = _shape(tuple(args1))
        if self.arg_shape != _shape(tuple(self.args)):
            raise CompileError(self._mixed("argument", tuple(args1)))
        carry1 = self._carry(tuple(args1), self.arg_kinds, self.arg_shape, "argument")
        saved = {id(r): (r, r.value) for r in self.outer_refs}
        pools1 = [p.cell.value for p in self.pools.values()]
        n_pools = len(self.pools)
        zero = np.int32(0)
        try:
            # trace 1: the outer references an iteration writes: carried tensors or families
            frame = Frame(self.start)
            finals = {}

            def writes(i):
                ev.frames = [frame]
                try:
                    self._body(i, carry1, pools1, [], [], [])
                    for ref, _ in frame.log.values():
                        finals[id(ref)] = ref.value
                finally:
                    ev.frames = saved_frames
                    restore()
                    for p, tables in zip(self.pools.values(), pools1):
                        p.cell.value = tables
                return []
            jax.make_jaxpr(writes)(zero)
            for ref, old in frame.log.values():
                if ref is self.cont or ref is self.nxt or \
                        any(ref is p.cell for p in self.pools.values()):
                    continue
                if ev.is_fault_cell(ref):     # a check raised in the body (a nested loop's)
                    ref.value = old
                    saved[id(ref)] = (ref, old)
                    self.carried.append(ref)
                    continue
                if id(ref) not in saved:
                    raise CompileError(f"{self.name}: an iteration writes a reference that "
                                       "is not reachable from the call's arguments")
                new = finals[id(ref)]
                if _is_tree(old) and _is_tree(new) and _key(old) == _key(new):
                    self.carried.append(ref)
                elif _holds_closure(new):
                    self.families.append(Family(ref, self.name))
                else:
                    # data holding the loop's references (reverse AD of a loop that writes
                    # an outer reference: `%acc := (v, %r)`): the peel leaves it joined with
                    # the caller's content, which a row or a carried position cannot hold
                    raise CompileError(
                        f"{self.name}: its loop writes a {describe(new)} holding references "
                        "made in the loop to a reference made before it (the gradient of a "
                        "loop that writes an outer reference?); not compiled as a loop yet: "
                        "use rl.evaluate")
            carried0 = [_tmap(lambda v: _cast_to(v, np.shape(v), jnp.asarray(v).dtype),
                              r.value) for r in self.carried]
            ptrs0 = [jnp.asarray(-1, jnp.int32) for _ in self.families]
            if self.families:
                # trace 2: the families' templates (their references read as rows)
                def templates(i):
                    try:
                        _, encoded = self._body(i, carry1, pools1, carried0, ptrs0,
                                                [[] for _ in self.families])
                    finally:
                        restore()
                        for p, tables in zip(self.pools.values(), pools1):
                            p.cell.value = tables
                    for fam, leaves in zip(self.families, encoded):
                        fam.set_layout([(tuple(np.shape(x)), np.dtype(x.dtype))
                                        for x in leaves])
                    return []
                jax.make_jaxpr(templates)(zero)
            tables0 = [[jnp.zeros((self.rows, len(members)) + shape, dtype)
                        for shape, dtype, members in fam.groups]
                       for fam in self.families]
            res0 = [jnp.zeros(k[1], k[2]) if k[0] == "t" else jnp.asarray(0, jnp.int32)
                    for k in self.res_kinds]

            def body(state):
                i, _, values, _, pools, carried, ptrs, fam_tables = state
                ev.frames = []
                try:
                    out, _ = self._body(i, values, pools, carried, ptrs, fam_tables)
                finally:
                    ev.frames = saved_frames
                    restore()
                if len(self.pools) != n_pools:
                    raise CompileError(f"internal: {self.name}'s iteration made a new pool")
                return (i + 1,) + out
            state = (jnp.asarray(0, jnp.int32), jnp.asarray(cont0, bool), carry1, res0, pools1,
                     carried0, ptrs0, tables0)
            state = lax.while_loop(lambda s: s[1] & (s[0] < self.bound), body, state)
        finally:
            ev.frames = saved_frames
        trips, going, _, res, pools, carried, ptrs, fam_tables = state
        ev.fault(going, f"{self.name} ran more than {self.steps} iterations, the "
                        "rows its loop records (references and closures made per "
                        "iteration; compile with a larger one: rl.compile(..., "
                        "capacity={\"steps\": N}))", grows=self.grows)
        for pool, tables in zip(self.pools.values(), pools):
            pool.cell.value = tables
        for ref, value in zip(self.carried, carried):
            ev.write(ref, value)
        for fam, ptr, tables in zip(self.families, ptrs, fam_tables):
            fam.tables, fam.count = tables, trips
            # no iteration left a new closure: the reference holds what the peel left
            ev.write(fam.ref, fam.base if fam.template is None else JRow(fam, ptr))
        self._release()
        looped = self._value(res, self.res_kinds, self.res_shape)
        if not is_traced(cont0):
            return looped
        index = jnp.asarray(cont0).astype(jnp.int32)
        return ev.switch(index, [lambda stop: result0, lambda stop: looped])

    def _adopt(self, calls, written):
        """State-keeping iterations: an argument position where some recursive call passes
        the entry's reference on (a descent keeping x when its step fails passes its `(x, %rx)`
        back) and another a reference made in the iteration. The peel alone receives the
        caller's reference, so its next argument there would be either kind; instead the
        caller's reference is *adopted*: it becomes a slot of its content type's pool after
        the rows (`Pool.entries`), holding its content, and the loop sees only pool slots. The
        two copies meet where the backward pass crosses the loop (a JSync each side of its
        chain, in the reference holding the backpropagator: the pool's slot gets what was
        added to the caller's reference after the loop before the chain runs, the caller's
        reference what the chain left in the slot before the closures made before the loop
        run), and after the forward loop the caller's reference holds the slot's content."""
        import jax.numpy as jnp
        self.adopted, self.sync_ref = [], None
        keeps = []
        for k, v in enumerate(self.entry):
            if not (isinstance(v, JRef) and _is_tree(v.value)):
                continue
            leaves = [_flatten(tuple(c), [])[k] for c in calls]
            # passed on by some call (or some alternative of a call's joined argument), and
            # not by every call
            kept = [x is v or (isinstance(x, JUnion) and any(a is v for a in x.alts))
                    for x in leaves]
            if any(kept) and not all(x is v for x in leaves) and \
                    not any(v is j for j, *_ in keeps):
                mixed = [x for x in leaves if isinstance(x, JUnion)]
                keeps.append((v, k, mixed[0] if mixed else v))
        if not keeps:
            return
        # the loop's one family must be a backpropagator (closures of no parameters, reverse
        # AD's `%bp`): JSync merges the two copies of an adopted adjoint as accumulations
        fams = [ref for ref, new in written
                if isinstance(ref, JRef) and ref is not self.cont and ref is not self.nxt and
                not self.ev.is_fault_cell(ref) and _holds_closure(new)]
        if len(fams) != 1 or not _backpropagators(dict(written)[fams[0]]):
            raise CompileError(self._mixed("argument", keeps[0][2], keeps[0][1]))
        slots = {}
        for ref, k, _ in keeps:
            pool = self.pool(_key(ref.value))
            pool.per_row = pool.per_row or 1
            slots[id(ref)] = (pool, pool.entries)
            pool.entries += 1
        for pool in {id(p): p for p, _ in slots.values()}.values():
            pool.cell.value = pool.zeros(pool.per_row)
        for k, v in enumerate(self.entry):
            if id(v) in slots and isinstance(v, JRef):
                pool, j = slots[id(v)]
                slot = jnp.asarray(pool.rows * pool.per_row + j, jnp.int32)
                adopted = JPoolRef(pool, slot)
                adopted.write(self.ev, v.value)
                self.adopted.append((v, adopted))
                self.entry = [adopted if x is v else x for x in self.entry]
        self.args = list(_rebuild(self.arg_shape, iter(self.entry)))
        self.sync_ref = fams[0]
        self.ev.write(fams[0], JSync(fams[0].value, self.adopted, to_ref=True))

    def _release(self):
        """After the forward loop: the adopted references hold their slots' contents, and the
        backpropagator reference syncs the slots from them when called (_adopt)."""
        ev = self.ev
        released = []
        for ref, slot in self.adopted:
            ev.write(ref, slot.read(ev))
            released.append((ref.value, slot.pool.cell.value))
        if self.sync_ref is not None:
            ev.write(self.sync_ref, JSync(self.sync_ref.value, self.adopted, to_ref=False,
                                          released=released))

    def _adopted_pool(self, v):
        """The pool of `v` when it is an adopted reference, or a join of such references
        and slots of one pool; else None."""
        alts = v.alts if isinstance(v, JUnion) else [v]
        pools = []
        for a in alts:
            slot = [s for ref, s in self.adopted if ref is a]
            if slot:
                pools.append(slot[0].pool)
            elif isinstance(a, JPoolRef) and isinstance(v, JUnion):
                pools.append(a.pool)
            else:
                return None
        return pools[0] if all(p is pools[0] for p in pools) else None

    def _blank(self, raw):
        """What `next` holds before the peeled iteration runs: the recursive call's arguments
        with the same kind at each position (so the body's joins join them part by part):
        the entry's object where the call passes it on, zeros, a pool's spare slot."""
        import jax.numpy as jnp
        out = []
        for k, v in enumerate(_flatten(tuple(raw), [])):
            adopted = self._adopted_pool(v)
            if v is self.entry[k]:
                out.append(v)
            elif adopted is not None:
                out.append(JPoolRef(adopted, self.spare(adopted)))
            elif isinstance(v, JPoolRef):
                out.append(JPoolRef(v.pool, self.spare(v.pool)))
            elif isinstance(v, JCursor):
                out.append(JCursor(v.table, jnp.asarray(0, jnp.int32)))
            elif is_tensor(v):
                out.append(jnp.zeros(np.shape(v), v.dtype))
            elif serial_of(v) < self.start:
                out.append(v)
            else:
                raise CompileError(self._mixed("argument", v, k))
        return list(_rebuild(_shape(tuple(raw)), iter(out)))


__all__ = ["JSync", "DEFAULT_STEPS", "DEFAULT_ROW_STEPS", "FIRST_ROW_STEPS", "MAX_ROW_STEPS", "tail_call"]
