"""Loops over dynamic structure: a recognized fold over a node table as ONE lax loop, and the
chain of closures its iterations leave behind (reverse AD's backpropagators) as a second loop.

    value = fold_call(ev, fold, callee, args)   # TraceEvaluator.enter's hook; None: not a loop
    JRow.call(ev, args)                         # calling a closure a loop left in a reference

**Forward: the fold as a loop.** A call of a fold (dynamic_rule.py) whose folded argument is a
node table (dynamic_tables.py) runs `lax.fori_loop(0, count, body)`. The body runs the clause of
row i's constructor (`switch` on tag[i], joins.py: results, written references and closures are
joined across constructors); a pattern variable of a tensor field reads its column at row i;
the fold's recursive call on a child reads the *result table* at the child's row (children
come first in post-order). The result is written to the result table at row i; the call's
value is the result at the root. Everything that lives past one iteration is a table row:

  * **Result table**: one table per tensor of the fold's result type, [capacity, *shape]; a
    reference in the result is its slot (below).
  * **Reference pools** (`Pool`, `JPoolRef`): every `ref(v)` evaluated in an iteration is slot
    `i * K + k` of the pool of its content type (K: the references of that type one iteration
    makes, counted while tracing). The pool's tables live in a JRef cell, so joins and write
    logs treat a pool like any reference; reading a pool reference is a dynamic index, writing
    one a dynamic update.
  * **Families** (`Family`, `JRow`): an outer reference (made before the loop) that an iteration
    writes a non-tensor value to, e.g. reverse AD's `%bp := fn() { ...; %prev() }`. At the end
    of iteration i its content is encoded as a *template* (the value's structure: closures,
    unions of closures, tuples, rows of other tables; identical for every iteration, as the
    body is traced once) and the template's tensors, stored at row i of the family's tables;
    the reference then holds `JRow(family, i)`. Reading the reference inside the next
    iteration gives `JRow(family, i - 1)`: `%prev`. Row -1 is what the reference held before
    the loop (`family.base`).
  * Outer references holding tensors (an accumulator) are loop-carried values.

The body is traced three times: to find the references it writes and the slots it needs, to
find the families' templates (with the family references reading as JRows), and inside the
loop. Invariant values (what the call's other arguments reach, outer tracers, constants) are
kept as they are, never copied into rows.

**Backward: a chain of rows as a loop.** Calling `JRow(family, p)` (the backward pass calls
`!%bp`) is `lax.while_loop(p >= 0)`: decode row p (its closures, with their captured tensors
read from the family's tables at p), call it; its tail call of the previous row's JRow gives the
next p. The references it writes (pool slots at data-dependent rows, outer tensor references)
are carried; pool slots go through per-step cells and weight gradients are deferred sums
(dynamic_defer.py has why: the cost of a loop iteration). At p = -1 the loop ends and calls
`family.base`. Two references held by one closure that turn out to be the same slot are
reported after the run (an EvaluationError, never a wrong result): the per-step cells cannot
represent that aliasing.

**Under rl.vmap** (`_fixed_trips`): both loops run a trip count the same for every example
(the capacity) with every write of an iteration past the example's count guarded per row, so
jax batches them without selecting the whole carry per example on every iteration.

**Not compiled as a loop** (a CompileError naming the function and the construct): a loop
inside a traced `if`, a fold over a table inside another fold's iteration, `ref(v)` of a
non-tensor value in an iteration, a row of a family called inside the loop that builds it, a
chain whose closure does not end by tail-calling the previous row with the same arguments, and
references written by the backward loop that hold anything but tensors. Gradients of
gradients through such a loop are not compiled as loops either (the second backward pass would
call rows inside the loop that builds them).
"""
from __future__ import annotations

import numpy as np

from relayish.errors import CompileError
from relayish.backend.values import ConstructorValue
from relayish.backend.jax.dynamic_defer import (Guard, PoolCell, Undefer, _is_tree, _key, _leaves,
                                                _tmap, accumulations, settle)
from relayish.backend.jax.dynamic_tables import JChild, JTable
from relayish.backend.jax.values import (Frame, Indexed, JAdt, JClosure, JRef, JUnion, TailCall,
                                         closure_name, describe, is_jax_value, is_tensor,
                                         load_jax, next_serial)


