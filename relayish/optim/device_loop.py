"""Newton's iterations as one XLA computation; the modified Cholesky goes back to the host.

`build_newton_loop` runs methods.run_newton's iterations back to back in one `lax.while_loop`
inside one jitted call — no Python, dispatch or transfer per iteration: the plain Cholesky's
direction, the Armijo test of the full step, and when it fails the same safeguarded
backtracking as methods.backtrack (an inner while_loop over the objective's jax function). A
call returns when the run stops (CONVERGED, MAX_ITER, NO_DECREASE, BAD_OBJECTIVE,
BAD_GRADIENT) or when H is not positive definite (DIRECTION: the Cholesky gave NaN, or p is not
a descent direction): the host then computes methods.modified_cholesky_direction — rare, and
kept out of the compiled program so that it stays small, quick to compile and quick to start —
and calls the loop again from there (methods._run_newton_in_xla).

A body evaluates (f, g, H, p) once, at a point z that is
    START        x0 (iteration k = 0): taken;
    TRIAL        x + p: taken if Armijo accepts the full step, else the line search runs and
                 the next body evaluates at its point (or the call returns NO_DECREASE);
    BACKTRACKED  x + t p, the line search's point: taken.
Taking a point starts the next iteration: finiteness checks, the history row, the convergence
and max_iter tests, and the next trial point x + p.
"""
from __future__ import annotations

import attrs
import numpy as np

from relayish.optim.methods import ARMIJO_C1, BACKTRACK_STEPS

# why a call returned (RUNNING only inside the loop)
RUNNING, CONVERGED, MAX_ITER, BAD_OBJECTIVE, BAD_GRADIENT, NO_DECREASE, DIRECTION = range(7)
# what the point a body evaluates is for
START, TRIAL, BACKTRACKED = range(3)

MAX_HISTORY = 1 << 16       # rows; a larger max_iter runs the stepwise loop instead


def runs_in_xla(watched, max_iter):
    """Does Newton's device path take this loop? Not when the iterations are reported live
    (`watched`: a callback or verbose), nor when max_iter is too large for the history
    arrays; the stepwise loop (methods._newton_device_loop) runs then."""
    return not watched and max_iter + 1 <= MAX_HISTORY


def history_capacity(max_iter):
    """The static length of the history arrays: a power of two >= max_iter + 1, so that one
    compiled loop serves every max_iter up to it."""
    return max(16, 1 << int(max_iter).bit_length())


@attrs.frozen
class LoopState:
    """Where the Newton loop stands between calls (numpy, on the host).

    status: why the call returned; first: the iteration of the call's first history row;
    x, f, g, H: the current iterate k, its value, gradient and Hessian (read when the host
    computes the direction); history: the rows (f, |g|, step) this call
    recorded, for iterations first, first + 1, ...; evaluations: the (f, g, H) evaluations
    this call made, objective_evaluations those of f alone (line searches)."""
    status: int
    k: int
    first: int
    x: np.ndarray
    f: float
    g: np.ndarray
    H: np.ndarray
    history: np.ndarray
    evaluations: int
    objective_evaluations: int


