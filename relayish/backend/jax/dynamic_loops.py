"""Loops over dynamic structure: a recognized fold over a node table as ONE lax loop.

    value = fold_call(ev, fold, callee, args)   # TraceEvaluator.enter's hook; None: not a loop

**Forward: the fold as a loop.** A call of a fold (dynamic_rule.py) whose folded argument is a
node table (dynamic_tables.py) runs `lax.fori_loop(0, count, body)`. The body runs the clause of
row i's constructor (`switch` on tag[i], joins.py: results, written references and closures are
joined across constructors); a pattern variable of a tensor field reads its column at row i;
the fold's recursive call on a child reads the *result table* at the child's row (children
come first in post-order). The result is written to the result table at row i; the call's
value is the result at the root. Everything that lives past one iteration is a table row
(dynamic_rows.py):

  * **Result table**: one table per tensor of the fold's result type, [capacity, *shape]; a
    reference in the result is its slot in a pool.
  * **Reference pools**: every `ref(v)` evaluated in an iteration is a slot of the pool of its
    content type (`JPoolRef`).
  * **Families**: an outer reference (made before the loop) that an iteration writes a
    non-tensor value to, e.g. reverse AD's `%bp := fn() { ...; %prev() }`, holds
    `JRow(family, i)` at the end of iteration i: its content then, stored at row i of the
    family's tables. Reading the reference inside the next iteration gives `JRow(family, i)`:
    `%prev`; row -1 is what it held before the loop. An iteration that leaves the reference as
    it was (a clause that writes no backpropagator, `Nil => h0`), or a clause whose content is
    the previous row, keeps the pointer instead: that row is never in the chain, so the
    backward loop (dynamic_rows.py) skips it.
  * Outer references holding tensors (an accumulator) are loop-carried values.

The body is traced three times: to find the references it writes and the slots it needs, to
find the families' templates (with the family references reading as JRows), and inside the
loop. Invariant values (what the call's other arguments reach, outer tracers, constants) are
kept as they are, never copied into rows.

**Under rl.vmap** (`_fixed_trips`): the loop runs the capacity, every write of an iteration
past the example's count guarded per row (dynamic_rows.py).

**Not compiled as a loop** (a CompileError naming the function and the construct): a loop
inside a traced `if`, a fold over a table inside another fold's iteration, `ref(v)` of a
non-tensor value in an iteration. Gradients of gradients through such a loop are not compiled
as loops either (the second backward pass would call rows inside the loop that builds them).
"""
from __future__ import annotations

import numpy as np

from relayish.errors import CompileError
from relayish.backend.values import ConstructorValue
from relayish.backend.jax.dynamic_defer import _is_tree, _key, _tmap
from relayish.backend.jax.dynamic_left import left_fold_call
from relayish.backend.jax.dynamic_rows import (Family, JPoolRef, JRow, Pool, _at, _cast,
                                               _fixed_trips, _keep_if, _set, new_pool_ref,
                                               write_family_rows)
from relayish.backend.jax.dynamic_rule import _same_type, adt_fields
from relayish.backend.jax.dynamic_tables import JChild, JTable, TableSpec
from relayish.backend.jax.values import (Frame, Indexed, JClosure, JRef, JUnion, closure_name,
                                         describe, is_tensor, load_jax, next_serial)


def _reachable(values):
    """(ids of the tensors, the JRefs) reachable from `values`: what a loop keeps invariant."""
    tensors, refs, seen = set(), [], set()
    stack = list(values)
    while stack:
        v = stack.pop()
        if id(v) in seen:
            continue
        seen.add(id(v))
        if is_tensor(v):
            tensors.add(id(v))
        elif isinstance(v, tuple):
            stack.extend(v)
        elif isinstance(v, ConstructorValue):
            stack.extend(v.fields)
        elif isinstance(v, JClosure):
            stack.extend(v.env.values())
        elif isinstance(v, JRef):
            refs.append(v)
            stack.append(v.value)
        elif isinstance(v, JUnion):
            stack.append(v.index)
            stack.extend(v.alts)
        elif isinstance(v, Indexed):
            stack.extend(v.parts())
    return tensors, refs


