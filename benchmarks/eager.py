"""Define-by-run (relayish/eager/, issue 15): a recorded training loop against PyTorch eager,
jax eager and jax.jit, in one process, interleaved, every library on one thread.

    python benchmarks/eager.py [--steps 1000] [--memory-steps 10000] [--quick] [--sync]

1. An MLP (64 x 8 inputs, 32 tanh units, 1 output, mean squared error; and a larger one,
   256 x 64 -> 256 -> 1) trained by SGD, the same step written five ways: relayish eager
   (record, re.grad, update under re.no_grad, float(loss) each step), relayish PyTorch
   style (loss.backward(), `p -= lr * p.grad` under re.no_grad), PyTorch eager
   (loss.backward(), update under torch.no_grad, loss.item()), jax eager (jax.value_and_grad,
   no jit) and jax.jit of the whole step. The steps run in rounds of --block steps, the
   loops taking turns, so a slow phase of the shared machine falls on all of them (jax eager
   in a phase of its own after them: see `measured`); the figure is the median over rounds
   of the CPU time per step (process time, all threads of this process).
2. A small RNN (tanh cell, 16 units, 4 inputs) over sequences whose length is drawn from
   4..11 each step (a Python loop over the time steps), trained the same four ways; jax.jit
   and relayish compile once per length.
   After each, the structural cache of relayish eager: runs, hits, misses, jax compiles, the
   hit rate, and what a new structure (an RNN length) costs once: building its gradient
   program, its first run (interpreted), its compile at the second sighting; for the RNN,
   beside jax.jit's compile of one length.
3. The recording overhead per op: recording 1,000 additions of two (8,) tensors without
   running them (the best of 20 rounds), beside PyTorch eager computing the same op.
4. Memory over a long loop: the bindings still pending, the recorded nodes alive, and the
   process's peak resident memory, every --memory-steps / 10 steps.
"""
from __future__ import annotations

import os

os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                                   "intra_op_parallelism_threads=1")
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import argparse  # noqa: E402
import gc  # noqa: E402
import resource  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

from relayish import eager as re  # noqa: E402
from relayish.eager.graph import Node  # noqa: E402

SIZES = {"small": (64, 8, 32), "large": (256, 64, 256)}
N, D, H = SIZES["small"]
LR = 0.05


def data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(N, D)).astype("float32")
    Y = np.sin(X.sum(axis=1, keepdims=True)).astype("float32")
    params = [(rng.normal(size=(D, H)) * 0.3).astype("float32"), np.zeros(H, "float32"),
              (rng.normal(size=(H, 1)) * 0.3).astype("float32"), np.zeros(1, "float32")]
    return X, Y, params


def relayish_loop():
    X0, Y0, p0 = data()
    X, Y = re.tensor(X0), re.tensor(Y0)
    params = [re.tensor(p) for p in p0]

    def step():
        nonlocal params
        w1, b1, w2, b2 = params
        h = re.tanh(X @ w1 + b1)
        loss = ((h @ w2 + b2 - Y) ** 2).mean()
        grads = re.grad(loss, wrt=params)
        with re.no_grad():
            params = [p - LR * g for p, g in zip(params, grads)]
        return float(loss)
    return step


def relayish_backward_loop():
    """The same step PyTorch style: leaves with requires_grad=True, loss.backward(), in-place
    updates under re.no_grad()."""
    X0, Y0, p0 = data()
    X, Y = re.tensor(X0), re.tensor(Y0)
    params = [re.tensor(p, requires_grad=True) for p in p0]

    def step():
        w1, b1, w2, b2 = params
        h = re.tanh(X @ w1 + b1)
        loss = ((h @ w2 + b2 - Y) ** 2).mean()
        loss.backward()
        with re.no_grad():
            for p in params:
                p -= LR * p.grad
                p.grad = None
        return float(loss)
    return step


def torch_loop():
    import torch
    torch.set_num_threads(1)
    X0, Y0, p0 = data()
    X, Y = torch.tensor(X0), torch.tensor(Y0)
    params = [torch.tensor(p, requires_grad=True) for p in p0]

    def step():
        w1, b1, w2, b2 = params
        h = torch.tanh(X @ w1 + b1)
        loss = ((h @ w2 + b2 - Y) ** 2).mean()
        loss.backward()
        with torch.no_grad():
            for p in params:
                p -= LR * p.grad
                p.grad = None
        return loss.item()
    return step


def _jax_parts():
    import jax
    import jax.numpy as jnp
    X0, Y0, p0 = data()
    X, Y = jnp.asarray(X0), jnp.asarray(Y0)

    def loss_fn(params):
        w1, b1, w2, b2 = params
        h = jnp.tanh(X @ w1 + b1)
        return ((h @ w2 + b2 - Y) ** 2).mean()

    def update(params):
        loss, grads = jax.value_and_grad(loss_fn)(params)
        return loss, [p - LR * g for p, g in zip(params, grads)]
    return jax, [jnp.asarray(p) for p in p0], update


