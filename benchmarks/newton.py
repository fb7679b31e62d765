"""Newton's method: relayish vs a hand-written jitted jax Newton iteration, and iteration counts
against scipy.optimize, measured side by side in one run.

    python benchmarks/newton.py [--repeat 200] [--hessian forward|reverse|both]

Problems: Rosenbrock in 32 dimensions from (-1.2, 1, ..., 1), and L2-regularized logistic
regression on 200 x 50 data (examples/logistic_regression.py).

* relayish: `rl.optim.minimize(method="newton", backend="jax")`. One call gives the iteration
  count and the setup time (AD, tracing, XLA compilation: all done before iteration 0). The time
  per iteration is the median, over --repeat runs of the same Newton loop from x0 on the
  problem minimize builds (compiled once), of the wall time between consecutive history records
  — i.e. exactly minimize's iterations, without its once-per-call setup. The median filters
  the scheduler noise of a loaded machine.
* jax: `step = jax.jit(lambda x: x - jnp.linalg.solve(jax.hessian(f)(x), jax.grad(f)(x)))`, the
  same objective written in jax.numpy; time per call (block_until_ready), median of --repeat;
  "host" is the same step called on a numpy array and converted back to numpy, as a Python-driven
  loop (which has to look at the iterate to decide when to stop) pays.
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

def time_relayish(f, x0, args, hessian, repeat):
    from relayish.optim.methods import Monitor, run_newton
    from relayish.optim.problem import RelayishProblem, flat_objective
    stamps = []
    start = time.perf_counter()
    res = rl.optim.minimize(f, x0, method="newton", backend="jax", args=args, hessian=hessian,
                            callback=lambda e: stamps.append(time.perf_counter()))
    setup = stamps[0] - start
    obj, spec, x_flat = flat_objective(f, x0, args)
    problem = RelayishProblem(obj, x_flat.size, "newton", "jax", "cpu", hessian)
    problem.warm_up(x_flat)
    durations = []
    for _ in range(max(repeat // max(res.n_iter, 1), 5)):
        stamps = []
        run_newton(problem, x_flat, 1e-8, 100, Monitor(lambda e: stamps.append(time.perf_counter())))
        durations.extend(np.diff(stamps))
    calls = []
    for _ in range(repeat):            # the compiled evaluation alone, without the Python loop
        t = time.perf_counter()
        problem.value_grad_hess(x_flat)
        calls.append(time.perf_counter() - t)
    return res, float(np.median(durations)), setup, float(np.median(calls))


def time_jax_newton(f_jax, x0, repeat):
    step = jax.jit(lambda x: x - jnp.linalg.solve(jax.hessian(f_jax)(x), jax.grad(f_jax)(x)))
    x = jnp.asarray(x0)
    t = time.perf_counter()
    step(x).block_until_ready()
    compile_s = time.perf_counter() - t
    times, host = [], []
    for _ in range(repeat):
        t = time.perf_counter()
        step(x).block_until_ready()
        times.append(time.perf_counter() - t)
        t = time.perf_counter()
        np.asarray(step(x0))
        host.append(time.perf_counter() - t)
    return float(np.median(times)), float(np.median(host)), compile_s


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
    print(f"jax {jax.__version__} on {jax.devices()[0].platform}; numpy {np.__version__}")
    for make in (rosenbrock_problem, logistic_problem):
        name, f, f_jax, numpy, x0, fargs = make()
        print(f"\n== {name} ==")
        jax_iter, jax_host, jax_compile = time_jax_newton(f_jax, x0, args.repeat)
        print(f"  jax hand-written Newton step (jit, hessian + solve): {jax_iter * 1e6:9.1f} us/iter"
              f"   (host arrays in/out: {jax_host * 1e6:.1f} us; compile {jax_compile:.2f} s)")
        for mode in modes:
            res, per_iter, setup, call = time_relayish(f, x0, fargs, mode, args.repeat)
            print(f"  relayish minimize newton, {mode:7s} Hessian:        {per_iter * 1e6:9.1f} us/iter"
                  f"   ratio {per_iter / jax_iter:5.2f}x (vs host {per_iter / jax_host:4.2f}x)"
                  f"   ({res.n_iter} iterations, converged={res.converged}; AD + compile "
                  f"{setup:.2f} s)")
            print(f"      its compiled (f, g, H, direction) evaluation alone: {call * 1e6:9.1f} us"
                  f"   ratio {call / jax_host:5.2f}x vs the host-array jax step")
        print("  iterations to convergence:")
        for method, (nit, ok, gn) in relayish_counts(f, x0, fargs).items():
            print(f"    relayish {method:10s} {nit:4d}  converged={ok}  |grad| {gn:.1e}")
        for method, (nit, ok, gn) in scipy_counts(numpy, x0, fargs).items():
            print(f"    scipy    {method:10s} {nit:4d}  success={ok}    |grad| {gn:.1e}")


if __name__ == "__main__":
    main()
