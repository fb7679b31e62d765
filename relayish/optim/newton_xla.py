"""Newton on the jax backend's cpu path: the vmapped (f, g, H, p) evaluation, and newton.py's
step function run on the device by its two drivers.

`DeviceNewton(jg, fun, n)`: jg is the pure jax function of the relayish program
jvp(gradient(f)) : (x, v) -> ((f, (g,)), (_, (H v,))) (forward over reverse), fun the objective's.
vmapped over the n basis vectors, jg gives the rows of H while its primal half (f, g) does not
depend on v and stays unbatched: one pass computes f, g and H (jax.hessian batches its HVPs the
same way); the direction p comes from a plain Cholesky solve in the same evaluation (NaN where
H is not positive definite: the step then stops with DIRECTION and the host computes the
modified Cholesky). Its drivers, which keep x, g, H and p on the device:

* XlaLoop, when nothing watches the iterations: `newton.step` under `lax.while_loop`, inside
  one jitted call — no Python, dispatch or transfer per iteration, line searches included
  (newton.line_search's inner while_loop over the objective). A call returns when the run
  stops or needs the modified Cholesky. The history goes into a (capacity + 1, 3) array,
  capacity a power of two >= max_iter + 1 (one compilation serves every smaller max_iter; tol
  and max_iter are traced); inputs and outputs travel as two arrays each (two transfers).
* StepwiseLoop, when a callback or verbose watches: `newton.take` and `newton.line_search`
  jitted separately and called from Python on the state packed into two device arrays; a step
  reads back one report vector [status, took, k, f, |g|, step] — an iteration whose full step
  Armijo accepts is one compiled call and one read-back; a rejected one adds the line
  search's call.
Both run inside `jax.enable_x64(True)`.
"""
from __future__ import annotations

import numpy as np

from relayish.optim import newton
from relayish.optim.arrays import xla
from relayish.optim.outcome import BAD_GRADIENT, BAD_OBJECTIVE, RUNNING


class DeviceNewton:
    """Newton's compiled evaluation and loops, with the iterate kept on the device.

    `evaluate(x) -> (f, g, H, p)` and `objective(x) -> f` are pure jax functions;
    `value_grad_hess(x)` is the evaluation jitted, numpy in and out (the host loop calls it:
    backend="auto" after switching, and tests); `driver(watched, max_iter)` the loop
    newton.run_newton runs. Each is compiled on first use (`warm_up` does it ahead).
    """

    def __init__(self, jg, fun, n):
        import jax
        import jax.numpy as jnp
        from jax.scipy.linalg import cho_solve
        eye = np.eye(n)
        self.n = n

        def evaluate(x):
            (f, (g,)), (_, (H,)) = jax.vmap(lambda e: jg(x, e),
                                            out_axes=((None, (None,)), (0, (0,))))(eye)
            f, g, H = (jnp.asarray(v, jnp.float64) for v in (f, g, H))
            L = jnp.linalg.cholesky(0.5 * (H + H.T))
            return f, g, H, -cho_solve((L, True), g)

        def objective(x):
            return jnp.asarray(fun(x), jnp.float64)
        self.evaluate, self.objective = evaluate, objective
        self._evaluate = jax.jit(evaluate)
        self.context = lambda: jax.enable_x64(True)
        self.xla_loop = XlaLoop(evaluate, objective, n)
        self.stepwise_loop = StepwiseLoop(evaluate, objective, n)

    def check(self):
        """Trace (not compile) the vmapped evaluation and the objective: fails early where
        batching does not go."""
        import jax
        import jax.numpy as jnp
        with self.context():
            for fn in (self.evaluate, self.objective):
                jax.eval_shape(fn, jax.ShapeDtypeStruct((self.n,), jnp.float64))

    def driver(self, watched, max_iter):
        return self.xla_loop if newton.runs_in_xla(watched, max_iter) else self.stepwise_loop

    def value_grad_hess(self, x):
        with self.context():
            f, g, H, p = self._evaluate(np.asarray(x, dtype=np.float64))
            return float(f), np.asarray(g), np.asarray(H), np.asarray(p)

    def warm_up(self, x, loop, max_iter=0):
        """Compile (and run once at x) what the coming loop uses: "xla" the whole loop for
        max_iter's history size, "stepwise" its two step functions, "host" the evaluation."""
        x = np.asarray(x, dtype=np.float64)
        with self.context():
            if loop == "xla":
                self.xla_loop.call(newton.state(np, x), 0.0, 0, capacity_for=max_iter)
            elif loop == "stepwise":
                self.stepwise_loop.warm_up(x)
            else:
                self.value_grad_hess(x)


