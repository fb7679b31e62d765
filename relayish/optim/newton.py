"""Newton's method, written once: a pure step function over an array namespace, and its drivers.

The iteration (direction, Armijo backtracking, stopping rules, status) is `step(ns, evaluate,
objective, state, tol, max_iter) -> state` plus `state(...)` (the initial state) and `done`
(status != RUNNING), written against an array namespace `ns` (arrays.py: numpy with Python
control flow, or jax.numpy with lax's). Drivers run it:

* the host driver here: a Python loop over numpy values, for the interpreter, numpy callables
  and backend="auto" (verbose and callbacks see each iteration as it is taken);
* on the jax backend (newton_xla.py) the same step traced by jax: driven by `lax.while_loop`
  (one XLA computation, when nothing watches the iterations), or jitted and driven by a Python
  loop that reads back one small report per step (when a callback or verbose watches).

State: the current iterate k (x, f, g, H, p: the Newton direction from a plain Cholesky, NaN
where H is not positive definite), and z, the point the next step evaluates, with `mode`:
    START        z = x0: taken (iteration 0);
    TRIAL        z = x + p: taken if Armijo accepts the full step, else the line search runs
                 from x along p and sets z = x + t p (or stops with NO_DECREASE);
    BACKTRACKED  z = x + t p: taken.
One step evaluates (f, g, H, p) once, at z: when Armijo accepts the full step (the usual case)
that evaluation is already the next iteration's data. Taking a point starts the next
iteration: finiteness checks, the convergence and max_iter tests, the next trial point; `took`
tells the driver to record the history row (f, |g|, step) of iteration k.

The modified Cholesky (H + tau I, tau doubled until positive definite) stays on the host, in
every driver: a step that meets an unusable direction stops with DIRECTION, the driver calls
`with_modified_cholesky` (numpy) and goes on from its result. It is rare, and inside XLA its
tau-doubling loop of Cholesky factorizations made the compiled loop ~1 s slower to compile
(notes/optim.md) than it could save.
"""
from __future__ import annotations

import math

import numpy as np

from relayish.optim.arrays import HOST
from relayish.optim.linesearch import ARMIJO_C1, accepts, backtrack_search
from relayish.optim.outcome import (BAD_GRADIENT, BAD_HESSIAN, BAD_OBJECTIVE, CONVERGED,
                                    DIRECTION, MAX_ITER, NO_DECREASE, RUNNING, finite, stopped)

START, TRIAL, BACKTRACKED = range(3)

MAX_HISTORY = 1 << 16       # rows; a larger max_iter runs the stepwise loop instead of XLA's


def state(xp, z, mode=START, k=0, x=None, f=math.nan, g=None, H=None, p=None, step=math.nan,
          status=RUNNING):
    """A Newton state (a dict of arrays of namespace xp): to start at z (mode START), or to go
    on from iterate k (x, f, g) along p (mode TRIAL, z = x + p)."""
    n = z.shape[0]
    zeros = xp.zeros(n, dtype=z.dtype)
    scalar = lambda v, dtype=z.dtype: xp.asarray(v, dtype=dtype)   # noqa: E731
    ints = xp.asarray(0).dtype
    return dict(status=scalar(status, ints), mode=scalar(mode, ints), k=scalar(k, ints), z=z,
                x=z if x is None else x, f=scalar(f), g=zeros if g is None else g,
                H=xp.zeros((n, n), dtype=z.dtype) if H is None else H,
                p=zeros if p is None else p, step=scalar(step), gnorm=scalar(math.nan),
                f_trial=scalar(math.nan), took=xp.asarray(False),
                evaluations=scalar(0, ints), objective=scalar(0, ints))


def done(s):
    return s["status"] != RUNNING


def take(ns, evaluate, s, tol, max_iter):
    """Evaluate (f, g, H, p) at z and take z, unless it is a full step that Armijo rejects."""
    xp = ns.xp
    fz, gz, Hz, pz = evaluate(s["z"])
    trial = s["mode"] == TRIAL
    took = xp.logical_or(xp.logical_not(trial),
                         accepts(xp, fz, s["f"] + ARMIJO_C1 * xp.dot(s["g"], s["p"])))
    k = xp.where(xp.logical_and(took, s["mode"] != START), s["k"] + 1, s["k"])
    gnorm = xp.sqrt(xp.sum(gz * gz))
    usable = xp.logical_and(xp.all(xp.isfinite(pz)), xp.dot(gz, pz) < 0)
    status = xp.select(
        [xp.logical_not(xp.isfinite(fz)), xp.logical_not(xp.all(xp.isfinite(gz))),
         gnorm <= tol, k >= max_iter, xp.logical_not(usable)],
        [BAD_OBJECTIVE, BAD_GRADIENT, CONVERGED, MAX_ITER, DIRECTION], RUNNING)

    def pick(new, old):
        return xp.where(took, new, old)
    x, f, g, H, p = (pick(new, s[name]) for name, new in
                     (("x", s["z"]), ("f", fz), ("g", gz), ("H", Hz), ("p", pz)))
    return dict(s, status=pick(status, s["status"]), mode=pick(TRIAL, s["mode"]), k=k,
                z=pick(x + p, s["z"]), x=x, f=f, g=g, H=H, p=p,
                gnorm=pick(gnorm, s["gnorm"]), step=pick(xp.where(trial, 1.0, s["step"]),
                                                         s["step"]),
                f_trial=fz, took=took, evaluations=s["evaluations"] + 1)


