"""Newton's method as one XLA computation: the whole loop, line search included.

`methods.run_newton` written in jax: the same direction (the plain Cholesky's, else the modified
Cholesky), the same Armijo test, the same safeguarded backtracking, the same stopping rules and
constants, so that it takes the host loop's iterates. It runs as one `lax.while_loop` inside one
jitted call: no Python, no dispatch and no transfer per iteration. The history (f, |g|, step per
iteration) is written into fixed-size arrays and read back once at the end.

It is used when nothing watches the iterations (no `verbose`, no `callback`) and max_iter fits
the history (`fits`): progress reported live needs the Python loop
(methods._newton_device_loop), which returns to the host once per iteration.

The loop body evaluates (f, g, H, p) once, at the point `z` that the previous body chose:
    START        z = x0: take it;
    TRIAL        z = x + p: take it if Armijo accepts the full step, else backtrack along p with
                 the objective alone and set z = x + t p (BACKTRACKED) — or stop (no decrease);
    BACKTRACKED  z = x + t p: take it.
Taking a point starts an iteration (finite checks, the history record, the convergence and
max_iter tests) and computes the next direction and z = x + p. So the fused evaluation appears
once in the program (one copy to compile), and a full-step iteration is one body.
"""
from __future__ import annotations

import attrs
import numpy as np

from relayish.optim.methods import ARMIJO_C1

# why the loop stopped (RUNNING while it has not)
RUNNING, CONVERGED, MAX_ITER, BAD_OBJECTIVE, BAD_GRADIENT, BAD_HESSIAN, NO_DECREASE = range(7)
# what the point the next body evaluates is for
START, TRIAL, BACKTRACKED = range(3)

BACKTRACK_STEPS = 60        # methods.backtrack's max_steps
CHOLESKY_TRIES = 100        # methods.modified_cholesky_direction's doublings


@attrs.frozen
class LoopResult:
    """The device loop's outcome, read back to numpy."""
    status: int
    n_iter: int
    x: np.ndarray
    fun: float
    grad: np.ndarray
    grad_norm: float
    history_fun: np.ndarray      # [n_iter + 1] (fewer when it stopped on a non-finite value)
    history_grad_norm: np.ndarray
    history_step: np.ndarray     # NaN at iteration 0
    fused_evaluations: int       # (f, g, H, p) evaluations
    objective_evaluations: int   # f alone (backtracking)


MAX_HISTORY = 1 << 16       # rows; a larger max_iter runs the stepwise loop instead


def fits(max_iter):
    """Is max_iter small enough for the history arrays (else the stepwise loop runs)?"""
    return max_iter + 1 <= MAX_HISTORY


def history_capacity(max_iter):
    """The static length of the history arrays: a power of two >= max_iter + 1, so that one
    compiled loop serves every max_iter up to it."""
    return max(16, 1 << int(max_iter).bit_length())


