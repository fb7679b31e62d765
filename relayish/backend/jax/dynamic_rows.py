"""What outlives one iteration of a loop over dynamic structure (dynamic_loops.py), and the
backward loop over the chain of closures a fold's iterations leave behind.

    ref = JPoolRef(pool, slot)          # ref(v) made in an iteration: a slot of a Pool's tables
    row = JRow(family, ptr)             # an outer reference's content at the end of iteration ptr
    row.call(ev, args)                  # calling it (the backward pass calls `!%bp`): a loop

  * **Reference pools** (`Pool`, `JPoolRef`): every `ref(v)` evaluated in an iteration is slot
    `i * K + k` of the pool of its content type (K: the references of that type one iteration
    makes, counted while tracing). The pool's tables live in a JRef cell, so joins and write
    logs treat a pool like any reference; reading a pool reference is a dynamic index, writing
    one a dynamic update. An iteration's own slots are made before its switch (`start_row`),
    stored in family rows as ("own", k), and left unwritten by the backward step that owns
    them (`flush`: dead writes; a later read of the pool restarts the trace).
  * **Families** (`Family`, `JRow`): an outer reference (made before the loop) that an iteration
    writes a non-tensor value to, e.g. reverse AD's `%bp := fn() { ...; %prev() }`. At the end
    of iteration i its content is encoded (`_Encoder`) as a *template* (the value's structure:
    closures, unions of closures, tuples, rows of other tables; identical for every iteration,
    as the body is traced once) and the template's tensors, stored at row i of the family's
    tables; the reference then holds `JRow(family, i)`. Row -1 is what the reference held
    before the loop (`family.base`).

**Backward: a chain of rows as a loop.** Calling `JRow(family, p)` is
`lax.while_loop(p >= 0)`: decode row p (`_Decoder`: its closures, with their captured tensors
read from the family's tables at p), call it; its tail call of the previous row's JRow gives
the next p. The references it writes (pool slots at data-dependent rows, outer tensor
references) are carried; pool slots go through per-step cells (`_prefetch`, `flush`) and weight
gradients are deferred sums (dynamic_defer.py has why: the cost of a loop iteration). At p = -1
the loop ends and calls `family.base` (a tail loop's peeled first iteration) with the slots it
holds prefetched and flushed the same way (`_Chain._base_call`). Two references held by one closure that turn out to be
the same slot are reported after the run (an EvaluationError, never a wrong result): the
per-step cells cannot represent that aliasing.

**Under rl.vmap** (`_fixed_trips`): the loops run a trip count the same for every example (the
capacity) with every write of an iteration past the example's count guarded per row, so jax
batches them without selecting the whole carry per example on every iteration.

Not compiled as a loop (a CompileError naming the function): a row of a family called inside
the loop that builds it (a gradient of a gradient), a chain whose closure does not end by
tail-calling the previous row with the same arguments, and references written by the backward
loop that hold anything but tensors.
"""
from __future__ import annotations

import functools

import numpy as np

from relayish.errors import CompileError
from relayish.backend.values import ConstructorValue
from relayish.backend.jax.dynamic_defer import (Guard, PoolCell, Undefer, _is_tree, _key, _leaves,
                                                _tmap, accumulations, settle)
from relayish.backend.jax.joins import view
from relayish.backend.jax.values import (POISON, Frame, Indexed, JAdt, JClosure, JRef, JUnion,
                                         TailCall, describe, is_jax_value, is_tensor, load_jax,
                                         next_serial)

# ---- tensor trees (a tensor, or tuples of them: dynamic_defer.py) ---------------------------

def _is_leaf_key(key):
    return len(key) == 2 and isinstance(key[1], str) and isinstance(key[0], tuple)


def _is_ref_key(key):
    """("ref", the target pool's key): a reference made in the loop, held in a pool's content
    (reverse over reverse: an adjoint reference holding an `(x, %rx)` pair); its table is
    the slot, int32."""
    return len(key) == 2 and key[0] == "ref"


SLOT_KEY = ((), "int32")


def _key_leaves(key, out):
    if _is_ref_key(key):
        out.append(SLOT_KEY)
    elif _is_leaf_key(key):
        out.append(key)
    else:
        for k in key:
            _key_leaves(k, out)
    return out


