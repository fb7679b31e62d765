"""What a run of a method returns and why it stopped: the status codes and their messages.

Every method ends in one of the statuses below, and `stopped` turns a status into an Outcome
with its message from MESSAGES, the one table of stop messages: Newton's loops (on the host or
in XLA) return status codes, the other methods name a status where they stop.
"""
from __future__ import annotations

import math

import attrs
import numpy as np

# why a run stopped (RUNNING: it has not; DIRECTION: Newton's compiled loop hands an indefinite
# Hessian back to the host, which computes the modified Cholesky direction and goes on)
(RUNNING, CONVERGED, MAX_ITER, BAD_OBJECTIVE, BAD_GRADIENT, BAD_HESSIAN, BAD_HVP, NO_DECREASE,
 DIRECTION, DIVERGES) = range(10)

MESSAGES = {
    CONVERGED: "converged: gradient norm below tol",
    MAX_ITER: "stopped: max_iter={max_iter} iterations reached",
    BAD_OBJECTIVE: "stopped: the objective is not finite (NaN or inf) at iteration {k}",
    BAD_GRADIENT: "stopped: the gradient is not finite (NaN or inf) at iteration {k}",
    BAD_HESSIAN: "stopped: the Hessian is not finite (NaN or inf) at iteration {k}",
    BAD_HVP: "stopped: the Hessian-vector product is not finite (NaN or inf) at iteration {k}",
    NO_DECREASE: "stopped: the line search found no decrease along the search direction (the "
                 "objective's precision is reached at gradient norm {gnorm:.3g} > tol)",
    DIVERGES: "stopped: the objective diverges (it is unbounded below, or unbounded in "
              "float64): f {what} at iteration {k}",
}


@attrs.define
class Outcome:
    x: np.ndarray
    fun: float
    grad: np.ndarray
    n_iter: int
    converged: bool
    message: str
    reached_max_iter: bool = False


def stopped(status, x, f, g, k, tol=0.0, max_iter=None):
    """The Outcome of a run that stopped with `status` at iterate k (x, f(x), g(x))."""
    gnorm = float(np.linalg.norm(g))
    if status == NO_DECREASE and gnorm <= tol:
        status = CONVERGED
    if status == MAX_ITER:
        k = max_iter
    message = MESSAGES[status].format(k=k, max_iter=max_iter, gnorm=gnorm)
    return Outcome(x, f, g, k, status == CONVERGED, message, reached_max_iter=status == MAX_ITER)


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


def finite(*values):
    for v in values:
        if isinstance(v, float):
            if not math.isfinite(v):
                return False
        elif not np.isfinite(v).all():
            return False
    return True
