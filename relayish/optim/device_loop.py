"""Newton's usual iterations as one XLA computation; the rare cases go back to the host.

Most Newton iterations are alike: the Cholesky direction is a descent direction and Armijo
accepts the full step. `build_newton_loop` runs such iterations back to back in one
`lax.while_loop` inside one jitted call — no Python, dispatch or transfer per iteration — and
returns as soon as an iteration needs something else:

    LINE_SEARCH  Armijo rejected the full step: the host backtracks (methods.backtrack);
    DIRECTION    H is not positive definite (the Cholesky gave NaN) or p is not a descent
                 direction: the host computes the modified-Cholesky direction;
    and the stops: CONVERGED, MAX_ITER, BAD_OBJECTIVE, BAD_GRADIENT.

The host then calls the loop again from where it left off (methods._run_newton_in_xla). So the
rare paths are methods.py's own code, shared with the host loop, and the compiled program is
only the evaluation and a few comparisons: small, quick to compile and quick to start.

A call starts by evaluating (f, g, H, p) at a point z, which is
    START        x0 (iteration k = 0): taken;
    TRIAL        x + p: taken if Armijo accepts the full step, else the call returns LINE_SEARCH;
    BACKTRACKED  x + t p, the point the host's line search chose: taken.
Taking a point starts the next iteration: finiteness checks, the history row, the convergence
and max_iter tests, and the next trial point x + p. Every body evaluates once.
"""
from __future__ import annotations

import attrs
import numpy as np

from relayish.optim.methods import ARMIJO_C1

# why a call returned (RUNNING only inside the loop)
RUNNING, CONVERGED, MAX_ITER, BAD_OBJECTIVE, BAD_GRADIENT, LINE_SEARCH, DIRECTION = range(7)
# what the point a body evaluates is for
START, TRIAL, BACKTRACKED = range(3)

MAX_HISTORY = 1 << 16       # rows; a larger max_iter runs the stepwise loop instead


def fits(max_iter):
    """Is max_iter small enough for the history arrays (else the stepwise loop runs)?"""
    return max_iter + 1 <= MAX_HISTORY


def history_capacity(max_iter):
    """The static length of the history arrays: a power of two >= max_iter + 1, so that one
    compiled loop serves every max_iter up to it."""
    return max(16, 1 << int(max_iter).bit_length())


@attrs.frozen
class LoopState:
    """Where the Newton loop stands between calls (numpy, on the host).

    status: why the call returned; first: the iteration of the call's first history row;
    x, f, g, p: the current iterate k, its value, gradient and direction; H its Hessian (read
    when the host computes the direction); f_trial: f(x + p) when the call returned
    LINE_SEARCH; history: the rows (f, |g|, step) this call recorded, for iterations
    first, first + 1, ...; evaluations: (f, g, H) evaluations this call made."""
    status: int
    k: int
    first: int
    x: np.ndarray
    f: float
    g: np.ndarray
    p: np.ndarray
    H: np.ndarray
    f_trial: float
    history: np.ndarray
    evaluations: int