# ---- the forward loop ----------------------------------------------------------------------------

def fold_call(ev, fold, callee, args):
    """The value of a call of the recognized fold `fold` (TraceEvaluator.enter's hook), or None
    when its folded argument is static structure (the call unrolls as before)."""
    x = args[fold.k]
    if isinstance(x, JChild):
        loop = ev.loop
        if fold.left and loop is not None and loop.fold is fold:
            return loop.recur(args)          # a left fold goes on with a child (dynamic_left)
        if loop is None or loop.fold is not fold:
            raise CompileError(f"{closure_name(callee)}: a child of a node table reached a "
                               "call outside the loop over that table; not compiled as a loop")
        if fold.map is not None:
            return _MapChild(x.row)      # a map's recursive result: a child field of its row
        return loop.result_at(x.row)
    if not isinstance(x, JTable):
        return None
    if fold.left:
        # one with references (reverse AD's): dynamic_tail's loop with rows, as a tail loop
        return None if fold.rows else left_fold_call(ev, fold, callee, args)
    if ev.loop is not None:
        raise CompileError(f"{closure_name(callee)} folds a node table inside the loop of "
                           f"{ev.loop.name}: nested loops over dynamic structure are not "
                           "compiled yet")
    if ev.join_depth:
        raise CompileError(f"{closure_name(callee)} folds a node table under a traced if or "
                           "match: a loop over dynamic structure inside a join is not compiled "
                           "yet; call it outside the if")
    return _FoldLoop(ev, fold, callee, args).run()


def _type_key(t):
    """The result template of a fold's result type: ("t", shape, dtype) / ("tuple", [...]) /
    ("ref", pool key)."""
    from relayish.backend.runtime.args import NP_DTYPES
    from relayish.ir.types import RefType, TensorType, TupleType
    if isinstance(t, TensorType):
        return ("t", tuple(t.shape), np.dtype(NP_DTYPES[t.dtype]).name)
    if isinstance(t, TupleType):
        return ("tuple", [_type_key(f) for f in t.fields])
    if isinstance(t, RefType):
        return ("ref", _content_key(t.value))
    raise CompileError(f"internal: a fold result of type {t}")


def _content_key(t):
    from relayish.backend.runtime.args import NP_DTYPES
    from relayish.ir.types import RefType, TensorType
    if isinstance(t, TensorType):
        return (tuple(t.shape), np.dtype(NP_DTYPES[t.dtype]).name)
    if isinstance(t, RefType):      # a reference held by a pool's content (dynamic_rows)
        return ("ref", _content_key(t.value))
    return tuple(_content_key(f) for f in t.fields)


