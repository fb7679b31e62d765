"""The minimization algorithms, over plain callables on flat float64 vectors.

Each method is `run_<method>(problem, x0, tol, max_iter, monitor) -> Outcome`: newton-cg,
trust-ncg, bfgs and gd here, newton in newton.py (its step function is shared by the host loop
and the jax backend's device loops). `problem` offers (see problem.py, and CallableProblem
below for plain numpy functions):

    fun(x) -> float                          every method (line searches, trust-region ratios)
    value_and_grad(x) -> (float, ndarray)    every method
    value_grad_hess(x) -> (f, g, H, p)       newton (one call: the backend fuses them); p is the
                                             Newton direction -H^-1 g if the backend computed
                                             it (H positive definite), else None
    hvp(x, v) -> ndarray                     newton-cg, trust-ncg

Stopping: the Euclidean norm of the gradient is at most `tol` (converged), `max_iter` steps were
taken, or no step decreases the objective any more (a line search or the trust region gives up,
usually because the objective is only as accurate as its float precision), or a value is NaN.
NaN and +inf objective values met by a line search or a trial step count as "too far" and shrink
the step; -inf is the largest decrease there is and is accepted (the run then stops: the
objective diverges). A NaN or inf at an accepted point or in a gradient/Hessian stops with a
reason; `solve` turns a stop into "the objective diverges" when the objective went to -inf or
overflowed on its way down (f below its start and an infinite gradient or gradient norm).
"""
from __future__ import annotations

import itertools
import math

import numpy as np

from relayish.optim.linesearch import backtrack
from relayish.optim.newton import modified_cholesky_direction, run_newton
from relayish.optim.outcome import (BAD_GRADIENT, BAD_HVP, BAD_OBJECTIVE, CONVERGED, DIVERGES,
                                    MAX_ITER, MESSAGES, NO_DECREASE, Monitor, Outcome, finite,
                                    stopped)

__all__ = ["METHODS", "CallableProblem", "Monitor", "Outcome", "backtrack",
           "modified_cholesky_direction", "run_newton", "solve", "steihaug_cg", "truncated_cg"]


class CallableProblem:
    """A problem from numpy callables: fun(x), grad(x), and optionally hess(x), hvp(x, v)."""

    def __init__(self, fun, grad, hess=None, hvp=None):
        self._fun, self._grad, self._hess, self._hvp = fun, grad, hess, hvp
        if hvp is None and hess is not None:
            self._hvp = lambda x, v: np.asarray(hess(x)) @ v

    def fun(self, x):
        return float(self._fun(x))

    def value_and_grad(self, x):
        return float(self._fun(x)), np.asarray(self._grad(x), dtype=np.float64)

    def value_grad_hess(self, x):
        f, g = self.value_and_grad(x)
        return f, g, np.asarray(self._hess(x), dtype=np.float64), None

    def hvp(self, x, v):
        return np.asarray(self._hvp(x, v), dtype=np.float64)


def _iteration_start(x, f, g, k, tol, max_iter, monitor, step, **progress):
    """What every method but Newton (newton.py, the same rules as a step function) does first
    in an iteration: stop on a non-finite objective or gradient, record progress, stop when the
    gradient is small or when max_iter steps were taken (so a method's loop ends here).
    Returns (an Outcome or None, |g|)."""
    gnorm = float(np.linalg.norm(g))
    if not finite(f):
        return stopped(BAD_OBJECTIVE, x, f, g, k), gnorm
    if not finite(g):
        return stopped(BAD_GRADIENT, x, f, g, k), gnorm
    monitor.record(k, f, gnorm, step, **progress)
    if gnorm <= tol:
        return stopped(CONVERGED, x, f, g, k), gnorm
    if k == max_iter:
        return stopped(MAX_ITER, x, f, g, k, max_iter=max_iter), gnorm
    return None, gnorm


def truncated_cg(hvp, g, gnorm, max_cg):
    """Newton-CG inner solve of H p = -g (Nocedal & Wright, Algorithm 7.1): stops at relative
    residual min(0.5, sqrt(|g|)) or at negative curvature (then returns the last iterate, or -g)."""
    eps = min(0.5, math.sqrt(gnorm)) * gnorm
    z = np.zeros_like(g)
    r = g.copy()
    d = -r
    rr = float(r @ r)
    for j in range(max_cg):
        Hd = hvp(d)
        dHd = float(d @ Hd)
        if not math.isfinite(dHd):
            return None
        if dHd <= 0:
            return -g if j == 0 else z
        alpha = rr / dHd
        z = z + alpha * d
        r = r + alpha * Hd
        rr_new = float(r @ r)
        if math.sqrt(rr_new) < eps:
            return z
        d = -r + (rr_new / rr) * d
        rr = rr_new
    return z


