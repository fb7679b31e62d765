"""rl.vmap against jax.vmap: per-example gradients of an MLP, measured side by side.

    python benchmarks/vmap.py [--rounds 41] [--device cpu] [--xla-threads] [--trees 64]

Each case is value_and_grad of an MLP (tanh, squared error) for one example, batched over the
examples with the weights shared:
  relayish: rl.compile(rl.vmap(rl.value_and_grad(f, argnums=weights), in_axes=(None, ..., 0, 0)))
  jax:      jax.jit(jax.vmap(jax.value_and_grad(f, argnums=weights), in_axes=(None, ..., 0, 0)))
so the result is one loss and one gradient per example (per-example gradients, as in
differential privacy). Run time: rounds alternate between the two (order swapped every round),
each times a batch of calls blocked on at the end; medians per call and the median per-round
ratio (relayish / jax; benchmarks/jit.py's `side_by_side`). Compile time: the first call of a
fresh compiled function (relayish: AD is done once outside; trace + XLA compile), median of 3.
XLA:CPU runs with one thread (set before jax is imported; --xla-threads keeps XLA's pool).

--trees B adds the TreeLSTM (examples/treelstm.py, Tai dims): value_and_grad over B random
trees of 5-24 leaves (capacity 64) as one batched call, rl.vmap over stacked node tables,
against B calls of the same program compiled for one tree; per tree, interleaved rounds
(--tree-rounds, default 3), and each one's first call (trace + compile).
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
from jit import check_close, first_call_time, side_by_side  # noqa: E402

CASES = [("mlp-16-16-16-1", (16, 16, 16, 1), 64),
         ("mlp-64-128-128-10", (64, 128, 128, 10), 256)]


def mlp_relayish(sizes):
    """One example: (weights..., x[in], y[out]) -> squared error."""
    params = []
    for k, (m, n) in enumerate(zip(sizes[:-1], sizes[1:])):
        params += [rl.var(f"w{k}", shape=(m, n)), rl.var(f"b{k}", shape=(n,))]
    x, y = rl.var("x", shape=(sizes[0],)), rl.var("y", shape=(sizes[-1],))
    h = rl.reshape(x, (1, sizes[0]))
    for k in range(len(sizes) - 1):
        h = rl.matmul(h, params[2 * k]) + params[2 * k + 1]
        if k < len(sizes) - 2:
            h = rl.tanh(h)
    err = rl.reshape(h, (sizes[-1],)) - y
    return rl.Function(params + [x, y], rl.sum(err * err)), len(params)


def inputs(sizes, batch, seed=0):
    rng = np.random.default_rng(seed)
    args = []
    for m, n in zip(sizes[:-1], sizes[1:]):
        args += [(rng.normal(size=(m, n)) / np.sqrt(m)).astype("float32"),
                 np.zeros(n, "float32")]
    return args + [rng.normal(size=(batch, sizes[0])).astype("float32"),
                   rng.normal(size=(batch, sizes[-1])).astype("float32")]


def case(name, sizes, batch, rounds, device):
    f, n_params = mlp_relayish(sizes)
    weights = tuple(range(n_params))
    axes = (None,) * n_params + (0, 0)
    vg = rl.vmap(rl.value_and_grad(f, argnums=weights), in_axes=axes)
    args = inputs(sizes, batch)

    def make_theirs():
        return jax.jit(jax.vmap(jax.value_and_grad(jax_mlp(len(sizes) - 1, "sum"), argnums=weights),
                                in_axes=axes))
    ours, theirs = rl.compile(vg, device=device), make_theirs()
    check_close(ours(*args), theirs(*args), 1e-4)
    run_ours, run_theirs, ratio = side_by_side(ours, theirs, args, rounds)
    comp_ours = first_call_time(lambda: rl.compile(vg, device=device), args)
    comp_theirs = first_call_time(make_theirs, args)
    return dict(case=name, batch=batch, ours=run_ours, theirs=run_theirs, ratio=ratio,
                comp_ours=comp_ours, comp_theirs=comp_theirs)


def trees_case(batch, rounds, device):
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                    "examples"))
    from treelstm import init_params, random_tree, to_value, treelstm_module
    mod, params = treelstm_module(), init_params(np.random.default_rng(0))
    rng = np.random.default_rng(1)
    trees = [to_value(mod, random_tree(rng, int(rng.integers(5, 25)), 1000))
             for _ in range(batch)]
    ys = rng.integers(5, size=batch).astype(np.int32)
    vg = rl.value_and_grad(mod, argnums=tuple(range(len(params))))
    capacity = {"nodes": 64}
    one = rl.compile(vg, device=device, capacity=capacity)
    batched = rl.compile(rl.vmap(vg, in_axes=(None,) * len(params) + (0, 0)), device=device,
                         capacity=capacity)

    def loop():
        for t, y in zip(trees, ys):
            out = one(*params, t, y)
        return jax.block_until_ready(out)

    def together():
        return jax.block_until_ready(batched(*params, trees, ys))
    firsts = []
    for run in (loop, together):
        t0 = time.perf_counter()
        run()
        firsts.append(time.perf_counter() - t0)
    a, b = [], []
    for k in range(rounds):
        for run, out in ((loop, a), (together, b))[::1 if k % 2 else -1]:
            t0 = time.perf_counter()
            run()
            out.append((time.perf_counter() - t0) / batch)
    return statistics.median(a), statistics.median(b), firsts


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--rounds", type=int, default=41)
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--xla-threads", action="store_true")
    parser.add_argument("--trees", type=int, default=0)
    parser.add_argument("--tree-rounds", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"jax {jax.__version__}, device {args.device}, "
          f"XLA threads {'pool' if args.xla_threads else 'one'}")
    print(f"{'case':<20} {'batch':>5} {'relayish us':>12} {'jax us':>9} {'ratio':>6} "
          f"{'compile s (rl / jax)':>21}")
    for name, sizes, batch in CASES:
        r = case(name, sizes, batch, args.rounds, args.device)
        print(f"{r['case']:<20} {r['batch']:>5} {r['ours'] * 1e6:>12.1f} "
              f"{r['theirs'] * 1e6:>9.1f} {r['ratio']:>6.3f} "
              f"{r['comp_ours']:>10.2f} / {r['comp_theirs']:.2f}")
    if args.trees:
        per_one, per_batched, (first_one, first_batched) = trees_case(
            args.trees, args.tree_rounds, args.device)
        print(f"treelstm value_and_grad, {args.trees} trees: one per call "
              f"{per_one * 1e3:.2f} ms/tree, batched {per_batched * 1e3:.2f} ms/tree "
              f"(ratio {per_batched / per_one:.2f}); first call {first_one:.1f} s / "
              f"{first_batched:.1f} s")


if __name__ == "__main__":
    main()
