"""Newton's method: relayish vs a hand-written jitted jax Newton iteration, and iteration counts
against scipy.optimize, measured side by side in one run.

    python benchmarks/newton.py [--repeat 20] [--hessian forward|reverse|both]

On a small shared machine XLA:CPU's thread pool makes both sides' times noisy; for steadier
figures run both single-threaded: XLA_FLAGS="--xla_cpu_multi_thread_eigen=false
intra_op_parallelism_threads=1".

Problems: Rosenbrock in 32 dimensions from (-1.2, 1, ..., 1), and L2-regularized logistic
regression on 200 x 50 data (examples/logistic_regression.py).

* relayish: `rl.optim.minimize(method="newton", backend="jax")`. One call gives the iteration
  count and the setup time (AD, tracing, XLA compilation: all done before iteration 0). Without
  verbose/callback, minimize runs the Newton loop (line search included; only a modified-
  Cholesky direction goes back to the host, which these two problems never need) as one XLA
  computation, so single iterations cannot be timed from Python. Instead the loop minimize runs
  after its setup (`methods.run_newton` on the problem minimize builds, compiled once) is timed
  from x0 with max_iter = 0, 1, ..., n: run k stops at the start of iteration k, so
  T(k) - T(k-1) is the cost of iteration k. Reported: the median of those differences (a typical
  iteration), their mean (T(n) - T(0)) / n (line-search iterations included), and the whole
  loop T(n), which adds the fixed cost of one call (the evaluation at x0, dispatch, read-back).
  With a callback (verbose) the loop runs step by step from Python: that is timed between
  history records, as "stepwise".
* jax: `step = jax.jit(lambda x: x - jnp.linalg.solve(jax.hessian(f)(x), jax.grad(f)(x)))`, the
  same objective written in jax.numpy; time per call (block_until_ready), x on the device, no
  line search. For reference also the same step looped n times inside one jit (lax.fori_loop):
  its per-iteration cost, measured the same way as relayish's (differences over n).
* The two are timed in interleaved rounds (the order swapped every round); a ratio is the
  median of the per-round ratios of medians, so drifting machine load hits both alike.
* whole minimize calls (newton, default hessian="auto", setup included): the first call on an
  empty problem cache and the median repeated call (the cache reuses AD and compilation), on
  jax and on the interpreter.
* Hessian programs: rl.hessian (reverse over reverse) against hessian_forward (n
  forward-over-reverse HVPs) on the flat objective, interpreted and compiled with jax.
* scipy: iteration counts of scipy.optimize.minimize with Newton-CG and trust-ncg (exact
  gradient and Hessian-vector products written in numpy) next to relayish's newton, newton-cg
  and trust-ncg (all with gradient tolerance 1e-8... scipy's Newton-CG stops on xtol=1e-8).
"""
import argparse
import os
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, os.pardir, "examples"))

import jax  # noqa: E402

jax.config.update("jax_enable_x64", True)
import jax.numpy as jnp  # noqa: E402
from scipy import optimize as sp  # noqa: E402

import relayish as rl  # noqa: E402
import logistic_regression as lr  # noqa: E402

F64 = "float64"


# ---- problems: relayish objective, jax objective, numpy (fun, grad, hessp), x0, args ----------

def rosenbrock_problem(n=32):
    x = rl.var("x", shape=(n,), dtype=F64)
    a = rl.op.strided_slice(x, [0], [n - 1])
    b = rl.op.strided_slice(x, [1], [n])
    f = rl.Function([x], rl.sum(100.0 * (b - a * a) * (b - a * a) + (1.0 - a) * (1.0 - a)))

    def f_jax(x):
        a, b = x[:-1], x[1:]
        return jnp.sum(100.0 * (b - a * a) ** 2 + (1.0 - a) ** 2)
    x0 = np.array([-1.2] + [1.0] * (n - 1))
    numpy = (sp.rosen, sp.rosen_der, sp.rosen_hess_prod)
    return f"Rosenbrock {n}-D", f, f_jax, numpy, x0, ()


