"""A left fold over a node table as ONE lax.while_loop (issue 17; dynamic_rule.py has the rule).

    value = left_fold_call(ev, fold, callee, args)   # dynamic_loops.fold_call's hook

A left fold is tail recursion with an accumulator that walks a recursive ADT from its root,
`@sum(acc, xs) = match xs { Nil => acc, Cons(x, r) => @sum(f(acc, x), r) }` (an RNN written
with its state as an argument). Called with a node table (dynamic_tables.py) it runs
`lax.while_loop` carrying (row, continue, the other arguments, the result), from the root
(row count - 1): an iteration runs the clause of tag[row] (`switch` on the tag, joins.py), its
tensor fields read from the columns at row; the clause's tail call of the fold, passing a
child, writes `continue := True` and `next := (the arguments, the child's row)` to two cells
(JRefs made before the loop, so the joins of the clause's traced ifs join them like any
reference) and gives zeros of the result type; an exit clause's value is the result, and
`continue` stays False. Every call moves to a child, whose row is before its parent's, so
the loop runs at most `count` iterations: no step capacity is needed.

Not compiled as a loop (a CompileError naming the function): a left fold whose iteration
writes a reference made outside it or makes one, one inside another loop over dynamic
structure or under a traced if.

Reverse AD's output of a left fold (`@sum_ad((acc, %racc), xs_ad, %bp)`: its accumulator holds
a reference made by the previous iteration, and it writes a backpropagator per iteration) is
a left fold with `rows` set: dynamic_tail.py's loop that leaves rows runs it as a tail loop,
its table argument carried as a cursor (dynamic_tables.JCursor, a row) from the root, and
`match` on a cursor is `match_cursor` below (a switch on the row's tag).
"""
from __future__ import annotations

import numpy as np

from relayish.errors import CompileError
from relayish.backend.jax.dynamic_defer import _is_tree, _tmap
from relayish.backend.jax.dynamic_tables import JChild, JCursor
from relayish.backend.jax.values import (Frame, JRef, closure_name, describe, load_jax,
                                         next_serial)


def _zeros_of(t):
    """Zeros of a type made of tensors and tuples (the stand-in result of a continuing step)."""
    import jax.numpy as jnp
    from relayish.backend.runtime.args import NP_DTYPES
    from relayish.ir.types import TupleType
    if isinstance(t, TupleType):
        return tuple(_zeros_of(f) for f in t.fields)
    return jnp.zeros(tuple(t.shape), NP_DTYPES[t.dtype])


def _like(v, old):
    """`v` as a value of `old`'s dtype and shape (what the loop carries in that position)."""
    import jax.numpy as jnp
    from jax import lax
    v = lax.convert_element_type(jnp.asarray(v), jnp.asarray(old).dtype)
    return jnp.broadcast_to(v, np.shape(old)) if np.shape(v) != np.shape(old) else v


def left_fold_call(ev, fold, callee, args):
    """The value of a call of the left fold `fold` on a node table (module docstring)."""
    name = closure_name(callee)
    if ev.loop is not None or getattr(ev, "tail", None) is not None:
        raise CompileError(f"{name} folds a node table inside another loop: nested loops over "
                           "dynamic structure are not compiled yet")
    if ev.join_depth:
        raise CompileError(f"{name} folds a node table under a traced if or match: a loop over "
                           "dynamic structure inside a join is not compiled yet; call it "
                           "outside the if")
    for m, a in enumerate(args):
        if m != fold.k and not _is_tree(a):
            raise CompileError(f"{name}: argument {m} of a left fold is a {describe(a)}; a "
                               "left fold's loop carries tensors and tuples of them")
    return _LeftLoop(ev, fold, name, args).run()


