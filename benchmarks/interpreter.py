"""The interpreter's overhead per evaluated IR node, against the same computation in numpy.

    python benchmarks/interpreter.py [--nodes 3000] [--size 8] [--repeat 7]

Three programs, each measured in this one run (best of --repeat, after a warm-up call that
compiles):
  1. a let-chain of elementwise ops on small float64 arrays, vs the same ops written as
     straight-line numpy code;
  2. the reverse-AD shape: per op a ref, a backpropagator closure written into a ref and called
     at the end (refs + closures + small ops), vs the same written with Python closures and
     lists as cells;
  3. IR calls: sum of 1..n by non-tail recursion, vs a Python recursive function.
Prints time per node (or per call) and the ratio interpreter / numpy. Times are the best
process (CPU) time of --repeat runs.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import relayish as rl
from timing import best_of
from relayish.ir.visitor import build_let_chain

_UNARY = ["tanh", "sin", "exp", "negative"]
_BINARY = ["add", "multiply", "subtract", "maximum"]


def let_chain_program(n, size):
    """A let-chain of n elementwise ops; each reads one or two recent values (bounded growth)."""
    rng = np.random.default_rng(0)
    x = rl.var("x", shape=(size,), dtype="float64")
    scale = rl.const(np.full(size, 0.5), "float64")
    exprs, lines, impl_lines, bindings = [x], [], [], []
    names = ["x"]
    for k in range(n):
        v = rl.Var(f"v{k}")
        i = len(exprs) - 1 - int(rng.integers(0, min(len(exprs), 4)))
        if k % 2 == 0:
            op = _UNARY[(k // 2) % len(_UNARY)]
            if op == "exp":                    # keep values bounded: exp(tanh(.)) style
                op = "tanh"
            bindings.append((v, rl.get_op(op)(exprs[i])))
            lines.append(f"{v.name_hint} = np.{op}({names[i]})")
            impl_lines.append(f"{v.name_hint} = ops[{op!r}](np, {names[i]})")
        else:
            op = _BINARY[(k // 2) % len(_BINARY)]
            bindings.append((v, rl.get_op(op)(exprs[i], scale)))
            lines.append(f"{v.name_hint} = np.{op}({names[i]}, scale)")
            impl_lines.append(f"{v.name_hint} = ops[{op!r}](np, {names[i]}, scale)")
        exprs.append(v)
        names.append(v.name_hint)
    func = rl.Function([x], build_let_chain(bindings, rl.sum(exprs[-1])))
    source = "def direct(x, scale):\n" + "".join(f"    {line}\n" for line in lines)
    source += f"    return np.asarray(np.sum({names[-1]}))\n"
    # the same calls through the registered op impls (what the interpreter must call)
    source += "def via_impls(x, scale):\n" + "".join(f"    {line}\n" for line in impl_lines)
    source += f"    return np.asarray(np.sum({names[-1]}))\n"
    env = {"np": np, "ops": {name: rl.get_op(name).impl for name in _UNARY + _BINARY}}
    exec(compile(source, "<direct numpy>", "exec"), env)   # straight-line numpy, no dispatch
    direct, via_impls = env["direct"], env["via_impls"]
    half = np.full(size, 0.5)
    return func, (lambda a: direct(a, half)), (lambda a: via_impls(a, half)), n + 1


def ad_shaped_program(n, size):
    """Per op: z = op(..); zr = ref(zeros_like z); old = !bp; bp := fn() {.. zr ..; old()}."""
    x = rl.var("x", shape=(size,), dtype="float64")
    bp, acc = rl.Var("bp"), rl.Var("acc")
    steps = [(bp, rl.RefCreate(rl.Function([], rl.Tuple([])))),
             (acc, rl.RefCreate(rl.zeros_like(x)))]
    cur = x
    for k in range(n):
        z, zr, old, u, w, g = (rl.Var(f"{s}{k}") for s in ("z", "zr", "old", "u", "w", "g"))
        bp_body = rl.Let(g, rl.RefRead(zr) * cur,
                         rl.Let(w, rl.RefWrite(acc, rl.RefRead(acc) + g), old()))
        steps += [(z, rl.tanh(cur)), (zr, rl.RefCreate(rl.ones_like(z))),
                  (old, rl.RefRead(bp)), (u, rl.RefWrite(bp, rl.Function([], bp_body)))]
        cur = z
    done = rl.Var("done")
    steps.append((done, rl.Call(rl.RefRead(bp), [])))
    func = rl.Function([x], build_let_chain(steps, rl.RefRead(acc)))
    # nodes evaluated: forward 2 + per op (tanh, ones_like, ref, !bp, fn, :=) = 6, backward per
    # op (!zr, *, !acc, +, :=, call) = 6, plus the final call and read
    nodes = 2 + 12 * n + 3

    def direct(a):
        bp_cell = [lambda: ()]
        acc_cell = [np.zeros_like(a)]
        cur_v = a
        for _ in range(n):
            z_v = np.tanh(cur_v)
            zr_cell = [np.ones_like(z_v)]
            old_fn = bp_cell[0]

            def back(zr_cell=zr_cell, cur_v=cur_v, old_fn=old_fn):
                g_v = zr_cell[0] * cur_v
                acc_cell[0] = acc_cell[0] + g_v
                return old_fn()
            bp_cell[0] = back
            cur_v = z_v
        bp_cell[0]()
        return acc_cell[0]
    return func, direct, nodes


def recursion_program(n):
    mod = rl.Module()
    s = rl.GlobalVar("sum_to")
    k = rl.var("k", dtype="int64")
    mod[s] = rl.Function([k], rl.If(rl.equal(k, rl.const(0, "int64")), rl.const(0, "int64"),
                                    k + s(k - rl.const(1, "int64"))))
    m = rl.var("m", dtype="int64")
    mod["main"] = rl.Function([m], s(m))
    one, zero = np.asarray(1, "int64"), np.asarray(0, "int64")

    def direct(v):
        if np.equal(v, zero):
            return zero
        return np.add(v, direct(np.subtract(v, one)))
    return mod, direct


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--nodes", type=int, default=3000)
    ap.add_argument("--size", type=int, default=8)
    ap.add_argument("--repeat", type=int, default=7)
    ap.add_argument("--depth", type=int, default=800)
    args = ap.parse_args(argv)
    a = np.linspace(-1.0, 1.0, args.size)
    print(f"relayish interpreter overhead (numpy {np.__version__}, Python {sys.version.split()[0]})")

    func, direct, via_impls, nodes = let_chain_program(args.nodes, args.size)
    t0 = time.perf_counter()
    out = rl.evaluate(func, a)               # warm-up: type inference + compilation
    first = time.perf_counter() - t0
    np.testing.assert_allclose(out, direct(a), rtol=1e-12)
    t_int = best_of(lambda: rl.evaluate(func, a), args.repeat)
    t_np = best_of(lambda: direct(a), args.repeat)
    t_impl = best_of(lambda: via_impls(a), args.repeat)
    print(f"1. let-chain of {args.nodes} elementwise ops on float64[{args.size}]:")
    print(f"   first call (infer + compile + run) {first * 1e3:8.1f} ms")
    print(f"   interpreter {t_int / nodes * 1e6:6.2f} us/node   numpy {t_np / nodes * 1e6:6.2f} us/op"
          f"   ratio {t_int / t_np:5.2f}x")
    print(f"   (straight-line calls of the registered op impls: {t_impl / nodes * 1e6:6.2f} us/op, "
          f"ratio to numpy {t_impl / t_np:5.2f}x; interpreter / impls {t_int / t_impl:5.2f}x)")

    n_ad = max(args.nodes // 6, 1)
    func, direct, nodes = ad_shaped_program(n_ad, args.size)
    out = rl.evaluate(func, a)
    np.testing.assert_allclose(out, direct(a), rtol=1e-12)
    t_int = best_of(lambda: rl.evaluate(func, a), args.repeat)
    t_py = best_of(lambda: direct(a), args.repeat)
    print(f"2. reverse-AD shape, {n_ad} ops with refs and backpropagator closures ({nodes} nodes):")
    print(f"   interpreter {t_int / nodes * 1e6:6.2f} us/node   Python+numpy {t_py / nodes * 1e6:6.2f}"
          f" us/node   ratio {t_int / t_py:5.2f}x")

    mod, direct = recursion_program(args.depth)
    d = np.asarray(args.depth, "int64")
    assert rl.evaluate(mod, d) == direct(d)
    t_int = best_of(lambda: rl.evaluate(mod, d), args.repeat)
    t_py = best_of(lambda: direct(d), args.repeat)
    print(f"3. non-tail recursion sum_to({args.depth}) (3 ops + 1 IR call per level):")
    print(f"   interpreter {t_int / args.depth * 1e6:6.2f} us/level   Python+numpy "
          f"{t_py / args.depth * 1e6:6.2f} us/level   ratio {t_int / t_py:5.2f}x")


if __name__ == "__main__":
    main()
