"""Gradient checkpointing (issue 13): peak memory and time of the interpreter running a gradient,
checkpointed against not.

    python benchmarks/checkpoint.py [--steps 10000] [--width 256] [--sections 1234]

1. a let-chain of `steps` steps `u = tanh(u) * 0.5 + u` over a float64 vector of `width`, then
   sum(u * x): rl.gradient(f) against checkpoint=k ("sqrt"), "revolve" (log2 snapshots) and
   ("revolve", s) for a few s;
2. a loop over a list of `steps` vectors, `@main(xs, s, w)`: s <- tanh(s * w + h) for each h,
   then sum(s * s): rl.gradient(mod) against checkpoint=k for k near sqrt(steps), "sqrt",
   "revolve" and ("revolve", 8);
3. a recursion over a list of `steps` vectors that is not a tail call (a foldr),
   `@main(xs, s, w)`: r <- tanh(@main(t, s, w) * w + h) from r = s at the end: rl.gradient(mod)
   against checkpoint=k, and rl.vjp(mod, checkpoint=k) (forward and one backpropagator call);
4. rl.evaluate's cost per call of a Module with 10 to 10^5 globals (its compile cache hit).

Peak memory: tracemalloc's peak over one run of the gradient program's compiled @main, after a
first run (the interpreter compiles a program once; that is not the backward pass's memory).
Time: wall time of one run (best of `--repeat`), and its ratio to the plain gradient's (the
recompute factor as the interpreter sees it). The figures are in notes/passes.md.
"""
from __future__ import annotations

import argparse
import gc
import math
import time
import tracemalloc

import numpy as np

import relayish as rl
from relayish.backend.interp.api import _compile_module
from relayish.ir.passes.checkpoint import repetitions, schedule

F = "float64"


def chain(steps, width):
    x = rl.var("x", shape=(width,), dtype=F)
    sb = rl.ScopeBuilder()
    u = x
    for _ in range(steps):
        u = sb.let("u", rl.tanh(u) * rl.const(0.5, F) + u)
    sb.ret(rl.sum(u * x))
    return rl.Function([x], sb.get())


def over_a_list(width, cons, nil):
    """@main(xs: List[Tensor[(width,)]], s, w) = match xs { Cons(h, t) => cons(main, h, t, s, w),
    Nil => nil(s) }."""
    mod = rl.Module()
    p = rl.Prelude(mod)
    T = rl.TensorType((width,), F)
    LT = rl.TypeCall(p.List, [T])
    xs, s, w = rl.var("xs", type=LT), rl.var("s", type=T), rl.var("w", type=T)
    h, t = rl.var("h", type=T), rl.var("t", type=LT)
    main = rl.GlobalVar("main")
    mod[main] = rl.Function([xs, s, w], rl.Match(xs, [
        rl.Clause(rl.PatternConstructor(p.Cons, [rl.PatternVar(h), rl.PatternVar(t)]),
                  cons(main, h, t, s, w)),
        rl.Clause(rl.PatternConstructor(p.Nil, []), nil(s))]))
    return mod


def list_loop(width):
    """A tail recursion over the list: s <- tanh(s * w + h), then sum(s * s)."""
    return over_a_list(width, lambda main, h, t, s, w: rl.Call(main, [t, rl.tanh(s * w + h), w]),
                       lambda s: rl.sum(s * s))


def foldr(width):
    """A right fold over the list: tanh(@main(t, s, w) * w + h), s at the end."""
    return over_a_list(width, lambda main, h, t, s, w: rl.tanh(rl.Call(main, [t, s, w]) * w + h),
                       lambda s: s)


def with_globals(n):
    """@main(x) = x and n one-line globals nothing calls."""
    mod = rl.Module()
    x = rl.var("x", dtype=F)
    mod["main"] = rl.Function([x], x)
    for i in range(n):
        y = rl.var("y", dtype=F)
        mod[f"g{i}"] = rl.Function([y], y)
    return mod


def measure(prog, args, repeat, call_back=False):
    """(peak MiB of one run, best wall seconds of one run, the result)."""
    if not isinstance(prog, rl.Module):
        prog = rl.Module.from_expr(prog)
    # The compiled @main, called directly: the program's time alone (rl.evaluate's own cost per
    # call, now O(1) in the number of globals, is section 4). call_back: a vjp program, whose
    # backpropagator is called once on ones like its value.
    main = _compile_module(prog)
    if call_back:
        def run(*xs):
            value, back = main(*xs)
            return value, back(np.ones_like(value))
    else:
        run = main
    result = run(*args)
    gc.collect()
    gc.freeze()         # the program's own objects: not rescanned by every collection
    best = math.inf
    for _ in range(repeat):
        t = time.perf_counter()      # wall time: process_time read far too low here
        run(*args)
        best = min(best, time.perf_counter() - t)
    tracemalloc.start()
    run(*args)
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    gc.unfreeze()
    return peak / 2 ** 20, best, result


