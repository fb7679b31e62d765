"""Joins: an `if` on a traced condition (and every use of a joined value) as one lax.switch.

    value = switch(ev, index, [alt0, alt1, ...], tail_stop)   # alt(stop) -> value | TailCall

Scheme. Each alternative is first traced on its own (`jax.make_jaxpr`, the *probe*), which gives
its result and the references it wrote as trace-time objects; each alternative's writes are
undone before the next runs (a Frame logs them). `_Joiner` walks the alternatives' results (and
each written reference's new contents) side by side and makes a *template* of the joined value:

    _Same(obj)                      the same object in every alternative
    _Slot                           a tensor: one output of the lax.switch
    ("tuple", [t]) | ("adt", ctor, [t]) | ("closure", func, name, [(var, t)])
                                    same structure: joined field by field
    ["ref", JRef | None, t]         references each alternative made: one reference after the join
    ("union", index slot, [t])      anything else: an int32 index output plus each alternative's
                                    own tensors (one slot serves one tensor of each
                                    alternative of its shape and dtype, `_Joiner.shared`: what
                                    it holds when another alternative ran is garbage or zeros);
                                    nested unions flatten
    ("tail", t, [t])                pending tail calls, joined like values
    ("parts", v, [t])               rows of one table in a loop (values.Indexed): their parts

Then `lax.switch` runs each probe's jaxpr and pads it to the joined outputs, and `_Rebuilder`
builds the joined value from the switch outputs; written references get the joined contents.
Joins nested deeper than MAX_SWITCH_NESTING (limits.py) probe inline, into the enclosing trace,
and select the outputs (`lax.select_n`) instead of nesting XLA conditionals (XLA's compiler
recurses per nested conditional, slowly and then into a segfault). A union of references that
all hold tensor trees of one type is read and written with selects (`tensor_contents`,
`select_tree`), not switches. A *view* (`view(ev, base, j)`: `base[j]` for a static j, such as
the vectors the backward loop decodes from a row of stacked tables) that an alternative uses is
sliced inside the branch from `base`, the switch's operand, not passed in as an operand of its
own: each operand slice was an XLA operation per loop step that the branch could not fuse.

The evaluator (`ev`, trace.py) is passed in: a join needs its frames, its join depth, its
reference writes and its views (`ev.views`, made here), and nothing else of it.
"""
from __future__ import annotations

import numpy as np

from relayish.errors import CompileError
from relayish.backend.values import ConstructorValue
from relayish.backend.jax.limits import MAX_SWITCH_NESTING
from relayish.backend.jax.values import (POISON, Frame, Indexed, JAdt, JClosure, JRef, JUnion,
                                         Restart, TailCall, describe, is_jax_value, is_tensor,
                                         is_tensor_tree, is_traced, load_jax, next_serial,
                                         same_tree_type, serial_of)


def switch(ev, index, alternatives, tail_stop=None, one_row=False):
    """Run alternative `index` (an int32 scalar); each is `alt(stop) -> value | TailCall`.

    A trace-time index picks the alternative. A traced one probes every alternative, joins
    their results and written references, and emits one lax.switch. `one_row` (a traced if
    whose value the iteration goes on with): see _Joiner.
    """
    if not is_traced(index):
        return alternatives[int(np.asarray(index))](tail_stop)
    inline = ev.join_depth >= MAX_SWITCH_NESTING
    start = next_serial()
    probes = [_probe(ev, alt, start, tail_stop, inline) for alt in alternatives]
    if tail_stop is not None:
        pending = [isinstance(p.result, TailCall) for p in probes]
        if any(pending) and not all(pending):     # values and calls do not join: finish calls
            probes = [_probe(ev, alt, start, None, inline) if pend else p
                      for alt, p, pend in zip(alternatives, probes, pending)]
    return _join(ev, index, probes, start, one_row)


