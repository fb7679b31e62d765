"""Interoperation costs (docs/interop.md, notes/interop.md).

1. Steady training step inside jax.jit: an MLP and a scan RNN written in jax, imported with
   rl.from_jax and exported back with rl.to_jax (so the step's gradient is relayish's reverse
   mode), against the original jax function's step (jax's own AD). SGD, float32, one CPU
   thread (XLA's and the BLAS libraries' thread pools set to one thread, and the process
   pinned to one core: XLA's executor runs independent operations of a long straight-line
   program -- the unrolled RNN -- on a second thread, which on a loaded machine competes
   with the other processes and makes the ratio follow the load; --unpinned skips). The steps are
   timed in interleaved rounds (a batch of steps of each, in an order shuffled per round) in
   one process; printed: the median and the minimum per step, and the median of the
   per-round ratios relayish/jax (goal <= 1.05), which a loaded machine moves least.
2. Import time: rl.from_jax of jaxprs of growing length (a chain of elementwise equations),
   per 1,000 equations; and of the MLP and RNN.

    python benchmarks/interop.py [--quick] [--unpinned]
"""
import os

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                      "intra_op_parallelism_threads=1")
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

import relayish as rl  # noqa: E402


def mlp(params, x, y):
    (w1, b1), (w2, b2), (w3, b3) = params
    h = jnp.tanh(x @ w1 + b1)
    h = jnp.tanh(h @ w2 + b2)
    logits = h @ w3 + b3
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * y, axis=-1))


def rnn(params, xs, y):
    w, u, v = params

    def cell(h, x):
        h = jnp.tanh(h @ w + x @ u)
        return h, None
    h, _ = jax.lax.scan(cell, jnp.zeros((xs.shape[1], w.shape[0]), xs.dtype), xs)
    return jnp.mean((h @ v - y) ** 2)


def rnn_unrolled(params, xs, y):
    """rnn with the scan unrolled by a Python loop: the XLA program relayish's gradient of
    the imported scan compiles to (its trip count is a trace-time constant, so the
    recursion unrolls), written in jax -- the reference that separates the cost of unrolling
    from relayish's own."""
    w, u, v = params
    h = jnp.zeros((xs.shape[1], w.shape[0]), xs.dtype)
    for t in range(xs.shape[0]):
        h = jnp.tanh(h @ w + xs[t] @ u)
    return jnp.mean((h @ v - y) ** 2)


def _mlp_case(rng):
    d, hdim, k, n = 64, 128, 10, 64
    p = ((rng.normal(size=(d, hdim)) * 0.1, np.zeros(hdim)),
         (rng.normal(size=(hdim, hdim)) * 0.1, np.zeros(hdim)),
         (rng.normal(size=(hdim, k)) * 0.1, np.zeros(k)))
    x = rng.normal(size=(n, d))
    y = np.eye(k)[rng.integers(0, k, n)]
    return mlp, p, x, y


def _rnn_case(rng):
    t, n, d, hdim = 20, 16, 8, 32
    p = (rng.normal(size=(hdim, hdim)) * 0.2, rng.normal(size=(d, hdim)) * 0.2,
         rng.normal(size=(hdim, 1)) * 0.2)
    return rnn, p, rng.normal(size=(t, n, d)), rng.normal(size=(n, 1))


def _f32(tree):
    return jax.tree_util.tree_map(lambda a: jnp.asarray(a, jnp.float32), tree)


def _sgd_step(loss):
    @jax.jit
    def step(params, x, y):
        g = jax.grad(loss)(params, x, y)
        return jax.tree_util.tree_map(lambda p, d: p - 0.01 * d, params, g)
    return step


def _time(step, params, x, y, calls):
    p = params
    start = time.perf_counter()
    for _ in range(calls):
        p = step(p, x, y)
    jax.block_until_ready(p)
    return (time.perf_counter() - start) / calls


def compare(steps, args, rounds, calls, seed=0):
    """{name: per-step times} of jitted steps measured in interleaved rounds: each round times
    a batch of `calls` steps of every competitor, in an order shuffled per round, so that a
    burst of load from other processes falls on all of them alike."""
    order = list(steps)
    for step in steps.values():              # compile and warm
        _time(step, *args, 5)
    times = {k: [] for k in steps}
    rng = np.random.default_rng(seed)
    for _ in range(rounds):
        rng.shuffle(order)
        for k in order:
            times[k].append(_time(steps[k], *args, calls))
    return times


def summary(times, reference):
    """{name: (median, min, median of the per-round ratios to `reference`)}: the paired ratio
    is the robust one (a round's competitors saw the same load)."""
    ref = times[reference]
    return {k: (statistics.median(ts), min(ts),
                statistics.median(b / a for a, b in zip(ref, ts))) for k, ts in times.items()}


def steady_steps(rounds, calls):
    rng = np.random.default_rng(0)
    rows = []
    for name, case in (("MLP 64-128-128-10, batch 64", _mlp_case),
                       ("scan RNN T=20, hidden 32, batch 16", _rnn_case)):
        fn, params, x, y = case(rng)
        params, x, y = _f32(params), _f32(x), _f32(y)
        mod = rl.from_jax(fn, params, x, y)
        steps = {"jax": _sgd_step(fn), "relayish": _sgd_step(rl.to_jax(mod))}
        if fn is rnn:
            steps["jax unrolled"] = _sgd_step(rnn_unrolled)
        stats = summary(compare(steps, (params, x, y), rounds, calls), "jax")
        print(f"  {name} ({rounds} interleaved rounds of {calls} steps)", flush=True)
        for k, (med, low, ratio) in stats.items():
            rows.append((name, k, med, low, ratio))
            print(f"    {k:12s} median {med * 1e6:7.1f} us  min {low * 1e6:7.1f} us  "
                  f"paired ratio to jax {ratio:5.2f}  (ratio of mins {low / stats['jax'][1]:5.2f})",
                  flush=True)
    return rows


def _chain(n):
    def f(x):
        for k in range(n // 2):
            x = jnp.sin(x) * (1.0 + 1e-3 * k)
        return x.sum()
    return f


def import_times(sizes):
    x = np.ones(8, np.float32)
    for n in sizes:
        start = time.perf_counter()
        jaxpr_eqns = len(jax.make_jaxpr(_chain(n))(x).jaxpr.eqns)
        trace = time.perf_counter() - start
        start = time.perf_counter()
        rl.from_jax(_chain(n), x)
        total = time.perf_counter() - start
        print(f"  chain of {jaxpr_eqns:6d} equations: rl.from_jax {total:7.3f} s "
              f"({total / jaxpr_eqns * 1000:.3f} s per 1,000; jax.make_jaxpr alone "
              f"{trace / jaxpr_eqns * 1000:.3f} s per 1,000)", flush=True)
    rng = np.random.default_rng(0)
    for name, case in (("MLP", _mlp_case), ("scan RNN", _rnn_case)):
        fn, params, x, y = case(rng)
        start = time.perf_counter()
        rl.from_jax(fn, *_f32((params, x, y)))
        print(f"  {name}: {time.perf_counter() - start:.3f} s", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--unpinned", action="store_true")
    args = parser.parse_args()
    if not args.unpinned and hasattr(os, "sched_setaffinity"):
        core = max(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {core})      # every thread of the process on one core
        print(f"pinned to core {core}")
    print("steady SGD step inside jax.jit (float32, one CPU thread; interleaved rounds)")
    steady_steps(rounds=10 if args.quick else 60, calls=20)
    print("rl.from_jax import time")
    import_times([1000] if args.quick else [1000, 4000, 16000])


if __name__ == "__main__":
    main()