def _rebuild_key(key, it):
    if _is_ref_key(key) or _is_leaf_key(key):
        return next(it)
    return tuple(_rebuild_key(k, it) for k in key)


def _is_content(v):
    """A pool's content: tensors, tuples and references made in the loop (JPoolRef)."""
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, tuple):
            stack.extend(x)
        elif not (isinstance(x, JPoolRef) or is_tensor(x)):
            return False
    return True


def _content_key(v):
    """A pool content's key: `_key`'s, with ("ref", pool key) for a reference made in the
    loop."""
    if isinstance(v, tuple):
        return tuple(_content_key(x) for x in v)
    if isinstance(v, JPoolRef):
        return ("ref", v.pool.key)
    return _key(v)


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


def _kept(fam, value, i):
    """(what row i of `fam` stores, the family's pointer after iteration i) for the content
    `value` the iteration leaves in the family's reference. A clause that writes no new
    content (the base case of reverse AD's fold, `Nil => h0`, writes no backpropagator) leaves
    the previous row, `JRow(fam, p)`: the pointer stays p and row i is never in the chain, so
    the backward loop skips it. A union over the clauses keeps the pointer of the alternatives
    that are a previous row, and row i stores the union of the others (their index renumbered;
    one alternative left is stored as itself); None: every alternative keeps the pointer."""
    if isinstance(value, JRow) and value.family is fam:
        return None, value.ptr
    if not isinstance(value, JUnion):
        return value, i
    kept = [isinstance(a, JRow) and a.family is fam for a in value.alts]
    if not any(kept):
        return value, i
    import jax.numpy as jnp
    ptr = jnp.stack([jnp.asarray(a.ptr if k else i, jnp.int32)
                     for a, k in zip(value.alts, kept)])[value.index]
    rest = [a for a, k in zip(value.alts, kept) if not k]
    if not rest:
        return None, ptr
    if len(rest) == 1:
        return rest[0], ptr
    renumber = np.cumsum([not k for k in kept], dtype=np.int32) - 1
    index = jnp.asarray(np.maximum(renumber, 0))[value.index]
    return JUnion(index, rest, value.start, next_serial()), ptr


def write_family_rows(loop, i, tables):
    """Row i of every family of `loop` (a fold's forward loop or a tail loop with rows:
    `families`, `start`, `outer`, `name`): the content each family's reference holds at the end
    of iteration i, encoded against the family's template and written at row i of its tables
    (`_kept`: a family the iteration left as it was keeps its pointer). Returns (the tables,
    the families' pointers, each family's encoded leaves)."""
    encoded, pointers = [], []
    for fam in loop.families:
        stored, ptr = _kept(fam, fam.ref.value, i)
        pointers.append(ptr)
        enc = _Encoder(loop.start, loop.outer, loop.name)
        fam.template = None if stored is None else enc.encode(stored)
        encoded.append(enc.leaves)
        if fam.layout is not None:
            got = [(tuple(np.shape(x)), np.dtype(x.dtype)) for x in enc.leaves]
            if got != fam.layout:
                raise CompileError(f"internal: {loop.name}'s iteration changed shape between "
                                   "traces")
    tables = [[_set(t, i, x) for t, x in zip(ts, fam.pack(leaves))] if ts else []
              for fam, ts, leaves in zip(loop.families, tables, encoded)]
    return tables, pointers, encoded


def new_pool_ref(loop, value, slot, where):
    """`ref(value)` made in an iteration of `loop` (a fold's forward loop or a tail loop with
    rows: `name`, `ev`, `pool(key)` and the per-iteration `counts`): the next slot of its
    content type's pool, `slot(pool, k)` its index for the k-th such reference of the
    iteration; `where` names the loop in the error for a reference that holds no tensors."""
    if not _is_content(value):
        raise CompileError(f"{loop.name}: ref(...) of a {describe(value)} in an iteration of "
                           f"{where} is not compiled as a loop (a reference made in the loop "
                           "holds tensors and references made in the loop)")
    key = _content_key(value)
    pool = loop.pool(key)
    pool.target(value)
    k = loop.counts.get(key, 0)
    loop.counts[key] = k + 1
    ref = JPoolRef(pool, slot(pool, k))
    if not _is_zero_constant(value):       # the pool starts as zeros
        ref.write(loop.ev, value)
    return ref