def _probe(ev, alternative, start, stop, inline=False):
    """Trace one alternative on its own (a jaxpr), or with `inline` into the current trace
    (its tensors are then the current trace's, and `jaxpr` is None)."""
    jax = load_jax()
    probe = _Probe()
    frame = Frame(start)

    def traced():
        ev.frames.append(frame)
        ev.join_depth += 1
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
            ev.join_depth -= 1
            ev.frames.pop()
            for ref, old in frame.log.values():     # the next alternative starts afresh
                ref.value = old

    if inline:
        traced()
        probe.jaxpr = None
    else:
        probe.jaxpr = jax.make_jaxpr(traced)()
    probe.position = {id(leaf): i for i, leaf in enumerate(probe.leaves)}
    # tensors of the enclosing trace that the alternative only passes through (a closure
    # capturing a weight matrix): a union keeps them as they are instead of a switch output
    # (a loop over dynamic structure would otherwise store them in every row)
    probe.outer = set()
    if probe.jaxpr is not None:
        constvars = {id(v) for v in probe.jaxpr.jaxpr.constvars}
        probe.outer = {id(leaf) for leaf, var in zip(probe.leaves, probe.jaxpr.jaxpr.outvars)
                       if id(var) in constvars}
    probe.restore = [(ref, old) for ref, old in frame.log.values()]
    return probe


def _join(ev, index, probes, start, one_row=False):
    """The joined result of the probed alternatives; the written references get joined contents."""
    jax = load_jax()
    import jax.numpy as jnp
    from jax import lax
    refs, seen = [], set()
    for p in probes:
        for ref, _ in p.writes:
            if id(ref) not in seen:
                seen.add(id(ref))
                refs.append(ref)
    joiner = _Joiner(len(probes), start, one_row)
    joiner.outer = [p.outer for p in probes]
    old = {id(ref): old for p in probes for ref, old in p.restore}
    positions = [[p.result] + [_written(p, ref, old[id(ref)]) for ref in refs] for p in probes]
    templates = [joiner.join([pos[k] for pos in positions]) for k in range(len(refs) + 1)]
    slots = joiner.slots

    local = _inside(ev)

    def branch(i):
        probe = probes[i]

        def fn():
            if probe.jaxpr is None:              # inlined: its leaves are the outputs
                outs = probe.leaves.copy()
            else:                                # views among its constants sliced here
                closed = probe.jaxpr
                outs = jax.extend.core.jaxpr_as_fun(jax.extend.core.ClosedJaxpr(
                    closed.jaxpr, [local(c) for c in closed.consts]))()
            result = []
            for slot in slots:
                src = slot.sources[i]
                if src is None:
                    value = jnp.zeros(slot.shape, slot.dtype)
                elif isinstance(src, _Const):
                    value = jnp.asarray(src.value, slot.dtype)
                elif isinstance(src, _Offset):
                    pos = probe.position.get(id(src.value))
                    value = (outs[pos] if pos is not None else local(src.value)) + src.offset
                else:
                    pos = probe.position.get(id(src))
                    value = outs[pos] if pos is not None else local(src)
                result.append(lax.convert_element_type(value, slot.dtype))
            return result
        return fn

    branches = [branch(i) for i in range(len(probes))]
    if not slots:
        outs = []
    elif probes[0].jaxpr is None or ev.select_joins:
        # past MAX_SWITCH_NESTING (every alternative was traced inline), or under rl.vmap
        # (ev.select_joins: jax batches a switch on a batched index by broadcasting every
        # operand, the weights too, to the batch): run every alternative, select the outputs.
        # Same values (tensor code has no effects; the references are joined below), at the
        # cost of computing the alternatives not taken.
        cases = [b() for b in branches]
        outs = [lax.select_n(index, *column) for column in zip(*cases)]
    else:
        outs = lax.switch(index, branches)
    rebuilt = _Rebuilder(outs, start)
    values = [rebuilt.build(t) for t in templates]
    for ref, value in zip(refs, values[1:]):
        ev.write(ref, value)
    return values[0]


def view(ev, base, j):
    """`base[j]` (j a Python int), noted as a view: a lax.switch whose alternatives use it
    takes `base` as its operand and slices inside its branches. Why: the backward loop decodes
    a row of stacked tables into some 40 vectors its closures capture; as separate switch
    operands each was an XLA operation of its own per step (a slice the branch cannot fuse),
    inside the branch it fuses into the first use."""
    leaf = base[j]
    views = getattr(ev, "views", None)
    if views is None:
        views = ev.views = {}
    views[id(leaf)] = (leaf, base, j)       # the leaf is kept alive: its id stays unique
    return leaf


def _inside(ev):
    """v -> v, except a view (`view`) is sliced from its base where the function is called
    (inside a switch's branch: the base is the branch's operand, not the slice)."""
    views = getattr(ev, "views", None) or {}

    def local(v):
        hit = views.get(id(v))
        return v if hit is None else hit[1][hit[2]]
    return local