def run_newton_cg(problem, x0, tol, max_iter, monitor):
    """Line-search Newton-CG: truncated CG on Hessian-vector products, Armijo backtracking."""
    x = x0
    f, g = problem.value_and_grad(x)
    n = x.size
    step = None
    for k in itertools.count():
        stop, gnorm = _iteration_start(x, f, g, k, tol, max_iter, monitor, step)
        if stop is not None:
            return stop
        p = truncated_cg(lambda v: problem.hvp(x, v), g, gnorm, max_cg=max(20, 2 * n))
        if p is None:
            return stopped(BAD_HVP, x, f, g, k)
        if not (g @ p < 0):
            p = -g
        found = backtrack(problem.fun, x, f, g, p)
        if found is None:
            return stopped(NO_DECREASE, x, f, g, k, tol=tol)
        step, _ = found
        x = x + step * p
        f, g = problem.value_and_grad(x)


def steihaug_cg(hvp, g, gnorm, radius, max_cg):
    """Steihaug's CG for min g.p + p.H.p/2 within |p| <= radius.

    Returns (p, predicted decrease, hit_boundary). r = g + H z is kept up to date so the model
    value m(z) = (g.z + r.z)/2 needs no extra Hessian-vector product.
    """
    eps = min(0.5, math.sqrt(gnorm)) * gnorm
    z = np.zeros_like(g)
    r = g.copy()
    d = -r
    rr = float(r @ r)

    def to_boundary(z, d):
        a, b, c = float(d @ d), 2.0 * float(z @ d), float(z @ z) - radius * radius
        return (-b + math.sqrt(max(b * b - 4 * a * c, 0.0))) / (2 * a)

    for _ in range(max_cg):
        Hd = hvp(d)
        dHd = float(d @ Hd)
        if not math.isfinite(dHd):
            return None, 0.0, False
        if dHd <= 0:
            tau = to_boundary(z, d)
            z, r = z + tau * d, r + tau * Hd
            return z, -0.5 * float(g @ z + r @ z), True
        alpha = rr / dHd
        z_new = z + alpha * d
        if np.linalg.norm(z_new) >= radius:
            tau = to_boundary(z, d)
            z, r = z + tau * d, r + tau * Hd
            return z, -0.5 * float(g @ z + r @ z), True
        z, r = z_new, r + alpha * Hd
        rr_new = float(r @ r)
        if math.sqrt(rr_new) < eps:
            break
        d = -r + (rr_new / rr) * d
        rr = rr_new
    return z, -0.5 * float(g @ z + r @ z), False


def run_trust_ncg(problem, x0, tol, max_iter, monitor, initial_radius=1.0, max_radius=1e4,
                  eta=0.1):
    """Trust-region Newton-CG (Steihaug); every outer iteration, accepted or not, counts."""
    x = x0
    f, g = problem.value_and_grad(x)
    radius = initial_radius
    n = x.size
    for k in itertools.count():
        stop, gnorm = _iteration_start(x, f, g, k, tol, max_iter, monitor, None, radius=radius)
        if stop is not None:
            return stop
        p, predicted, on_boundary = steihaug_cg(lambda v: problem.hvp(x, v), g, gnorm, radius,
                                                max_cg=max(20, 2 * n))
        if p is None:
            return stopped(BAD_HVP, x, f, g, k)
        f_new = problem.fun(x + p)
        # NaN or +inf: a failed step; -inf: accepted (rho = inf), the run stops as diverging
        actual = f - f_new if (math.isfinite(f_new) or f_new == -math.inf) else -math.inf
        rho = actual / predicted if predicted > 0 else -math.inf
        if rho < 0.25:
            radius = 0.25 * radius
        elif rho > 0.75 and on_boundary:
            radius = min(2.0 * radius, max_radius)
        if rho > eta:
            x = x + p
            f, g = problem.value_and_grad(x)
        elif radius < 1e-14 * (1.0 + float(np.linalg.norm(x))):
            return stopped(NO_DECREASE, x, f, g, k, tol=tol)