# ---- rows of tables: pool references and family members ---------------------------------------

class Pool:
    """The references of one content type made in a loop: a table per tensor of the content,
    [rows * K, *shape], held by the JRef `cell` (zeros initially)."""

    def __init__(self, key, rows):
        self.key, self.rows, self.per_row = key, rows, None
        self.entries = 0             # slots after the rows: references adopted (dynamic_tail)
        self.cell = PoolCell(None, next_serial())
        self.own = []                # the slots of the iteration being traced (`start_row`)
        self.own_k = {}              # id(one of them) -> k
        self.targets = {}            # key -> the Pool of a reference its content holds
        self.owner = "a loop"        # the loop's function, for errors

    def start_row(self, i):
        """Iteration i's slots i*K + k (k < K) made in the iteration's trace before its switch
        over constructors: a reference the iteration makes is then a value of the enclosing
        trace that the switch passes through (no switch output, no slot arithmetic in the
        branches), and a family row stores it as ("own", k), no table column (`_Encoder`);
        the backward step reads such slots as one block and writes none back (`flush`)."""
        import jax.numpy as jnp
        if self.per_row is None:
            self.own, self.own_k = [], {}
            return
        self.own = [jnp.asarray(i * self.per_row + k, jnp.int32) for k in range(self.per_row)]
        self.own_k = {id(s): k for k, s in enumerate(self.own)}

    def own_slot(self, i, k):
        """Slot k of iteration i (`start_row`'s when made)."""
        import jax.numpy as jnp
        if k < len(self.own):
            return self.own[k]
        return jnp.asarray(i * (self.per_row or 1) + k, jnp.int32)

    def zeros(self, per_row):
        import jax.numpy as jnp
        n = self.rows * max(per_row, 1) + self.entries + 1      # + a spare row (flush)
        return _rebuild_key(self.key, iter([jnp.zeros((n,) + shape, dtype)
                                            for shape, dtype in _key_leaves(self.key, [])]))

    # -- contents holding references made in the loop: their slots in int32 tables ----------
    def target(self, value):
        """Note the pools of the references `value` (this pool's content) holds: a content
        key names a pool by its key, `targets` by the object (one per key and loop)."""
        stack = [value]
        while stack:
            x = stack.pop()
            if isinstance(x, tuple):
                stack.extend(x)
            elif isinstance(x, JPoolRef):
                seen = self.targets.setdefault(x.pool.key, x.pool)
                if seen is not x.pool:
                    raise CompileError("a reference made in a loop holds references made in "
                                       "two different loops; not compiled as a loop")

    def store(self, value):
        """The content as its tables' leaves (a reference: its slot)."""
        def go(key, v):
            if _is_ref_key(key):
                if isinstance(v, (JRef, JUnion)):
                    raise _made_outside(self.owner)
                if not isinstance(v, JPoolRef) or v.pool.key != key[1]:
                    raise CompileError(f"a reference made in a loop holds "
                                       f"{_key_text(self.key)}; cannot store a {describe(v)}")
                self.target(v)
                return v.slot
            if _is_leaf_key(key):
                return v
            return tuple(go(k, x) for k, x in zip(key, v))
        return go(self.key, value)

    def load(self, stored):
        """The content from its tables' leaves (`store`'s inverse)."""
        def go(key, v):
            if _is_ref_key(key):
                if key[1] not in self.targets:
                    raise CompileError("internal: a reference made in a loop holds a "
                                       "reference of a pool it has not seen")
                return JPoolRef(self.targets[key[1]], v)
            if _is_leaf_key(key):
                return v
            return tuple(go(k, x) for k, x in zip(key, v))
        return go(self.key, stored)