def line_search(ns, objective, s):
    """After a rejected full step: backtrack from x along p (f(x + p) is known); the next step
    evaluates at the point found."""
    xp = ns.xp
    f_full = xp.where(xp.isfinite(s["f_trial"]), s["f_trial"], xp.inf)
    found, t, _, evaluations = backtrack_search(ns, objective, s["x"], s["f"], s["g"], s["p"],
                                                f_trial=f_full)
    return dict(s, status=xp.where(found, s["status"], NO_DECREASE),
                mode=xp.full_like(s["mode"], BACKTRACKED), z=s["x"] + t * s["p"],
                step=t, objective=s["objective"] + evaluations)


def step(ns, evaluate, objective, s, tol, max_iter):
    """One evaluation: take z or, for a rejected full step, run the line search."""
    s = take(ns, evaluate, s, tol, max_iter)
    return ns.cond(s["took"], lambda s: s, lambda s: line_search(ns, objective, s), s)


def recorded(s):
    """Does the step that led to s give a history row (a taken point with finite f and g)?"""
    return bool(s["took"]) and int(s["status"]) not in (BAD_OBJECTIVE, BAD_GRADIENT)


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


def with_modified_cholesky(s):
    """A state that stopped on DIRECTION (numpy), going on along the modified Cholesky's
    direction (steepest descent if that is no descent direction); BAD_HESSIAN if H is not
    finite."""
    x, g, H = (np.asarray(s[name], dtype=np.float64) for name in ("x", "g", "H"))
    if not finite(H):
        return dict(s, status=np.asarray(BAD_HESSIAN))
    p, _ = modified_cholesky_direction(H, g)
    if not g @ p < 0:
        p = -g
    return state(np, x + p, TRIAL, int(s["k"]), x=x, f=float(s["f"]), g=g, p=p)


def run_newton(problem, x0, tol, max_iter, monitor):
    """Newton's method: exact Hessian, modified Cholesky, Armijo backtracking.

    `problem.value_grad_hess(x) -> (f, g, H, p or None)` and `problem.fun`; on the jax backend
    `problem.device_newton` (newton_xla.DeviceNewton) runs the same step on the device.
    """
    device = getattr(problem, "device_newton", None)
    driver = (HostLoop(problem) if device is None
              else device.driver(monitor.callback is not None, max_iter))
    s = state(np, np.asarray(x0, dtype=np.float64))
    while True:
        s = driver.advance(problem, s, tol, max_iter, monitor.record)
        if int(s["status"]) == DIRECTION:
            s = with_modified_cholesky(s)
            if int(s["status"]) == RUNNING:
                continue
        return stopped(int(s["status"]), np.array(s["x"]), float(s["f"]), np.array(s["g"]),
                       int(s["k"]), tol=tol, max_iter=max_iter)


def record_row(record, k, f, gnorm, step):
    record(k, f, gnorm, None if k == 0 else step)


class HostLoop:
    """The step on numpy values in a Python loop; the problem's callables count evaluations."""

    def __init__(self, problem):
        nan = None

        def evaluate(x):
            nonlocal nan
            f, g, H, p = problem.value_grad_hess(x)
            if p is None:       # the backend gives no direction: the modified Cholesky does
                nan = np.full(x.shape[0], np.nan) if nan is None else nan
                p = nan
            return f, g, np.asarray(H, dtype=np.float64), p
        self.evaluate, self.objective = evaluate, problem.fun

    def advance(self, problem, s, tol, max_iter, record):
        """Steps until the run stops or needs the modified Cholesky."""
        with np.errstate(all="ignore"):
            while not done(s):
                s = step(HOST, self.evaluate, self.objective, s, tol, max_iter)
                if recorded(s):
                    record_row(record, int(s["k"]), float(s["f"]), float(s["gnorm"]),
                               float(s["step"]))
        return s


def runs_in_xla(watched, max_iter):
    """Does Newton's device path run its iterations in one XLA loop? Not when the iterations
    are reported live (`watched`: a callback or verbose), nor when max_iter is too large for
    the history arrays; the stepwise loop runs then."""
    return not watched and max_iter + 1 <= MAX_HISTORY


def history_capacity(max_iter):
    """The static length of the XLA loop's history arrays: a power of two >= max_iter + 1, so
    that one compiled loop serves every max_iter up to it."""
    return max(16, 1 << int(max_iter).bit_length())