def logistic_problem(n_samples=200, n_features=50, lam=1e-2):
    X, y = lr.make_data(n_samples, n_features)
    f = lr.make_objective(n_samples, n_features, lam)
    Xj, yj = jnp.asarray(X), jnp.asarray(y)

    def f_jax(w):
        z = Xj @ w
        return jnp.mean(jax.nn.relu(z) + jnp.log(1.0 + jnp.exp(-jnp.abs(z))) - yj * z) \
            + lam / 2.0 * jnp.sum(w * w)
    fun, grad, hess = lr.numpy_objective(X, y, lam)
    numpy = (fun, grad, lambda w, v: hess(w) @ v)
    return f"logistic regression {n_samples}x{n_features}", f, f_jax, numpy, np.zeros(n_features), (X, y)


# ---- measurements ----------------------------------------------------------------------------

def relayish_setup(f, x0, args, hessian):
    """One minimize call (iterations, setup time) and the problem it builds, compiled."""
    from relayish.optim.objective import flat_objective
    from relayish.optim.problem import RelayishProblem
    start = time.perf_counter()
    rl.optim.minimize(f, x0, method="newton", backend="jax", args=args, hessian=hessian,
                      max_iter=0)
    setup = time.perf_counter() - start
    res = rl.optim.minimize(f, x0, method="newton", backend="jax", args=args, hessian=hessian)
    obj, spec, x_flat = flat_objective(f, x0, args)
    problem = RelayishProblem(obj, x_flat.size, "newton", "jax", "cpu", hessian)
    problem.warm_up(x_flat, watched=False, max_iter=100)
    problem.warm_up(x_flat, watched=True)
    return res, setup, problem, x_flat


def newton_loop(problem, x_flat, max_iter):
    """What minimize runs after its setup: the Newton loop from x0 (one XLA computation on the
    device path when nothing watches it)."""
    from relayish.optim.methods import Monitor, run_newton
    run_newton(problem, x_flat, 1e-8, max_iter, Monitor())


def stepwise_iterations(problem, x_flat):
    """Wall time of each iteration of the stepwise loop (a callback watches it)."""
    from relayish.optim.methods import Monitor, run_newton
    stamps = []
    run_newton(problem, x_flat, 1e-8, 100, Monitor(lambda e: stamps.append(time.perf_counter())))
    return list(np.diff(stamps))


def jax_step(f_jax, x0):
    step = jax.jit(lambda x: x - jnp.linalg.solve(jax.hessian(f_jax)(x), jax.grad(f_jax)(x)))
    x = jnp.asarray(x0)
    t = time.perf_counter()
    step(x).block_until_ready()
    return step, x, time.perf_counter() - t


def jax_looped(f_jax, x0):
    """The same step, k times in one jit (lax.fori_loop): a jax user's loop without dispatch."""
    def steps(x, k):
        return jax.lax.fori_loop(
            0, k, lambda i, x: x - jnp.linalg.solve(jax.hessian(f_jax)(x), jax.grad(f_jax)(x)), x)
    looped = jax.jit(steps)
    looped(jnp.asarray(x0), 1).block_until_ready()
    return looped


def timed(fn, calls):
    """Median wall time of one call of fn, over `calls` calls."""
    out = []
    for _ in range(calls):
        t = time.perf_counter()
        fn()
        out.append(time.perf_counter() - t)
    return float(np.median(out))