def build_newton_loop(evaluate, objective, n):
    """A function run(x0, tol, max_iter) -> LoopResult (call it with jax's x64 enabled).

    evaluate(x) -> (f, g, H, p): pure jax, p = the Newton direction from a plain Cholesky (NaN
    where H is not positive definite); objective(x) -> f: pure jax, for the line search.
    The history's length is static: history_capacity(max_iter), one compilation per size.
    """
    import jax
    import jax.numpy as jnp
    from jax import lax
    from jax.scipy.linalg import cho_solve

    eye = jnp.eye(n)
    c1 = ARMIJO_C1

    def all_finite(v):
        return jnp.all(jnp.isfinite(v))

    def modified_cholesky(H, g):
        # methods.modified_cholesky_direction: the smallest doubled tau with H + tau I
        # positive definite (a Cholesky without NaN); -g when none is found
        diag = jnp.diagonal(H)
        beta = 1e-3 * jnp.maximum(1.0, jnp.max(jnp.abs(diag)))
        min_diag = jnp.min(diag)
        tau0 = jnp.where(min_diag > 0, 0.0, beta - min_diag)

        def not_done(s):
            tries, tau, done = s
            return (~done) & (tries < CHOLESKY_TRIES)

        def next_tau(s):
            tries, tau, _ = s
            ok = all_finite(jnp.linalg.cholesky(H + tau * eye))
            return tries + 1, jnp.where(ok, tau, jnp.maximum(2.0 * tau, beta)), ok
        _, tau, done = lax.while_loop(not_done, next_tau, (0, tau0, False))
        L = jnp.linalg.cholesky(H + tau * eye)
        return jnp.where(done, -cho_solve((L, True), g), -g)

    def backtrack(x, f, g, p, f_trial):
        # methods.backtrack from t = 1 with f(x + p) = f_trial known: (found, t, f evaluations)
        slope = jnp.dot(g, p)
        floor = 1e-16 * (1.0 + jnp.max(jnp.abs(x)))
        p_max = jnp.max(jnp.abs(p))

        def running(s):
            i, t, outcome = s
            return (outcome == 0) & (i < BACKTRACK_STEPS)

        def shrink(s):
            i, t, _ = s
            ft = lax.cond(i == 0, lambda: f_trial, lambda: objective(x + t * p))
            finite = jnp.isfinite(ft)
            accepted = finite & (ft <= f + c1 * t * slope)
            denom = 2.0 * (ft - f - slope * t)
            interpolated = jnp.where(denom > 0, -slope * t * t / jnp.where(denom > 0, denom, 1.0),
                                     0.5 * t)
            t_next = jnp.where(finite, jnp.minimum(jnp.maximum(interpolated, 0.1 * t), 0.5 * t),
                               0.1 * t)
            too_small = t_next * p_max <= floor
            outcome = jnp.where(accepted, 1, jnp.where(too_small, 2, 0))
            return i + 1, jnp.where(accepted, t, t_next), outcome
        tries, t, outcome = lax.while_loop(running, shrink, (0, 1.0, 0))
        # try 0 reuses f(x + p); each later try evaluated the objective once
        return outcome == 1, t, tries - 1

    def direction(g, H, p):
        # the plain Cholesky's direction when it is finite and a descent direction, else the
        # modified Cholesky's; steepest descent if even that is not a descent direction
        usable = all_finite(p) & (jnp.dot(g, p) < 0)
        p = lax.cond(usable, lambda: p, lambda: modified_cholesky(H, g))
        return jnp.where(jnp.dot(g, p) < 0, p, -g)

    def start_iteration(s, tol, max_iter):
        """The point s["x"] was just taken as iteration s["k"]: checks, record, next z."""
        k, f, g, H = s["k"], s["f"], s["g"], s["H"]
        gnorm = jnp.sqrt(jnp.sum(g * g))
        bad_f, bad_g = ~jnp.isfinite(f), ~all_finite(g)
        # recorded even when f or g is not finite: the caller then keeps only rows 0..k-1
        history = s["history"].at[k].set(jnp.stack([f, gnorm, s["step"]]))
        needs_direction = ~(bad_f | bad_g) & (gnorm > tol) & (k < max_iter)
        bad_h = needs_direction & ~(all_finite(s["p"]) & (jnp.dot(g, s["p"]) < 0)) \
            & ~all_finite(H)
        status = jnp.select(
            [bad_f, bad_g, gnorm <= tol, k >= max_iter, bad_h],
            [BAD_OBJECTIVE, BAD_GRADIENT, CONVERGED, MAX_ITER, BAD_HESSIAN], RUNNING)
        p = lax.cond(status == RUNNING, lambda: direction(g, H, s["p"]), lambda: s["p"])
        return dict(s, status=status, p=p, z=s["x"] + p, mode=TRIAL, history=history)

    def body(s, tol, max_iter):
        fz, gz, Hz, pz = evaluate(s["z"])
        s = dict(s, fused=s["fused"] + 1)
        accept_full = (s["mode"] == TRIAL) & jnp.isfinite(fz) \
            & (fz <= s["f"] + c1 * jnp.dot(s["g"], s["p"]))
        take = (s["mode"] != TRIAL) | accept_full

        def take_point():
            step = jnp.where(s["mode"] == TRIAL, 1.0, s["step"])
            k = jnp.where(s["mode"] == START, 0, s["k"] + 1)
            taken = dict(s, x=s["z"], f=fz, g=gz, H=Hz, p=pz, step=step, k=k)
            return start_iteration(taken, tol, max_iter)

        def line_search():
            found, t, evals = backtrack(s["x"], s["f"], s["g"], s["p"],
                                        jnp.where(jnp.isfinite(fz), fz, jnp.inf))
            return dict(s, z=s["x"] + t * s["p"], step=t, mode=BACKTRACKED,
                        status=jnp.where(found, RUNNING, NO_DECREASE),
                        objective=s["objective"] + evals)
        return lax.cond(take, take_point, line_search)

    def solve(x0, tol, max_iter, capacity):
        state = dict(status=RUNNING, mode=START, k=0, z=x0, x=x0, f=jnp.nan,
                     g=jnp.zeros(n), H=jnp.zeros((n, n)), p=jnp.zeros(n), step=jnp.nan,
                     history=jnp.full((capacity, 3), jnp.nan), fused=0, objective=0)
        state = jax.tree_util.tree_map(jnp.asarray, state)
        s = lax.while_loop(lambda s: s["status"] == RUNNING,
                           lambda s: body(s, tol, max_iter), state)
        # two arrays to read back: the floats and the counts
        floats = jnp.concatenate([s["x"], s["g"], s["f"][None], s["history"].reshape(-1)])
        counts = jnp.stack([s["status"], s["k"], s["fused"], s["objective"]])
        return floats, counts

    jitted = jax.jit(solve, static_argnums=3)

    def run(x0, tol, max_iter, capacity_for=0):
        """capacity_for: compile for the history size of that max_iter (warm-up runs)."""
        capacity = history_capacity(max(max_iter, capacity_for))
        floats, counts = jitted(np.asarray(x0, dtype=np.float64), np.float64(tol),
                                np.int64(max_iter), capacity)
        floats, counts = np.asarray(floats), np.asarray(counts).tolist()
        status, k, fused, objective = counts
        x, g, f = floats[:n].copy(), floats[n:2 * n].copy(), float(floats[2 * n])
        history = floats[2 * n + 1:].reshape(capacity, 3)
        kept = k + 1 if status not in (BAD_OBJECTIVE, BAD_GRADIENT) else k
        return LoopResult(status=status, n_iter=k, x=x, fun=f, grad=g,
                          grad_norm=float(np.linalg.norm(g)),
                          history_fun=history[:kept, 0], history_grad_norm=history[:kept, 1],
                          history_step=history[:kept, 2], fused_evaluations=fused,
                          objective_evaluations=objective)
    run.jitted = jitted
    return run
