"""What README's main job costs from a cold start, stage by stage, in one run:

    relayish minimize examples/rosenbrock.rly --x0 "[-1.2, 1.0]"

    python benchmarks/startup.py [--repeat 3]

Each column is a fresh Python process (the first call's costs are per process: imports, jax's
and XLA's initialization, AD, tracing, compilation), run `--repeat` times; the table shows
the median of each stage, CPU time (process time: all threads of the process, so that other
processes on the shared machine do not count) and wall time.

* relayish auto / interpreter / jax: `rl.optim.minimize(mod, [-1.2, 1.0], backend=...)`,
  method newton, no callback (as `relayish minimize --quiet`). Stages: import (`import
  relayish`), parse (the file), then the first minimize call, split into its AD (the
  derivations: gradient, Hessian or the jvp of the gradient), its compile (jax: building and
  tracing the compiled programs and the warm-up's XLA compilation; auto and interpreter: none)
  and the rest (iterations, flattening, type checks); then a second call from another x0
  (the problem cache reuses AD and compilation).
* jax's own: the same objective in jax.numpy, `jax.jit` of a hand-written Newton step
  `x - solve(jax.hessian(f)(x), jax.grad(f)(x))`, looped from Python until |grad| <= 1e-8
  (pure Newton: no line search, which this start does not need). Stages: import jax (x64
  enabled), AD + trace (`jit(step).lower(x0)`), compile (`.compile()`), the loop; the first
  minimize is their sum, the second a new loop with the compiled step.
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.join(HERE, os.pardir)
EXAMPLE = os.path.join(ROOT, "examples", "rosenbrock.rly")
X0, X0_SECOND = [-1.2, 1.0], [-1.0, 1.2]
COLUMNS = ("auto", "interpreter", "jax", "jax-own")
STAGES = ("import", "parse", "AD", "compile", "first minimize", "second minimize")


class Clock:
    """CPU and wall seconds spent in named stages (nested stages count in their parents)."""

    def __init__(self):
        self.spent = {}

    def stage(self, name):
        clock = self

        class Timer:
            def __enter__(self):
                self.cpu, self.wall = time.process_time(), time.perf_counter()

            def __exit__(self, *exc):
                cpu, wall = clock.spent.get(name, (0.0, 0.0))
                clock.spent[name] = (cpu + time.process_time() - self.cpu,
                                     wall + time.perf_counter() - self.wall)
        return Timer()

    def timed(self, name, fn):
        def wrapper(*args, **kwargs):
            with self.stage(name):
                return fn(*args, **kwargs)
        return wrapper


def relayish_child(backend):
    clock = Clock()
    with clock.stage("import"):
        import relayish as rl
    from relayish.optim import hessian, problem
    # the first call's AD and compilation, timed where minimize does them
    for name in ("gradient_program", "hessian_program", "hvp_program", "jvp_of_gradient"):
        setattr(hessian, name, clock.timed("AD", getattr(hessian, name)))
    hessian.batched_newton = clock.timed("compile", hessian.batched_newton)
    problem.RelayishProblem._run = clock.timed("compile", problem.RelayishProblem._run)
    problem.RelayishProblem.warm_up = clock.timed("compile", problem.RelayishProblem.warm_up)
    with clock.stage("parse"):
        with open(EXAMPLE) as fh:
            mod = rl.parse(fh.read())
    with clock.stage("first minimize"):
        first = rl.optim.minimize(mod, X0, backend=backend)
    with clock.stage("second minimize"):
        second = rl.optim.minimize(mod, X0_SECOND, backend=backend)
    assert first.converged and second.converged
    return clock.spent, {"backend": first.backend, "n_iter": first.n_iter,
                         "jax imported": "jax" in sys.modules}


def jax_child():
    clock = Clock()
    with clock.stage("import"):
        import jax
        jax.config.update("jax_enable_x64", True)
        import jax.numpy as jnp
        import numpy as np

    def f(x):
        return (1.0 - x[0]) ** 2 + 100.0 * (x[1] - x[0] * x[0]) ** 2

    def step(x):
        g = jax.grad(f)(x)
        return x - jnp.linalg.solve(jax.hessian(f)(x), g), jnp.sqrt(jnp.sum(g * g))

    def newton(compiled, x0):
        x = jnp.asarray(x0, dtype=jnp.float64)
        for k in range(100):
            x_next, gnorm = compiled(x)
            if float(gnorm) <= 1e-8:
                return np.asarray(x), k
            x = x_next
        raise AssertionError("jax Newton did not converge")

    with clock.stage("first minimize"):
        x0 = np.array(X0)
        with clock.stage("AD"):
            lowered = jax.jit(step).lower(x0)
        with clock.stage("compile"):
            compiled = lowered.compile()
        x, n_iter = newton(compiled, X0)
    with clock.stage("second minimize"):
        newton(compiled, X0_SECOND)
    assert np.allclose(x, 1.0)
    return clock.spent, {"backend": "jax.jit", "n_iter": n_iter, "jax imported": True}


def run_column(column):
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--child", column],
                         check=True, capture_output=True, text=True, cwd=ROOT)
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeat", type=int, default=3, help="fresh processes per column")
    parser.add_argument("--child", choices=COLUMNS, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        spent, info = jax_child() if args.child == "jax-own" else relayish_child(args.child)
        print(json.dumps({"spent": spent, "info": info}))
        return
    runs = {c: [] for c in COLUMNS}
    for _ in range(args.repeat):          # interleaved, so drifting load hits all columns
        for column in COLUMNS:
            runs[column].append(run_column(column))
    print(f"README's main job (Rosenbrock 2-D, newton, from {X0}); median of {args.repeat} "
          f"fresh processes per column; CPU s / wall s")
    print(f"{'stage':<18}" + "".join(f"{c:>22}" for c in COLUMNS))
    for stage in STAGES:
        cells = []
        for column in COLUMNS:
            got = [r["spent"][stage] for r in runs[column] if stage in r["spent"]]
            if not got:
                cells.append(f"{'-':>22}")
                continue
            cpu = statistics.median(g[0] for g in got)
            wall = statistics.median(g[1] for g in got)
            cells.append(f"{cpu:>12.3f} / {wall:>7.3f}")
        print(f"{stage:<18}" + "".join(cells))
    totals = []
    for column in COLUMNS:
        cpu = statistics.median(sum(r["spent"][s][0] for s in ("import", "parse",
                                                                "first minimize")
                                    if s in r["spent"]) for r in runs[column])
        totals.append(f"{cpu:>22.3f}")
    print(f"{'import..1st (CPU)':<18}" + "".join(totals))
    for column in COLUMNS:
        info = runs[column][0]["info"]
        print(f"  {column}: ran on {info['backend']}, {info['n_iter']} iterations, jax imported: "
              f"{info['jax imported']}")
    print("AD and compile are parts of the first minimize (relayish) or of jax's first loop;"
          " '-' = not done.")


if __name__ == "__main__":
    main()
