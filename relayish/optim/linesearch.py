"""Armijo backtracking with safeguarded quadratic interpolation, written once for numpy and jax.

`backtrack_search(ns, ...)` is the line search against an array namespace (arrays.py): every
method calls it on the host through `backtrack`, and Newton's step function runs it as an inner
`lax.while_loop` over the objective's jax function in XLA, with the same constants and rules.
NaN and +inf objective values count as "too far" and shrink the step; -inf is the largest
decrease there is and is accepted (the run then stops: the objective diverges).
"""
from __future__ import annotations

import numpy as np

from relayish.optim.arrays import HOST

ARMIJO_C1 = 1e-4
BACKTRACK_STEPS = 60        # trial steps before a line search gives up


def accepts(xp, ft, bound):
    """The Armijo test f(x + t p) <= bound, where -inf passes (it is a decrease: the run stops
    there as diverging) and NaN or +inf fail (too far: shrink the step)."""
    return xp.logical_or(ft == -xp.inf, xp.logical_and(xp.isfinite(ft), ft <= bound))


def backtrack_search(ns, objective, x, f, g, p, t=1.0, f_ref=None, f_trial=None,
                     max_steps=BACKTRACK_STEPS):
    """Search t from `t` down until f(x + t p) <= f_ref + c1 t g.p.

    Returns (found, t, f(x + t p), objective evaluations). `f_ref` (default f) allows a
    non-monotone reference value; `f_trial` is f(x + t p) for the first t when the caller
    already has it. Gives up after max_steps trials, or when t p is below x's precision.
    """
    xp = ns.xp
    slope = xp.dot(g, p)
    f_ref = f if f_ref is None else f_ref
    floor = 1e-16 * (1.0 + xp.max(xp.abs(x)))
    p_max = xp.max(xp.abs(p))

    def value(i, t):
        if f_trial is None:
            return objective(x + t * p)
        return ns.cond(i == 0, lambda: f_trial, lambda: objective(x + t * p))

    def running(c):
        i, _, _, outcome = c
        return xp.logical_and(outcome == 0, i < max_steps)

    def shrink(c):
        i, t, _, _ = c
        ft = value(i, t)
        finite = xp.isfinite(ft)
        accepted = accepts(xp, ft, f_ref + ARMIJO_C1 * t * slope)
        denom = 2.0 * (ft - f - slope * t)
        interpolated = xp.where(denom > 0, -slope * t * t / xp.where(denom > 0, denom, 1.0),
                                0.5 * t)
        t_next = xp.where(finite, xp.minimum(xp.maximum(interpolated, 0.1 * t), 0.5 * t),
                          0.1 * t)
        outcome = xp.where(accepted, 1, xp.where(t_next * p_max <= floor, 2, 0))
        return i + 1, xp.where(accepted, t, t_next), ft, outcome
    start = (xp.asarray(0), xp.asarray(t, dtype=p.dtype), xp.asarray(xp.nan, dtype=p.dtype),
             xp.asarray(0))
    tries, t, ft, outcome = ns.while_loop(running, shrink, start)
    return outcome == 1, t, ft, tries - (0 if f_trial is None else 1)


def backtrack(fun, x, f, g, p, t=1.0, f_ref=None, f_trial=None, max_steps=BACKTRACK_STEPS):
    """backtrack_search on the host: (t, f(x + t p)) for the first t meeting Armijo, or None."""
    with np.errstate(invalid="ignore", over="ignore"):
        found, t, ft, _ = backtrack_search(HOST, fun, x, f, g, p, t, f_ref, f_trial, max_steps)
    return (float(t), float(ft)) if found else None