# ---- tensor trees (a tensor, or tuples of them: dynamic_defer.py) ---------------------------

def _is_leaf_key(key):
    return len(key) == 2 and isinstance(key[1], str) and isinstance(key[0], tuple)


def _key_leaves(key, out):
    if _is_leaf_key(key):
        out.append(key)
    else:
        for k in key:
            _key_leaves(k, out)
    return out


def _rebuild_key(key, it):
    if _is_leaf_key(key):
        return next(it)
    return tuple(_rebuild_key(k, it) for k in key)


def _cast(v, shape, dtype):
    import jax.numpy as jnp
    from jax import lax
    v = lax.convert_element_type(jnp.asarray(v), dtype)
    return jnp.broadcast_to(v, shape) if tuple(v.shape) != tuple(shape) else v


def _at(table, row):
    from jax import lax
    return lax.dynamic_index_in_dim(table, row, 0, keepdims=False)


def _set(table, row, value):
    from jax import lax
    return lax.dynamic_update_index_in_dim(table, _cast(value, table.shape[1:], table.dtype),
                                           row, 0)


def _keep_if(valid, new, old):
    """`new` where the traced bool `valid` holds, else `old` (a row-sized select: the guarded
    write of a fixed-trip loop, _fixed_trips)."""
    import jax.numpy as jnp
    if valid is None:
        return new
    return jnp.where(valid, _cast(new, old.shape, old.dtype), old)


def _fixed_trips(ev):
    """Run the loops for the table's capacity, not its count, with every write of an iteration
    past the count guarded (`where(i < count, new, old)` per row)? Under rl.vmap
    (`select_joins`, set by batching.py) the count differs per example: jax batches a loop
    whose trip count is batched as a while loop that selects the *whole* carry (the tables)
    per example on every iteration; a trip count the same for every example is an unbatched
    predicate and no carry select. The padding rows compute on zero fields (inf or NaN
    possibly: log(0)), but only in values no guarded write keeps. One example per call keeps
    the exact count: fewer iterations and no selects."""
    return bool(getattr(ev, "select_joins", False))


def _is_zero_constant(v):
    return all(isinstance(x, np.ndarray) and not x.any() for x in _leaves(v, []))


# ---- rows of tables: pool references and family members ---------------------------------------

class Pool:
    """The references of one content type made in a loop: a table per tensor of the content,
    [rows * K, *shape], held by the JRef `cell` (zeros initially)."""

    def __init__(self, key, rows):
        self.key, self.rows, self.per_row = key, rows, None
        self.cell = PoolCell(None, next_serial())

    def zeros(self, per_row):
        import jax.numpy as jnp
        n = self.rows * max(per_row, 1) + 1      # + a spare row (flush)
        return _rebuild_key(self.key, iter([jnp.zeros((n,) + shape, dtype)
                                            for shape, dtype in _key_leaves(self.key, [])]))


class JPoolRef(Indexed):
    """A reference made in a loop: slot `slot` (an int32 tensor) of `pool`."""
    __slots__ = ("pool", "slot")

    def __init__(self, pool, slot):
        self.pool, self.slot = pool, slot

    def join_key(self):
        return self.pool

    def parts(self):
        return [self.slot]

    def with_parts(self, parts):
        return JPoolRef(self.pool, parts[0])

    def read(self, ev):
        guard = ev.guard
        entry = None if guard is None else guard.cache.get(id(self.slot))
        if entry is None:
            return _tmap(lambda t: _at(t, self.slot), ev.read(self.pool.cell))
        return ev.read(entry.cell)

    def write(self, ev, value):
        if not _is_tree(value) or _key(value) != self.pool.key:
            raise CompileError(f"a reference made in a loop over dynamic structure holds "
                               f"{_key_text(self.pool.key)}; cannot store a {describe(value)}")
        guard = ev.guard
        if guard is None:
            tables = ev.read(self.pool.cell)
            valid = getattr(ev.loop, "valid", None)
            ev.write(self.pool.cell, _tmap(
                lambda t, v: _set(t, self.slot, _keep_if(valid, v, _at(t, self.slot))),
                tables, value))
            return
        entry = guard.cache.get(id(self.slot))
        if entry is None:
            raise CompileError("a closure run by the backward loop writes a reference made in "
                               "the loop that it does not hold itself; not compiled as a loop")
        ev.write(entry.cell, _tmap(lambda o, v: _cast(v, o.shape, o.dtype), entry.original,
                                   value))