def build_newton_loop(evaluate, objective, n):
    """run(z, mode, step, x, f, g, p, k, tol, max_iter) -> LoopState (call it with jax's x64
    enabled). evaluate(x) -> (f, g, H, p): pure jax, p = the Newton direction from a plain
    Cholesky (NaN where H is not positive definite); objective(x) -> f: pure jax, for the line
    search. step: the step that led to z (1 for TRIAL, t for BACKTRACKED). The history's length
    is static: history_capacity(max_iter)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    c1 = ARMIJO_C1

    def backtrack(x, f, g, p, f_trial):
        # methods.backtrack from t = 1, f(x + p) = f_trial known: (found, t, f evaluations)
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
            # methods.decreased_enough: -inf is accepted (the run then stops as diverging)
            accepted = (ft == -jnp.inf) | (finite & (ft <= f + c1 * t * slope))
            denom = 2.0 * (ft - f - slope * t)
            interpolated = jnp.where(denom > 0, -slope * t * t / jnp.where(denom > 0, denom, 1.0),
                                     0.5 * t)
            t_next = jnp.where(finite, jnp.minimum(jnp.maximum(interpolated, 0.1 * t), 0.5 * t),
                               0.1 * t)
            outcome = jnp.where(accepted, 1, jnp.where(t_next * p_max <= floor, 2, 0))
            return i + 1, jnp.where(accepted, t, t_next), outcome
        tries, t, outcome = lax.while_loop(running, shrink, (0, jnp.asarray(1.0), 0))
        # try 0 reused f(x + p); each later try evaluated the objective once
        return outcome == 1, t, tries - 1

    def body(s, first_row, tol, max_iter):
        fz, gz, Hz, pz = evaluate(s["z"])
        trial = s["mode"] == TRIAL
        armijo = (fz == -jnp.inf) | (jnp.isfinite(fz)
                                     & (fz <= s["f"] + c1 * jnp.dot(s["g"], s["p"])))
        take = ~trial | armijo
        k = jnp.where(take & (s["mode"] != START), s["k"] + 1, s["k"])
        gnorm = jnp.sqrt(jnp.sum(gz * gz))
        step = jnp.where(trial, 1.0, s["step"])
        bad_f, bad_g = ~jnp.isfinite(fz), ~jnp.all(jnp.isfinite(gz))
        usable = jnp.all(jnp.isfinite(pz)) & (jnp.dot(gz, pz) < 0)
        status = jnp.select(
            [bad_f, bad_g, gnorm <= tol, k >= max_iter, ~usable],
            [BAD_OBJECTIVE, BAD_GRADIENT, CONVERGED, MAX_ITER, DIRECTION], RUNNING)
        # the row is written for a taken point even when f or g is not finite (the host then
        # keeps only the rows before it); a rejected trial point writes nothing
        row = jnp.where(take, k - first_row, s["history"].shape[0] - 1)
        history = s["history"].at[row].set(
            jnp.where(take, jnp.stack([fz, gnorm, step]), s["history"][row]))
        # a rejected full step: backtrack along p, then evaluate at the point found
        found, t, tries = lax.cond(
            take, lambda: (jnp.asarray(True), jnp.asarray(1.0), jnp.asarray(0)),
            lambda: backtrack(s["x"], s["f"], s["g"], s["p"], jnp.where(jnp.isfinite(fz), fz,
                                                                        jnp.inf)))

        def pick(new, old):
            return jnp.where(take, new, old)
        x, f, g, H, p = (pick(new, old) for new, old in
                         ((s["z"], s["x"]), (fz, s["f"]), (gz, s["g"]), (Hz, s["H"]),
                          (pz, s["p"])))
        return dict(s, status=jnp.where(take, status, jnp.where(found, RUNNING, NO_DECREASE)),
                    mode=jnp.where(take, TRIAL, BACKTRACKED), k=k,
                    z=jnp.where(take, x + p, x + t * p), x=x, f=f, g=g, H=H, p=p,
                    step=jnp.where(take, step, t), history=history,
                    evaluations=s["evaluations"] + 1, objective=s["objective"] + tries)

    def loop(floats_in, ints_in, capacity):
        # the inputs come in two arrays (two transfers): the vectors and scalars, the counts
        z, x, g, p, (step, f, tol) = jnp.split(floats_in, np.cumsum([n, n, n, n]))
        mode, k, max_iter = ints_in
        # capacity + 1 rows: the last one is scratch, for the rejected trial point's write
        state = dict(status=jnp.asarray(RUNNING), mode=mode, k=k, z=z, x=x, f=f, g=g,
                     H=jnp.zeros((n, n)), p=p, step=step,
                     history=jnp.full((capacity + 1, 3), jnp.nan), evaluations=jnp.asarray(0),
                     objective=jnp.asarray(0))
        first_row = jnp.where(mode == START, k, k + 1)     # the first point this call takes
        s = lax.while_loop(lambda s: s["status"] == RUNNING,
                           lambda s: body(s, first_row, tol, max_iter), state)
        # two arrays to read back: the floats and the counts
        floats = jnp.concatenate([s["x"], s["g"], s["H"].reshape(-1), s["f"][None],
                                  s["history"][:capacity].reshape(-1)])
        counts = jnp.stack([s["status"], s["k"], s["evaluations"], s["objective"]])
        return floats, counts

    jitted = jax.jit(loop, static_argnums=2)

    def run(z, mode, step, x, f, g, p, k, tol, max_iter, capacity_for=0):
        """capacity_for: compile for the history size of that max_iter (warm-up runs)."""
        capacity = history_capacity(max(max_iter, capacity_for))
        floats_in = np.concatenate([z, x, g, p, [step, f, tol]]).astype(np.float64)
        floats, counts = jitted(floats_in, np.array([mode, k, max_iter], dtype=np.int64),
                                capacity)
        status, k_end, evaluations, objective_evaluations = np.asarray(counts).tolist()
        floats = np.asarray(floats)
        x, g = floats[:n].copy(), floats[n:2 * n].copy()
        H = floats[2 * n:2 * n + n * n].reshape(n, n)
        f, rows = float(floats[2 * n + n * n]), floats[2 * n + n * n + 1:]
        first = k if mode == START else k + 1       # the first iteration this call took
        last = k_end - 1 if status in (BAD_OBJECTIVE, BAD_GRADIENT) else k_end   # last recorded
        return LoopState(status=status, k=k_end, first=first, x=x, f=f, g=g, H=H,
                         history=rows.reshape(capacity, 3)[:max(last - first + 1, 0)],
                         evaluations=evaluations, objective_evaluations=objective_evaluations)
    run.jitted = jitted
    return run
