"""The optimizing passes (relayish/ir/passes/, issue 13): what they cost and what they remove.

    python benchmarks/passes.py [--quick] [--sizes 1000 10000 100000]

1. Cost of each pass against program size: a let-chain of n steps (`let %v = tanh(%u) * 0.5f
   + %u`, a reference written every 100 steps, every tenth step unused), at n = 10^3, 10^4,
   10^5 (--quick: 10^3, 10^4). Stages: the effect analysis (Effects), dead_code (eliminate),
   to_anf, from_anf (of to_anf's output, 3n bindings), and the passes cse and simplify called
   as users call them (a type check, and for cse to_anf and from_anf, included). CPU time
   (process time: other processes sharing the cores do not count) of one run, microseconds
   per step, and the growth exponent between sizes (the log-log slope: 1.0 is linear).
2. Size of AD output before and after dead-code elimination: `let`s as built (anywhere in the
   program, closures and globals included), operations (the lets of its A-normal form: every
   op call, tuple, projection, reference access and closure counts one, so nesting does not
   hide work) and lines of text, of rl.grad of `y ** 5` at orders 1..3 (order 4 without
   --quick), the gradient of a 2-layer MLP with weight parameters, and of benchmarks/ad.py's
   20-layer MLP chain; beside them jax.make_jaxpr's equation count of the same nested jax.grad
   (for `y ** 5`), the issue's yardstick. The optimized programs are evaluated and checked
   against the raw ones.
3. The same programs through `dead_code(simplify(cse(...)))` (rl.optimize with those passes),
   with the CPU time of the three passes; then the operations left by partial_eval and
   dead_code, and by partial_eval followed by cse, simplify and dead_code.
4. The same programs through `dead_code(partial_eval(inline(...)))`, with the passes' CPU time.
5. The same programs through all five
   (`dead_code(simplify(cse(dead_code(partial_eval(inline(...))))))`), with the passes' CPU time.
6. The default pipeline (rl.optimize(x), what the AD entry points run): its CPU time on the raw
   gradient of an n-step chain at the sizes of section 1 (past 20,000 lets only dead_code
   runs); the tree network's gradient (examples/tree_network.py) on the interpreter, raw
   and optimized, against HIPS autograd; jax trace + compile time of rl.hessian, raw and
   optimized.
7. Whether inline pays in the default pipeline: operations and lets of the raw AD output, of
   the pipeline without inline and with inline in front, the pipeline's CPU time (best of 5) and
   the interpreter's time for one run of its output (best of 5 batches), for y ** 5 at orders
   1..4, the 20-layer MLP, the tree network (examples/tree_network.py) and tests/ad's 30 nested
   closures; and a 20-layer MLP whose layer is a global, forward and gradient (inline is the
   only pass that inlines globals).
8. The default pipeline stage by stage (its passes, and the type checks it runs where a pass
   requires types no earlier pass kept) on the raw gradient of a chain of 10^3, 10^4 and 10^5
   lets: CPU time, microseconds per let, growth exponent (`--pipeline-cost`: this section only).
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np

import relayish as rl
from relayish.ir.expr import Let
from relayish.ir.passes.anf import from_anf_expr, to_anf_expr
from relayish.ir.passes.dead_code import eliminate
from relayish.ir.passes.effects import Effects
from relayish.ir.passes.uses import operands
from relayish.ir.visitor import build_let_chain

F = "float64"


def chain_program(n):
    x = rl.var("x", shape=(), dtype=F)
    r = rl.var("r", type=rl.RefType(rl.TensorType((), F)))
    bindings, prev = [(r, rl.RefCreate(x))], x
    for k in range(n):
        v = rl.var(f"v{k}", dtype=F)
        value = rl.tanh(prev) * rl.const(0.5, F) + prev
        bindings.append((v, value))
        if k % 10 == 9:                  # unused: dead code
            bindings.append((rl.var(f"d{k}", dtype=F), rl.exp(prev)))
        if k % 100 == 99:
            bindings.append((rl.Var(f"w{k}", None), rl.RefWrite(r, v)))   # ()
        prev = v
    return rl.Function([x], build_let_chain(bindings, rl.RefRead(r) + prev))


def _cpu(fn, *args):
    t0 = time.process_time()
    out = fn(*args)
    return time.process_time() - t0, out


def cost_table(sizes):
    stages = ["effects", "dead_code", "to_anf", "from_anf", "cse", "simplify", "inline",
              "partial_eval"]
    rows = {s: [] for s in stages}
    for n in sizes:
        func = chain_program(n)
        t, _ = _cpu(Effects, func)
        rows["effects"].append(t)
        t, _ = _cpu(eliminate, func)
        rows["dead_code"].append(t)
        t, anf = _cpu(to_anf_expr, func)
        rows["to_anf"].append(t)
        t, _ = _cpu(from_anf_expr, anf)
        rows["from_anf"].append(t)
        for name in ("cse", "simplify", "inline", "partial_eval"):   # type check included
            t, _ = _cpu(getattr(rl.passes, name), func)
            rows[name].append(t)
    print("1. pass cost (CPU seconds, one run; us per step; growth exponent between sizes)")
    print(f"{'stage':>10} " + " ".join(f"{n:>18,}" for n in sizes) + "   exponents")
    for s in stages:
        times = rows[s]
        cells = " ".join(f"{t:8.3f}s {1e6 * t / n:6.1f}us" for t, n in zip(times, sizes))
        slopes = [math.log(b / a) / math.log(m / n) if a > 0 and b > 0 else float("nan")
                  for a, b, n, m in zip(times, times[1:], sizes, sizes[1:])]
        print(f"{s:>10} {cells}   " + " ".join(f"{e:.2f}" for e in slopes))


def bindings(program) -> int:
    """The `let`s of a Function or Module, in every scope and global (each distinct node once)."""
    roots = list(program.functions.values()) if isinstance(program, rl.Module) else [program]
    seen, count, work = set(), 0, list(roots)
    while work:
        node = work.pop()
        if id(node) in seen:
            continue
        seen.add(id(node))
        count += isinstance(node, Let)
        work.extend(operands(node))
    return count


def lines(program) -> int:
    return len(rl.astext(program).splitlines())


def _power_grads(max_order):
    y = rl.var("y", shape=(), dtype=F)
    g = rl.Function([y], y ** rl.const(5.0, F))
    for k in range(1, max_order + 1):
        g = rl.grad(g, optimize=False)     # the raw transform: the passes are measured on it
        yield f"y**5 order {k}", g, (np.float64(0.7),), _jaxpr_equations(k)


def _jaxpr_equations(order):
    try:
        import jax
    except ImportError:                 # the bench extra is not installed
        return None
    jax.config.update("jax_enable_x64", True)
    f = lambda y: y ** 5                                            # noqa: E731
    for _ in range(order):
        f = jax.grad(f)
    return len(jax.make_jaxpr(f)(0.7).jaxpr.eqns)


def _mlp2():
    x = rl.var("x", shape=(4,), dtype=F)
    w1 = rl.var("w1", shape=(8, 4), dtype=F)
    w2 = rl.var("w2", shape=(1, 8), dtype=F)
    f = rl.Function([x, w1, w2], rl.sum(rl.matmul(w2, rl.tanh(rl.matmul(w1, x)))))
    rng = np.random.default_rng(0)
    args = (rng.normal(size=4), rng.normal(size=(8, 4)), rng.normal(size=(1, 8)))
    return "mlp 2 layers", rl.gradient(f, optimize=False), args, None


def _mlp20():
    from ad import mlp_chain
    f, args = mlp_chain()
    return "mlp 20 layers", rl.gradient(f, optimize=False), tuple(args), None


def _same(a, b):
    if isinstance(a, tuple):
        return all(_same(x, y) for x, y in zip(a, b)) and len(a) == len(b)
    return np.array_equal(np.asarray(a), np.asarray(b), equal_nan=True)


def size_table(max_order):
    print("\n2. AD output before and after dead_code: lets as built, operations (lets in A-normal"
          " form, where each op, tuple, projection, ref access and closure is one), lines of text")
    print(f"{'program':>15} {'lets':>11} {'operations':>13} {'lines':>13} {'jaxpr eqns':>11}")
    cases = list(_power_grads(max_order)) + [_mlp2(), _mlp20()]
    for name, g, args, eqns in cases:
        dce = rl.optimize(g, passes=[rl.passes.dead_code], check=True)
        assert _same(rl.evaluate(dce, *args), rl.evaluate(g, *args)), name
        ops = [bindings(rl.passes.to_anf(p)) for p in (g, dce)]
        print(f"{name:>15} {bindings(g):>5}->{bindings(dce):<5} {ops[0]:>6}->{ops[1]:<6} "
              f"{lines(g):>6}->{lines(dce):<6} {'' if eqns is None else eqns:>11}")


def pipeline_table(max_order):
    """Section 3: the same programs through cse, simplify and dead_code (issue 13), and the
    operations left when partial_eval runs first (alone with dead_code, then with the two)."""
    print("\n3. AD output before and after dead_code(simplify(cse(...))): lets, operations, lines;"
          "\n   then operations after partial_eval + dead_code, and after partial_eval, cse,"
          " simplify, dead_code")
    print(f"{'program':>15} {'lets':>11} {'operations':>13} {'lines':>13} {'jaxpr eqns':>11} "
          f"{'pass CPU s':>10} {'pe':>5} {'pe+cse+simp':>11}")
    passes = [rl.passes.CSE(bind=True), rl.passes.simplify, rl.passes.dead_code]
    cases = list(_power_grads(max_order)) + [_mlp2(), _mlp20()]
    for name, g, args, eqns in cases:
        t, out = _cpu(rl.optimize, g, passes)
        pe = rl.optimize(g, passes=[rl.passes.partial_eval, rl.passes.dead_code])
        full = rl.optimize(g, passes=[rl.passes.partial_eval] + passes)
        for p in (out, pe, full):
            assert _same(rl.evaluate(p, *args), rl.evaluate(g, *args)), name
        ops = [bindings(rl.passes.to_anf(p)) for p in (g, out, pe, full)]
        print(f"{name:>15} {bindings(g):>5}->{bindings(out):<5} {ops[0]:>6}->{ops[1]:<6} "
              f"{lines(g):>6}->{lines(out):<6} {'' if eqns is None else eqns:>11} {t:10.3f} "
              f"{ops[2]:>5} {ops[3]:>11}")


def pe_table(max_order):
    """Sections 4 and 5: the same programs through inline, partial_eval and dead_code, then also
    cse, simplify and dead_code (issue 13)."""
    pe = [rl.passes.inline, rl.passes.partial_eval, rl.passes.dead_code]
    every = pe + [rl.passes.CSE(bind=True), rl.passes.simplify, rl.passes.dead_code]
    for number, title, passes in (("4", "dead_code(partial_eval(inline(...)))", pe),
                                  ("5", "those, then cse, simplify, dead_code", every)):
        print(f"\n{number}. AD output before and after {title}: lets, operations, lines")
        print(f"{'program':>15} {'lets':>11} {'operations':>13} {'lines':>13} "
              f"{'jaxpr eqns':>11} {'pass CPU s':>10}")
        cases = list(_power_grads(max_order)) + [_mlp2(), _mlp20()]
        for name, g, args, eqns in cases:
            t, out = _cpu(rl.optimize, g, passes)
            assert _same(rl.evaluate(out, *args), rl.evaluate(g, *args)), name
            ops = [bindings(rl.passes.to_anf(p)) for p in (g, out)]
            print(f"{name:>15} {bindings(g):>5}->{bindings(out):<5} {ops[0]:>6}->{ops[1]:<6} "
                  f"{lines(g):>6}->{lines(out):<6} {'' if eqns is None else eqns:>11} "
                  f"{t:10.3f}")


def _grad_chain(n):
    """The raw gradient of an n-step chain `v = tanh(u) * 0.5 + u` (about 6n lets)."""
    x = rl.var("x", shape=(), dtype=F)
    steps, prev = [], x
    for k in range(n):
        v = rl.var(f"v{k}", dtype=F)
        steps.append((v, rl.tanh(prev) * rl.const(0.5, F) + prev))
        prev = v
    return rl.gradient(rl.Function([x], build_let_chain(steps, prev)), optimize=False)


def _tree_node_bindings(grad_mod):
    """{clause: (bindings, bindings of its closures)} of @net_ad in the tree network's gradient,
    in A-normal form (every op call, tuple, projection, reference access and closure one): the
    work per internal node (Node) and per leaf (Leaf), forward and backward."""
    def scope(e):
        n, fns = 0, []
        while isinstance(e, Let):
            n += 1
            if isinstance(e.value, rl.Function):
                fns.append(e.value)
            e = e.body
        return n, fns, e
    _, _, match = scope(to_anf_expr(grad_mod["net_ad"]).body)
    out = {}
    for clause in match.clauses:
        n, fns, _ = scope(clause.rhs)
        out[clause.lhs.constructor.name_hint] = (n, sum(scope(f.body)[0] for f in fns))
    return out


def default_pipeline_table(sizes, trees, hidden, repeat):
    """Section 6: the default pipeline (rl.optimize without passes, what the AD entry points
    run): its cost on AD output against size, the tree network's gradient against HIPS autograd,
    and jax trace + compile time of Hessians, raw against optimized."""
    from relayish.ir.passes.manager import count_lets, default_passes
    print("\n6. the default pipeline on the raw gradient of an n-step chain (CPU s)")
    print(f"{'n':>8} {'lets in':>9} {'lets out':>9} {'passes':>8} {'pipeline s':>11} "
          f"{'us/let':>7} {'AD s':>7}")
    for n in sizes:
        t_ad, g = _cpu(_grad_chain, n)
        lets = count_lets(g, 10 ** 9)
        full = default_passes(g) is rl.ir.passes.DEFAULT_PASSES
        t, out = _cpu(rl.optimize, g)
        x = np.float64(0.3)
        assert _same(rl.evaluate(out, x), rl.evaluate(g, x))
        print(f"{n:>8} {lets:>9} {count_lets(out, 10 ** 9):>9} {'full' if full else 'dce':>8} "
              f"{t:>11.2f} {t / lets * 1e6:>7.1f} {t_ad:>7.2f}")

    from ad import autograd_tree_grad       # ad.py puts examples/ on the path
    from timing import best_of
    from tree_network import random_tree, to_value, tree_module
    rng = np.random.default_rng(0)
    mod, p = tree_module(hidden)
    W, b = rng.normal(size=(hidden, 2 * hidden)) * 0.5, rng.normal(size=hidden) * 0.1
    shapes = [random_tree(rng, int(rng.integers(4, 13)), hidden) for _ in range(trees)]
    values = [to_value(p, t) for t in shapes]
    raw = rl.grad(mod, argnums=(0, 1), optimize=False)
    t_opt, opt = _cpu(rl.grad, mod, (0, 1))
    ag = autograd_tree_grad()
    for v, t in zip(values, shapes):
        for got, want in zip(rl.evaluate(opt, W, b, v), ag(W, b, t)):
            np.testing.assert_allclose(got, want, rtol=1e-9, atol=1e-12)
    times = {name: best_of(lambda: [rl.evaluate(g, W, b, v) for v in values], repeat)
             for name, g in (("raw", raw), ("optimized", opt))}
    times["autograd"] = best_of(lambda: [ag(W, b, t) for t in shapes], repeat)
    print(f"\n   tree network gradient, {trees} trees of 4-12 leaves, hidden {hidden} (best of "
          f"{repeat}; rl.grad with the pipeline: {t_opt:.2f} s)")
    for name, t in times.items():
        print(f"   {name:<10} {t * 1e3:8.2f} ms   {t / times['autograd']:5.2f}x autograd's time")
    for name, g in (("raw", raw), ("optimized", opt)):
        per = _tree_node_bindings(g)
        print(f"   {name:<10} @net_ad bindings (A-normal form) per internal node: "
              f"{per['Node'][0]} forward + {per['Node'][1]} in its backpropagator; per leaf: "
              f"{per['Leaf'][0] + per['Leaf'][1]}")

    try:
        import jax  # noqa: F401
    except ImportError:
        return
    print("\n   jax backend: trace + compile (first call) of rl.hessian, raw and optimized")
    for n in (4, 16):
        x = rl.var("x", shape=(n,), dtype=F)
        f = rl.Function([x], rl.sum(rl.tanh(x) * rl.tanh(x)) + rl.sum(x * x * x))
        arg = np.linspace(-1.0, 1.0, n)
        row = []
        for optimize in (False, True):
            h = rl.hessian(f, optimize=optimize)
            t0 = time.perf_counter()
            value = rl.compile(h, backend="jax")(arg)
            row.append((time.perf_counter() - t0, count_lets(h, 10 ** 9), np.asarray(value)))
        np.testing.assert_allclose(row[1][2], row[0][2], rtol=1e-12)
        print(f"   n = {n:>3}: raw {row[0][0]:6.2f} s ({row[0][1]} lets), optimized "
              f"{row[1][0]:6.2f} s ({row[1][1]} lets)")


def _layered_mlp(layers=20, width=16):
    """A 20-layer MLP whose layer is a global @layer, called from @main at every layer."""
    mod = rl.Module()
    w, h = rl.var("w", shape=(width, width), dtype=F), rl.var("h", shape=(width,), dtype=F)
    layer = rl.GlobalVar("layer")
    mod[layer] = rl.Function([w, h], rl.tanh(rl.matmul(w, h)) * rl.const(0.9, F)
                             + h * rl.const(0.1, F))
    x = rl.var("x", shape=(width,), dtype=F)
    rng = np.random.default_rng(1)
    sb, h = rl.ScopeBuilder(), x
    for _ in range(layers):
        weights = rl.const(rng.normal(size=(width, width)) / np.sqrt(width))
        h = sb.let("h", rl.Call(layer, [weights, h]))
    sb.ret(rl.sum(h * h))
    mod["main"] = rl.Function([x], sb.get())
    return mod, (rng.normal(size=width),)


def _inline_cases(max_order):
    for name, g, args, _ in _power_grads(max_order):
        yield name, g, args
    name, g, args, _ = _mlp20()
    yield name, g, args
    from tree_network import random_tree, to_value, tree_module   # ad.py put examples/ on the path
    rng = np.random.default_rng(0)
    mod, p = tree_module(8)
    W, b = rng.normal(size=(8, 16)) * 0.5, rng.normal(size=8) * 0.1
    tree = to_value(p, random_tree(rng, 8, 8))
    yield "tree network", rl.grad(mod, argnums=(0, 1), optimize=False), (W, b, tree)
    import os
    import sys
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir,
                                    "tests", "ad"))
    from test_nesting_cost import nested_fn
    yield "30 nested fns", rl.gradient(nested_fn(30), optimize=False), (np.float64(0.5),)
    mod, args = _layered_mlp()
    yield "@layer x20 fwd", mod, args
    yield "@layer x20 grad", rl.gradient(mod, optimize=False), args


def inline_table(max_order):
    """Section 7: the default pipeline without and with inline (in front)."""
    from timing import best_of
    without = [p for p in rl.ir.passes.DEFAULT_PASSES if p.name != "inline"]
    with_inline = [rl.passes.inline] + without
    print("\n7. inline in the default pipeline: operations / lets, pipeline CPU s, one run of the"
          " output on the interpreter (us)")
    print(f"{'program':>15} {'raw':>9} {'without inline':>24} {'with inline':>24}")
    for name, g, args in _inline_cases(max_order):
        want = rl.evaluate(g, *args)
        cells = []
        for passes in (without, with_inline):
            out = rl.optimize(g, passes=passes)
            t = best_of(lambda: rl.optimize(g, passes=passes), 5)
            run = rl.compile(out, backend="interpreter")
            np.testing.assert_allclose(np.concatenate([np.ravel(v) for v in _leaves(run(*args))]),
                                       np.concatenate([np.ravel(v) for v in _leaves(want)]),
                                       rtol=1e-12)
            batch = 20
            us = best_of(lambda: [run(*args) for _ in range(batch)], 5) / batch * 1e6
            main = out["main"] if isinstance(out, rl.Module) else out
            cells.append(f"{bindings(rl.passes.to_anf(main)):>5} / {bindings(main):<4} "
                         f"{t:5.2f} {us:6.0f}")
        main = g["main"] if isinstance(g, rl.Module) else g
        print(f"{name:>15} {bindings(rl.passes.to_anf(main)):>4} / {bindings(main):<3} "
              f"{cells[0]:>24} {cells[1]:>24}")


def _leaves(value):
    if isinstance(value, tuple):
        return [leaf for v in value for leaf in _leaves(v)]
    return [np.asarray(value, dtype=float)]


def pipeline_cost_table(sizes):
    """Section 8: what each stage of the default pipeline costs on AD output (the raw gradient
    of a chain, `sizes` in lets), run as rl.optimize runs it: a type check only where a pass
    requires types that no earlier pass kept. CPU seconds of one run, microseconds per let of
    the pipeline's input (so the rows add up), and the growth exponent between sizes."""
    from relayish.ir.passes.base import TYPED
    from relayish.ir.passes.manager import DEFAULT_PASSES, count_lets
    from relayish.ir.typecheck import infer_type
    from relayish.ir.visitor import no_gc, run_deep

    def stages(mod):
        rows, held = [], set()
        for p in DEFAULT_PASSES:
            if TYPED in p.requires and TYPED not in held:
                t, _ = _cpu(infer_type, mod)
                rows.append(("type check", t))
                held.add(TYPED)
            t, mod = _cpu(p.run, mod)
            rows.append((p.name, t))
            held = (held & p.preserves) | p.provides
        return rows

    table, lets = None, []
    for size in sizes:
        g = _grad_chain(max(1, (size - 16) // 6))       # 6 lets a step, 16 around them
        lets.append(count_lets(g, 10 ** 9))
        with no_gc():      # as the entry points run (rl.optimize pauses the collector)
            rows = run_deep(stages, rl.Module.from_expr(g))
        rows.append(("pipeline", sum(t for _, t in rows)))
        table = [(name, []) for name, _ in rows] if table is None else table
        for (_, times), (_, t) in zip(table, rows):
            times.append(t)
    print("\n8. the default pipeline's stages on the raw gradient of a chain (CPU s, one run; "
          "us per let of the pipeline's input; growth exponent)")
    print(f"{'stage':>12} " + " ".join(f"{n:>17,} lets" for n in lets) + "   exponents")
    for name, times in table:
        cells = " ".join(f"{t:8.3f}s {1e6 * t / n:6.1f}us     " for t, n in zip(times, lets))
        slopes = [math.log(b / a) / math.log(m / n) if a > 0 and b > 0 else float("nan")
                  for a, b, n, m in zip(times, times[1:], lets, lets[1:])]
        print(f"{name:>12} {cells}  " + " ".join(f"{e:.2f}" for e in slopes))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="sizes up to 10^4, orders up to 3")
    ap.add_argument("--sizes", type=int, nargs="+", default=None)
    ap.add_argument("--pipeline-cost", action="store_true",
                    help="only section 8 (the default pipeline's stages, 10^3-10^5 lets)")
    args = ap.parse_args(argv)
    if args.pipeline_cost:
        pipeline_cost_table(args.sizes or [1_000, 10_000, 100_000])
        return
    sizes = args.sizes or ([1_000, 10_000] if args.quick else [1_000, 10_000, 100_000])
    cost_table(sizes)
    size_table(3 if args.quick else 4)
    pipeline_table(3 if args.quick else 4)
    pe_table(3 if args.quick else 4)
    default_pipeline_table(sizes, 10 if args.quick else 30, 8, 3 if args.quick else 5)
    inline_table(3 if args.quick else 4)
    pipeline_cost_table([1_000, 10_000] if args.quick else [1_000, 10_000, 100_000])


if __name__ == "__main__":
    main()