class _FoldLoop:
    def __init__(self, ev, fold, callee, args):
        self.ev, self.fold, self.args = ev, fold, list(args)
        self.name = closure_name(callee)
        self.table = args[fold.k]
        self.rows = self.table.capacity
        self.start = next_serial()
        invariants = [a for m, a in enumerate(args) if m != fold.k]
        self.outer, self.outer_refs = _reachable(invariants)
        self.map_spec = None if fold.map is None else _map_spec(ev.mod, fold.map)
        self.result = _type_key(fold.ret) if fold.map is None else \
            ("tuple", [_type_key(ft) for _, _, ft in self.map_spec.columns])
        self.result_layout = []          # [(shape, dtype)]: "t" tensors, "ref" slots (int32)
        self._layout(self.result)
        self.pools = {}                  # content key -> Pool
        self.counts = {}                 # content key -> references made in this body trace
        self.carried = []                # outer references holding tensors, carried
        self.families = []               # Family per outer reference holding closures
        self.i = None
        self.valid = None                # fixed trips: i < count (traced), else None
        self.fixed = _fixed_trips(ev)
        self.results = None

    def _layout(self, key):
        kind = key[0]
        if kind == "t":
            self.result_layout.append((key[1], key[2]))
        elif kind == "tuple":
            for k in key[1]:
                self._layout(k)
        else:
            self.result_layout.append(((), "int32"))

    def pool(self, key):
        pool = self.pools.get(key)
        if pool is None:
            pool = self.pools[key] = Pool(key, self.rows)
            pool.cell.value = pool.zeros(1)       # first body trace: a stand-in table
        return pool

    # -- inside the body ----------------------------------------------------------------------
    def new_ref(self, value):
        """`ref(value)` in an iteration: the next slot of its type's pool at row i."""
        return new_pool_ref(self, value, lambda pool, k: pool.own_slot(self.i, k),  # i*K + k
                            "a loop over dynamic structure")

    def result_at(self, row):
        return _unflatten(self.result, iter([_at(t, row) for t in self.results]), self.pool)

    def _flatten(self, key, value, out):
        """The tensors a row holds for `value` of the result template `key` (a reference: its
        slot), appended to `out`."""
        stack = [(key, value)]
        while stack:
            key, v = stack.pop()
            if key[0] == "t":
                if not is_tensor(v):
                    raise CompileError(f"{self.name} returns a {describe(v)} where its type "
                                       "says a tensor")
                out.append(v)
            elif key[0] == "tuple":
                if not isinstance(v, tuple) or len(v) != len(key[1]):
                    raise CompileError(f"{self.name} returns a {describe(v)} where its type "
                                       "says a tuple")
                stack.extend(reversed(list(zip(key[1], v))))
            else:
                if not (isinstance(v, JPoolRef) and v.pool.key == key[1]):
                    raise CompileError(f"{self.name} returns a reference it did not make in "
                                       "the same call (a reference from outside the loop): "
                                       "not compiled as a loop")
                out.append(v.slot)
        return out

    def _map_row(self, value):
        """A map's clause result (a constructor of B) as the row's tensors: its fields in the
        columns of its constructor, zeros in the others'; its B fields must be the clause's
        recursive results (dynamic_rule.py checks that)."""
        import jax.numpy as jnp
        if not (isinstance(value, ConstructorValue) and value.constructor.tag < len(
                self.map_spec.constructors)):
            raise CompileError(f"internal: {self.name}'s clause returned a {describe(value)}")
        tag, out = value.constructor.tag, []
        for (t, m, _), key in zip(self.map_spec.columns, self.result[1]):
            if t == tag:
                self._flatten(key, value.fields[m], out)
            else:
                out.extend(jnp.zeros(shape, dtype) for shape, dtype in _key_layout(key))
        for m in self.map_spec.orders.get(tag, ()):
            if not isinstance(value.fields[m], _MapChild):
                raise CompileError(f"internal: {self.name}'s clause result holds a "
                                   f"{describe(value.fields[m])} where a child goes")
        return tuple(out)

    def _put_result(self, value, i):
        leaves = list(value) if self.map_spec is not None else \
            self._flatten(self.result, value, [])
        return [_set(t, i, v) for t, v in zip(self.results, leaves)]

    def _step(self):
        """Row i's clause, chosen by its tag (a lax.switch joining the constructors)."""
        ev, fold, table, i = self.ev, self.fold, self.table, self.i
        spec = table.spec
        params = fold.func.params
        alternatives = []
        for tag in range(len(spec.constructors)):
            clause, subs, order = fold.clauses[tag]

            def alt(stop, clause=clause, subs=subs, order=order, tag=tag):
                env = dict(zip(params, self.args))
                for m, var in enumerate(subs):
                    if var is None:
                        continue
                    if m in order:
                        env[var] = JChild(_at(table.children[order.index(m)], i))
                    else:
                        env[var] = table.field(tag, m, i)
                value = ev.eval(clause.rhs, env)
                return value if self.map_spec is None else self._map_row(value)
            alternatives.append(alt)
        if len(alternatives) == 1:
            return alternatives[0](None)
        return ev.switch(_at(table.tag, i), alternatives)

    def _body(self, i, results, pools, carried, ptrs, fam_tables):
        """One iteration on the state given; returns the new state (same structure)."""
        self.i, self.results, self.counts = i, list(results), {}
        self.valid = (i < self.table.count) if self.fixed else None
        for pool, tables in zip(self.pools.values(), pools):
            pool.cell.value = tables
        for ref, value in zip(self.carried, carried):
            ref.value = value
        for fam, ptr in zip(self.families, ptrs):
            fam.ref.value = JRow(fam, ptr)
        for pool in self.pools.values():
            pool.start_row(i)           # this iteration's slots, outside its switch
        value = self._step()
        results = self._put_result(value, i)
        fam_tables, pointers, encoded = write_family_rows(self, i, fam_tables)
        import jax.numpy as jnp
        valid = self.valid
        ptrs = [_keep_if(valid, jnp.asarray(q, jnp.int32), p) for q, p in zip(pointers, ptrs)]
        pools = [pool.cell.value for pool in self.pools.values()]
        carried = [_tmap(lambda v, o: _keep_if(valid, v, o), ref.value, old)
                   for ref, old in zip(self.carried, carried)]
        return results, pools, carried, ptrs, fam_tables, encoded

    # -- the three traces and the loop ------------------------------------------------------------
    def run(self):
        ev = self.ev
        jax = load_jax()
        import jax.numpy as jnp
        from jax import lax
        saved_frames, saved = ev.frames, {id(r): (r, r.value) for r in self.outer_refs}
        ev.loop, ev.frames = self, []

        def restore():
            for r, value in saved.values():
                r.value = value
        try:
            results0 = [jnp.zeros((self.rows,) + shape, dtype)
                        for shape, dtype in self.result_layout]
            zero = np.int32(0)
            # trace 1: which outer references the body writes, how many slots per row
            frame = Frame(self.start)
            ev.frames = [frame]
            finals = {}

            def discover(i):
                try:
                    self._body(i, results0, [], [], [], [])
                    for ref, _ in frame.log.values():
                        finals[id(ref)] = ref.value
                finally:
                    restore()
                return []
            jax.make_jaxpr(discover)(zero)
            ev.frames = []
            for ref, old in frame.log.values():
                if any(ref is p.cell for p in self.pools.values()):
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
                else:
                    self.families.append(Family(ref, self.name))
            for key, pool in self.pools.items():
                pool.per_row = max(self.counts.get(key, 0), 1)
                pool.cell.value = pool.zeros(pool.per_row)
            pools0 = [p.cell.value for p in self.pools.values()]
            carried0 = [_tmap(lambda v: _cast(v, np.shape(v), v.dtype), r.value)
                        for r in self.carried]
            ptrs0 = [jnp.asarray(-1, jnp.int32) for _ in self.families]
            if self.families:
                # trace 2: the families' templates (their references read as rows)
                def templates(i):
                    try:
                        out = self._body(i, results0, pools0, carried0, ptrs0,
                                         [[] for _ in self.families])
                    finally:
                        restore()
                    for fam, leaves in zip(self.families, out[5]):
                        fam.set_layout([(tuple(np.shape(x)), np.dtype(x.dtype))
                                        for x in leaves])
                    return []
                jax.make_jaxpr(templates)(zero)
            tables0 = [[jnp.zeros((self.rows, len(members)) + shape, dtype)
                        for shape, dtype, members in fam.groups]
                       for fam in self.families]
            n_pools = len(self.pools)

            def body(i, state):
                results, pools, carried, ptrs, fam_tables = state
                try:
                    out = self._body(i, results, pools, carried, ptrs, fam_tables)
                finally:
                    restore()
                if len(self.pools) != n_pools:
                    raise CompileError(f"internal: {self.name}'s iteration made a new pool")
                return out[:5]
            trips = self.rows if self.fixed else self.table.count
            state = lax.fori_loop(0, trips, body,
                                  (results0, pools0, carried0, ptrs0, tables0))
        finally:
            ev.loop, ev.frames = None, saved_frames
        results, pools, carried, ptrs, fam_tables = state
        for pool, tables in zip(self.pools.values(), pools):
            pool.cell.value = tables
        for ref, value in zip(self.carried, carried):
            ev.write(ref, value)
        for fam, ptr, tables in zip(self.families, ptrs, fam_tables):
            fam.tables, fam.count = tables, self.table.count
            # no clause left a new content (`%bp := !%bp`): the pointer is -1 after every row
            ev.write(fam.ref, fam.base if fam.template is None else JRow(fam, ptr))
        self.results = results
        if self.map_spec is not None:
            return _MappedTable(self)
        return self.result_at(self.table.count - 1)


