"""The backward loop's cost model (dynamic_rows.py): one iteration touches rows, not whole
tables and weight matrices.

    patterns = accumulations(mod)       # IR: `%a = !%r; ...; %r := %a + d` with d an outer
                                        # product or a row scatter, %a used once
    guard = Guard(start, patterns, deferred, depth, shapes)   # ev.guard while it traces

**Pool slots through cells.** The backward loop runs row p's closure, one of a few Functions
(one per constructor), as a lax.switch. Had its closures written the pool tables, the switch
would return whole tables (the TreeLSTM's gradient: 107 ms per tree, 10x PyTorch, nearly all
copies). Instead the slots the row's closures hold are read first, in one conditional
(materialized: XLA cannot fuse it into the in-place updates that follow, which would make it
copy the table), into JRef cells (`Guard.cache`); the switch joins the cells like any
reference, and the changed ones are written back after it (dynamic_rows.flush).

**Deferred sums.** Reverse AD accumulates a weight's gradient per use: `%r := !%r + expand_dims(
%g, axis=-1) * %x` (matmul's weight gradient) or `%r := !%r + take_backward(%v, %i, %E, axis=0)`
(an embedding row). Done per iteration that is a pass over the whole matrix, and a switch
output the size of the matrix. For an outer reference whose every read and write in the loop
is such a pair (`accumulations` finds them in the program text; a read elsewhere, or a pair
inside a traced join of the closure, raises `Undefer` and the loop is traced again without
deferring that reference), each hit writes (g, x) -- or (v, i) -- to a small cell of the step
(zeros and a 0 hit flag where another Function ran), the loop stores them in tables [rows, ...]
(densely: a hit's next row is its own counter, so the TreeLSTM's node weight has a row per node,
not per node and leaf), and after the loop `settle` adds `G^T X` (one matmul over the first n
rows, n from `settle_sizes`) or a scatter-add of the rows: the interpreter's deferred outer
products (interp/deferred.py), as XLA operations. An embedding's gradient through a matmul,
`take_backward(matmul(g, W), i, E)` with W the same for every row (a weight the closure
captured from outside the loop), stores g, and `settle` scatters G[:n] @ W: one matrix product
instead of a matrix-vector product per step (the TreeLSTM leaf's input gradient).
"""
from __future__ import annotations

import numpy as np

from relayish.errors import CompileError
from relayish.ir.analysis import use_counts, walk
from relayish.ir.expr import Call, Let, RefRead, RefWrite, Var
from relayish.ir.op import Op
from relayish.ir.types import TensorType
from relayish.backend.jax.values import JRef, is_tensor


def _is_tree(v):
    """A tensor, or tuples of them."""
    stack = [v]
    while stack:
        x = stack.pop()
        if isinstance(x, tuple):
            stack.extend(x)
        elif not is_tensor(x):
            return False
    return True


def _key(v):
    """The structure of a tensor tree as (shape, dtype) leaves (a pool's key)."""
    if isinstance(v, tuple):
        return tuple(_key(x) for x in v)
    return (tuple(np.shape(v)), np.dtype(v.dtype).name)


def _leaves(tree, out):
    """The leaves of a tensor tree, appended to `out` in order."""
    if isinstance(tree, tuple):
        for x in tree:
            _leaves(x, out)
    else:
        out.append(tree)
    return out


def _tmap(f, *trees):
    if isinstance(trees[0], tuple):
        return tuple(_tmap(f, *parts) for parts in zip(*trees))
    return f(*trees)


class PoolCell(JRef):
    """The cell holding a pool's tables (dynamic_rows.Pool)."""
    __slots__ = ()


class Undefer(Exception):
    """A deferred reference is used outside its accumulation pattern: trace again without."""

    def __init__(self, ref):
        super().__init__()
        self.ref = ref