def row(label, build_s, peak, run_s, base, extra=""):
    ratio = run_s / base[1]
    print(f"  {label:<26} build {build_s:6.1f} s   peak {peak:8.2f} MiB ({peak / base[0]:5.3f}x)"
          f"   run {run_s:6.3f} s ({ratio:4.2f}x){extra}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=10_000)
    ap.add_argument("--width", type=int, default=256)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--sections", default="1234")
    opts = ap.parse_args()
    n, width = opts.steps, opts.width
    rng = np.random.default_rng(0)
    if "1" in opts.sections:
        chain_section(n, width, opts.repeat, rng)
    if "2" in opts.sections:
        loop_section(n, width, opts.repeat, rng)
    if "3" in opts.sections:
        foldr_section(n, width, opts.repeat, rng)
    if "4" in opts.sections:
        evaluate_section()


def chain_section(n, width, repeat, rng):

    print(f"1. let-chain of {n} steps (3 ops each: {3 * n} bindings in A-normal form), "
          f"vectors of {width} float64")
    f = chain(n, width)
    x = rng.normal(size=width) * 0.1
    t = time.process_time()
    plain = rl.gradient(f)
    build = time.process_time() - t
    base = measure(plain, (x,), repeat)
    row("no checkpointing", build, base[0], base[1], base)
    m = 3 * n + 1
    for spec in ["sqrt", "revolve", ("revolve", 8), ("revolve", 16, 3), ("revolve", 8, 3)]:
        t = time.process_time()
        g = rl.gradient(f, checkpoint=spec)
        build = time.process_time() - t
        peak, run, result = measure(g, (x,), repeat)
        assert np.allclose(result[1][0], base[2][1][0], rtol=1e-10), spec
        extra = ""
        if isinstance(spec, tuple) or spec == "revolve":
            s = spec[1] if isinstance(spec, tuple) else math.ceil(math.log2(m)) + 1
            k = spec[2] if isinstance(spec, tuple) and len(spec) == 3 else 1
            plan = schedule(-(-(m - 1) // k) + 1 if k > 1 else m, s)
            extra = (f"   {plan.m} steps, s={s}: t={repetitions(plan.m, s)}, "
                     f"{plan.advances / plan.m:.2f} advances a step")
        row(f"checkpoint={spec!r}", build, peak, run, base, extra)



def loop_section(n, width, repeat, rng):
    print(f"\n2. loop over a list of {n} vectors of {width} float64 (tail recursion @main)")
    mod = list_loop(width)
    args = (rl.list_value(mod, [rng.normal(size=width) * 0.1 for _ in range(n)]),
            rng.normal(size=width) * 0.1, rng.normal(size=width))
    t = time.process_time()
    plain = rl.gradient(mod)
    build = time.process_time() - t
    base = measure(plain, args, repeat)
    row("no checkpointing", build, base[0], base[1], base)
    for k in (int(math.isqrt(n)) // 2, int(math.isqrt(n)), 4 * int(math.isqrt(n)), "sqrt",
              "revolve", ("revolve", 8)):
        t = time.process_time()
        g = rl.gradient(mod, checkpoint=k)
        build = time.process_time() - t
        peak, run, result = measure(g, args, repeat)
        assert np.allclose(result[1][2], base[2][1][2], rtol=1e-10), k
        row(f"checkpoint={k!r}", build, peak, run, base)


def foldr_section(n, width, repeat, rng):
    print(f"\n3. recursion over a list of {n} vectors of {width} float64, not a tail call "
          f"(a foldr: g(h, @main(t)))")
    mod = foldr(width)
    args = (rl.list_value(mod, [rng.normal(size=width) * 0.1 for _ in range(n)]),
            rng.normal(size=width) * 0.1, rng.normal(size=width))
    for what, transform, back in (("gradient", rl.gradient, False), ("vjp", rl.vjp, True)):
        t = time.process_time()
        plain = transform(mod)
        build = time.process_time() - t
        base = measure(plain, args, repeat, back)
        row(f"{what}, no checkpointing", build, base[0], base[1], base)
        for k in (int(math.isqrt(n)) // 2, int(math.isqrt(n)), 4 * int(math.isqrt(n)), "sqrt"):
            t = time.process_time()
            g = transform(mod, checkpoint=k)
            build = time.process_time() - t
            peak, run, result = measure(g, args, repeat, back)
            assert np.allclose(result[1][2], base[2][1][2], rtol=1e-10), k
            row(f"{what}, checkpoint={k!r}", build, peak, run, base)


def evaluate_section(repeat=2000):
    print("\n4. rl.evaluate(Module) per call (a compile cache hit), by the number of globals")
    for n in (10, 10_000, 100_000):
        mod, x = with_globals(n), np.float64(1.0)
        rl.evaluate(mod, x)
        t = time.perf_counter()
        for _ in range(repeat):
            rl.evaluate(mod, x)
        print(f"  {n:>7} globals   {(time.perf_counter() - t) / repeat * 1e6:8.1f} us a call")


if __name__ == "__main__":
    main()