def jax_eager_loop():
    jax, params, update = _jax_parts()

    def step():
        nonlocal params
        loss, params = update(params)
        return float(loss)
    return step


def jax_jit_loop():
    jax, params, update = _jax_parts()
    jitted = jax.jit(update)

    def step():
        nonlocal params
        loss, params = jitted(params)
        return float(loss)
    return step


def interleaved(loops, steps, block):
    """{name: median CPU seconds per step}, {name: last loss}: the loops take turns."""
    for step in loops.values():             # warm-up: compiles, caches
        for _ in range(5):
            step()
    per_step = {name: [] for name in loops}
    last = {}
    for _ in range(max(1, steps // block)):
        for name, step in loops.items():
            # each loop starts its round on a collected heap: a full collection that one
            # loop's garbage (jax eager makes a lot) made due is not timed in another's round
            gc.collect()
            t0 = time.process_time()
            for _ in range(block):
                last[name] = step()
            per_step[name].append((time.process_time() - t0) / block)
    return {name: statistics.median(t) for name, t in per_step.items()}, last


def measured(loops, steps, block):
    """`interleaved`, but jax eager in a phase of its own after the others: with jax's
    asynchronous CPU dispatch, thousands of tiny dispatched ops in a jax eager round slowed
    the jax-based loops of the rounds after it (small MLP: jax.jit 63-69 -> 81-93 us a step,
    relayish 102-107 -> 104-224; PyTorch unchanged; with --sync no effect), a cost of the
    neighbour, not of the loop measured."""
    fast = {name: step for name, step in loops.items() if name != "jax eager"}
    medians, last = interleaved(fast, steps, block)
    if "jax eager" in loops:
        m, l = interleaved({"jax eager": loops["jax eager"]}, steps, block)
        medians.update(m)
        last.update(l)
    return {name: medians[name] for name in loops}, {name: last[name] for name in loops}


def show(medians, last):
    base = medians["jax.jit"]
    for name, med in medians.items():
        print(f"   {name:18s} {med * 1e6:9.1f} us/step   {med / base:5.2f}x jax.jit   "
              f"final loss {last[name]:.6f}")


def training(steps, block):
    global N, D, H
    for size, dims in SIZES.items():
        N, D, H = dims
        re.clear_cache()
        loops = {"relayish eager": relayish_loop(), "relayish backward": relayish_backward_loop(),
                 "PyTorch eager": torch_loop(), "jax eager": jax_eager_loop(),
                 "jax.jit": jax_jit_loop()}
        print(f"1. MLP {size} ({N}x{D} -> {H} tanh -> 1), SGD, {steps} steps per library in "
              f"rounds of {block}; median CPU time per step")
        show(*measured(loops, steps, block))
        cache_rate(f"MLP {size}")
    N, D, H = SIZES["small"]


def rnn_data(seed=0):
    rng = np.random.default_rng(seed)
    lengths = rng.integers(4, 12, size=100_000)
    xs = rng.normal(size=(12, 4)).astype("float32")
    p0 = [(rng.normal(size=(4, 16)) * 0.3).astype("float32"),
          (rng.normal(size=(16, 16)) * 0.3).astype("float32"),
          (rng.normal(size=(16, 1)) * 0.3).astype("float32")]
    return lengths, xs, p0


def rnn_loops():
    import jax
    import jax.numpy as jnp
    import torch
    lengths, xs, p0 = rnn_data()
    target = np.float32(0.5)

    def relayish_rnn():
        params = [re.tensor(p) for p in p0]
        rows = [re.tensor(x[None, :]) for x in xs]
        k = iter(lengths)

        def step():
            nonlocal params
            wx, wh, wo = params
            h = re.tensor(np.zeros((1, 16), "float32"))
            for t in range(next(k)):
                h = re.tanh(rows[t] @ wx + h @ wh)
            loss = ((h @ wo - target) ** 2.0).sum()
            grads = re.grad(loss, wrt=params)
            with re.no_grad():
                params = [p - LR * g for p, g in zip(params, grads)]
            return float(loss)
        return step

    def torch_rnn():
        torch.set_num_threads(1)
        params = [torch.tensor(p, requires_grad=True) for p in p0]
        rows = [torch.tensor(x[None, :]) for x in xs]
        k = iter(lengths)

        def step():
            wx, wh, wo = params
            h = torch.zeros((1, 16))
            for t in range(next(k)):
                h = torch.tanh(rows[t] @ wx + h @ wh)
            loss = ((h @ wo - target) ** 2).sum()
            loss.backward()
            with torch.no_grad():
                for p in params:
                    p -= LR * p.grad
                    p.grad = None
            return loss.item()
        return step

    def jax_loss(params, n):
        wx, wh, wo = params
        h = jnp.zeros((1, 16), "float32")
        for t in range(n):
            h = jnp.tanh(jnp.asarray(xs[t][None, :]) @ wx + h @ wh)
        return ((h @ wo - target) ** 2).sum()

    def update(params, n):
        loss, grads = jax.value_and_grad(jax_loss)(params, n)
        return loss, [p - LR * g for p, g in zip(params, grads)]

    def jax_rnn(jit):
        params = [jnp.asarray(p) for p in p0]
        k = iter(lengths)
        fn = jax.jit(update, static_argnums=1) if jit else update

        def step():
            nonlocal params
            loss, params = fn(params, int(next(k)))
            return float(loss)
        return step
    def jit_compile_seconds():
        """What a new length costs jax.jit: tracing, lowering and XLA-compiling the step for
        each length, wall seconds per length (a new Python function each time: jax caches
        traces and compiled programs by the function jitted)."""
        params = [jnp.asarray(p) for p in p0]
        t0 = time.perf_counter()
        for n in range(4, 12):
            jax.jit(lambda ps, k: update(ps, k), static_argnums=1).lower(params, n).compile()
        return (time.perf_counter() - t0) / 8

    loops = {"relayish eager": relayish_rnn(), "PyTorch eager": torch_rnn(),
             "jax eager": jax_rnn(False), "jax.jit": jax_rnn(True)}
    return loops, jit_compile_seconds


def rnn(steps, block):
    re.clear_cache()
    loops, jit_compile_seconds = rnn_loops()
    print(f"2. RNN (16 tanh units, sequence length 4..11 drawn each step), SGD, {steps} steps "
          f"per library in rounds of {block}; median CPU time per step")
    show(*measured(loops, steps, block))
    cache_rate("RNN")
    print(f"   jax.jit: a new length costs {1e3 * jit_compile_seconds():.0f} ms (trace, lower, "
          f"XLA compile), wall time")


def recording_overhead(n=1000, rounds=20):
    a, b = re.tensor(np.ones(8, "float32")), re.tensor(np.ones(8, "float32"))
    best = float("inf")
    for _ in range(rounds):
        re.run()
        t0 = time.process_time()
        kept = [a + b for _ in range(n)]
        best = min(best, (time.process_time() - t0) / n)
        del kept
    re.run()
    import torch
    ta, tb = torch.ones(8), torch.ones(8)
    best_torch = float("inf")
    for _ in range(rounds):
        t0 = time.process_time()
        kept = [ta + tb for _ in range(n)]
        best_torch = min(best_torch, (time.process_time() - t0) / n)
    print(f"3. recording overhead: {best * 1e6:.2f} us per recorded op (a + b on (8,) tensors, "
          f"not run); PyTorch eager computes the same op in {best_torch * 1e6:.2f} us")


def cache_rate(what):
    s = re.stats()
    print(f"   structural cache ({what}): {s['runs']} runs, {s['hits']} hits, {s['misses']} "
          f"misses, {s['compiles']} jax compiles: hit rate {s['hit_rate']:.4f}")
    # what a new structure (an RNN length) costs once: its first sighting runs on the
    # interpreter after re.grad built its gradient program; its second compiles
    if s["misses"] and s["compiles"]:
        print(f"   a new structure costs {1e3 * s['gradient_s'] / s['misses']:.0f} ms (gradient "
              f"program) + {1e3 * s['interpret_s'] / s['misses']:.0f} ms (first run, "
              f"interpreted) + {1e3 * s['compile_s'] / s['compiles']:.0f} ms (second run: "
              f"optimize, trace, XLA compile), wall time")


def memory(steps):
    step = relayish_loop()
    print(f"4. memory over {steps} steps: pending bindings, recorded nodes alive, peak RSS")
    for i in range(1, steps + 1):
        step()
        if i % (steps // 10) == 0:
            gc.collect()
            nodes = sum(1 for o in gc.get_objects() if type(o) is Node)
            rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
            print(f"   step {i:6d}: pending {re.stats()['pending']:3d}   nodes alive "
                  f"{nodes:4d}   peak RSS {rss:7.1f} MiB")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--block", type=int, default=100)
    parser.add_argument("--memory-steps", type=int, default=10_000)
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--sync", action="store_true",
                        help="jax runs CPU programs in the calling thread (no async dispatch: "
                             "jax_cpu_enable_async_dispatch=False), for relayish and jax.jit")
    args = parser.parse_args()
    if args.sync:
        import jax
        jax.config.update("jax_cpu_enable_async_dispatch", False)
    if args.quick:
        args.steps, args.block, args.memory_steps = 200, 50, 1000
    training(args.steps, args.block)
    rnn(args.steps, args.block)
    recording_overhead()
    memory(args.memory_steps)


if __name__ == "__main__":
    main()