def side_by_side(problem, x_flat, step, looped, x_jax, n_iter, rounds, calls=15):
    """Interleaved rounds (order swapped every round). Per round: T(k) for the relayish loop and
    the looped jax step with k = 0..n_iter, and the jax step alone; returns medians over rounds
    of: relayish median and mean iteration, whole loop, jax step, looped-jax iteration, and the
    per-round ratios."""
    rows = []
    for r in range(rounds):
        def ours():
            return [timed(lambda k=k: newton_loop(problem, x_flat, k), calls)
                    for k in range(n_iter + 1)]

        def theirs():
            single = timed(lambda: step(x_jax).block_until_ready(), calls * (n_iter + 1))
            loop = [timed(lambda k=k: looped(x_jax, k).block_until_ready(), calls)
                    for k in (0, n_iter)]
            return single, loop
        if r % 2:
            single, loop = theirs()
            T = ours()
        else:
            T = ours()
            single, loop = theirs()
        diffs = np.diff(T)
        looped_iter = (loop[1] - loop[0]) / n_iter
        rows.append(dict(median=float(np.median(diffs)), mean=(T[-1] - T[0]) / n_iter,
                         whole=T[-1], single=single, looped=looped_iter,
                         r_median=float(np.median(diffs)) / single,
                         r_mean=(T[-1] - T[0]) / n_iter / single,
                         r_whole=T[-1] / (n_iter * single),
                         r_looped=(T[-1] - T[0]) / n_iter / looped_iter))
    return {key: float(np.median([row[key] for row in rows])) for key in rows[0]}


def stepwise_side_by_side(problem, x_flat, step, x_jax, n_iter, rounds):
    ours, ratios = [], []
    for _ in range(rounds):
        a = [d for _ in range(4) for d in stepwise_iterations(problem, x_flat)]
        b = timed(lambda: step(x_jax).block_until_ready(), len(a))
        ours.extend(a)
        ratios.append(np.median(a) / b)
    return float(np.median(ours)), float(np.median(ratios))


def host_jax_step(step, x0, repeat):
    """The jax step called on a numpy array and converted back to numpy."""
    return timed(lambda: np.asarray(step(x0)), repeat)


def scipy_counts(numpy, x0, args):
    fun, grad, hessp = numpy
    out = {}
    for method in ("Newton-CG", "trust-ncg"):
        opts = {"xtol": 1e-8} if method == "Newton-CG" else {"gtol": 1e-8}
        r = sp.minimize(fun, x0, jac=grad, hessp=hessp, method=method, options=opts)
        out[method] = (r.nit, bool(r.success), float(np.linalg.norm(grad(r.x))))
    return out


def relayish_counts(f, x0, args):
    out = {}
    for method in ("newton", "newton-cg", "trust-ncg"):
        r = rl.optim.minimize(f, x0, method=method, backend="jax", args=args, max_iter=500)
        out[method] = (r.n_iter, r.converged, r.grad_norm)
    return out


def wall(fn):
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


def whole_calls(f, x0, args, calls=10):
    """Whole minimize calls (newton, default hessian="auto"), setup included: the first call on
    an empty problem cache, then the median of repeated calls (the cache reuses AD and
    compilation). jax and the interpreter."""
    from relayish.optim import cache
    out = {}
    for backend in ("jax", "interpreter"):
        cache.PROBLEMS.entries.clear()
        first = wall(lambda: rl.optim.minimize(f, x0, backend=backend, args=args))
        again = float(np.median([wall(lambda: rl.optim.minimize(f, x0, backend=backend,
                                                                  args=args))
                                 for _ in range(calls)]))
        out[backend] = (first, again)
    return out


def hessian_programs(f, x0, args, repeat=5):
    """rl.hessian (reverse over reverse) against hessian_forward (n forward-over-reverse HVPs) on
    the flat objective: best interpreter time, and best time compiled with jax (and its first
    call: tracing + compilation)."""
    from relayish.ad.api import hessian_forward
    from relayish.optim.objective import flat_objective
    obj, _, x = flat_objective(f, x0, args)
    out = {}
    for name, make in (("reverse (rl.hessian)", rl.hessian), ("forward (hessian_forward)",
                                                               hessian_forward)):
        prog = make(obj)
        interp = min(wall(lambda: rl.evaluate(prog, x)) for _ in range(repeat))
        run = rl.compile(prog)
        compile_s = wall(lambda: run(x))
        compiled = min(wall(lambda: run(x)) for _ in range(50 * repeat))
        out[name] = (interp, compiled, compile_s)
    return out