def _count(problem, s):
    problem.count(int(s["evaluations"]))
    problem.nfev += int(s["objective"])


FLOATS = ("z", "x", "g", "p", "H", "f", "step", "gnorm", "f_trial")
INTS = ("status", "mode", "k", "took", "evaluations", "objective")


def pack(xp, s):
    """A state as two arrays, floats and ints: a jitted call's dispatch cost grows with its
    number of arguments and results, and the stepwise loop makes one call per step."""
    floats = xp.concatenate([xp.reshape(xp.asarray(s[name], dtype=s["x"].dtype), (-1,))
                             for name in FLOATS])
    ints = xp.stack([xp.asarray(s[name], dtype=s["k"].dtype) for name in INTS])
    return floats, ints


def unpack(xp, floats, ints, n):
    sizes = [n, n, n, n, n * n, 1, 1, 1, 1]
    parts = xp.split(floats, np.cumsum(sizes)[:-1])
    s = {name: part for name, part in zip(FLOATS, parts)}
    s["H"] = xp.reshape(s["H"], (n, n))
    for name in ("f", "step", "gnorm", "f_trial"):
        s[name] = s[name][0]
    s.update({name: ints[i] for i, name in enumerate(INTS)})
    s["took"] = s["took"] != 0
    return s


class StepwiseLoop:
    """newton.take and newton.line_search jitted, driven from Python: each step reads back one
    report, so a callback sees each iteration when it is taken. The state travels packed
    (pack/unpack) and stays on the device between calls."""

    def __init__(self, evaluate, objective, n):
        import jax
        import jax.numpy as jnp
        ns = xla()
        self.n = n

        def take(floats, ints, tol, max_iter):
            s = newton.take(ns, evaluate, unpack(jnp, floats, ints, n), tol, max_iter)
            report = jnp.stack([jnp.asarray(s[name], jnp.float64) for name in
                                ("status", "took", "k", "f", "gnorm", "step")])
            return (*pack(jnp, s), report)

        def search(floats, ints):
            s = newton.line_search(ns, objective, unpack(jnp, floats, ints, n))
            return pack(jnp, s)
        self.take, self.search = jax.jit(take), jax.jit(search)
        self._context = lambda: jax.enable_x64(True)

    def warm_up(self, x):
        """Compile what a run calls: `take` on the numpy state a run starts from and on the
        device arrays of the calls after it (two entries in jit's cache: the first run
        compiled again without the second), `search` on device arrays."""
        with self._context():
            tol, max_iter = self._limits(0.0, 0)
            floats, ints = pack(np, newton.state(np, x))
            for _ in range(2):
                floats, ints, _ = self.take(floats, ints, tol, max_iter)
            # a line search from x along its Newton direction (or NaN): at most
            # BACKTRACK_STEPS objective evaluations inside XLA
            self.search(floats, ints)

    @staticmethod
    def _limits(tol, max_iter):
        import jax
        return (jax.device_put(np.float64(tol)), jax.device_put(np.int64(max_iter)))

    def advance(self, problem, s, tol, max_iter, record):
        with self._context():
            tol, max_iter = self._limits(tol, max_iter)
            floats, ints = pack(np, s)
            while True:
                floats, ints, report = self.take(floats, ints, tol, max_iter)
                status, took, k, f, gnorm, step = np.asarray(report).tolist()
                if took and status not in (BAD_OBJECTIVE, BAD_GRADIENT):
                    newton.record_row(record, int(k), f, gnorm, step)
                if status != RUNNING:
                    break
                if not took:
                    floats, ints = self.search(floats, ints)
                    if int(np.asarray(ints)[0]) != RUNNING:      # INTS[0]: the status
                        break
            s = unpack(np, np.asarray(floats), np.asarray(ints), self.n)
        _count(problem, s)
        return s