class Accumulation:
    """One `%r := %a + d` site: `read` the Var %a bound to `!%r`, `kind` "outer" (operands
    g, x), "scatter" (v, i) or "scatter_mm" (g, i and `w`: the rows are matmul(g, w), an
    embedding's gradient through a matmul; deferred as g when w is the same for every row)."""
    __slots__ = ("read", "kind", "a", "b", "w")

    def __init__(self, read, kind, a, b, w=None):
        self.read, self.kind, self.a, self.b, self.w = read, kind, a, b, w


def _ttype(e):
    t = getattr(e, "_checked_type", None)
    return t if isinstance(t, TensorType) else None


def _op(e, name):
    return isinstance(e, Call) and isinstance(e.op, Op) and e.op.name == name


def _delta(d):
    """("outer", g, x) / ("scatter", v, i) when d is an accumulable gradient term, else None."""
    if _op(d, "multiply") and len(d.args) == 2:
        col, x = d.args
        if _op(col, "expand_dims") and len(col.args) == 1 and col.attrs.get("axis") == -1:
            g = col.args[0]
            tg, tx, t = _ttype(g), _ttype(x), _ttype(d)
            if tg and tx and t and len(tg.shape) == 1 and len(tx.shape) == 1 and \
                    t.shape == (tg.shape[0], tx.shape[0]) and tg.dtype == tx.dtype == t.dtype:
                return "outer", g, x
    if _op(d, "take_backward") and len(d.args) == 3 and d.attrs.get("axis") == 0:
        v, i, like = d.args
        tv, ti, tl = _ttype(v), _ttype(i), _ttype(like)
        if tv and ti and tl and ti.shape == () and ti.dtype.startswith("int") and \
                len(tl.shape) >= 1 and tv.shape == tl.shape[1:]:
            if _op(v, "matmul") and len(v.args) == 2:
                g, w = v.args
                tg, tw = _ttype(g), _ttype(w)
                if tg and tw and len(tg.shape) == 1 and len(tw.shape) == 2 and \
                        tw.shape[0] == tg.shape[0] and tv.shape == (tw.shape[1],) and \
                        tg.dtype == tw.dtype == tv.dtype:
                    return "scatter_mm", g, i, w
            return "scatter", v, i
    return None


def accumulations(mod):
    """{RefRead node: Var, RefWrite node: Accumulation} of every accumulation pair in the
    module (docstring): `let %a = !%r` and later in the same let-chain `%r := %a + d`, %a used
    once. A loop over the let-chains (each chain once), no recursion."""
    out = {}
    if mod is None:
        return out
    for func in mod.functions.values():
        counts = use_counts(func)
        inner = set()
        for node in walk(func):
            if isinstance(node, Let) and isinstance(node.body, Let):
                inner.add(id(node.body))
        for node in walk(func):
            if not isinstance(node, Let) or id(node) in inner:
                continue
            reads, lets = {}, {}
            while isinstance(node, Let):
                value = node.value
                if counts.get(node.var, 0) == 1:
                    lets[node.var] = value        # a term bound once: `%t = take_backward(..)`
                if isinstance(value, RefRead) and isinstance(value.ref, Var) and \
                        counts.get(node.var, 0) == 1:
                    reads[node.var] = value
                elif isinstance(value, RefWrite) and isinstance(value.ref, Var) and \
                        _op(value.value, "add") and len(value.value.args) == 2:
                    a, d = value.value.args
                    d = lets.get(d, d) if isinstance(d, Var) else d
                    read = reads.get(a)
                    found = _delta(d)
                    if read is not None and read.ref is value.ref and found is not None:
                        out[read] = a
                        out[value] = Accumulation(a, *found)
                node = node.body
    return out


class Marker:
    """The content of a deferred reference while the loop traces (not a tensor)."""
    __slots__ = ("ref",)

    def __init__(self, ref):
        self.ref = ref


