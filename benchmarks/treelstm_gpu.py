"""The TreeLSTM gradient batched on a GPU (issue 17, section 2): rl.vmap of relayish's one
program over 256 trees per call, against PyTorch CUDA eager one tree at a time.

    python benchmarks/treelstm_gpu.py [--trees 1024] [--batch 256] [--rounds 5] [--device gpu]

The model, dimensions and data are benchmarks/treelstm.py's (examples/treelstm.py: embedding
300, hidden 150, vocabulary 1000, 5 classes, random binary trees of 5-40 leaves, float32);
value_and_grad of the loss w.r.t. all 7 parameters, per tree.

* relayish, batched: rl.compile(rl.vmap(rl.value_and_grad(@main), in_axes=(None,)*7 + (0, 0)),
  backend="jax", device=..., capacity={"nodes": 128}): ONE trace of the program for every tree
  shape; each call runs --batch trees of different shapes together (the fold's loop advances all
  of them at once: a step is one batched cell for every tree). The batches are encoded as node
  tables and put on the device ahead of the timed calls (StackedTables, as a data loader's
  prefetch would); the same calls with the host encoding included are timed too.
* relayish, one tree per call: the same program compiled for one tree (rl.compile(vg, ...)).
* PyTorch CUDA eager: the model written in PyTorch (benchmarks/treelstm.py's torch_runner on
  the device), loss.backward() per tree, gradients left on the device; the GPU is synchronized
  once at the end of the timed trees, so kernel launches overlap as they would in training.

Times are wall clock (the GPU's work is asynchronous), best of --rounds, per tree; the compile
time is the first call's. Before timing, the batched losses and per-tree gradients of the first
trees are checked against PyTorch's (relative error of each gradient's norm; XLA and PyTorch may
pick different float32 matmul algorithms on the GPU, so the tolerance is 1e-2).
"""
import argparse
import os
import sys
import time

import numpy as np

import relayish as rl

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "examples"))
from treelstm import (CLASSES, PARAMS, VOCAB, init_params, random_tree, to_value,  # noqa: E402
                      treelstm_module)
from models import torch_treelstm  # noqa: E402

ALL = tuple(range(len(PARAMS)))


def relayish_batched(mod, params, trees, ys, batch, device, capacity):
    """(run_encoded, run_with_host_encoding, compile_s): each runs the whole data set in
    batches of `batch` trees and returns the last batch's (losses, grads)."""
    import jax
    vg = rl.value_and_grad(mod, argnums=ALL)
    run = rl.compile(rl.vmap(vg, in_axes=(None,) * len(params) + (0, 0)), backend="jax",
                     device=device, capacity={"nodes": capacity})
    where = jax.devices(device)[0]
    ps = [jax.device_put(p, where) for p in params]
    values = [to_value(mod, t) for t in trees]
    starts = range(0, len(trees) - batch + 1, batch)
    encoded = []
    for s in starts:
        args = run.encode_batch(*params, values[s:s + batch], ys[s:s + batch])
        tables = args[len(params)]
        tables.leaves[:] = [jax.device_put(x, where) for x in tables.leaves]
        encoded.append((tables, jax.device_put(ys[s:s + batch], where)))

    def run_encoded():
        for tables, y in encoded:
            out = run(*ps, tables, y)
        return jax.block_until_ready(out)

    def run_host():
        for s in starts:
            out = run(*ps, values[s:s + batch], ys[s:s + batch])
        return jax.block_until_ready(out)

    t0 = time.perf_counter()
    jax.block_until_ready(run(*ps, *encoded[0]))
    compile_s = time.perf_counter() - t0
    run_encoded.trees = run_host.trees = len(starts) * batch
    run_encoded.traces = lambda: run.trace_count
    return run_encoded, run_host, compile_s


def relayish_one(mod, params, trees, ys, device, capacity):
    import jax
    vg = rl.value_and_grad(mod, argnums=ALL)
    run = rl.compile(vg, backend="jax", device=device, capacity={"nodes": capacity})
    where = jax.devices(device)[0]
    ps = [jax.device_put(p, where) for p in params]
    spec = run.node_tables()[len(params)]
    tables = [spec.encode(to_value(mod, t), capacity) for t in trees]

    def run_all():
        for table, y in zip(tables, ys):
            out = run(*ps, table, y)
        return jax.block_until_ready(out)
    run_all.trees = len(trees)
    t0 = time.perf_counter()
    jax.block_until_ready(run(*ps, tables[0], ys[0]))
    return run_all, time.perf_counter() - t0