class _LeftLoop:
    """The loop being traced (ev.loop while its body traces): `recur` is the fold's call."""

    def __init__(self, ev, fold, name, args):
        self.ev, self.fold, self.name = ev, fold, name
        self.table = args[fold.k]
        self.others = [a for m, a in enumerate(args) if m != fold.k]
        start = next_serial()
        self.cont, self.nxt = JRef(np.asarray(False), start), JRef(None, start)
        self.start = start

    def new_ref(self, value):
        raise CompileError(f"{self.name}: ref(...) in an iteration of a left fold over dynamic "
                           "structure is not compiled as a loop yet; use rl.evaluate")

    def recur(self, args):
        """The fold's tail call on a child, inside an iteration: continue with `args`."""
        child = args[self.fold.k]
        others = [a for m, a in enumerate(args) if m != self.fold.k]
        ev = self.ev
        ev.write(self.cont, np.asarray(True))
        ev.write(self.nxt, (tuple(_tmap(_like, a, o) for a, o in zip(others, self.initial)),
                            child.row))
        return _zeros_of(self.fold.ret)

    def _step(self, row, others):
        """Row `row`'s clause on the carried arguments: (continue, next arguments, next row,
        the clause's value)."""
        import jax.numpy as jnp
        ev, fold, table = self.ev, self.fold, self.table
        spec = table.spec
        self.cont.value = np.asarray(False)
        self.nxt.value = (tuple(others), row)
        params = [p for m, p in enumerate(fold.func.params) if m != fold.k]
        alternatives = []
        for tag in range(len(spec.constructors)):
            clause, subs, _ = fold.clauses[tag]

            def alt(stop, clause=clause, subs=subs, tag=tag):
                env = dict(zip(params, others))
                order = spec.orders.get(tag, ())
                for m, var in enumerate(subs):
                    if var is None:
                        continue
                    if m in order:
                        env[var] = JChild(_at(table.children[order.index(m)], row))
                    else:
                        env[var] = table.field(tag, m, row)
                value = ev.eval(clause.rhs, env)
                if not _is_tree(value):
                    raise CompileError(f"{self.name} returns a {describe(value)} from a left "
                                       "fold's loop; it returns tensors and tuples of them")
                return _tmap(_like, value, _zeros_of(fold.ret))
            alternatives.append(alt)
        if len(alternatives) == 1:
            value = alternatives[0](None)
        else:
            value = ev.switch(_at(table.tag, row), alternatives)
        nxt_others, nxt_row = self.nxt.value
        return (jnp.asarray(self.cont.value), list(nxt_others),
                jnp.asarray(nxt_row, jnp.int32), value)

    def run(self):
        jax = load_jax()
        import jax.numpy as jnp
        from jax import lax
        ev = self.ev
        self.initial = [_tmap(lambda v: _like(v, v), a) for a in self.others]
        saved_frames, saved_loop = ev.frames, ev.loop
        root = jnp.asarray(self.table.count - 1, jnp.int32)
        frame = Frame(self.start)
        try:
            # trace once: an iteration may write no reference made before the loop
            ev.frames, ev.loop = [frame], self

            def probe():
                try:
                    self._step(root, self.initial)
                finally:
                    for ref, old in frame.log.values():
                        ref.value = old
                return []
            jax.make_jaxpr(probe)()
            written = [r for r, _ in frame.log.values() if r is not self.cont and r is not self.nxt]
            # run-time checks (an index check in a clause) are flag cells: the loop carries them
            checks = [r for r in written if ev.is_fault_cell(r)]
            if len(checks) < len(written):
                raise CompileError(f"{self.name}: an iteration of its left fold writes a "
                                   "reference made outside it; not compiled as a loop yet: use "
                                   "rl.evaluate")

            def body(state):
                row, _, others, _, flags = state
                ev.frames, ev.loop = [], self
                for cell, flag in zip(checks, flags):
                    cell.value = flag
                try:
                    going, others, nxt, value = self._step(row, others)
                    flags = [jnp.asarray(cell.value, bool) for cell in checks]
                finally:
                    ev.frames, ev.loop = saved_frames, saved_loop
                return nxt, going, others, value, flags
            flags0 = [jnp.asarray(cell.value, bool) for cell in checks]
            state = (root, jnp.asarray(True), self.initial, _zeros_of(self.fold.ret), flags0)
            _, _, _, value, flags = lax.while_loop(lambda s: s[1], body, state)
            for cell, flag in zip(checks, flags):
                ev.write(cell, flag)
        finally:
            ev.frames, ev.loop = saved_frames, saved_loop
        return value


def match_cursor(ev, e, cursor, env, tail):
    """`match` on a node of a table (a JCursor): a switch on its row's tag over the clause
    each constructor takes; tensor fields read from the columns at the row, children are
    cursors at their rows (TraceEvaluator.visit_Match's hook)."""
    from relayish.ir.expr import PatternConstructor, PatternVar, PatternWildcard
    from relayish.backend.runtime.describe import node_text
    table, row = cursor.table, cursor.row
    spec = table.spec
    alternatives = []
    for tag in range(len(spec.constructors)):
        chosen = None
        for clause in e.clauses:
            lhs = clause.lhs
            if isinstance(lhs, (PatternVar, PatternWildcard)) or (
                    isinstance(lhs, PatternConstructor) and lhs.constructor.tag == tag):
                chosen = clause
                break
        if chosen is None:
            raise CompileError(f"no clause of {node_text(e, 80)} matches a node of a table "
                               f"({spec.constructors[tag].name_hint}); use rl.evaluate")
        bound = {}
        lhs = chosen.lhs
        if isinstance(lhs, PatternVar):
            bound[lhs.var] = cursor
        elif isinstance(lhs, PatternConstructor):
            order = spec.orders.get(tag, ())
            for m, p in enumerate(lhs.patterns):
                if isinstance(p, PatternWildcard):
                    continue
                if not isinstance(p, PatternVar):
                    raise CompileError(f"{node_text(e, 80)}: a nested pattern on a node of a "
                                       "table is not compiled as a loop yet; use rl.evaluate")
                if m in order:
                    bound[p.var] = JCursor(table, _at(table.children[order.index(m)], row))
                else:
                    bound[p.var] = table.field(tag, m, row)

        def alt(stop, rhs=chosen.rhs, bound=bound):
            inner = dict(env)
            inner.update(bound)
            if tail:
                return ev.finish(ev.eval(rhs, inner, True), stop)
            return ev.eval(rhs, inner)
        alternatives.append(alt)
    stop = ev.serial_now() if tail else None
    return ev.switch(_at(table.tag, row), alternatives, tail_stop=stop)


def _at(table, row):
    from jax import lax
    return lax.dynamic_index_in_dim(table, row, 0, keepdims=False)


__all__ = ["left_fold_call", "match_cursor"]