def _made_outside(owner):
    return CompileError(
        f"{owner}: a reference made outside its loop is stored in a reference made in the "
        "loop (reverse over reverse through a loop: rl.grad of rl.grad, hvp_reverse); not "
        "compiled as a loop yet. A second derivative taken forward over reverse does "
        "(rl.hessian, rl.hvp, rl.derivative(f, 2)); or run it with rl.evaluate")


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

    def _guard(self, ev):
        """The guard whose cells hold this slot's pool (None: read and write the tables). A
        row -1 step's guard covers the rows' pools only (`_Chain._base_call`): the others are
        the enclosing guard's, or the tables themselves (`direct`: a replayed inner loop runs
        in the enclosing step, dynamic_nest)."""
        guard = ev.guard
        while guard is not None and guard.partial is not None and \
                id(self.pool) not in guard.partial:
            guard = guard.outer
        return None if guard is None or guard.direct else guard

    def read(self, ev):
        guard = self._guard(ev)
        entry = None if guard is None else guard.cache.get((id(self.pool), id(self.slot)))
        if entry is None:
            return self.pool.load(_tmap(lambda t: _at(t, self.slot), ev.read(self.pool.cell)))
        return ev.read(entry.cell)

    def write(self, ev, value):
        if not _is_content(value) or _content_key(value) != self.pool.key:
            if any(isinstance(x, (JRef, JUnion)) for x in _leaves(value, [])):
                raise _made_outside(self.pool.owner)
            raise CompileError(f"a reference made in a loop over dynamic structure holds "
                               f"{_key_text(self.pool.key)}; cannot store a {describe(value)}")
        stored = self.pool.store(value)
        guard = self._guard(ev)
        if guard is None:
            tables = ev.read(self.pool.cell)
            valid = getattr(ev.loop, "valid", None)
            ev.write(self.pool.cell, _tmap(
                lambda t, v: _set(t, self.slot, _keep_if(valid, v, _at(t, self.slot))),
                tables, stored))
            return
        entry = guard.cache.get((id(self.pool), id(self.slot)))
        if entry is None:
            raise CompileError("a closure run by the backward loop writes a reference made in "
                               "the loop that it does not hold itself; not compiled as a loop")
        ev.write(entry.cell, self.pool.load(_tmap(lambda o, v: _cast(v, o.shape, o.dtype),
                                                  self.pool.store(entry.original), stored)))