class Guard:
    """What the backward loop's body does differently (module docstring): `deferred`
    references accumulate into `records` (per reference, per hit: (kind, a, b)); `cache` holds
    the iteration's pool slots (dynamic_rows._prefetch). While discovering (`shapes` None) a
    hit keeps its tensors to learn their shapes; afterwards each hit writes a cell made at the
    start of the step (`start_step`), so the switch over the row's Functions joins it (zeros
    where another Function ran). `depth`: the join depth of the row's alternatives."""

    def __init__(self, start, patterns, deferred, depth, shapes=None, weights=None):
        self.start, self.patterns, self.depth, self.shapes = start, patterns, depth, shapes
        # id(site) -> the weight a "scatter_mm" site read in the loop's first trace: a tensor
        # of the enclosing trace (the same for every row) is the same object in every trace
        # of the body, one the row computes is a new tracer each time
        self.weights = {} if weights is None else weights
        self.deferred = {id(r): r for r in deferred}
        self.records = {id(r): [] for r in deferred}
        self.markers = {id(r): Marker(r) for r in deferred}
        self.cache = {}          # id(slot) -> the iteration's cell of a pool slot
        self.direct = False      # the cells written back, tables used directly (dynamic_nest)
        self.partial = None      # ids of the only pools it covers (a row -1 step), and
        self.outer = None        # ... the guard of the others
        self.dead = {}           # id(pool cell) -> cell whose own slots flush left unwritten
        self.cells = {}          # id(ref) -> a cell per hit (after discovery)
        self.hits = {}
        self.alternatives = 1

    def install(self):
        for key, ref in self.deferred.items():
            ref.value = self.markers[key]

    def start_step(self):
        import jax.numpy as jnp
        self.hits = {key: 0 for key in self.deferred}
        if self.shapes is None:
            return
        # a cell per hit: its two operands and whether this step's Function made the hit
        self.cells = {key: [JRef((jnp.zeros(sa, da), jnp.zeros(sb, db),
                                  jnp.zeros((), jnp.int32)), -1)
                            for _, sa, da, sb, db in hits]
                      for key, hits in zip(self.deferred, self.shapes)}
        for cells in self.cells.values():
            for cell in cells:
                cell.serial = self.start      # older than the step's switch: joined by it

    def step_records(self):
        """Per deferred reference, per hit: (kind, a, b, hit) of this step (after its switch;
        `hit` an int32 1 where the step's Function made it, else 0 and a, b zeros)."""
        out = []
        for key, hits in zip(self.deferred, self.shapes):
            out.append([(h[0],) + tuple(c.value) for h, c in zip(hits, self.cells[key])])
        return out

    def check_read(self, ev, e, ref):
        if isinstance(ref, JRef) and id(ref) in self.deferred and \
                (e not in self.patterns or ev.join_depth > self.depth):
            raise Undefer(ref)
        if isinstance(ref, JRef) and isinstance(ref.value, Marker) and \
                id(ref) not in self.deferred:
            # deferred by an enclosing backward loop (this one runs a replayed inner loop's
            # chain inside its step, dynamic_nest.py): that loop carries it instead
            raise Undefer(ref.value.ref)

    def same_weight(self, ev, site, env):
        """The weight of a "scatter_mm" site, and whether it is the same for every row (the
        object the site read in the loop's first trace: see Guard.weights in __init__)."""
        w = ev.eval(site.w, env)
        return w, is_tensor(w) and self.weights.setdefault(id(site), w) is w

    def defers(self, ev, e, ref, env):
        """Record the write `e` to a deferred reference (True), or False for any other."""
        site = self.patterns.get(e)
        if not (isinstance(ref, JRef) and id(ref) in self.deferred):
            if isinstance(site, Accumulation) and site.kind == "scatter_mm":
                self.same_weight(ev, site, env)       # the first trace remembers its weight
            return False
        if not isinstance(site, Accumulation) or ev.join_depth > self.depth or \
                env.get(site.read) is not self.markers[id(ref)]:
            raise Undefer(ref)
        a, b = ev.eval(site.a, env), ev.eval(site.b, env)
        if not (is_tensor(a) and is_tensor(b)):
            raise Undefer(ref)
        import jax.numpy as jnp
        kind, w = site.kind, None
        if kind == "scatter_mm":
            w, same = self.same_weight(ev, site, env)
            if not same:
                # the weight is the row's own: the product runs in the step, as written
                kind, a, w = "scatter", jnp.matmul(a, w), None
        key = id(ref)
        n = self.hits.get(key, 0)
        self.hits[key] = n + 1
        if self.shapes is None:
            self.records[key].append((kind, jnp.asarray(a), jnp.asarray(b), w))
            return True
        cells = self.cells[key]
        if n >= len(cells):
            raise CompileError("internal: the backward loop's body changed between traces")
        ev.write(cells[n], (jnp.asarray(a), jnp.asarray(b), jnp.ones((), jnp.int32)))
        return True