# ---- maps: a fold whose result is a node table of another ADT of the same shape -----------------

class _MapChild:
    """A map's recursive result inside its loop: the B node at a child's row."""
    __slots__ = ("row", "serial")

    def __init__(self, row):
        self.row, self.serial = row, -1


def _map_spec(mod, map_to):
    """The TableSpec of a map's result type B (child orders of the constructors the map never
    builds: their B fields in field order)."""
    b, _, orders = map_to
    _, fields = adt_fields(mod, b)
    full = {tag: orders.get(tag, [m for m, f in enumerate(fs) if _same_type(f, b)])
            for tag, fs in enumerate(fields)}
    return TableSpec(mod, b, full)


def _key_layout(key):
    """[(shape, dtype)] of the tensors a row holds for a result template."""
    out, stack = [], [key]
    while stack:
        k = stack.pop()
        if k[0] == "t":
            out.append((k[1], k[2]))
        elif k[0] == "tuple":
            stack.extend(reversed(k[1]))
        else:
            out.append(((), "int32"))
    return out


def _unflatten(key, it, pool):
    """The value of result template `key` from an iterator of a row's tensors (`pool(content
    key)`: the Pool a reference's slot is in)."""
    if key[0] == "t":
        return next(it)
    if key[0] == "tuple":
        return tuple(_unflatten(k, it, pool) for k in key[1])
    return JPoolRef(pool(key[1]), next(it))


