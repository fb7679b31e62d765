"""Interoperation costs (docs/interop.md, notes/interop.md).

1. Steady training step inside jax.jit: an MLP and a scan RNN written in jax, imported with
   rl.from_jax and exported back with rl.to_jax (so the step's gradient is relayish's reverse
   mode), against the original jax function's step (jax's own AD). SGD, float32, one CPU
   thread. The two steps alternate in one process, a median over rounds; the ratio
   relayish/jax is printed (goal <= 1.05).
2. Import time: rl.from_jax of jaxprs of growing length (a chain of elementwise equations),
   per 1,000 equations; and of the MLP and RNN.

    python benchmarks/interop.py [--quick]
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


def steady_steps(rounds, calls):
    rng = np.random.default_rng(0)
    rows = []
    for name, case in (("MLP 64-128-128-10, batch 64", _mlp_case),
                       ("scan RNN T=20, hidden 32, batch 16", _rnn_case)):
        fn, params, x, y = case(rng)
        params, x, y = _f32(params), _f32(x), _f32(y)
        theirs = _sgd_step(fn)
        mod = rl.from_jax(fn, params, x, y)
        # the RNN's gradient loop records rows: its buffers at the default capacity (1,024
        # steps) and at one near the scan's 20 steps
        variants = {"relayish": _sgd_step(rl.to_jax(mod)),
                    "relayish capacity 32": _sgd_step(rl.to_jax(mod, capacity={"steps": 32}))}
        if fn is mlp:
            del variants["relayish capacity 32"]
        for step in (theirs, *variants.values()):      # compile and warm
            _time(step, params, x, y, 3)
        times = {"jax": []} | {k: [] for k in variants}
        for _ in range(rounds):              # interleaved, so the load hits all alike
            times["jax"].append(_time(theirs, params, x, y, calls))
            for k, step in variants.items():
                times[k].append(_time(step, params, x, y, calls))
        a = statistics.median(times["jax"])
        print(f"  {name}: jax {a * 1e6:.1f} us", flush=True)
        for k in variants:
            b = statistics.median(times[k])
            rows.append((name, k, a, b))
            print(f"    {k:24s} {b * 1e6:8.1f} us   ratio to jax {b / a:5.2f}", flush=True)
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
    args = parser.parse_args()
    print("steady SGD step inside jax.jit (float32, one CPU thread; median of rounds)")
    steady_steps(rounds=3 if args.quick else 7, calls=50 if args.quick else 200)
    print("rl.from_jax import time")
    import_times([1000] if args.quick else [1000, 4000, 16000])


if __name__ == "__main__":
    main()