def _prefetch(ev, guard, value, ptr, origin):
    """Read every pool slot the decoded row's closures hold into a JRef cell of the iteration
    (Guard.cache), one conditional per pool: XLA does not fuse a conditional, so the rows are
    materialized before the iteration's in-place updates (a dynamic slice fused into a later
    update makes XLA copy the whole table every iteration: 2 x 0.9 MB for the TreeLSTM's
    gradient, 6 of its 7 ms). The closures read and write the cells, which the switch over
    the row's Functions joins like any reference; `flush` writes changed ones back."""
    import jax.numpy as jnp
    from jax import lax
    alts = value.alts if isinstance(value, JUnion) else [value]
    refs = {}
    for j, alt in enumerate(alts):
        seen, stack = set(), [alt]
        while stack:
            v = stack.pop()
            if id(v) in seen:
                continue
            seen.add(id(v))
            if isinstance(v, JPoolRef):
                refs.setdefault(id(v.slot), (v, set()))[1].add(j)
            elif isinstance(v, JClosure):
                stack.extend(v.env.values())
            elif isinstance(v, JUnion):
                stack.extend(v.alts)
            elif isinstance(v, tuple):
                stack.extend(v)
            elif isinstance(v, ConstructorValue):
                stack.extend(v.fields)
    by_pool = {}
    for ref, users in refs.values():
        by_pool.setdefault(ref.pool, []).append((ref, users))
    guard.cache = {}
    for pool, members in by_pool.items():
        tables = ev.read(pool.cell)
        slots = _gathered([r.slot for r, _ in members], origin)
        flat = _leaves(tables, [])
        rows = lax.cond(ptr >= 0, lambda: [jnp.take(t, slots, axis=0) for t in flat],
                        lambda: [jnp.zeros((len(members),) + t.shape[1:], t.dtype)
                                 for t in flat])
        for j, (r, users) in enumerate(members):
            value = _rebuild_key(pool.key, iter([x[j] for x in rows]))
            guard.cache[id(r.slot)] = _Cached(pool, r.slot, users, JRef(value, next_serial()))
    guard.alternatives = len(alts)


def _gathered(slots, origin):
    """The slots as one int32 vector: an index into the decoded row they all come from
    (Family.origin), else stacked."""
    import jax.numpy as jnp
    came = [origin.get(id(x)) for x in slots]
    if all(c is not None and c[0] is came[0][0] for c in came):
        at = np.array([c[1] for c in came], np.int32)
        row = came[0][0]
        if (np.diff(at) == 1).all():
            return jnp.asarray(row[int(at[0]):int(at[-1]) + 1], jnp.int32)
        return jnp.asarray(row[at], jnp.int32)
    return jnp.stack([jnp.asarray(x, jnp.int32) for x in slots])


class _Cached:
    """One prefetched pool slot: the alternatives (`users`) whose closures hold it, and the
    cell the iteration reads and writes it through."""
    __slots__ = ("pool", "slot", "users", "cell", "original")

    def __init__(self, pool, slot, users, cell):
        self.pool, self.slot, self.users, self.cell = pool, slot, users, cell
        self.original = cell.value


def flush(ev, guard, value, valid=None):
    """Write the iteration's changed slots back (a slot of an alternative not taken goes to
    the pool's spare last row, so a garbage slot never overwrites a real one; so does every
    slot of a fixed-trip loop's step past the chain's end, `valid` False); returns a
    traced bool: did one alternative hold two references to one slot, one of them written
    (aliasing the per-iteration cells cannot represent)?"""
    import jax.numpy as jnp
    index = value.index if isinstance(value, JUnion) else None

    def taken(users):
        if index is None or len(users) == guard.alternatives:
            return None
        out = None
        for j in sorted(users):
            hit = index == j
            out = hit if out is None else out | hit
        return out
    entries = list(guard.cache.values())
    dirty = [e.cell.value is not e.original for e in entries]
    alias = jnp.asarray(False)
    for a in range(len(entries)):
        for b in range(a):
            x, y = entries[a], entries[b]
            common = x.users & y.users
            if x.pool is not y.pool or not common or not (dirty[a] or dirty[b]):
                continue
            hit = x.slot == y.slot
            pred = taken(common)
            hit = hit if pred is None else hit & pred
            alias = alias | (hit if valid is None else hit & valid)
    for pool in {id(e.pool): e.pool for e, d in zip(entries, dirty) if d}.values():
        tables = ev.read(pool.cell)
        spare = _leaves(tables, [])[0].shape[0] - 1
        for e, d in zip(entries, dirty):
            if d and e.pool is pool:
                pred = taken(e.users)
                if valid is not None:
                    pred = valid if pred is None else pred & valid
                at = e.slot if pred is None else jnp.where(pred, e.slot, spare)
                tables = _tmap(lambda t, v: _set(t, at, v), tables, e.cell.value)
        ev.write(pool.cell, tables)
    guard.cache = {}
    return alias


