"""Newton's method: relayish vs a hand-written jitted jax Newton iteration, and iteration counts
against scipy.optimize, measured side by side in one run.

    python benchmarks/newton.py [--repeat 200] [--hessian forward|reverse|both]

On a small shared machine XLA:CPU's thread pool makes both sides' times bimodal (a 32x32 step
takes ~25 or ~55 us depending on whether a pool thread is free); for steadier figures run both
single-threaded: XLA_FLAGS="--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1".

Problems: Rosenbrock in 32 dimensions from (-1.2, 1, ..., 1), and L2-regularized logistic
regression on 200 x 50 data (examples/logistic_regression.py).

* relayish: `rl.optim.minimize(method="newton", backend="jax")`. One call gives the iteration
  count and the setup time (AD, tracing, XLA compilation: all done before iteration 0). The time
  per iteration is the wall time between consecutive history records of the same Newton loop
  from x0 on the problem minimize builds (compiled once) — i.e. exactly minimize's iterations,
  without its once-per-call setup. Each iteration includes the evaluation at the trial point
  x + p (f, g, H and the next direction in one compiled call) and reading back a few floats.
* jax: `step = jax.jit(lambda x: x - jnp.linalg.solve(jax.hessian(f)(x), jax.grad(f)(x)))`, the
  same objective written in jax.numpy; time per call (block_until_ready), x on the device.
  "host" is the same step called on a numpy array and converted back to numpy.
* The two are timed in interleaved rounds (one relayish run of n_iter iterations, then n_iter
  jax steps, order swapped every round); the ratio is the median of the per-round ratios of
  medians, so drifting machine load hits both alike.
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
    from relayish.optim.problem import RelayishProblem, flat_objective
    stamps = []
    start = time.perf_counter()
    res = rl.optim.minimize(f, x0, method="newton", backend="jax", args=args, hessian=hessian,
                            callback=lambda e: stamps.append(time.perf_counter()))
    setup = stamps[0] - start
    obj, spec, x_flat = flat_objective(f, x0, args)
    problem = RelayishProblem(obj, x_flat.size, "newton", "jax", "cpu", hessian)
    problem.warm_up(x_flat)
    return res, setup, problem, x_flat


def relayish_iterations(problem, x_flat):
    """Wall time of each iteration of one Newton run from x0 (between history records)."""
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


def jax_iterations(step, x, calls):
    out = []
    for _ in range(calls):
        t = time.perf_counter()
        step(x).block_until_ready()
        out.append(time.perf_counter() - t)
    return out


def side_by_side(problem, x_flat, step, x_jax, n_iter, repeat):
    """Interleaved rounds: one relayish Newton run (n_iter iterations) and n_iter jax steps,
    the order swapped every round. Returns the medians per iteration and the median of the
    per-round ratios (relayish median / jax median in the same round)."""
    ours, theirs, ratios = [], [], []
    runs = max(1, -(-20 // max(n_iter, 1)))        # at least 20 iterations of each per round

    def relayish_round():
        return [d for _ in range(runs) for d in relayish_iterations(problem, x_flat)]
    for k in range(max(repeat // (runs * max(n_iter, 1)), 5)):
        if k % 2:
            b = jax_iterations(step, x_jax, runs * n_iter)
            a = relayish_round()
        else:
            a = relayish_round()
            b = jax_iterations(step, x_jax, runs * n_iter)
        ours.extend(a)
        theirs.extend(b)
        ratios.append(np.median(a) / np.median(b))
    return float(np.median(ours)), float(np.median(theirs)), float(np.median(ratios))


def host_jax_step(step, x0, repeat):
    """The jax step called on a numpy array and converted back to numpy."""
    out = []
    for _ in range(repeat):
        t = time.perf_counter()
        np.asarray(step(x0))
        out.append(time.perf_counter() - t)
    return float(np.median(out))


def evaluation_alone(problem, x_flat, repeat):
    """relayish's compiled (f, g, H, direction) evaluation, numpy in and out (value_grad_hess)."""
    calls = []
    for _ in range(repeat):
        t = time.perf_counter()
        problem.value_grad_hess(x_flat)
        calls.append(time.perf_counter() - t)
    return float(np.median(calls))


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


def main(argv=None):
    parser = argparse.ArgumentParser(description="relayish Newton vs jax and scipy")
    parser.add_argument("--repeat", type=int, default=200)
    parser.add_argument("--hessian", choices=("forward", "reverse", "both"), default="both")
    args = parser.parse_args(argv)
    modes = ("forward", "reverse") if args.hessian == "both" else (args.hessian,)
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; numpy {np.__version__}; "
          f"XLA_FLAGS={os.environ.get('XLA_FLAGS', '')!r}")
    print("relayish iteration (forward Hessian): one compiled call evaluating f, g, H and the Newton direction at "
          "the trial point x + p\n  (the Armijo test of the full step) and one read-back of "
          "[f, |g|, g.p, finiteness flags]; x, g, H, p stay on the device.\n"
          "jax step: x - solve(hessian(f)(x), grad(f)(x)), jitted, x on the device, no line "
          "search, nothing read back.\nInterleaved rounds (order swapped each round); ratio = "
          "median over rounds of (relayish median / jax median).")
    for make in (rosenbrock_problem, logistic_problem):
        name, f, f_jax, numpy, x0, fargs = make()
        print(f"\n== {name} ==")
        step, x_jax, jax_compile = jax_step(f_jax, x0)
        jax_host = host_jax_step(step, x0, args.repeat)
        for mode in modes:
            res, setup, problem, x_flat = relayish_setup(f, x0, fargs, mode)
            per_iter, jax_iter, ratio = side_by_side(problem, x_flat, step, x_jax, res.n_iter,
                                                     args.repeat)
            print(f"  jax hand-written Newton step (jit, hessian + solve): {jax_iter * 1e6:9.1f} "
                  f"us/iter   (host arrays in/out: {jax_host * 1e6:.1f} us; compile "
                  f"{jax_compile:.2f} s)")
            where = "device loop" if problem.device_newton is not None else "host loop  "
            print(f"  relayish minimize newton, {mode:7s} Hessian, {where}: {per_iter * 1e6:9.1f} "
                  f"us/iter   ratio {ratio:5.2f}x (medians {per_iter / jax_iter:4.2f}x; vs host "
                  f"{per_iter / jax_host:4.2f}x)   ({res.n_iter} iterations, "
                  f"converged={res.converged}; AD + compile {setup:.2f} s)")
            call = evaluation_alone(problem, x_flat, args.repeat)
            print(f"      its compiled (f, g, H, direction) evaluation alone, numpy in/out: "
                  f"{call * 1e6:9.1f} us   ratio {call / jax_host:5.2f}x vs the host-array jax "
                  f"step")
        print("  iterations to convergence:")
        for method, (nit, ok, gn) in relayish_counts(f, x0, fargs).items():
            print(f"    relayish {method:10s} {nit:4d}  converged={ok}  |grad| {gn:.1e}")
        for method, (nit, ok, gn) in scipy_counts(numpy, x0, fargs).items():
            print(f"    scipy    {method:10s} {nit:4d}  success={ok}    |grad| {gn:.1e}")


if __name__ == "__main__":
    main()