def tensor_contents(union):
    """The contents of a union of references when they are tensor trees of one type (else None)."""
    if not is_traced(union.index) or not all(isinstance(a, JRef) for a in union.alts):
        return None
    contents = [a.value for a in union.alts]
    if not all(is_tensor_tree(c) and same_tree_type(c, contents[0]) for c in contents):
        return None
    return contents


def select_tree(index, cases):
    """lax.select_n over tensor trees of one type: cases[index]."""
    from jax import lax
    if isinstance(cases[0], tuple):
        return tuple(select_tree(index, [c[k] for c in cases]) for k in range(len(cases[0])))
    return lax.select_n(index, *cases)


class _Probe:
    __slots__ = ("result", "writes", "leaves", "jaxpr", "position", "restore", "outer")


def _written(probe, ref, old):
    for r, value in probe.writes:
        if r is ref:
            return value
    return old


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
        if is_jax_value(v):
            seen.add(id(v))
            leaves.append(v)
            continue
        if isinstance(v, Indexed):                # a row of a loop's table: its parts
            stack.extend(v.parts())
            continue
        if serial_of(v) < start and not isinstance(v, TailCall):
            continue                              # built before the join: unchanged by it
        seen.add(id(v))
        if isinstance(v, JClosure):
            stack.extend(v.env.values())
        elif isinstance(v, ConstructorValue):
            stack.extend(v.fields)
        elif isinstance(v, JRef):
            stack.append(v.value)
        elif isinstance(v, JUnion):
            stack.append(v.index)
            stack.extend(v.alts)
        elif isinstance(v, TailCall):
            stack.append(v.callee)
            stack.extend(v.args)