def _key_text(key):
    return "tensors " + ", ".join(f"{dtype}{list(shape)}" for shape, dtype in
                                  _key_leaves(key, []))


class Family:
    """What one outer reference holds across a loop: row i is its content at the end of
    iteration i, as `template` + `tables` (one per tensor of the template); `base` is its
    content before the loop (row -1)."""

    def __init__(self, ref, name):
        self.ref, self.name, self.base = ref, name, ref.value
        self.template = None
        self.layout = None           # [(shape, dtype)] of the template's tensors
        self.tables = None           # set once the loop that fills them has run
        self.groups = None           # [(shape, dtype, leaf indices)]: one table per group
        self.count = None            # the rows it filled (a traced int)
        self.origin = {}             # id(decoded leaf) -> (its group's row, index in it)

    def set_layout(self, layout):
        """The template's tensors grouped by shape and dtype: a row writes one stacked table
        per group, not one table per tensor (38 in the TreeLSTM's gradient; each in-place
        update is an XLA operation of its own, per iteration)."""
        self.layout, groups = layout, {}
        for k, (shape, dtype) in enumerate(layout):
            groups.setdefault((shape, dtype), []).append(k)
        self.groups = [(shape, dtype, members) for (shape, dtype), members in groups.items()]

    def pack(self, leaves):
        import jax.numpy as jnp
        return [jnp.stack([_cast(leaves[k], shape, dtype) for k in members])
                for shape, dtype, members in self.groups]

    def unpack(self, stacked):
        out = [None] * len(self.layout)
        for (_, _, members), rows in zip(self.groups, stacked):
            for j, k in enumerate(members):
                out[k] = rows[j]
        return out

    def decode(self, ptr):
        rows = [_at(t, ptr) for t in self.tables]
        leaves = self.unpack(rows)
        # where each leaf came from: _prefetch reads the pool slots a row holds as one gather
        # of the row's int32 vector, not one slice per slot and a concatenation
        self.origin = {id(x): (rows[g], j) for g, (_, _, members) in enumerate(self.groups)
                       for j, x in enumerate(leaves[k] for k in members)}
        memo = {}
        built = _Decoder(leaves, memo).build(self.template)
        start = next_serial()
        for u in memo.get("unions", ()):
            u.start = start          # tail calls of earlier objects stop at joins of it
        return built


class JRow(Indexed):
    """Row `ptr` (an int32 tensor; -1: the family's base) of a Family."""
    __slots__ = ("family", "ptr")

    def __init__(self, family, ptr):
        self.family, self.ptr = family, ptr

    def join_key(self):
        return self.family

    def parts(self):
        return [self.ptr]

    def with_parts(self, parts):
        return JRow(self.family, parts[0])

    def call(self, ev, args):
        return _call_chain(ev, self, args)