def main(argv=None):
    parser = argparse.ArgumentParser(description="relayish Newton vs jax and scipy")
    parser.add_argument("--repeat", type=int, default=20, help="interleaved rounds")
    parser.add_argument("--hessian", choices=("forward", "reverse", "both"), default="both")
    args = parser.parse_args(argv)
    modes = ("forward", "reverse") if args.hessian == "both" else (args.hessian,)
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; numpy {np.__version__}; "
          f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    print("relayish: minimize's Newton loop after its setup, timed with max_iter = 0..n; an "
          "iteration = T(k) - T(k-1)\n  (forward Hessian: the loop, Armijo line search "
          "included, is one XLA computation).\njax step: x - solve(hessian(f)(x), grad(f)(x)), "
          "jitted, x on the device, no line search, called from Python.\nInterleaved rounds "
          "(order swapped each round); ratio = median over rounds of (relayish / jax).")
    for make in (rosenbrock_problem, logistic_problem):
        name, f, f_jax, numpy, x0, fargs = make()
        print(f"\n== {name} ==")
        step, x_jax, jax_compile = jax_step(f_jax, x0)
        looped = jax_looped(f_jax, x0)
        jax_host = host_jax_step(step, x0, 200)
        for mode in modes:
            res, setup, problem, x_flat = relayish_setup(f, x0, fargs, mode)
            n = res.n_iter
            m = side_by_side(problem, x_flat, step, looped, x_jax, n, args.repeat)
            where = "one XLA loop" if problem.device_newton is not None else "host loop"
            print(f"  jax hand-written Newton step (jit, hessian + solve): {m['single'] * 1e6:8.1f} "
                  f"us/iter   (numpy in/out: {jax_host * 1e6:.1f} us; compile {jax_compile:.2f} s;"
                  f" the step looped in one jit: {m['looped'] * 1e6:.1f} us/iter)")
            print(f"  relayish newton, {mode} Hessian ({where}; {n} iterations, converged="
                  f"{res.converged}; AD + compile {setup:.2f} s):")
            print(f"      per iteration: median {m['median'] * 1e6:8.1f} us  ratio "
                  f"{m['r_median']:5.2f}x   mean {m['mean'] * 1e6:8.1f} us  ratio "
                  f"{m['r_mean']:5.2f}x   (mean vs the looped jax step: {m['r_looped']:.2f}x)")
            print(f"      whole loop from x0 (one call: evaluation at x0 + {n} iterations): "
                  f"{m['whole'] * 1e6:8.1f} us  vs {n} jax steps: ratio {m['r_whole']:5.2f}x")
            if problem.device_newton is not None:
                per, ratio = stepwise_side_by_side(problem, x_flat, step, x_jax, n, args.repeat)
                print(f"      stepwise (with a callback / verbose): median {per * 1e6:8.1f} us "
                      f"per iteration  ratio {ratio:5.2f}x")
        print("  whole minimize calls (newton, hessian=\"auto\", setup included): first call / "
              "repeated call (cache)")
        for backend, (first, again) in whole_calls(f, x0, fargs).items():
            print(f"    {backend:11s} {first:7.3f} s / {again * 1e3:8.2f} ms")
        print("  Hessian programs: interpreter / compiled with jax (first call)")
        for name, (interp, compiled, compile_s) in hessian_programs(f, x0, fargs).items():
            print(f"    {name:26s} {interp * 1e3:7.2f} ms / {compiled * 1e6:7.1f} us "
                  f"({compile_s:.2f} s)")
        print("  iterations to convergence:")
        for method, (nit, ok, gn) in relayish_counts(f, x0, fargs).items():
            print(f"    relayish {method:10s} {nit:4d}  converged={ok}  |grad| {gn:.1e}")
        for method, (nit, ok, gn) in scipy_counts(numpy, x0, fargs).items():
            print(f"    scipy    {method:10s} {nit:4d}  success={ok}    |grad| {gn:.1e}")


if __name__ == "__main__":
    main()
