"""A small network as a list of closures: the objective uses closures and an ADT.

    python examples/layers.py [--method trust-ncg] [--backend jax|interpreter]

The variable is a prelude List of layers, each a (W, b) tuple. The objective maps every layer
to a closure `fn(h) { tanh(W h + b) }`, folds the list of closures over the input batch, and
measures the squared error to a target plus a small weight penalty:

    layers  : List[(Tensor[(3, 3)], Tensor[(3, 1)])]
    fns     = map(fn(p) { fn(h) { tanh(p.0 @ h + p.1) } }, layers)       // List[fn(..) -> ..]
    out     = foldl(fn(h, f) { f(h) }, X, fns)
    loss    = mean((out - Y)^2) + 1e-3 * foldl(fn(acc, p) { acc + sum(p.0 * p.0) }, 0, layers)

rl.optim.minimize differentiates through map, foldl (recursion over the list), the closures
and the match on Cons/Nil, and takes the Python list of (W, b) tuples as the starting point.
"""
import argparse

import numpy as np

import relayish as rl

F64 = "float64"
WIDTH, BATCH = 3, 8


def make_objective(X, Y, penalty=1e-3):
    mod = rl.Module()
    p = rl.Prelude(mod)
    mat, col = rl.TensorType((WIDTH, WIDTH), F64), rl.TensorType((WIDTH, 1), F64)
    batch = rl.TensorType((WIDTH, BATCH), F64)
    layer_t = rl.TupleType([mat, col])
    layers = rl.var("layers", type=rl.TypeCall(p.List, [layer_t]))

    q, h = rl.var("q", type=layer_t), rl.var("h", type=batch)
    as_closure = rl.Function([q], rl.Function(
        [h], rl.tanh(rl.matmul(rl.TupleGetItem(q, 0), h) + rl.TupleGetItem(q, 1))))

    f, h2 = rl.var("f", type=rl.FuncType([batch], batch)), rl.var("h", type=batch)
    apply_ = rl.Function([h2, f], f(h2))

    acc, q2 = rl.var("acc", dtype=F64), rl.var("q", type=layer_t)
    w = rl.TupleGetItem(q2, 0)
    add_penalty = rl.Function([acc, q2], acc + rl.sum(w * w))

    sb = rl.ScopeBuilder()
    fns = sb.let("fns", p.map(as_closure, layers))
    out = sb.let("out", p.foldl(apply_, rl.const(X), fns))
    err = sb.let("err", out - rl.const(Y))
    reg = sb.let("reg", p.foldl(add_penalty, rl.const(0.0, F64), layers))
    sb.ret(rl.mean(err * err) + rl.const(penalty, F64) * reg)
    mod["main"] = rl.Function([layers], sb.get())
    return mod


def make_data(seed=0, n_layers=2):
    rng = np.random.default_rng(seed)
    X = rng.standard_normal((WIDTH, BATCH))
    teacher = [(rng.standard_normal((WIDTH, WIDTH)), rng.standard_normal((WIDTH, 1)) * 0.1)
               for _ in range(n_layers)]
    Y = X
    for W, b in teacher:
        Y = np.tanh(W @ Y + b)
    start = [(np.eye(WIDTH) + 0.1 * rng.standard_normal((WIDTH, WIDTH)), np.zeros((WIDTH, 1)))
             for _ in range(n_layers)]
    return X, Y, start


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--backend", default="jax", choices=("jax", "interpreter"))
    parser.add_argument("--method", default="trust-ncg", choices=sorted(rl.optim.METHODS))
    parser.add_argument("--max-iter", type=int, default=200)
    args = parser.parse_args(argv)
    X, Y, start = make_data()
    mod = make_objective(X, Y)
    res = rl.optim.minimize(mod, start, method=args.method, backend=args.backend,
                            max_iter=args.max_iter, tol=1e-6, verbose=True)
    print(f"{res.method}: converged={res.converged} in {res.n_iter} iterations, "
          f"loss {res.fun:.3e}; the result is a list of {len(res.x)} (W, b) layers")
    return res


if __name__ == "__main__":
    main()