SETTLE_CHUNK = 8


def settle_sizes(rows: int) -> list[int]:
    """The row counts `settle` has a matrix product for: multiples of SETTLE_CHUNK up to 16
    chunks, then growing by half (so at most a third of a product is padding), the last `rows`."""
    sizes = list(range(SETTLE_CHUNK, min(rows, 16 * SETTLE_CHUNK) + 1, SETTLE_CHUNK))
    while not sizes or sizes[-1] < rows:
        grown = sizes[-1] + sizes[-1] // 2 if sizes else rows
        sizes.append(min(rows, -(-grown // SETTLE_CHUNK) * SETTLE_CHUNK))
    return sizes


def settle(initial, records, tables, count, fixed=False, weights=None):
    """The deferred reference's value after the loop: its content before plus every row's
    terms (`tables`: per hit, the two stacked operand tables). Rows past `count` (a traced
    int: the rows the loop wrote) are zeros: the outer products are ONE matrix product per
    table over the first n rows, n the smallest of `settle_sizes` holding count (a switch
    over those sizes), so the work follows the structure's size, not the capacity, and the
    weight-sized sum is made once (a loop over chunks added a whole weight matrix per chunk:
    a sixth of the TreeLSTM gradient's time). `fixed` (a fixed-trip loop's tables,
    dynamic_rows._fixed_trips): every row, so that the work is the same for every example of
    a batch. A "scatter_mm" hit (`weights`: its w) stored g: its rows are G[:n] @ w, one
    matrix product where each step would have run a matrix-vector product, then scattered."""
    import jax.numpy as jnp
    from jax import lax
    total = jnp.asarray(initial)
    weights = weights or [None] * len(records)
    outer = [(ta, tb) for (kind, *_), (ta, tb) in zip(records, tables) if kind == "outer"]
    mapped = [(ta, tb, w) for (kind, *_), (ta, tb), w in zip(records, tables, weights)
              if kind == "scatter_mm"]
    for (kind, *_), (ta, tb) in zip(records, tables):
        if kind == "scatter":
            total = total.at[tb].add(ta.astype(total.dtype))
    if not outer and not mapped:
        return total
    rows = (outer or mapped)[0][0].shape[0]

    def products(n):
        d = None
        for ta, tb in outer:
            p = jnp.matmul(ta[:n].T, tb[:n]).astype(total.dtype)
            d = p if d is None else d + p
        # the mapped rows padded to the table's rows (zeros past n, scattered to row 0)
        rows_of = [jnp.pad(jnp.matmul(ta[:n], w), ((0, rows - n), (0, 0))) for ta, _, w in mapped]
        return d, rows_of
    sizes = settle_sizes(rows)
    if fixed or len(sizes) == 1:
        d, rows_of = products(rows)
    else:
        which = jnp.searchsorted(jnp.asarray(sizes, jnp.int32), count)
        d, rows_of = lax.switch(jnp.minimum(which, len(sizes) - 1),
                                [lambda n=n: products(n) for n in sizes])
    # `total +` outside the switch: XLA drops it when the reference started as zeros
    if d is not None:
        total = total + d
    for (_, tb, _), v in zip(mapped, rows_of):
        total = total.at[tb].add(v.astype(total.dtype))
    return total


__all__ = ["PoolCell", "Undefer", "Accumulation", "accumulations", "Marker", "Guard", "settle"]