def _prefetch(ev, guard, value, ptr, origin, own=None, pools=None):
    """Read every pool slot the decoded row's closures hold into a JRef cell of the iteration
    (Guard.cache), one conditional per pool: XLA does not fuse a conditional, so the rows are
    materialized before the iteration's in-place updates (a dynamic slice fused into a later
    update makes XLA copy the whole table every iteration: 2 x 0.9 MB for the TreeLSTM's
    gradient, 6 of its 7 ms). The closures read and write the cells, which the switch over
    the row's Functions joins like any reference; `flush` writes changed ones back. The slots
    of the row's own iteration (`own`: (id(pool), id(slot)) -> k, Family.decode) are read as
    one block [K, ...] at ptr * K rather than gathered. `pools` (ids): only their slots."""
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
                if pools is not None and id(v.pool) not in pools:
                    continue
                # keyed by pool too: joins.py shares a union's slots between alternatives,
                # so one slot tensor can index two pools (a lifted list's and a fold's)
                refs.setdefault((id(v.pool), id(v.slot)), (v, set()))[1].add(j)
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
    own = own or {}
    for pool, members in by_pool.items():
        tables = ev.read(pool.cell)
        mine = [(r, users) for r, users in members if (id(pool), id(r.slot)) in own]
        others = [(r, users) for r, users in members if (id(pool), id(r.slot)) not in own]
        slots = _gathered([r.slot for r, _ in others], origin) if others else None
        flat = _leaves(tables, [])
        per_row = pool.per_row or 1
        # per table: the own block [K, ...] (if any), then the gathered others (if any)
        layout = [((n,) + t.shape[1:], t.dtype) for t in flat
                  for n in ([per_row] if mine else []) + ([len(others)] if others else [])]

        def read(flat=flat, slots=slots, per_row=per_row, mine=mine):
            out = []
            for t in flat:
                if mine:
                    out.append(lax.dynamic_slice_in_dim(t, ptr * per_row, per_row))
                if slots is not None:
                    out.append(jnp.take(t, slots, axis=0))
            return out
        rows = lax.cond(ptr >= 0, read,
                        lambda layout=layout: [jnp.zeros(s, d) for s, d in layout])
        step = len(rows) // len(flat)
        blocks, gathered = (rows[0::step] if mine else None), rows[step - 1::step]
        for r, users in mine:
            k = own[(id(pool), id(r.slot))]
            value = pool.load(_rebuild_key(pool.key, iter([view(ev, x, k) for x in blocks])))
            guard.cache[(id(pool), id(r.slot))] = _Cached(pool, r.slot, users,
                                                          JRef(value, next_serial()), own=k)
        for j, (r, users) in enumerate(others):
            value = pool.load(_rebuild_key(pool.key, iter([view(ev, x, j) for x in gathered])))
            guard.cache[(id(pool), id(r.slot))] = _Cached(pool, r.slot, users,
                                                          JRef(value, next_serial()))
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
    cell the iteration reads and writes it through; `own`: k when it is slot k of the row's own
    iteration, else None."""
    __slots__ = ("pool", "slot", "users", "cell", "original", "own")

    def __init__(self, pool, slot, users, cell, own=None):
        self.pool, self.slot, self.users, self.cell = pool, slot, users, cell
        self.original = cell.value
        self.own = own


def flush(ev, guard, value, valid=None):
    """Write the iteration's changed slots back (a slot of an alternative not taken goes to
    the pool's spare last row, so a garbage slot never overwrites a real one; so does every
    slot of a fixed-trip loop's step past the chain's end, `valid` False); returns a
    traced bool: did one alternative hold two references to one slot, one of them written
    (aliasing the per-iteration cells cannot represent)?

    Slots of the row's own iteration (`_Cached.own`) are not written back while `ev.batching`
    is on (a program's first trace): no later step reads them (a step reaches only slots of
    its own iteration and earlier ones: its children's results, earlier rows), so the write is
    dead -- unless the program reads the pool after the loop (a second backward pass, an
    adjoint read afterwards). The loop then leaves the pool's cell POISON (`guard.dead`), and
    such a read restarts the trace without batching, where every slot is written back. Why:
    the TreeLSTM's gradient wrote 10 slots back per step, 6 of them its own (an in-place row
    update and a switch output each)."""
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
            if x.own is not None and y.own is not None:
                continue            # slots k != k' of one row: distinct
            hit = x.slot == y.slot
            pred = taken(common)
            hit = hit if pred is None else hit & pred
            alias = alias | (hit if valid is None else hit & valid)
    if getattr(ev, "batching", False):
        for e, d in zip(entries, dirty):
            if d and e.own is not None:
                guard.dead[id(e.pool.cell)] = e.pool.cell
        dirty = [d and e.own is None for e, d in zip(entries, dirty)]
    for pool in {id(e.pool): e.pool for e, d in zip(entries, dirty) if d}.values():
        tables = ev.read(pool.cell)
        spare = _leaves(tables, [])[0].shape[0] - 1
        for e, d in zip(entries, dirty):
            if d and e.pool is pool:
                pred = taken(e.users)
                if valid is not None:
                    pred = valid if pred is None else pred & valid
                at = e.slot if pred is None else jnp.where(pred, e.slot, spare)
                tables = _tmap(lambda t, v: _set(t, at, v), tables, pool.store(e.cell.value))
        ev.write(pool.cell, tables)
    guard.cache = {}
    return alias


def _key_text(key):
    if _is_ref_key(key):
        return "references"
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
        self.own = {}                # (id(pool), id(decoded own slot)) -> k (_Decoder)
        self.local = False           # a replayed inner loop's (dynamic_nest): its chain
                                     # runs inside the step or branch that replays it

    def row_pools(self):
        """{id: pool} of the pools whose slots the rows hold (the template's)."""
        found, seen, stack = {}, set(), [self.template]
        while stack:
            t = stack.pop()
            if not isinstance(t, (tuple, list)) or not t or id(t) in seen:
                continue
            seen.add(id(t))
            kind = t[0]
            if kind in ("own", "parts") and isinstance(t[1], JPoolRef):
                found[id(t[1].pool)] = t[1].pool
            if kind in ("tuple", "parts"):
                stack.extend(t[-1])
            elif kind == "adt":
                stack.extend(t[2])
            elif kind == "closure":
                stack.extend(x for _, x in t[3])
            elif kind == "union":
                stack.append(t[1])
                stack.extend(t[2])
        return found

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

    def unpack(self, stacked, ev=None):
        out = [None] * len(self.layout)
        for (_, _, members), rows in zip(self.groups, stacked):
            for j, k in enumerate(members):
                out[k] = rows[j] if ev is None else view(ev, rows, j)
        return out

    def decode(self, ptr, ev=None):
        rows = [_at(t, ptr) for t in self.tables]
        leaves = self.unpack(rows, ev)
        # where each leaf came from: _prefetch reads the pool slots a row holds as one gather
        # of the row's int32 vector, not one slice per slot and a concatenation
        self.origin = {id(x): (rows[g], j) for g, (_, _, members) in enumerate(self.groups)
                       for j, x in enumerate(leaves[k] for k in members)}
        memo = {}
        decoder = _Decoder(leaves, memo, ptr)
        built = decoder.build(self.template)
        self.own = decoder.own
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
        if isinstance(v, JPoolRef) and id(v.slot) in v.pool.own_k:
            return ("own", v, v.pool.own_k[id(v.slot)])     # made in this iteration
        if isinstance(v, Indexed):
            return ("parts", v, [self.encode(p) for p in v.parts()])
        if isinstance(v, np.ndarray):
            return ("same", v)
        if is_jax_value(v):
            if id(v) in self.outer:
                return ("same", v)
            hit = self.memo.get(id(v))
            if hit is None:     # stored once: joins.py shares a union's slots by shape
                self.leaves.append(v)
                hit = self.memo[id(v)] = ("leaf", len(self.leaves) - 1)
            return hit
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
    def __init__(self, leaves, memo, ptr=None):
        self.leaves, self.memo, self.ptr = leaves, memo, ptr
        self.own = {}                # (id(pool), id(decoded own slot)) -> k

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
        if kind == "own":            # slot k of the row's own iteration: ptr * K + k
            pool, k = t[1].pool, t[2]
            slot = self.memo.get(("own", id(pool), k))
            if slot is None:
                import jax.numpy as jnp
                slot = jnp.asarray(self.ptr * pool.per_row + k, jnp.int32)
                self.memo[("own", id(pool), k)] = slot
                self.own[(id(pool), id(slot))] = k
            return t[1].with_parts([slot])
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


# ---- the backward loop: calling a row of a family -------------------------------------------

def _call_chain(ev, row, args):
    fam = row.family
    if fam.tables is None:
        raise CompileError(f"{fam.name}: a closure made in an iteration of the loop is called "
                           "inside the same loop (a gradient of a gradient?); not compiled as "
                           "a loop")
    if (ev.join_depth or ev.guard is not None) and not fam.local:
        raise CompileError(f"{fam.name}: the closures its loop left are called under a traced "
                           "if or match, or inside another backward loop; not compiled as a "
                           "loop yet")
    if ev.accumulations is None:
        ev.accumulations = accumulations(ev.mod)
    return _Chain(ev, fam, list(args), row.ptr).run()


def _until_row(ev, fam, r):
    """Run a row's pending tail calls up to its call of an earlier row of `fam`. A joined
    callee whose alternatives reach that call after different numbers of closures (a leaf's
    backpropagator calls the row directly, a node's calls another closure of its own row
    first) runs as a switch: an alternative that is the row call stays pending, the others
    run on to theirs, and the join selects the row (joins.py joins JRows by their parts)."""
    def is_row(x):
        return isinstance(x, JRow) and x.family is fam
    while isinstance(r, TailCall) and not is_row(r.callee):
        callee, args = r.callee, r.args
        if isinstance(callee, JUnion) and any(is_row(a) for a in callee.alts):
            r = ev.switch(callee.index, [
                lambda stop, a=a: TailCall(a, args) if is_row(a) else
                _until_row(ev, fam, ev.enter(a, args)) for a in callee.alts],
                tail_stop=callee.start)
        else:
            r = ev.enter(callee, args)
    return r


class _Chain:
    """The backward loop over a family's rows (module docstring; dynamic_defer.py for the
    pool slots through cells and the deferred sums)."""

    def __init__(self, ev, fam, args, ptr):
        self.ev, self.fam, self.args, self.ptr = ev, fam, args, ptr
        self.start = next_serial()
        self.deferred = []
        self.record_shapes = None    # per deferred reference, per hit: (kind, shapes)
        self.fixed = _fixed_trips(ev)
        self.dead = {}               # id(pool cell) -> cell: own slots flush left unwritten
        self.settle_weights = []     # per deferred reference, per hit: scatter_mm weight or None
        self.seen_weights = {}       # Guard.weights, kept from the body's first trace on

    def step(self, ptr, guard):
        """Row ptr's closure (a lax.switch over the row's Functions, joins.py); the next row
        (its tail call of the previous row)."""
        import jax.numpy as jnp
        ev, fam, args = self.ev, self.fam, self.args
        # fixed trips: a step past the chain's end (ptr -1) reruns row 0, its writes dropped
        valid = (ptr >= 0) if self.fixed else None
        if valid is not None:
            ptr = jnp.maximum(ptr, 0)
        v = fam.decode(ptr, ev)
        _prefetch(ev, guard, v, ptr, fam.origin, fam.own)
        guard.start_step()
        r = _until_row(ev, fam, ev.enter(v, args))
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
                      self.record_shapes, self.seen_weights)
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
                                       for k, a, b, _ in guard.records[id(r)]] for r in deferred]
                    # the enclosing trace's weights of "scatter_mm" hits, for settle
                    out["weights"] = [[w for *_, w in guard.records[id(r)]] for r in deferred]
                    out["hits"] = dict(guard.hits)
                finally:
                    for ref, old in frame.log.values():
                        ref.value = old
                return []
            jax.make_jaxpr(body)(np.int32(0))
        self._traced(run, deferred)
        self.settle_weights = out["weights"]
        return [ref for ref, _ in frame.log.values()], finals, out["records"]

    def run(self):
        ev, fam = self.ev, self.fam
        import jax.numpy as jnp
        from jax import lax
        written, finals, records = self.discover([])
        # defer the outer tensor references the body accumulates into (dynamic_defer.py); with
        # none to defer, the first trace is the one the loop needs (no second one)
        deferred = [r for r in written if not isinstance(r, PoolCell) and _is_tree(r.value)
                    and not isinstance(r.value, tuple) and not ev.is_fault_cell(r)]
        while deferred:
            try:
                written, finals, records = self.discover(deferred)
                break
            except Undefer as undo:
                if not any(r is undo.ref for r in deferred):
                    raise            # an enclosing backward loop's (a replayed inner loop)
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
        before = [ref.value for ref in written]
        initial = [_tmap(lambda v: _cast(v, np.shape(v), v.dtype), v) for v in before]
        tables0 = [[(jnp.zeros((rows,) + tuple(sa), da), jnp.zeros((rows,) + tuple(sb), db))
                    for _, sa, da, sb, db in hits] for hits in records]

        pools = [isinstance(ref, PoolCell) for ref in written]

        # Without fixed trips a hit's table is written densely: the row of its own counter,
        # which only the steps making the hit advance, so `settle` multiplies as many rows as
        # there were hits (the TreeLSTM's U: the nodes, not nodes and leaves). Fixed trips
        # (rl.vmap): the family's row, the same work for every example.
        counts0 = [[jnp.zeros((), jnp.int32) for _ in hits] for hits in records]

        def body(state):
            ptr, values, tables, counts, alias = state
            valid = (ptr >= 0) if self.fixed else None
            row = ptr if valid is None else jnp.maximum(ptr, 0)

            def one(guard):
                # the body is a function of its own: no enclosing probe logs its writes (the
                # loop carries them; a replayed inner loop's chain runs inside a branch)
                ev.frames = []
                for ref, v in zip(written, values):
                    ref.value = v
                try:
                    nxt = self.step(ptr, guard)
                    self.dead = dict(guard.dead)
                    step_records = guard.step_records()
                    # pool tables: flush guarded their slots already (no whole-table select)
                    out = [_tmap(lambda v, o: _keep_if(None if pool else valid, v, o),
                                 ref.value, old)
                           for ref, old, pool in zip(written, values, pools)]
                finally:
                    # the contents before the loop, not their casts: inside a switch's branch
                    # (a replayed inner loop, dynamic_nest) the branch's log restores them
                    for ref, v in zip(written, before):
                        ref.value = v
                new_tables, new_counts = [], []
                for hits, got, cs in zip(tables, step_records, counts):
                    if len(got) != len(hits):
                        raise CompileError(f"internal: {fam.name}'s backward loop changed "
                                           "between traces")
                    if self.fixed:
                        new_tables.append([
                            (_set(ta, row, _keep_if(valid, a, _at(ta, row))),
                             _set(tb, row, _keep_if(valid, b, _at(tb, row))))
                            for (ta, tb), (_, a, b, _hit) in zip(hits, got)])
                        new_counts.append(cs)
                    else:
                        new_tables.append([(_set(ta, c, a), _set(tb, c, b))
                                           for (ta, tb), (_, a, b, _hit), c
                                           in zip(hits, got, cs)])
                        new_counts.append([c + hit for c, (*_, hit) in zip(cs, got)])
                return nxt, out, new_tables, new_counts, alias | self.alias
            return self._traced(one, deferred)
        state = (jnp.asarray(self.ptr, jnp.int32), initial, tables0, counts0,
                 jnp.asarray(False))
        if self.fixed:      # every row at most once: the chain runs down from ptr to -1
            ptr, values, tables, counts, alias = lax.fori_loop(0, rows, lambda _, s: body(s),
                                                               state)
        else:
            ptr, values, tables, counts, alias = lax.while_loop(lambda s: s[0] >= 0, body,
                                                                state)
        self._alias_fault(alias)
        for ref, v in zip(written, values):
            ev.write(ref, v)
        for cell in self.dead.values():      # own slots flush left unwritten: a later read
            ev.write(cell, POISON)           # restarts the trace, which writes them
        for ref, hits, t, cs, ws in zip(deferred, records, tables, counts, self.settle_weights):
            written_rows = fam.count if self.fixed or not cs else \
                functools.reduce(jnp.maximum, cs)
            ev.write(ref, settle(ref.value, hits, t, written_rows, self.fixed, ws))
        return self._base_call()

    def _alias_fault(self, alias):
        fam = self.fam
        self.ev.fault(alias, f"{fam.name}: two references the backward loop's closures "
                            "use in one step are the same reference, which the compiled "
                            "loop does not represent; run it with rl.evaluate")

    def _base_call(self):
        """Call the family's row -1 (what the reference held before the loop: a tail loop's
        peeled first iteration, whose closures hold slots of the pools' last row) with those
        slots prefetched into cells and written back after, as a backward step does: read and
        written in place one by one, every update of a table followed by reads of it, XLA
        copied the whole table per update and compiled a kernel per access (RK4's gradient: 38
        of the program's 113 kernels, a third of its compile time). The closures run until
        the chain reaches one made before the loop (a tail call of a closure older than the
        loop's pools: made after the newest of those the rows hold), which continues in the
        enclosing trace. Only slots of the pools the rows hold are prefetched."""
        ev, fam = self.ev, self.fam
        import jax.numpy as jnp
        pools = fam.row_pools()
        if not pools:
            return TailCall(fam.base, list(self.args))
        newest = max(p.cell.serial for p in pools.values())
        guard = Guard(self.start, ev.accumulations, [], ev.join_depth + 1)
        saved_guard = ev.guard
        guard.partial, guard.outer = set(pools), saved_guard
        ev.guard = guard
        try:
            _prefetch(ev, guard, fam.base, jnp.asarray(0, jnp.int32), {}, pools=set(pools))
            if not guard.cache:
                return TailCall(fam.base, list(self.args))
            r = TailCall(fam.base, list(self.args))
            while isinstance(r, TailCall) and isinstance(r.callee, (JClosure, JUnion)) and \
                    r.callee.serial > newest:
                r = ev.enter(r.callee, r.args)
            alias = flush(ev, guard, fam.base)
        finally:
            ev.guard = saved_guard
        self._alias_fault(alias)
        return r

__all__ = ["Pool", "JPoolRef", "Family", "JRow"]