# ---- join templates ----------------------------------------------------------------------------
# (the template kinds are listed in the module docstring; slots are the lax.switch's outputs)


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
    """Makes the template of a join (module docstring).

    `one_row`: rows of a loop's table that the alternatives return (pool references, one made
    in each branch of a traced if) are joined into one row, and alternative i's own values
    that hold its row (the branch's backpropagator) hold the joined row instead: when i runs
    it is that row. A backward step that holds both -- the closure of the if's branch and a
    later closure of the same iteration holding the joined result -- then holds one slot, not
    two cells of it (dynamic_rows.flush's alias check refused that). Not for the switch over a
    fold's constructors, whose joined result only the parent row holds: there each clause's
    closures keep their own slots (read as one block, dynamic_rows._prefetch)."""

    def __init__(self, n, start, one_row=False):
        self.n, self.start, self.one_row = n, start, one_row
        self.outer = [set()] * n        # per alternative: ids of enclosing-trace tensors
        self.slots: list[_Slot] = []
        self.spare: dict = {}           # (shape, dtype) -> union slots, shared (`shared`)
        self.memo: dict = {}
        self.keep: list = []

    def slot(self, shape, dtype):
        s = _Slot(self.n, tuple(shape), np.dtype(dtype), len(self.slots))
        self.slots.append(s)
        return s

    def shared(self, shape, dtype, i):
        """A slot for a tensor only alternative i has (a union's): one such slot of another
        alternative with the same shape and dtype when there is one, since only one alternative
        runs. Why: each switch output an alternative does not fill is a buffer of zeros its
        branch writes (the TreeLSTM's forward union of the two constructors' closures: 35
        copies per loop step), and a row of a loop's family table (dynamic_rows.py) stores
        every output."""
        pool = self.spare.setdefault((tuple(shape), np.dtype(dtype)), [])
        for s in pool:
            if s.sources[i] is None:
                return s
        s = self.slot(shape, dtype)
        pool.append(s)
        return s

    def join(self, vals):
        """The template of the join of vals[i] (the value of alternative i at one position)."""
        first = vals[0]
        if all(v is first for v in vals):
            return _Same(first)
        if any(v is POISON for v in vals):
            raise Restart()
        key = tuple(id(v) for v in vals)
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        self.keep.append(vals)
        if all(is_tensor(v) for v in vals):
            shapes = {tuple(np.shape(v)) for v in vals}
            dtypes = {np.dtype(v.dtype) for v in vals}
            if len(shapes) != 1 or len(dtypes) != 1:
                raise CompileError("the branches of a traced if produce tensors of different "
                                   f"types: {', '.join(describe(v) for v in vals)}")
            s = self.slot(shapes.pop(), dtypes.pop())
            for i, v in enumerate(vals):
                s.sources[i] = _Const(v) if isinstance(v, np.ndarray) else v
            out = s
        elif all(isinstance(v, tuple) for v in vals) and len({len(v) for v in vals}) == 1:
            out = ("tuple", [self.join([v[k] for v in vals]) for k in range(len(first))])
        elif all(isinstance(v, TailCall) for v in vals) and len({len(v.args) for v in vals}) == 1:
            out = ("tail", self.join([v.callee for v in vals]),
                   [self.join([v.args[k] for v in vals]) for k in range(len(first.args))])
        elif (all(isinstance(v, ConstructorValue) for v in vals)
              and all(v.constructor is first.constructor for v in vals)):
            out = ("adt", first.constructor,
                   [self.join([v.fields[k] for v in vals]) for k in range(len(first.fields))])
        elif (all(isinstance(v, Indexed) for v in vals)
              and all(v.join_key() == first.join_key() for v in vals)):
            # rows of one table (dynamic_loops.py): join the row's parts (one_row: the join
            # also stands for alternative i's row in i's own values)
            parts = [v.parts() for v in vals]
            out = ("parts", first, [self.join([p[k] for p in parts])
                                    for k in range(len(parts[0]))])
            if self.one_row:
                for i, v in enumerate(vals):
                    self.memo.setdefault(("row", id(v), i), out)
        elif (all(isinstance(v, JClosure) for v in vals)
              and all(v.func is first.func for v in vals)):
            out = ["closure", first.func, first.name, []]
            self.memo[key] = out                 # a let-rec closure captures itself
            out[3] = [(var, self.join([v.env[var] for v in vals])) for var in first.env]
        elif (all(isinstance(v, JRef) and v.serial >= self.start for v in vals)
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
            if isinstance(v, (tuple, TailCall)) or is_tensor(v):
                raise CompileError("the branches of a traced if produce values of different "
                                   f"kinds: {', '.join(describe(v) for v in vals)}")
        index = self.slot((), np.int32)
        alts = []
        for i, v in enumerate(vals):
            if isinstance(v, JUnion):
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
        if is_jax_value(v):
            if id(v) in self.outer[i]:
                return _Same(v)
            key = ("x", id(v), i)
            hit = self.memo.get(key)
            if hit is None:
                hit = self.shared(np.shape(v), v.dtype, i)
                hit.sources[i] = v
                self.memo[key] = hit
            return hit
        if isinstance(v, tuple):
            return ("tuple", [self.export(f, i) for f in v])
        if isinstance(v, TailCall):
            return ("tail", self.export(v.callee, i), [self.export(a, i) for a in v.args])
        if isinstance(v, Indexed):
            joined = self.memo.get(("row", id(v), i))
            if joined is not None:       # the joined row: in alternative i, it is v
                return joined
            return ("parts", v, [self.export(p, i) for p in v.parts()])
        if serial_of(v) < self.start:
            return _Same(v)
        key = ("o", id(v))
        hit = self.memo.get(key)
        if hit is not None:
            return hit
        self.keep.append(v)
        if isinstance(v, JRef):
            out = ["ref", v, None]
            self.memo[key] = out
            out[2] = self.export(v.value, i)
            return out
        if isinstance(v, ConstructorValue):
            out = ("adt", v.constructor, [self.export(f, i) for f in v.fields])
        elif isinstance(v, JClosure):
            out = ["closure", v.func, v.name, []]
            self.memo[key] = out
            out[3] = [(var, self.export(x, i)) for var, x in v.env.items()]
        elif isinstance(v, JUnion):
            index = (_Same(v.index) if isinstance(v.index, np.ndarray)
                     else self.export(v.index, i))
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
            out = TailCall(self.build(t[1]), [self.build(a) for a in t[2]])
        elif kind == "adt":
            out = JAdt(t[1], [self.build(c) for c in t[2]], next_serial())
        elif kind == "closure":
            out = JClosure(t[1], {}, t[2], next_serial())
            self.memo[key] = out
            for var, c in t[3]:
                out.env[var] = self.build(c)
        elif kind == "ref":
            # a reference made inside one alternative keeps its identity; merged ones are new
            out = t[1] if t[1] is not None else JRef(None, 0)
            self.memo[key] = out
            out.serial = next_serial()
            out.value = self.build(t[2])
        elif kind == "union":
            out = JUnion(self.build(t[1]), [self.build(a) for a in t[2]], self.start,
                          next_serial())
        elif kind == "parts":
            out = t[1].with_parts([self.build(p) for p in t[2]])
        else:
            raise CompileError(f"internal: unknown join template {kind!r}")
        self.memo[key] = out
        return out