def build_newton_loop(evaluate, n):
    """run(z, mode, step, x, f, g, p, k, tol, max_iter) -> LoopState (call it with jax's x64
    enabled). evaluate(x) -> (f, g, H, p): pure jax, p = the Newton direction from a plain
    Cholesky (NaN where H is not positive definite). step: the step that led to z (1 for
    TRIAL, t for BACKTRACKED). The history's length is static: history_capacity(max_iter)."""
    import jax
    import jax.numpy as jnp
    from jax import lax

    c1 = ARMIJO_C1

    def body(s, first_row, tol, max_iter):
        fz, gz, Hz, pz = evaluate(s["z"])
        trial = s["mode"] == TRIAL
        armijo = jnp.isfinite(fz) & (fz <= s["f"] + c1 * jnp.dot(s["g"], s["p"]))
        take = ~trial | armijo
        k = jnp.where(take & (s["mode"] != START), s["k"] + 1, s["k"])
        gnorm = jnp.sqrt(jnp.sum(gz * gz))
        step = jnp.where(trial, 1.0, s["step"])
        bad_f, bad_g = ~jnp.isfinite(fz), ~jnp.all(jnp.isfinite(gz))
        usable = jnp.all(jnp.isfinite(pz)) & (jnp.dot(gz, pz) < 0)
        status = jnp.select(
            [~take, bad_f, bad_g, gnorm <= tol, k >= max_iter, ~usable],
            [LINE_SEARCH, BAD_OBJECTIVE, BAD_GRADIENT, CONVERGED, MAX_ITER, DIRECTION], RUNNING)
        # the row is written for a taken point even when f or g is not finite (the host then
        # keeps only the rows before it); a rejected trial point writes nothing
        row = jnp.where(take, k - first_row, s["history"].shape[0] - 1)
        history = s["history"].at[row].set(
            jnp.where(take, jnp.stack([fz, gnorm, step]), s["history"][row]))

        def pick(new, old):
            return jnp.where(take, new, old)
        x, f, g, H, p = (pick(new, old) for new, old in
                         ((s["z"], s["x"]), (fz, s["f"]), (gz, s["g"]), (Hz, s["H"]),
                          (pz, s["p"])))
        return dict(s, status=status, mode=TRIAL, k=k, z=x + p, x=x, f=f, g=g, H=H, p=p,
                    step=step, f_trial=jnp.where(take, s["f_trial"], fz), history=history,
                    evaluations=s["evaluations"] + 1)

    def loop(floats_in, ints_in, capacity):
        # the inputs come in two arrays (two transfers): the vectors and scalars, the counts
        z, x, g, p, (step, f, tol) = jnp.split(floats_in, np.cumsum([n, n, n, n]))
        mode, k, max_iter = ints_in
        # capacity + 1 rows: the last one is scratch, for the rejected trial point's write
        state = dict(status=jnp.asarray(RUNNING), mode=mode, k=k, z=z, x=x, f=f, g=g,
                     H=jnp.zeros((n, n)), p=p, step=step, f_trial=jnp.asarray(jnp.nan),
                     history=jnp.full((capacity + 1, 3), jnp.nan), evaluations=jnp.asarray(0))
        first_row = jnp.where(mode == START, k, k + 1)     # the first point this call takes
        s = lax.while_loop(lambda s: s["status"] == RUNNING,
                           lambda s: body(s, first_row, tol, max_iter), state)
        # two arrays to read back: the floats and the counts
        floats = jnp.concatenate([s["x"], s["g"], s["p"], s["H"].reshape(-1),
                                  jnp.stack([s["f"], s["f_trial"]]),
                                  s["history"][:capacity].reshape(-1)])
        counts = jnp.stack([s["status"], s["k"], s["evaluations"]])
        return floats, counts

    jitted = jax.jit(loop, static_argnums=2)

    def run(z, mode, step, x, f, g, p, k, tol, max_iter, capacity_for=0):
        """capacity_for: compile for the history size of that max_iter (warm-up runs)."""
        capacity = history_capacity(max(max_iter, capacity_for))
        floats_in = np.concatenate([z, x, g, p, [step, f, tol]]).astype(np.float64)
        floats, counts = jitted(floats_in, np.array([mode, k, max_iter], dtype=np.int64),
                                capacity)
        status, k_end, evaluations = np.asarray(counts).tolist()
        floats = np.asarray(floats)
        x, g, p = floats[:n].copy(), floats[n:2 * n].copy(), floats[2 * n:3 * n].copy()
        H = floats[3 * n:3 * n + n * n].reshape(n, n)
        f, f_trial = floats[3 * n + n * n:3 * n + n * n + 2].tolist()
        rows = floats[3 * n + n * n + 2:]
        first = k if mode == START else k + 1       # the first iteration this call took
        last = k_end - 1 if status in (BAD_OBJECTIVE, BAD_GRADIENT) else k_end   # last recorded
        return LoopState(status=status, k=k_end, first=first, x=x, f=f, g=g, p=p, H=H,
                         f_trial=f_trial,
                         history=rows.reshape(capacity, 3)[:max(last - first + 1, 0)],
                         evaluations=evaluations)
    run.jitted = jitted
    return run
