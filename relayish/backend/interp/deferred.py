"""Deferred outer-product accumulation: `r := !r + expand_dims(g, axis=-1) * x`, batched.

    OuterSum                  a reference's pending value: base + sum_i outer(gs[i], xs[i])
    defer_outer(r, g, x)      the fused accumulation step's work: record (g, x) on r
    settle(r)                 r's pending value computed (one matrix product), stored, returned
    settle_all()              every pending reference of this thread settled (the machine calls
                              it when control leaves interpreter code)
    pending()                 this thread's pending references (id -> RefValue)

Why: reverse AD's gradient of `matmul(W, x)` w.r.t. W is the outer product of the output's
gradient and x, accumulated into W's gradient reference once per use of W. In a recursive
network (the TreeLSTM, notes/treelstm.md) that is one dense (m, n) product and one dense add
per tree node: about two thirds of the run time (750x300 weights). Recording the vectors and
computing `base + G^T X` (G, X the stacked vectors) when the reference is read does the same
sum as one matrix product. Only the order of the float additions differs (BLAS sums the k
terms of each entry in its own order), as between any two BLAS builds.

The contract: a RefValue's `.value` is an OuterSum only while interpreter code runs. Every step
that reads a reference settles it first (steps.py: reading, accumulating); the machine settles
every pending reference before it calls foreign code and when execute returns or raises
(run.py), so Python code (results, callbacks, the debugger's views) never sees one. The list
of pending references is per thread: a run ending in one thread must not settle a reference
another thread is appending to (its append would go to a dead OuterSum). Only
programs compiled with compiler.Program's `defer` (on unless a debug mode is) create them.
"""
from __future__ import annotations

import threading

import numpy as np

__all__ = ["OuterSum", "defer_outer", "settle", "settle_all", "pending"]

_local = threading.local()


def pending():
    """This thread's pending references: id -> RefValue whose value is (or was, until it was
    overwritten) an OuterSum. settle drops a reference: a loop that reads and accumulates a
    million times keeps at most one entry per reference."""
    try:
        return _local.pending
    except AttributeError:
        d = _local.pending = {}
        return d

_new_object = object.__new__


class OuterSum:
    """base + sum_i outer(gs[i], xs[i]) for a reference's value. `base` is None for the shared
    zero tensor; `owned` says base is the reference's own array (steps._ref_owns held when the
    deferral began, and nothing can read base since), so settling may add into it."""

    __slots__ = ("base", "owned", "gs", "xs")

    def __repr__(self):
        return f"<pending sum of {len(self.gs)} outer product(s)>"


def defer_outer(r, cur, g, x, owned):
    """Start r's pending sum with outer(g, x) (the step appends later terms itself); `cur` is
    r.value (not an OuterSum), `owned` whether r owns it (None: it is the shared zero tensor)."""
    p = _new_object(OuterSum)
    p.base = None if owned is None else cur
    p.owned = bool(owned)
    p.gs = [g]
    p.xs = [x]
    r.value = p
    pending()[id(r)] = r


def settle(r):
    """Compute r's pending sum, store it in r and return it (r.value must be an OuterSum)."""
    p = r.value
    pending().pop(id(r), None)
    gs, xs = p.gs, p.xs
    if len(gs) == 1:
        # numpy's matmul of an (m, 1) by a (1, n) matrix takes a slow non-BLAS loop
        prod = np.multiply(gs[0][:, None], xs[0])
    else:
        prod = np.dot(np.stack(gs, axis=1), np.stack(xs))
    base = p.base
    if base is None:
        value = prod
    elif p.owned:
        value = np.add(base, prod, out=base)
    else:
        value = base + prod
    r.value = value
    return value


def settle_all():
    """Settle this thread's pending references (one overwritten by `r := v` since is only
    dropped)."""
    waiting = pending()
    while waiting:
        r = waiting.popitem()[1]
        if r.value.__class__ is OuterSum:
            settle(r)
