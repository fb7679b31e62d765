"""Batched independent calls: a tuple of calls of one closure on constants as one jax.vmap.

    batched_calls(ev, tuple_expr, env) -> tuple of values | None (trace the calls one by one)

`rl.hessian` builds `stack((back(e0).0, ..., back(e31).0))`: one call of the vjp backpropagator
per basis vector, 32 XLA fusions where jax.hessian has one. `_batch_plan` recognizes a tuple
whose fields are calls of one closure variable with the same arguments except constants that
vary, and the calls are traced as one jax.vmap over the stacked constants, when that is the
same as running them in order. Which references the calls touch decides it:

  1. a first vmapped trace, under a Frame that also notes the pre-existing references read
     before being written (reads inside traced joins included);
  2. a reference each call writes before reading: no call sees another's value; afterwards it
     holds the last call's value (row n-1 of a vmap output);
  3. a reference read, then restored to an equal trace-time constant (the backpropagator zeroes
     what it reads): every call starts from the same state;
  4. a reference read and left changed (an accumulator `r := !r + g`): allowed only if the
     results do not depend on its content (dataflow over the jaxpr of the batched calls,
     `_independent_of`). Its final content is not computed: it holds POISON, and a later read
     restarts the whole trace without batching (values.Restart).

Anything else (a callee that is not a closure, results that are not tensors, a failing vmap)
returns None and the evaluator traces the calls one by one.
"""
from __future__ import annotations

import numpy as np

from relayish.ir.expr import Call, Constant, TupleGetItem, Var
from relayish.backend.jax.values import (POISON, Frame, JClosure, is_tensor_tree, load_jax,
                                         next_serial)


def batched_calls(ev, e, env):
    """The values of tuple `e`'s calls, traced as one vmap, or None (see the module docstring)."""
    if not ev.batching:
        return None
    hit = ev.batch_plans.get(id(e))
    if hit is None or hit[0] is not e:
        hit = (e, _batch_plan(e))
        ev.batch_plans[id(e)] = hit
    plan = hit[1]
    if plan is None:
        return None
    callee_expr, k, fixed, varying = plan
    callee = ev.eval(callee_expr, env)
    if not isinstance(callee, JClosure):
        return None
    fixed_values = {pos: ev.eval(x, env) for pos, x in fixed.items()}
    jax = load_jax()
    n_args = len(fixed) + len(varying)
    positions = sorted(varying)
    stacked = [varying[pos] for pos in positions]

    def batched(frame, carried):
        def one(*cs):
            args = [None] * n_args
            for pos, value in fixed_values.items():
                args[pos] = value
            for pos, c in zip(positions, cs):
                args[pos] = c
            ev.frames.append(frame)
            try:
                result = ev.call(callee, args)
            finally:
                ev.frames.pop()
            if k is not None:
                result = result[k] if isinstance(result, tuple) else None
            finals = tuple(ref.value for ref in carried)
            if not is_tensor_tree(result) or not is_tensor_tree(finals):
                raise _NotBatchable()
            return result, finals
        try:
            return jax.vmap(one)(*stacked)
        except Exception:  # noqa: BLE001
            return None
        finally:
            frame.finals = {key: ref.value for key, (ref, _) in frame.log.items()}
            for ref, old in frame.log.values():
                ref.value = old

    # first pass: which references do the calls write, and which do they read first?
    frame = Frame(next_serial(), track_reads=True)
    if batched(frame, ()) is None:
        return None
    read_first, carried = [], []
    for key, (ref, old) in frame.log.items():
        if key not in frame.reads:
            carried.append(ref)            # written before read: no call sees another's
        elif not _same_state(frame.finals[key], old):
            read_first.append(ref)         # read, then left changed (an accumulator)
        # else: read, then restored (zeroed after use): every call starts the same
    if read_first and not _independent_of(read_first, carried, batched):
        return None
    outcome = batched(Frame(next_serial()), carried)
    if outcome is None:
        return None
    out, finals = outcome
    n = len(e.fields)
    for ref, final in zip(carried, finals):   # as the last call leaves them
        ev.write(ref, jax.tree_util.tree_map(lambda a: a[n - 1], final))
    for ref in read_first:                    # accumulated over the calls: not computed
        ev.write(ref, POISON)
    return tuple(jax.tree_util.tree_map(lambda a, i=i: a[i], out) for i in range(n))


def _independent_of(read_first, carried, batched):
    """Do the batched results and the carried references' final contents not depend on the
    contents of `read_first` (references each call reads, then writes, e.g. an accumulator
    `r := !r + g`)? Checked on the jaxpr with those contents as inputs."""
    jax = load_jax()
    inits = [ref.value for ref in read_first]
    if not all(is_tensor_tree(v) for v in inits):
        return False

    def probe(*leaves):
        flat_inits = jax.tree_util.tree_unflatten(treedef, leaves)
        saved = [ref.value for ref in read_first]
        for ref, v in zip(read_first, flat_inits):
            ref.value = v
        try:
            outcome = batched(Frame(next_serial()), carried)
        finally:
            for ref, v in zip(read_first, saved):
                ref.value = v
        if outcome is None:
            raise _NotBatchable()
        return outcome

    leaves, treedef = jax.tree_util.tree_flatten(list(inits))
    try:
        closed = jax.make_jaxpr(probe)(*[jax.numpy.asarray(v) for v in leaves])
    except Exception:  # noqa: BLE001 - not batchable
        return False
    return not _outputs_depend_on(closed.jaxpr, closed.jaxpr.invars)


class _NotBatchable(Exception):
    """A batched call's result or reference contents are not tensors: trace the calls one by one."""


def _outputs_depend_on(jaxpr, inputs):
    """Does any output of `jaxpr` depend on one of `inputs`? (Sub-jaxprs count as a whole.)"""
    from jax.extend.core import Literal
    tainted = set(inputs)
    for eqn in jaxpr.eqns:
        if any(not isinstance(v, Literal) and v in tainted for v in eqn.invars):
            tainted.update(eqn.outvars)
    return any(not isinstance(v, Literal) and v in tainted for v in jaxpr.outvars)


def _batch_plan(e):
    """(callee variable, projected field or None, {position: fixed arg expr}, {position: stacked
    constants}) when tuple `e` is calls of one closure variable varying only in constants."""
    calls, k = [], None
    for i, f in enumerate(e.fields):
        index = None
        if isinstance(f, TupleGetItem):
            index, f = f.index, f.tuple_value
        if not isinstance(f, Call) or not isinstance(f.op, Var) or f.attrs:
            return None
        if i == 0:
            k = index
        elif index != k:
            return None
        calls.append(f)
    first = calls[0]
    if any(c.op is not first.op or len(c.args) != len(first.args) for c in calls):
        return None
    fixed, varying = {}, {}
    for pos, a in enumerate(first.args):
        column = [c.args[pos] for c in calls]
        if all(x is a for x in column):
            fixed[pos] = a
        elif all(isinstance(x, Constant) and x.data.shape == column[0].data.shape
                 and x.data.dtype == column[0].data.dtype for x in column):
            varying[pos] = np.stack([x.data for x in column])
        else:
            return None
    if not varying:
        return None
    return first.op, k, fixed, varying


def _same_state(a, b):
    """Is reference content `a` (after a call) the content `b` it had before?"""
    if a is b:
        return True
    if isinstance(a, tuple) and isinstance(b, tuple):
        return len(a) == len(b) and all(_same_state(x, y) for x, y in zip(a, b))
    if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
        return a.shape == b.shape and a.dtype == b.dtype and bool(np.array_equal(a, b))
    return False