class _Encoder:
    """The template of a value at the end of an iteration; its tensors go to `leaves`."""

    def __init__(self, start, outer, where):
        self.start, self.outer, self.where = start, outer, where
        self.leaves, self.memo = [], {}

    def encode(self, v):
        if isinstance(v, Indexed):
            return ("parts", v, [self.encode(p) for p in v.parts()])
        if isinstance(v, np.ndarray):
            return ("same", v)
        if is_jax_value(v):
            if id(v) in self.outer:
                return ("same", v)
            self.leaves.append(v)
            return ("leaf", len(self.leaves) - 1)
        if isinstance(v, tuple):
            return ("tuple", [self.encode(x) for x in v])
        if getattr(v, "serial", -1) < self.start:
            return ("same", v)      # made before the loop: the same object in every row
        hit = self.memo.get(id(v))
        if hit is not None:
            return hit
        if isinstance(v, ConstructorValue):
            out = ("adt", v.constructor, [self.encode(x) for x in v.fields])
        elif isinstance(v, JClosure):
            out = ["closure", v.func, v.name, []]
            self.memo[id(v)] = out
            out[3] = [(var, self.encode(x)) for var, x in v.env.items()]
        elif isinstance(v, JUnion):
            out = ("union", self.encode(v.index), [self.encode(a) for a in v.alts])
        else:
            raise CompileError(f"{self.where}: an iteration leaves a {describe(v)} in a "
                               "reference made before the loop; only closures, tensors and "
                               "references made by ref(...) in the loop are compiled as rows of "
                               "a loop")
        self.memo[id(v)] = out
        return out


class _Decoder:
    def __init__(self, leaves, memo):
        self.leaves, self.memo = leaves, memo

    def build(self, t):
        kind = t[0]
        if kind == "same":
            return t[1]
        if kind == "leaf":
            return self.leaves[t[1]]
        if kind == "tuple":
            return tuple(self.build(x) for x in t[1])
        if kind == "parts":
            return t[1].with_parts([self.build(p) for p in t[2]])
        key = id(t)
        if key in self.memo:
            return self.memo[key]
        if kind == "adt":
            out = JAdt(t[1], [self.build(x) for x in t[2]], next_serial())
        elif kind == "closure":
            out = JClosure(t[1], {}, t[2], next_serial())
            self.memo[key] = out
            for var, x in t[3]:
                out.env[var] = self.build(x)
        else:   # union
            out = JUnion(self.build(t[1]), [self.build(a) for a in t[2]], None, next_serial())
            self.memo.setdefault("unions", []).append(out)
        self.memo[key] = out
        return out


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
        if loop is None or loop.fold is not fold:
            raise CompileError(f"{closure_name(callee)}: a child of a node table reached a "
                               "call outside the loop over that table; not compiled as a loop")
        return loop.result_at(x.row)
    if not isinstance(x, JTable):
        return None
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
    from relayish.ir.types import TensorType
    if isinstance(t, TensorType):
        return (tuple(t.shape), np.dtype(NP_DTYPES[t.dtype]).name)
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
        self.result = _type_key(fold.ret)
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
        if not _is_tree(value):
            raise CompileError(f"{self.name}: ref(...) of a {describe(value)} in an iteration "
                               "of a loop over dynamic structure is not compiled as a loop "
                               "(a reference made in the loop holds tensors)")
        key = _key(value)
        pool = self.pool(key)
        k = self.counts.get(key, 0)
        self.counts[key] = k + 1
        import jax.numpy as jnp
        slot = self.i * (pool.per_row or 1) + k
        slot = jnp.asarray(slot, jnp.int32)
        ref = JPoolRef(pool, slot)
        if not _is_zero_constant(value):       # the pool starts as zeros
            ref.write(self.ev, value)
        return ref

    def result_at(self, row):
        it = iter(self.results)

        def build(key):
            if key[0] == "t":
                return _at(next(it), row)
            if key[0] == "tuple":
                return tuple(build(k) for k in key[1])
            return JPoolRef(self.pool(key[1]), _at(next(it), row))
        return build(self.result)

    def _put_result(self, value, i):
        out, it = [], iter(self.results)

        def put(key, v):
            if key[0] == "t":
                if not is_tensor(v):
                    raise CompileError(f"{self.name} returns a {describe(v)} where its type "
                                       "says a tensor")
                out.append(_set(next(it), i, v))
            elif key[0] == "tuple":
                if not isinstance(v, tuple) or len(v) != len(key[1]):
                    raise CompileError(f"{self.name} returns a {describe(v)} where its type "
                                       "says a tuple")
                for k, x in zip(key[1], v):
                    put(k, x)
            else:
                if not (isinstance(v, JPoolRef) and v.pool.key == key[1]):
                    raise CompileError(f"{self.name} returns a reference it did not make in "
                                       "the same call (a reference from outside the loop): "
                                       "not compiled as a loop")
                out.append(_set(next(it), i, v.slot))
        put(self.result, value)
        return out

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
                        env[var] = _at(table.columns[spec.column_of[(tag, m)]], i)
                return ev.eval(clause.rhs, env)
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
        value = self._step()
        results = self._put_result(value, i)
        encoded = []
        for fam, tables in zip(self.families, fam_tables):
            enc = _Encoder(self.start, self.outer, self.name)
            fam.template = enc.encode(fam.ref.value)
            encoded.append(enc.leaves)
            if fam.layout is not None:
                got = [(tuple(np.shape(x)), np.dtype(x.dtype)) for x in enc.leaves]
                if got != fam.layout:
                    raise CompileError(f"internal: {self.name}'s iteration changed shape "
                                       "between traces")
        fam_tables = [[_set(t, i, x) for t, x in zip(tables, fam.pack(leaves))] if tables else []
                      for fam, tables, leaves in zip(self.families, fam_tables, encoded)]
        import jax.numpy as jnp
        valid = self.valid
        ptrs = [_keep_if(valid, jnp.asarray(i, jnp.int32), p) for p in ptrs]
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
            ev.write(fam.ref, JRow(fam, ptr))
        self.results = results
        return self.result_at(self.table.count - 1)


