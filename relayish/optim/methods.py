"""The minimization algorithms, over plain callables on flat float64 vectors.

Each method is `run_<method>(problem, x0, tol, max_iter, monitor) -> Outcome`, where `problem`
offers (see problem.py, and CallableProblem below for plain numpy functions):

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

import attrs
import numpy as np

ARMIJO_C1 = 1e-4
BACKTRACK_STEPS = 60        # trial steps before a line search gives up


@attrs.define
class Outcome:
    x: np.ndarray
    fun: float
    grad: np.ndarray
    n_iter: int
    converged: bool
    message: str
    reached_max_iter: bool = False


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


class Monitor:
    """Records the history, reports progress and counts iterations for every method."""

    def __init__(self, callback=None):
        self.history = []
        self.callback = callback

    def record(self, k, f, gnorm, step=None, **extra):
        entry = {"iter": k, "fun": float(f), "grad_norm": float(gnorm), "step": step, **extra}
        self.history.append(entry)
        if self.callback is not None:
            self.callback(entry)


def _finite(*values):
    for v in values:
        if isinstance(v, float):
            if not math.isfinite(v):
                return False
        elif not np.isfinite(v).all():
            return False
    return True


def decreased_enough(ft, bound):
    """The Armijo test f(x + t p) <= bound, where -inf passes (it is a decrease: the run stops
    there as diverging) and NaN or +inf fail (too far: shrink the step)."""
    return ft == -math.inf or (math.isfinite(ft) and ft <= bound)


def _nonfinite_stop(x, f, g, k, what):
    return Outcome(x, f, g, k, False, f"stopped: the {what} is not finite (NaN or inf) at "
                                      f"iteration {k}")


def backtrack(fun, x, f, g, p, t=1.0, f_ref=None, f_trial=None,
              max_steps=BACKTRACK_STEPS):
    """Armijo backtracking with safeguarded quadratic interpolation.

    Returns (t, f(x + t p)) for the first t meeting f(x+tp) <= f_ref + c1 t g.p, or None.
    `f_ref` (default f) allows a non-monotone reference value; `f_trial` is f(x + t p) when the
    caller already has it.
    """
    slope = float(g @ p)
    f_ref = f if f_ref is None else f_ref
    for i in range(max_steps):
        ft = fun(x + t * p) if (i > 0 or f_trial is None) else f_trial
        if decreased_enough(ft, f_ref + ARMIJO_C1 * t * slope):
            return t, ft
        if math.isfinite(ft):
            denom = 2.0 * (ft - f - slope * t)
            t_new = -slope * t * t / denom if denom > 0 else 0.5 * t
            t = min(max(t_new, 0.1 * t), 0.5 * t)
        else:
            t *= 0.1
        if t * np.max(np.abs(p)) <= 1e-16 * (1.0 + np.max(np.abs(x))):
            return None
    return None


def _iteration_start(x, f, g, k, tol, max_iter, monitor, step, **progress):
    """What every method does first in an iteration: stop on a non-finite objective or gradient,
    record progress, stop when the gradient is small or when max_iter steps were taken (so a
    method's loop ends here). Returns (an Outcome or None, |g|)."""
    gnorm = float(np.linalg.norm(g))
    if not _finite(f):
        return _nonfinite_stop(x, f, g, k, "objective"), gnorm
    if not _finite(g):
        return _nonfinite_stop(x, f, g, k, "gradient"), gnorm
    monitor.record(k, f, gnorm, step, **progress)
    if gnorm <= tol:
        return Outcome(x, f, g, k, True, "converged: gradient norm below tol"), gnorm
    if k == max_iter:
        return _max_iter_reached(x, f, g, max_iter), gnorm
    return None, gnorm


def _max_iter_reached(x, f, g, max_iter):
    return Outcome(x, f, g, max_iter, False, f"stopped: max_iter={max_iter} iterations reached",
                   reached_max_iter=True)


def _line_search_failed(x, f, g, k, gnorm, tol):
    if gnorm <= tol:
        return Outcome(x, f, g, k, True, "converged: gradient norm below tol")
    return Outcome(x, f, g, k, False, "stopped: the line search found no decrease along the "
                                      "search direction (the objective's precision is reached "
                                      f"at gradient norm {gnorm:.3g} > tol)")


def modified_cholesky_direction(H, g):
    """Solve (H + tau I) p = -g with the smallest tau >= 0 (found by doubling) that makes the
    matrix positive definite (Nocedal & Wright, Algorithm 3.3). Returns (p, tau)."""
    n = H.shape[0]
    diag = np.diagonal(H)
    scale = max(1.0, float(np.max(np.abs(diag)))) if n else 1.0
    beta = 1e-3 * scale
    min_diag = float(np.min(diag)) if n else 1.0
    tau = 0.0 if min_diag > 0 else beta - min_diag
    for _ in range(100):
        shifted = H if tau == 0.0 else H + tau * np.eye(n)
        try:
            np.linalg.cholesky(shifted)      # the positive-definiteness test
        except np.linalg.LinAlgError:
            tau = max(2.0 * tau, beta)
            continue
        return np.linalg.solve(shifted, -g), tau
    return -g, math.inf


def run_newton(problem, x0, tol, max_iter, monitor):
    """Newton's method: exact Hessian, modified Cholesky, Armijo backtracking.

    The objective, gradient and Hessian are evaluated at the full Newton step in one call; when
    Armijo accepts the full step (the usual case) that call already holds the next iteration's
    data, so each iteration costs one fused evaluation. On the jax backend (problem.device_newton)
    the loop runs on the device: its usual iterations in XLA when no callback watches it, else
    step by step with the iterate kept on the device.
    """
    if getattr(problem, "device_newton", None) is not None:
        from relayish.optim import device_loop
        if device_loop.runs_in_xla(monitor.callback is not None, max_iter):
            return _run_newton_in_xla(problem, x0, tol, max_iter, monitor)
        return _run_newton_on_device(problem, x0, tol, max_iter, monitor)
    x = x0
    f, g, H, p = problem.value_grad_hess(x)
    step = None
    for k in itertools.count():
        stop, gnorm = _iteration_start(x, f, g, k, tol, max_iter, monitor, step)
        if stop is not None:
            return stop
        if p is None or not _finite(p):
            H = np.asarray(H, dtype=np.float64)
            if not _finite(H):
                return _nonfinite_stop(x, f, g, k, "Hessian")
            p, _ = modified_cholesky_direction(H, g)
        slope = float(g @ p)
        if not slope < 0:
            p, slope = -g, -float(g @ g)
        x_full = x + p
        f_full, g_full, H_full, p_full = problem.value_grad_hess(x_full)
        if decreased_enough(f_full, f + ARMIJO_C1 * slope):
            x, f, g, H, p, step = x_full, f_full, g_full, H_full, p_full, 1.0
        else:
            found = backtrack(problem.fun, x, f, g, p,
                              f_trial=f_full if math.isfinite(f_full) else math.inf)
            if found is None:
                return _line_search_failed(x, f, g, k, gnorm, tol)
            step, _ = found
            x = x + step * p
            f, g, H, p = problem.value_grad_hess(x)


def _run_newton_in_xla(problem, x0, tol, max_iter, monitor):
    """run_newton in XLA (device_loop.py): each call of the loop runs iterations, line searches
    included, until one needs the modified Cholesky (H not positive definite) or the run stops;
    the host computes that direction with this module's code and calls the loop again. Nothing
    watches the iterations, so each call's history rows are recorded when it returns."""
    from relayish.optim import device_loop as loop
    dev = problem.device_newton
    state = dev.loop(x0, loop.START, x0, tol, max_iter)
    while True:
        problem.count(state.evaluations)
        problem.nfev += state.objective_evaluations
        for k, (f, gnorm, step) in enumerate(state.history.tolist(), start=state.first):
            monitor.record(k, f, gnorm, None if k == 0 else step)
        x, f, g, k = state.x, state.f, state.g, state.k
        if state.status == loop.CONVERGED:
            return Outcome(x, f, g, k, True, "converged: gradient norm below tol")
        if state.status == loop.MAX_ITER:
            return _max_iter_reached(x, f, g, max_iter)
        if state.status in (loop.BAD_OBJECTIVE, loop.BAD_GRADIENT):
            what = "objective" if state.status == loop.BAD_OBJECTIVE else "gradient"
            return _nonfinite_stop(x, f, g, k, what)
        if state.status == loop.DIRECTION:
            if not _finite(state.H):
                return _nonfinite_stop(x, f, g, k, "Hessian")
            p, _ = modified_cholesky_direction(state.H, g)
            if not g @ p < 0:
                p = -g
            state = dev.loop(x + p, loop.TRIAL, x, tol, max_iter, f=f, g=g, p=p, k=k)
            continue
        # NO_DECREASE: the line search found no step that decreases f
        return _line_search_failed(x, f, g, k, float(np.linalg.norm(g)), tol)


def _run_newton_on_device(problem, x0, tol, max_iter, monitor):
    """run_newton with the iterate, gradient, Hessian and direction kept on the device.

    `problem.device_newton` (problem.py, DeviceNewton) evaluates f, g, H and the Newton
    direction at x + p in one compiled call (`trial`) and returns them as device arrays plus
    one small stats vector [f, |g|, g.p, g finite, p finite] — the only values read back per
    iteration. An iteration whose full step Armijo accepts is that one call; backtracking, an
    indefinite Hessian (modified Cholesky on the host) and the final result move arrays to the
    host. `problem.count(k)` records k fused evaluations in nfev/ngev/nhev.
    """
    dev = problem.device_newton
    with dev.context():
        return _newton_device_loop(problem, dev, x0, tol, max_iter, monitor)


def _newton_device_loop(problem, dev, x0, tol, max_iter, monitor):
    fun = problem.fun
    record = monitor.record
    c1 = ARMIJO_C1
    x, g, H, p, stats = dev.at(x0)
    problem.count()
    f, gnorm, slope, g_ok, p_ok = np.asarray(stats).tolist()
    step = None

    def stop(k, what):
        return _nonfinite_stop(np.array(x), f, np.array(g), k, what)
    for k in range(max_iter + 1):
        if not math.isfinite(f):
            return stop(k, "objective")
        if not g_ok:
            return stop(k, "gradient")
        record(k, f, gnorm, step)
        if gnorm <= tol:
            return Outcome(np.array(x), f, np.array(g), k, True,
                           "converged: gradient norm below tol")
        if k == max_iter:
            break
        if not (p_ok and slope < 0):
            # H not positive definite (the Cholesky gave NaN) or not a descent direction:
            # the modified Cholesky on the host
            if H is None:            # trial does not return H: evaluate it at x
                _, _, H, _, _ = dev.at(x)
                problem.count()
            g_host = np.asarray(g)
            H_host = np.asarray(H)
            if not _finite(H_host):
                return stop(k, "Hessian")
            p_host, _ = modified_cholesky_direction(H_host, g_host)
            slope = float(g_host @ p_host)
            if not slope < 0:
                p_host, slope = -g_host, -float(g_host @ g_host)
            p = dev.to_device(p_host)
        x_full, g_full, p_full, stats = dev.trial(x, p)
        problem.count()
        f_full, gnorm_full, slope_full, g_ok_full, p_ok_full = np.asarray(stats).tolist()
        if decreased_enough(f_full, f + c1 * slope):
            x, g, H, p, step = x_full, g_full, None, p_full, 1.0
            f, gnorm, slope, g_ok, p_ok = f_full, gnorm_full, slope_full, g_ok_full, p_ok_full
        else:
            x_host, g_host, p_host = np.array(x), np.array(g), np.array(p)
            found = backtrack(fun, x_host, f, g_host, p_host,
                              f_trial=f_full if math.isfinite(f_full) else math.inf)
            if found is None:
                return _line_search_failed(x_host, f, g_host, k, gnorm, tol)
            step, _ = found
            x, g, H, p, stats = dev.at(x_host + step * p_host)
            problem.count()
            f, gnorm, slope, g_ok, p_ok = np.asarray(stats).tolist()
    return _max_iter_reached(np.array(x), f, np.array(g), max_iter)


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
            return _nonfinite_stop(x, f, g, k, "Hessian-vector product")
        if not (g @ p < 0):
            p = -g
        found = backtrack(problem.fun, x, f, g, p)
        if found is None:
            return _line_search_failed(x, f, g, k, gnorm, tol)
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
            return _nonfinite_stop(x, f, g, k, "Hessian-vector product")
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
            return _line_search_failed(x, f, g, k, gnorm, tol)


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
            return _line_search_failed(x, f, g, k, gnorm, tol)
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
            return _line_search_failed(x, f, g, k, gnorm, tol)
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
        outcome.message = (f"stopped: the objective diverges (it is unbounded below, or "
                           f"unbounded in float64): f {what} at iteration {outcome.n_iter}")
    return outcome


METHODS = {
    "newton": run_newton,
    "newton-cg": run_newton_cg,
    "trust-ncg": run_trust_ncg,
    "bfgs": run_bfgs,
    "gd": run_gd,
}