class XlaLoop:
    """newton.step under lax.while_loop in one jitted call (see the module docstring)."""

    def __init__(self, evaluate, objective, n):
        import jax
        import jax.numpy as jnp
        ns = xla()
        self.n = n

        def loop(floats_in, ints_in, capacity):
            # the inputs come in two arrays (two transfers): the vectors and scalars, the counts
            z, x, g, p, (step, f, tol) = jnp.split(floats_in, np.cumsum([n, n, n, n]))
            mode, k, max_iter = ints_in
            s = newton.state(jnp, z, mode, k, x=x, f=f, g=g, p=p, step=step)
            first_row = jnp.where(mode == newton.START, k, k + 1)   # the first point taken
            # capacity + 1 rows: the last one is scratch, for the steps that take no point

            def body(c):
                # a row for every step: the taken point's, or the scratch row's
                s, history = c
                s = newton.step(ns, evaluate, objective, s, tol, max_iter)
                row = jnp.where(s["took"], s["k"] - first_row, capacity)
                history = history.at[row].set(jnp.stack([s["f"], s["gnorm"], s["step"]]))
                return s, history
            s, history = lax_while(lambda c: c[0]["status"] == RUNNING, body,
                                   (s, jnp.full((capacity + 1, 3), jnp.nan)))
            # two arrays to read back: the floats and the counts
            floats = jnp.concatenate([s["x"], s["g"], s["H"].reshape(-1), s["f"][None],
                                      history[:capacity].reshape(-1)])
            counts = jnp.stack([s["status"], s["k"], s["evaluations"], s["objective"]])
            return floats, counts
        lax_while = ns.while_loop
        self.jitted = jax.jit(loop, static_argnums=2)
        self._context = lambda: jax.enable_x64(True)

    def call(self, s, tol, max_iter, capacity_for=0):
        """One call of the loop from the numpy state s -> (numpy state, history rows (f, |g|,
        step) of the iterations it took, from s's next one). capacity_for: compile for the
        history size of that max_iter (warm-up runs)."""
        n = self.n
        capacity = newton.history_capacity(max(max_iter, capacity_for))
        floats_in = np.concatenate([s["z"], s["x"], s["g"], s["p"],
                                    [s["step"], s["f"], tol]]).astype(np.float64)
        mode, k = int(s["mode"]), int(s["k"])
        with self._context():
            floats, counts = self.jitted(floats_in, np.array([mode, k, max_iter],
                                                             dtype=np.int64), capacity)
            status, k_end, evaluations, objective = np.asarray(counts).tolist()
            floats = np.asarray(floats)
        x, g = floats[:n].copy(), floats[n:2 * n].copy()
        H = floats[2 * n:2 * n + n * n].reshape(n, n)
        f, rows = float(floats[2 * n + n * n]), floats[2 * n + n * n + 1:]
        first = k if mode == newton.START else k + 1       # the first iteration this call took
        last = k_end - 1 if status in (BAD_OBJECTIVE, BAD_GRADIENT) else k_end  # last recorded
        out = newton.state(np, x, k=k_end, x=x, f=f, g=g, H=H, status=status)
        out.update(evaluations=evaluations, objective=objective)
        return out, rows.reshape(capacity, 3)[:max(last - first + 1, 0)], first

    def advance(self, problem, s, tol, max_iter, record):
        s, rows, first = self.call(s, tol, max_iter)
        for k, (f, gnorm, step) in enumerate(rows.tolist(), start=first):
            newton.record_row(record, k, f, gnorm, step)
        _count(problem, s)
        return s
