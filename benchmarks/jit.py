"""relayish's jax backend against jax itself, measured side by side in one process.

    python benchmarks/jit.py [--rounds 61] [--device cpu] [--sync-dispatch] [--xla-threads]

For each case the same function is written once in relayish and once in jax:
  * mlp-small: value_and_grad of an MLP 16-16-16-1 (tanh, mean squared error), batch 8, float32
  * mlp-large: the same for 256-256-256-256-10, batch 64
  * rosenbrock-32: the Hessian of the 32-dimensional Rosenbrock function, float64
relayish: rl.compile(rl.value_and_grad(f, argnums=params)) / rl.compile(rl.hessian(f));
jax: jax.jit(jax.value_and_grad(f, argnums=params)) / jax.jit(jax.hessian(f)).
Run time: rounds alternate between the two (interleaved, order swapped every round), each round
times a batch of calls (results blocked on); medians per call and the median per-round ratio. Compile time: the first call of a fresh
compiled function (trace + XLA compile), median of a few fresh compilations each.

Device-resident (the Hessian, issue 16): the input is put on the device once (jax.device_put)
and every call is blocked on (`block_until_ready`), so a figure is the latency of one call
without the transfer from numpy; relayish's `run` and its bare `jax_function()` against
jax.jit(jax.hessian(f)), interleaved, median and minimum per call and the median per-round ratio.
XLA:CPU runs with one thread (XLA_FLAGS=--xla_cpu_multi_thread_eigen=false
intra_op_parallelism_threads=1, set before jax is imported; --xla-threads keeps XLA's pool):
with its pool the figures swing with the machine's load. --sync-dispatch runs each call on the
calling thread (jax_cpu_enable_async_dispatch off), which removes the thread hand-off from
the latency and leaves the compiled program's own time.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

if __name__ == "__main__" and "--xla-threads" not in sys.argv:   # before jax is imported
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_cpu_multi_thread_eigen=false"
                               " intra_op_parallelism_threads=1").strip()

import jax  # noqa: E402  (after XLA_FLAGS)
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

import relayish as rl  # noqa: E402
from models import jax_mlp  # noqa: E402


# ---- the functions, in relayish and in jax ----------------------------------------------------

def mlp_relayish(sizes, batch, dtype="float32"):
    params = []
    for k, (m, n) in enumerate(zip(sizes[:-1], sizes[1:])):
        params.append(rl.var(f"w{k}", shape=(m, n), dtype=dtype))
        params.append(rl.var(f"b{k}", shape=(n,), dtype=dtype))
    x = rl.var("x", shape=(batch, sizes[0]), dtype=dtype)
    y = rl.var("y", shape=(batch, sizes[-1]), dtype=dtype)
    h = x
    for k in range(len(sizes) - 1):
        h = rl.matmul(h, params[2 * k]) + params[2 * k + 1]
        if k < len(sizes) - 2:
            h = rl.tanh(h)
    err = h - y
    f = rl.Function(params + [x, y], rl.mean(err * err))
    return f, len(params)


def mlp_inputs(sizes, batch, seed=0):
    rng = np.random.default_rng(seed)
    args = []
    for m, n in zip(sizes[:-1], sizes[1:]):
        args.append((rng.normal(size=(m, n)) / np.sqrt(m)).astype("float32"))
        args.append(np.zeros(n, "float32"))
    args.append(rng.normal(size=(batch, sizes[0])).astype("float32"))
    args.append(rng.normal(size=(batch, sizes[-1])).astype("float32"))
    return args


def rosenbrock_relayish(n):
    x = rl.var("x", shape=(n,), dtype="float64")
    head = rl.op.strided_slice(x, (0,), (n - 1,))     # x[:-1], as in the jax version
    tail = rl.op.strided_slice(x, (1,), (n,))         # x[1:]
    d = tail - head * head
    e = rl.const(1.0, "float64") - head
    return rl.Function([x], rl.sum(rl.const(100.0, "float64") * d * d + e * e))


def rosenbrock_jax(x):
    head, tail = x[:-1], x[1:]
    return jnp.sum(100.0 * (tail - head * head) ** 2 + (1.0 - head) ** 2)


# ---- timing ---------------------------------------------------------------------------------------

def block(out):
    jax.tree_util.tree_map(lambda a: a.block_until_ready() if hasattr(a, "block_until_ready")
                           else a, out)
    return out


def batch_time(fn, args, calls):
    t0 = time.perf_counter()
    for _ in range(calls):
        out = fn(*args)
    block(out)
    return (time.perf_counter() - t0) / calls


def side_by_side(ours, theirs, args, rounds, target_s=0.01):
    """Median time per call of each, and the median of the per-round ratios (ours/theirs).

    Rounds alternate the order (ours first, then theirs first), so drifting machine load hits
    both alike; the per-round ratio compares two batches run back to back.
    """
    per = batch_time(theirs, args, 3)
    calls = max(1, int(target_s / max(per, 1e-7)))
    a, b, ratios = [], [], []
    for k in range(rounds):
        if k % 2:
            tb, ta = batch_time(theirs, args, calls), batch_time(ours, args, calls)
        else:
            ta, tb = batch_time(ours, args, calls), batch_time(theirs, args, calls)
        a.append(ta)
        b.append(tb)
        ratios.append(ta / tb)
    return statistics.median(a), statistics.median(b), statistics.median(ratios)


def blocked_time(fn, arg, calls):
    """Seconds per call, each call blocked on before the next (latency, not throughput)."""
    t0 = time.perf_counter()
    for _ in range(calls):
        fn(arg).block_until_ready()
    return (time.perf_counter() - t0) / calls


def device_side_by_side(candidates, arg, rounds, calls=200):
    """{name: (median s, min s, median per-round ratio to the last candidate)}, interleaved."""
    names = list(candidates)
    times = {name: [] for name in names}
    for name in names:
        blocked_time(candidates[name], arg, 3)
    for k in range(rounds):
        for name in (names if k % 2 else names[::-1]):
            times[name].append(blocked_time(candidates[name], arg, calls))
    base = times[names[-1]]
    return {name: (statistics.median(t), min(t),
                   statistics.median([a / b for a, b in zip(t, base)]))
            for name, t in times.items()}


def first_call_time(make, args, repeats=3):
    times = []
    for _ in range(repeats):
        fn = make()
        t0 = time.perf_counter()
        block(fn(*args))
        times.append(time.perf_counter() - t0)
    return statistics.median(times)


def check_close(ours, theirs, rtol):
    flat_a = jax.tree_util.tree_leaves(ours)
    flat_b = jax.tree_util.tree_leaves(theirs)
    assert len(flat_a) == len(flat_b), (len(flat_a), len(flat_b))
    for x, y in zip(flat_a, flat_b):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=rtol, atol=rtol)


# ---- cases ------------------------------------------------------------------------------------------

def mlp_case(name, sizes, batch, rounds, device):
    f, n_params = mlp_relayish(sizes, batch)
    t0 = time.perf_counter()
    vg = rl.value_and_grad(f, argnums=tuple(range(n_params)))
    ad_time = time.perf_counter() - t0
    args = mlp_inputs(sizes, batch)
    jf = jax.value_and_grad(jax_mlp(len(sizes) - 1, "mean"), argnums=tuple(range(n_params)))
    ours = rl.compile(vg, device=device)
    theirs = jax.jit(jf)
    check_close(ours(*args), theirs(*args), 1e-4)
    run_ours, run_theirs, ratio = side_by_side(ours, theirs, args, rounds)
    comp_ours = first_call_time(lambda: rl.compile(vg, device=device), args)
    comp_theirs = first_call_time(lambda: jax.jit(jax.value_and_grad(
        jax_mlp(len(sizes) - 1, "mean"), argnums=tuple(range(n_params)))), args)
    return dict(case=name, ours=run_ours, theirs=run_theirs, ratio=ratio, comp_ours=comp_ours,
                comp_theirs=comp_theirs, ad=ad_time, target=1.05)


def rosenbrock_case(n, rounds, device):
    f = rosenbrock_relayish(n)
    t0 = time.perf_counter()
    h = rl.hessian(f)
    ad_time = time.perf_counter() - t0
    x = np.linspace(-1.0, 1.5, n)
    ours = rl.compile(h, device=device)

    def scoped(fn):
        def run(*args):
            with jax.enable_x64(True):   # float64 on the jax side too, without global config
                return fn(*args)
        return run
    with jax.enable_x64(True):
        theirs = scoped(jax.jit(jax.hessian(rosenbrock_jax)))
        check_close(ours(x), theirs(x), 1e-9)
    run_ours, run_theirs, ratio = side_by_side(ours, theirs, (x,), rounds)
    comp_ours = first_call_time(lambda: rl.compile(h, device=device), (x,))
    comp_theirs = first_call_time(lambda: scoped(jax.jit(jax.hessian(rosenbrock_jax))), (x,))
    with jax.enable_x64(True):
        x_dev = jax.device_put(x, ours.device)
    resident = device_side_by_side({"relayish run": ours, "relayish jax_function":
                                    scoped(ours.jax_function()), "jax": theirs}, x_dev, rounds)
    return dict(case=f"rosenbrock-{n} hessian", ours=run_ours, theirs=run_theirs, ratio=ratio,
                comp_ours=comp_ours, comp_theirs=comp_theirs, ad=ad_time, target=1.5,
                resident=resident)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=61)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--sync-dispatch", action="store_true",
                        help="run each XLA call on the calling thread (no async hand-off)")
    parser.add_argument("--xla-threads", action="store_true",
                        help="keep XLA:CPU's thread pool (default: one thread)")
    opts = parser.parse_args()
    if opts.sync_dispatch:
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    print(f"jax {jax.__version__} on {rl.compile(rl.Function([], rl.const(0.0)), device=opts.device).device}"
          f"; {opts.rounds} interleaved rounds, medians")
    rows = [mlp_case("mlp-small 16-16-16-1 b8 value_and_grad", (16, 16, 16, 1), 8, opts.rounds,
                     opts.device),
            mlp_case("mlp-large 256-256-256-256-10 b64 value_and_grad",
                     (256, 256, 256, 256, 10), 64, opts.rounds, opts.device),
            rosenbrock_case(32, opts.rounds, opts.device)]
    print(f"{'case':48s} {'relayish':>10s} {'jax':>10s} {'ratio':>6s} {'target':>6s}   "
          f"{'compile rl':>10s} {'compile jax':>11s} {'ratio':>6s}  {'AD':>7s}")
    for r in rows:
        print(f"{r['case']:48s} {r['ours'] * 1e6:8.1f}us {r['theirs'] * 1e6:8.1f}us "
              f"{r['ratio']:6.2f} {r['target']:6.2f}   "
              f"{r['comp_ours'] * 1e3:8.1f}ms {r['comp_theirs'] * 1e3:9.1f}ms "
              f"{r['comp_ours'] / r['comp_theirs']:6.2f}  {r['ad'] * 1e3:5.1f}ms")
    print("run time: median per call incl. argument transfer from numpy; ratio: median of the "
          "per-round ratios; compile: first call of a fresh function (trace + XLA), median of 3; "
          "AD: building the relayish gradient/Hessian program")
    dispatch = "sync" if opts.sync_dispatch else "async"
    threads = "XLA thread pool" if opts.xla_threads else "one XLA thread"
    for r in rows:
        if "resident" not in r:
            continue
        print(f"\n{r['case']}, device-resident input, each call blocked on ({dispatch} dispatch, "
              f"{threads}); target ratio 1.1")
        for name, (med, low, ratio) in r["resident"].items():
            print(f"  {name:24s} median {med * 1e6:8.2f}us  min {low * 1e6:8.2f}us  "
                  f"ratio {ratio:5.2f}")


if __name__ == "__main__":
    main()
