"""A recursive tree network: gradients through recursion over an algebraic data type.

    python examples/tree_network.py [--trees 5] [--hidden 4] [--seed 0]

@net(W, b, t) walks a prelude Tree of vectors: a leaf is its vector, a node is
tanh(W @ concat(net(left), net(right)) + b). @main(W, b, t) = sum(net(W, b, t)^2).
rl.grad differentiates @main, following the recursion, into one relayish program that is
evaluated per tree (trees of different shapes need no retracing). benchmarks/ad.py times it
against HIPS autograd, and tests/ad/test_against_jax.py checks it against jax.grad.
"""
import argparse

import numpy as np

import relayish as rl

F = "float64"


def tree_module(hidden):
    """(module with @net and @main, its prelude)."""
    mod = rl.Module()
    p = rl.Prelude(mod)
    vt = rl.TensorType((hidden,), F)
    tt = rl.TypeCall(p.Tree, [vt])
    net = rl.GlobalVar("net")

    def params():
        return (rl.var("W", shape=(hidden, 2 * hidden), dtype=F), rl.var("b", type=vt),
                rl.var("t", type=tt))
    W, b, t = params()
    leaf, left, right = rl.Var("leaf"), rl.Var("l"), rl.Var("r")
    mod[net] = rl.Function([W, b, t], rl.Match(t, [
        rl.Clause(rl.PatternConstructor(p.Leaf, [rl.PatternVar(leaf)]), leaf),
        rl.Clause(rl.PatternConstructor(p.Node, [rl.PatternVar(left), rl.PatternVar(right)]),
                  rl.tanh(rl.matmul(W, rl.concatenate([net(W, b, left), net(W, b, right)],
                                                      axis=0)) + b))]), vt)
    W, b, t = params()
    h = rl.Var("h")
    mod["main"] = rl.Function([W, b, t], rl.Let(h, net(W, b, t), rl.sum(h * h)))
    return mod, p


def random_tree(rng, leaves, hidden):
    """A random binary tree with `leaves` leaves, as nested Python pairs of vectors."""
    if leaves == 1:
        return rng.normal(size=hidden)
    k = int(rng.integers(1, leaves))
    return (random_tree(rng, k, hidden), random_tree(rng, leaves - k, hidden))


def to_value(p, tree):
    """The nested pairs as a relayish Tree value (Node/Leaf of the prelude p)."""
    if isinstance(tree, tuple):
        return rl.ConstructorValue(p.Node, [to_value(p, tree[0]), to_value(p, tree[1])])
    return rl.ConstructorValue(p.Leaf, [tree])


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=5)
    parser.add_argument("--hidden", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    mod, p = tree_module(args.hidden)
    W = rng.normal(size=(args.hidden, 2 * args.hidden)) * 0.5
    b = rng.normal(size=args.hidden) * 0.1
    grad_wb = rl.grad(mod, argnums=(0, 1))
    total_W = np.zeros_like(W)
    for k in range(args.trees):
        tree = random_tree(rng, int(rng.integers(2, 9)), args.hidden)
        loss = rl.evaluate(mod, W, b, to_value(p, tree))
        gW, gb = rl.evaluate(grad_wb, W, b, to_value(p, tree))
        total_W += gW
        print(f"tree {k}: loss {float(loss):.6f}  |dW| {np.linalg.norm(gW):.6f}  "
              f"|db| {np.linalg.norm(gb):.6f}")
    return total_W


if __name__ == "__main__":
    main()