def run_bfgs(problem, x0, tol, max_iter, monitor):
    """BFGS on the inverse Hessian with Armijo backtracking; updates that would lose positive
    definiteness (s.y <= 0) are skipped, and the first update rescales the identity."""
    x = x0
    n = x.size
    f, g = problem.value_and_grad(x)
    Hinv = np.eye(n)
    first = True
    step = None
    for k in itertools.count():
        stop, gnorm = _iteration_start(x, f, g, k, tol, max_iter, monitor, step)
        if stop is not None:
            return stop
        p = -Hinv @ g
        if not (g @ p < 0):
            Hinv = np.eye(n)
            p = -g
        t0 = 1.0 if not first else min(1.0, 1.0 / gnorm)
        found = backtrack(problem.fun, x, f, g, p, t=t0)
        if found is None:
            if not np.allclose(Hinv, np.eye(n)):
                Hinv, first = np.eye(n), True    # restart once from steepest descent
                continue
            return stopped(NO_DECREASE, x, f, g, k, tol=tol)
        step, _ = found
        s = step * p
        x = x + s
        f_new, g_new = problem.value_and_grad(x)
        y = g_new - g
        sy = float(s @ y)
        if sy > 1e-12 * np.linalg.norm(s) * np.linalg.norm(y):
            if first:
                Hinv = (sy / float(y @ y)) * np.eye(n)
                first = False
            rho = 1.0 / sy
            Hy = Hinv @ y
            Hinv = (Hinv - rho * (np.outer(s, Hy) + np.outer(Hy, s))
                    + (rho * rho * float(y @ Hy) + rho) * np.outer(s, s))
        f, g = f_new, g_new


def run_gd(problem, x0, tol, max_iter, monitor, memory=10):
    """Gradient descent with Barzilai-Borwein step sizes and a non-monotone Armijo line search
    (Grippo-Lampariello-Lucidi reference: the largest of the last `memory` values)."""
    x = x0
    f, g = problem.value_and_grad(x)
    recent = [f]
    alpha = None
    step = None
    for k in itertools.count():
        stop, gnorm = _iteration_start(x, f, g, k, tol, max_iter, monitor, step)
        if stop is not None:
            return stop
        if alpha is None:
            alpha = min(1.0, 1.0 / gnorm)
        p = -g
        found = backtrack(problem.fun, x, f, g, p, t=alpha, f_ref=max(recent))
        if found is None:
            return stopped(NO_DECREASE, x, f, g, k, tol=tol)
        step, _ = found
        s = step * p
        x = x + s
        f_new, g_new = problem.value_and_grad(x)
        y = g_new - g
        sy = float(s @ y)
        alpha = min(max(float(s @ s) / sy, 1e-12), 1e12) if sy > 0 else min(1.0, 1.0 / gnorm)
        f, g = f_new, g_new
        recent = (recent + [f])[-memory:]


def solve(method, problem, x0, tol, max_iter, monitor):
    """Run METHODS[method] and name divergence: a run that stopped (not converged, not at
    max_iter) at f = -inf, or with f below its starting value and an infinite gradient or
    gradient norm (the objective overflowed on its way down), diverges. Without this the stop
    would read "not finite" or "the line search found no decrease (the objective's precision
    is reached)" for an objective that is unbounded below."""
    outcome = METHODS[method](problem, x0, tol, max_iter, monitor)
    if outcome.converged or outcome.reached_max_iter or not monitor.history:
        return outcome
    f0, f = monitor.history[0]["fun"], outcome.fun
    with np.errstate(over="ignore"):
        overflowed = (np.isinf(outcome.grad).any()
                      or math.isinf(float(np.linalg.norm(outcome.grad))))
    if f == -math.inf or (f < f0 and overflowed):
        what = "reached -inf" if f == -math.inf else \
            f"fell from {f0:.3g} to {f:.3g} and its gradient overflowed"
        outcome.message = MESSAGES[DIVERGES].format(what=what, k=outcome.n_iter)
    return outcome


METHODS = {
    "newton": run_newton,
    "newton-cg": run_newton_cg,
    "trust-ncg": run_trust_ncg,
    "bfgs": run_bfgs,
    "gd": run_gd,
}
