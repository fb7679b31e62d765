"""Reverse-mode AD on the interpreter: cost of a gradient, and a recursive tree network against
HIPS autograd.

    python benchmarks/ad.py [--trees 30] [--hidden 8] [--repeat 5] [--seed 0]

1. Cost of a gradient relative to the function itself, both on the interpreter (compiled once,
   best CPU time of --repeat runs): an MLP-like let-chain, a closure-heavy program, and the tree
   network below.
2. The gradient (w.r.t. the weights) of a recursive tree network: at each internal node a tanh
   layer over the concatenation of the two children's vectors, over --trees random binary trees
   of 4 to 12 leaves, hidden size --hidden. relayish: one gradient program (rl.grad of the module
   whose @net recurses over a prelude Tree) evaluated per tree; autograd: autograd.grad of the
   same recursive Python function. Both give the same numbers (checked), and the times are
   printed side by side with their ratio.
"""
from __future__ import annotations

import argparse
import os
import sys

import numpy as np

import relayish as rl
from timing import best_of

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "examples"))
from tree_network import random_tree, to_value, tree_module  # noqa: E402

F = "float64"


# ---- the tree network (examples/tree_network.py) ---------------------------------------------

def autograd_tree_grad():
    import autograd
    import autograd.numpy as anp

    def net(W, b, t):
        if isinstance(t, tuple):
            return anp.tanh(anp.dot(W, anp.concatenate([net(W, b, t[0]), net(W, b, t[1])])) + b)
        return t

    def loss(W, b, t):
        h = net(W, b, t)
        return anp.sum(h * h)
    return autograd.grad(loss, argnum=(0, 1))


# ---- other programs for the gradient/function cost ratio ---------------------------------------

def mlp_chain(layers=20, width=16):
    x = rl.var("x", shape=(width,), dtype=F)
    rng = np.random.default_rng(1)
    sb = rl.ScopeBuilder()
    h = x
    for _ in range(layers):
        w = rl.const(rng.normal(size=(width, width)) / np.sqrt(width))
        h = sb.let("h", rl.tanh(rl.matmul(w, h)) * rl.const(0.9, F) + h * rl.const(0.1, F))
    sb.ret(rl.sum(h * h))
    return rl.Function([x], sb.get()), [rng.normal(size=width)]


def closure_program(n=30):
    """A chain of closures each capturing x and the previous one (higher-order code)."""
    x, y = rl.var("x", shape=(8,), dtype=F), rl.var("y", shape=(8,), dtype=F)
    sb = rl.ScopeBuilder()
    f = sb.let("f", rl.Function([y], rl.sin(y)))
    for _ in range(n):
        y2 = rl.var("y", shape=(8,), dtype=F)
        f = sb.let("f", rl.Function([y2], rl.tanh(f(y2) * x + y2)))
    sb.ret(rl.sum(f(x)))
    return rl.Function([x], sb.get()), [np.random.default_rng(2).normal(size=8)]


def ratio_row(name, f, g, args, repeat):
    rl.evaluate(f, *args)          # warm-up: type inference and compilation
    rl.evaluate(g, *args)
    tf = best_of(lambda: rl.evaluate(f, *args), repeat)
    tg = best_of(lambda: rl.evaluate(g, *args), repeat)
    print(f"  {name:<34} f {tf * 1e3:8.2f} ms   grad {tg * 1e3:8.2f} ms   grad/f {tg / tf:5.1f}x")
    return tg / tf


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", type=int, default=30)
    ap.add_argument("--hidden", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    H = args.hidden

    mod, p = tree_module(H)
    W, b = rng.normal(size=(H, 2 * H)) * 0.5, rng.normal(size=H) * 0.1
    trees = [random_tree(rng, int(rng.integers(4, 13)), H) for _ in range(args.trees)]
    values = [to_value(p, t) for t in trees]

    print("1. cost of a gradient relative to the function (interpreter, best of "
          f"{args.repeat}, CPU time)")
    f, fargs = mlp_chain()
    ratio_row("mlp let-chain (20 layers, 16 wide)", f, rl.grad(f), fargs, args.repeat)
    f, fargs = closure_program()
    ratio_row("closure chain (30 closures)", f, rl.grad(f), fargs, args.repeat)
    grad_mod = rl.grad(mod, argnums=(0, 1))

    def run_all_f():
        for v in values:
            rl.evaluate(mod, W, b, v)

    def run_all_g():
        return [rl.evaluate(grad_mod, W, b, v) for v in values]
    run_all_f()
    rl_grads = run_all_g()
    tf = best_of(run_all_f, args.repeat)
    trl = best_of(run_all_g, args.repeat)
    print(f"  {'tree network (' + str(args.trees) + ' trees)':<34} f {tf * 1e3:8.2f} ms   "
          f"grad {trl * 1e3:8.2f} ms   grad/f {trl / tf:5.1f}x")

    print(f"\n2. gradient of a recursive tree network, {args.trees} trees of 4-12 leaves, "
          f"hidden {H} (CPU time, best of {args.repeat})")
    ag = autograd_tree_grad()
    ag_grads = [ag(W, b, t) for t in trees]
    for (gw, gb), (aw, ab) in zip(rl_grads, ag_grads):
        np.testing.assert_allclose(gw, aw, rtol=1e-9, atol=1e-12)
        np.testing.assert_allclose(gb, ab, rtol=1e-9, atol=1e-12)
    tag = best_of(lambda: [ag(W, b, t) for t in trees], args.repeat)
    print(f"  relayish interpreter  {trl * 1e3:8.2f} ms   ({trl / args.trees * 1e3:.3f} ms/tree)")
    print(f"  HIPS autograd         {tag * 1e3:8.2f} ms   ({tag / args.trees * 1e3:.3f} ms/tree)")
    print(f"  autograd / relayish   {tag / trl:8.2f}x  (>1: relayish faster; gradients agree "
          "to 1e-9)")


if __name__ == "__main__":
    main()