# ---- the backward loop: calling a row of a family -------------------------------------------

def _call_chain(ev, row, args):
    fam = row.family
    if fam.tables is None:
        raise CompileError(f"{fam.name}: a closure made in an iteration of the loop is called "
                           "inside the same loop (a gradient of a gradient?); not compiled as "
                           "a loop")
    if ev.join_depth or ev.guard is not None:
        raise CompileError(f"{fam.name}: the closures its loop left are called under a traced "
                           "if or match, or inside another backward loop; not compiled as a "
                           "loop yet")
    if ev.accumulations is None:
        ev.accumulations = accumulations(ev.mod)
    return _Chain(ev, fam, list(args), row.ptr).run()


class _Chain:
    """The backward loop over a family's rows (module docstring; dynamic_defer.py for the
    pool slots through cells and the deferred sums)."""

    def __init__(self, ev, fam, args, ptr):
        self.ev, self.fam, self.args, self.ptr = ev, fam, args, ptr
        self.start = next_serial()
        self.deferred = []
        self.record_shapes = None    # per deferred reference, per hit: (kind, shapes)
        self.fixed = _fixed_trips(ev)

    def step(self, ptr, guard):
        """Row ptr's closure (a lax.switch over the row's Functions, joins.py); the next row
        (its tail call of the previous row)."""
        import jax.numpy as jnp
        ev, fam, args = self.ev, self.fam, self.args
        # fixed trips: a step past the chain's end (ptr -1) reruns row 0, its writes dropped
        valid = (ptr >= 0) if self.fixed else None
        if valid is not None:
            ptr = jnp.maximum(ptr, 0)
        v = fam.decode(ptr)
        _prefetch(ev, guard, v, ptr, fam.origin)
        guard.start_step()
        r = ev.enter(v, args)
        while isinstance(r, TailCall) and not (isinstance(r.callee, JRow)
                                               and r.callee.family is fam):
            r = ev.enter(r.callee, r.args)
        if not isinstance(r, TailCall) or len(r.args) != len(args) or \
                any(a is not b for a, b in zip(r.args, args)):
            raise CompileError(f"{fam.name}: a closure its loop left does not end by "
                               "calling the one made before it with the same arguments "
                               "(a backpropagator chain); not compiled as a loop")
        self.alias = flush(ev, guard, v, valid)
        nxt = jnp.asarray(r.callee.ptr, jnp.int32)
        return nxt if valid is None else jnp.where(valid, nxt, -1)

    def _traced(self, fn, deferred):
        """Run fn(guard) with the evaluator set up for the loop body; restores everything."""
        ev = self.ev
        saved_frames, saved_guard = ev.frames, ev.guard
        keep = [(r, r.value) for r in deferred]
        guard = Guard(self.start, ev.accumulations, deferred, ev.join_depth + 1,
                      self.record_shapes)
        guard.install()
        ev.guard = guard
        try:
            return fn(guard)
        finally:
            ev.frames, ev.guard = saved_frames, saved_guard
            for r, value in keep:
                r.value = value

    def discover(self, deferred):
        """Trace the body once: (written references and their final contents, the guard)."""
        jax = load_jax()
        frame = Frame(self.start)
        finals, out = {}, {}

        def run(guard):
            self.ev.frames = [frame]

            def body(ptr):
                try:
                    self.step(ptr, guard)
                    for ref, _ in frame.log.values():
                        finals[id(ref)] = ref.value
                    out["records"] = [[(k, a.shape, a.dtype, b.shape, b.dtype)
                                       for k, a, b in guard.records[id(r)]] for r in deferred]
                    out["hits"] = dict(guard.hits)
                finally:
                    for ref, old in frame.log.values():
                        ref.value = old
                return []
            jax.make_jaxpr(body)(np.int32(0))
        self._traced(run, deferred)
        return [ref for ref, _ in frame.log.values()], finals, out["records"]

    def run(self):
        ev, fam = self.ev, self.fam
        import jax.numpy as jnp
        from jax import lax
        written, finals, _ = self.discover([])
        # defer the outer tensor references the body accumulates into (dynamic_defer.py)
        deferred = [r for r in written if not isinstance(r, PoolCell) and _is_tree(r.value)
                    and not isinstance(r.value, tuple)]
        while True:
            try:
                written, finals, records = self.discover(deferred)
                break
            except Undefer as undo:
                deferred = [r for r in deferred if r is not undo.ref]
        for ref in written:
            if not (_is_tree(ref.value) and _is_tree(finals[id(ref)])
                    and _key(ref.value) == _key(finals[id(ref)])):
                raise CompileError(f"{fam.name}: the closures its loop left write a "
                                   f"{describe(finals[id(ref)])} to a reference; only "
                                   "references holding tensors are carried by the backward "
                                   "loop")
        self.record_shapes = records
        rows = fam.tables[0].shape[0] if fam.tables else 1
        initial = [_tmap(lambda v: _cast(v, np.shape(v), v.dtype), ref.value) for ref in written]
        tables0 = [[(jnp.zeros((rows,) + tuple(sa), da), jnp.zeros((rows,) + tuple(sb), db))
                    for _, sa, da, sb, db in hits] for hits in records]

        pools = [isinstance(ref, PoolCell) for ref in written]

        def body(state):
            ptr, values, tables, alias = state
            valid = (ptr >= 0) if self.fixed else None
            row = ptr if valid is None else jnp.maximum(ptr, 0)

            def one(guard):
                for ref, v in zip(written, values):
                    ref.value = v
                try:
                    nxt = self.step(ptr, guard)
                    step_records = guard.step_records()
                    # pool tables: flush guarded their slots already (no whole-table select)
                    out = [_tmap(lambda v, o: _keep_if(None if pool else valid, v, o),
                                 ref.value, old)
                           for ref, old, pool in zip(written, values, pools)]
                finally:
                    for ref, v in zip(written, initial):
                        ref.value = v
                new_tables = []
                for hits, got in zip(tables, step_records):
                    if len(got) != len(hits):
                        raise CompileError(f"internal: {fam.name}'s backward loop changed "
                                           "between traces")
                    new_tables.append([
                        (_set(ta, row, _keep_if(valid, a, _at(ta, row))),
                         _set(tb, row, _keep_if(valid, b, _at(tb, row))))
                        for (ta, tb), (_, a, b) in zip(hits, got)])
                return nxt, out, new_tables, alias | self.alias
            return self._traced(one, deferred)
        state = (jnp.asarray(self.ptr, jnp.int32), initial, tables0, jnp.asarray(False))
        if self.fixed:      # every row at most once: the chain runs down from ptr to -1
            ptr, values, tables, alias = lax.fori_loop(0, rows, lambda _, s: body(s), state)
        else:
            ptr, values, tables, alias = lax.while_loop(lambda s: s[0] >= 0, body, state)
        ev.faults.append((alias, f"{fam.name}: two references the backward loop's closures "
                                 "use in one step are the same reference, which the compiled "
                                 "loop does not represent; run it with rl.evaluate"))
        for ref, v in zip(written, values):
            ev.write(ref, v)
        for ref, hits, t in zip(deferred, records, tables):
            ev.write(ref, settle(ref.value, hits, t, fam.count, self.fixed))
        return TailCall(fam.base, list(self.args))

__all__ = ["fold_call", "Pool", "JPoolRef", "Family", "JRow"]