class _MappedTable(JTable):
    """The node table of B a map's loop made: the source table's rows, tags renumbered, and
    its field columns the map's result tables (a field holding references: pool slots)."""
    __slots__ = ("fields", "pool")

    def __init__(self, loop):
        import jax.numpy as jnp
        source, spec = loop.table, loop.map_spec
        self.spec, self.capacity, self.count, self.serial = spec, source.capacity, source.count, -1
        renumber = np.full(len(source.spec.constructors) + 1, -1, np.int32)   # [-1]: padding
        for a, b in loop.fold.map[1].items():
            renumber[a] = b
        self.tag = jnp.asarray(renumber)[source.tag]
        self.children = list(source.children) + [
            jnp.full((source.capacity,), -1, jnp.int32)
            for _ in range(spec.n_children - len(source.children))]
        self.fields, self.columns, results = {}, [], iter(loop.results)
        for (tag, m, _), key in zip(spec.columns, loop.result[1]):
            span = [next(results) for _ in _key_layout(key)]
            self.fields[(tag, m)] = (key, span)
            self.columns.append(span[0] if key[0] == "t" else None)
        self.pool = loop.pool

    def field(self, tag, m, i):
        key, span = self.fields[(tag, m)]
        return _unflatten(key, iter([_at(t, i) for t in span]), self.pool)

    def output_leaves(self):
        if any(c is None for c in self.columns):
            raise CompileError(f"a compiled program cannot return a "
                               f"{self.spec.data.header.name} value holding references made "
                               "in a loop; return their contents")
        return super().output_leaves()


__all__ = ["fold_call"]