def torch_cuda(params, trees, ys, device):
    """PyTorch eager on the device: run_all() does value_and_grad for every tree; `one(k)`
    gives tree k's (loss, grads) as numpy arrays, for the check."""
    import torch
    ps, step = torch_treelstm(params, device)

    def run_all():
        for tree, y in zip(trees, ys):
            step(tree, int(y))
        if device == "cuda":
            torch.cuda.synchronize()

    def one(k):
        loss = step(trees[k], int(ys[k]))
        return loss.detach().cpu().numpy(), [p.grad.cpu().numpy() for p in ps]
    run_all.trees = len(trees)
    return run_all, one


def check(batched_out, torch_one, n):
    """Relative error of each tree's loss and gradient norms against PyTorch's (asserted)."""
    losses, grads = batched_out
    worst = 0.0
    for k in range(n):
        loss, tgrads = torch_one(k)
        worst = max(worst, abs(float(losses[k]) - float(loss)) / max(abs(float(loss)), 1e-6))
        for g, tg in zip(grads, tgrads):
            err = np.linalg.norm(np.asarray(g[k]) - tg) / max(np.linalg.norm(tg), 1e-12)
            worst = max(worst, float(err))
    assert worst < 1e-2, f"relayish and PyTorch differ: worst relative error {worst:.2e}"
    return worst


def best_per_tree(run, rounds):
    best = float("inf")
    for _ in range(rounds):
        t0 = time.perf_counter()
        run()
        best = min(best, (time.perf_counter() - t0) / run.trees)
    return best


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=1024)
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--one-trees", type=int, default=64,
                        help="trees timed one per call (relayish and PyTorch)")
    parser.add_argument("--device", default="gpu", help="jax platform: gpu or cpu")
    parser.add_argument("--capacity", type=int, default=128)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    import jax
    import torch
    torch_device = "cuda" if args.device == "gpu" else "cpu"
    print(f"jax {jax.__version__} on {jax.devices(args.device)[0].device_kind}; torch "
          f"{torch.__version__} on "
          f"{torch.cuda.get_device_name() if torch_device == 'cuda' else 'cpu'}")
    rng = np.random.default_rng(args.seed)
    trees = [random_tree(rng, int(rng.integers(5, 41)), VOCAB) for _ in range(args.trees)]
    ys = rng.integers(CLASSES, size=args.trees).astype(np.int32)
    params = init_params(rng)
    mod = treelstm_module()

    batched, host, compile_s = relayish_batched(mod, params, trees, ys, args.batch,
                                                args.device, args.capacity)
    one, one_compile_s = relayish_one(mod, params, trees[:args.one_trees], ys[:args.one_trees],
                                      args.device, args.capacity)
    torch_all, torch_one = torch_cuda(params, trees[:args.one_trees], ys[:args.one_trees],
                                      torch_device)
    out = batched()
    last = len(trees) // args.batch * args.batch - args.batch   # the last batch's first tree
    _, torch_last = torch_cuda(params, trees[last:], ys[last:], torch_device)
    worst = check(out, torch_last, min(8, args.batch))

    runs = {f"relayish rl.vmap, {args.batch} trees per call": batched,
            f"  the same, host encoding in the call": host,
            "relayish, one tree per call": one,
            f"PyTorch {torch_device} eager, one tree at a time": torch_all}
    for run in runs.values():
        run()                                   # warm-up
    best = dict.fromkeys(runs, float("inf"))
    for _ in range(args.rounds):                # interleaved rounds
        for name, run in runs.items():
            best[name] = min(best[name], best_per_tree(run, 1))
    theirs = best[f"PyTorch {torch_device} eager, one tree at a time"]
    print(f"{args.trees} trees of 5-40 leaves, capacity {args.capacity} rows; value_and_grad "
          f"w.r.t. all 7 parameters; wall clock per tree, best of {args.rounds} rounds")
    for name, t in best.items():
        print(f"  {name:48s} {t * 1e3:8.3f} ms   {theirs / t:7.1f}x PyTorch")
    print(f"relayish batched: {batched.traces()} trace for every shape, first call "
          f"{compile_s:.1f} s (one tree per call: {one_compile_s:.1f} s); worst relative "
          f"difference from PyTorch {worst:.1e}")


if __name__ == "__main__":
    main()
