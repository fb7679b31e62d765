"""How every relayish stage grows with program size (issue 10, item 12).

    python benchmarks/scaling.py [--quick] [--budget 20] [--family NAME ...] [--stage NAME ...]
                                 [--json FILE]

Programs (each a fn (%x: float64) -> float64, built with the Python API; "size" is the number of
bindings or the nesting depth):
  * let-chain      let %v1 = %x + 1f64; let %v2 = %v1 * 1.0001f64; ...      10^3, 10^4, 10^5
  * nested-if      (if (%x < k) { <depth k-1> + 1f64 } else { %x }): an if as an op argument
  * nested-fn      (fn (%y1) { (fn (%y2) { ... })(%y1 + 1f64) })(%x + 1f64): fn literals nested
  * let-as-value   let %v = (let %w = (...); %w + 1f64); %v + 1f64: a let as a let's value
  * make-nat       @nat_iterate(fn (%y) { %y * 1.0001f64 }, S(S(...Z)))(%x): nested constructor
                   calls (the prelude's make_nat) and a recursion as deep as the Nat
The nested families run at depths 10^3, 3*10^3 and 10^4 (--quick: a tenth of every size, and
the let-chain at 10^3, 3*10^3, 10^4).

Stages, each on a freshly built program (so no stage reuses what another cached on the nodes):
  infer_type  rl.infer_type(program)
  astext      rl.astext(program)
  parse       rl.parse(text)
  struct_eq   rl.structural_equal(a, b) of two programs built alike
  evaluate    rl.evaluate(program, x) (includes its type inference and the interpreter's compile)
  gradient    rl.gradient(program): building the gradient program (includes type inference)
  grad2       rl.grad(rl.grad(program)): building the second-order program
  compile     rl.compile(program, backend="jax") and its first call (trace + XLA compile + run),
              then (not timed) the answer is checked against the interpreter's.

Every measurement runs in a forked process of its own: it builds the program (not timed), then
runs the stage once. Time is the process's CPU time (as in benchmarks/timing.py: other processes
sharing the cores do not count; XLA's compiler threads do). Memory is the process's peak RSS
during the stage above its RSS before it (numpy buffers and XLA's native memory included; memory
that Python keeps for reuse counts once). A crash (XLA segfaults on some big programs), an error
(a CompileError, say) or a run past 6 x --budget (at least 60 s) of wall time is reported in the table instead of a figure.
The growth exponent is the log-log slope between consecutive sizes (1.0 is linear, 2.0
quadratic). A stage whose next size is predicted to take more than --budget seconds (from the
last time and the slope so far, at least linear) is skipped, with the prediction printed.
"""
from __future__ import annotations

import argparse
import json
import math
import multiprocessing
import os
import resource
import sys
import time

import numpy as np

import relayish as rl
from relayish.backend.jax import TRACE_LIMITS
from relayish.ir.visitor import run_deep

F64 = rl.TensorType((), "float64")


# ---- the programs -----------------------------------------------------------------------------

def let_chain(n):
    return rl.Module.from_expr(_let_chain(n))


def _let_chain(n):
    x = rl.var("x", type=F64)
    one, factor = rl.const(1.0, "float64"), rl.const(1.0001, "float64")
    bindings, prev = [], x
    for i in range(n):
        v = rl.Var(f"v{i}")
        bindings.append((v, prev + one if i % 2 == 0 else prev * factor))
        prev = v
    body = prev
    for v, value in reversed(bindings):       # a loop: the chain is built inside out
        body = rl.Let(v, value, body)
    return rl.Function([x], body, F64)


def nested_if(n):
    return rl.Module.from_expr(_nested_if(n))


def _nested_if(n):
    x = rl.var("x", type=F64)
    one = rl.const(1.0, "float64")
    e = x
    for k in range(n):
        e = rl.If(x < rl.const(float(k + 1), "float64"), e + one, x)
    return rl.Function([x], e, F64)


def nested_fn(n):
    return rl.Module.from_expr(_nested_fn(n))


def _nested_fn(n):
    x = rl.var("x", type=F64)
    one = rl.const(1.0, "float64")
    ys = [x] + [rl.var(f"y{k}", type=F64) for k in range(1, n + 1)]
    e = ys[n]
    for k in range(n, 0, -1):
        e = rl.Call(rl.Function([ys[k]], e), [ys[k - 1] + one])
    return rl.Function([x], e, F64)


def let_as_value(n):
    return rl.Module.from_expr(_let_as_value(n))


def _let_as_value(n):
    x = rl.var("x", type=F64)
    one = rl.const(1.0, "float64")
    e = x
    for k in range(n):
        v = rl.Var(f"v{k}")
        e = rl.Let(v, e, v + one)
    return rl.Function([x], e, F64)


def make_nat(n):
    mod = rl.Module()
    p = rl.Prelude(mod)
    x, y = rl.var("x", type=F64), rl.var("y", type=F64)
    step = rl.Function([y], y * rl.const(1.0001, "float64"))
    mod["main"] = rl.Function([x], rl.Call(rl.Call(p.nat_iterate, [step, p.make_nat(n)]), [x]),
                              F64)
    return mod


FAMILIES = {
    "let-chain": (let_chain, (10**3, 10**4, 10**5), (10**3, 3 * 10**3, 10**4)),
    "nested-if": (nested_if, (10**3, 3 * 10**3, 10**4), (100, 300, 10**3)),
    "nested-fn": (nested_fn, (10**3, 3 * 10**3, 10**4), (100, 300, 10**3)),
    "let-as-value": (let_as_value, (10**3, 3 * 10**3, 10**4), (100, 300, 10**3)),
    "make-nat": (make_nat, (10**3, 3 * 10**3, 10**4), (100, 300, 10**3)),
}
X = np.float64(0.5)
# The jax backend refuses (CompileError) traced programs with longer chains of dependent
# operations: XLA's compiler crashes the process on them (issue 10, item 6).
XLA_MAX_DEPTH = TRACE_LIMITS["max_depth"]


# ---- the stages -------------------------------------------------------------------------------
# Each takes the family's builder and size and returns a thunk doing the measured work (the
# program is built before the thunk runs, and not timed).

def stage_infer_type(build, n):
    prog = build(n)
    return lambda: rl.infer_type(prog)


def stage_astext(build, n):
    prog = build(n)
    return lambda: rl.astext(prog)


def stage_parse(build, n):
    text = rl.astext(build(n))
    return lambda: rl.parse(text)


def stage_struct_eq(build, n):
    a, b = build(n), build(n)

    def run():
        if not rl.structural_equal(a, b):
            raise AssertionError("two programs built alike are not structurally equal")
    return run


def stage_evaluate(build, n):
    prog = build(n)
    return lambda: rl.evaluate(prog, X)


def stage_gradient(build, n):
    prog = build(n)
    return lambda: rl.gradient(prog)


def stage_grad2(build, n):
    prog = build(n)
    return lambda: rl.grad(rl.grad(prog))


def stage_compile(build, n):
    prog = build(n)
    import jax                  # importing jax and starting its CPU client is not relayish's
    jax.jit(lambda a: a + 1)(np.float32(0)).block_until_ready()     # cost: done before timing

    def run():
        out = rl.compile(prog, backend="jax")(X)
        getattr(out, "block_until_ready", lambda: None)()
        return out

    def check(out):         # after the timing: XLA's answer is the interpreter's
        if n <= 3000:       # (the interpreter is quick enough here)
            expected = float(rl.evaluate(build(n), X))
            if not np.isclose(float(out), expected, rtol=1e-9):
                raise AssertionError(f"compiled result {float(out)} != interpreter {expected}")
    run.check = check
    return run


STAGES = {
    "infer_type": stage_infer_type, "astext": stage_astext, "parse": stage_parse,
    "struct_eq": stage_struct_eq, "evaluate": stage_evaluate, "gradient": stage_gradient,
    "grad2": stage_grad2, "compile": stage_compile,
}


def _rss_bytes():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def _child(stage, family, n, conn):
    """In a forked process: build the program, run the stage once; send (seconds, peak bytes)."""
    try:
        thunk = run_deep(STAGES[stage], FAMILIES[family][0], n)
        before = _rss_bytes()
        t0 = time.process_time()
        out = thunk()
        seconds = time.process_time() - t0
        peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - before
        if hasattr(thunk, "check"):
            run_deep(thunk.check, out)
        conn.send(("ok", seconds, max(peak, 0)))
    except rl.RelayishError as exc:
        conn.send(("error", f"{type(exc).__name__}: {exc}"))
    except BaseException as exc:  # noqa: BLE001 - reported in the table, not raised
        conn.send(("error", f"unexpected {type(exc).__name__}: {exc}"))
    finally:
        conn.close()


def measure(stage, family, n, timeout):
    """(CPU seconds, peak RSS growth in bytes, error text or None) of one run in a fresh process.

    A forked child per measurement: the peak RSS is the stage's own (numpy buffers and XLA's
    native memory included), no stage inherits another's garbage or caches, and a crash
    (XLA segfaults on some big programs) or a run past the timeout is reported, not fatal.
    tracemalloc is not used: it walks the whole Python stack on every allocation, which makes
    deep (recursive) passes quadratic under it."""
    ctx = multiprocessing.get_context("fork")
    receive, send = ctx.Pipe(duplex=False)
    proc = ctx.Process(target=_child, args=(stage, family, n, send))
    proc.start()
    send.close()
    result, answered = None, receive.poll(timeout)
    if answered:
        try:
            result = receive.recv()
        except EOFError:        # the child died without a word: a crash
            pass
    proc.join(5)
    if proc.is_alive():
        proc.kill()
        proc.join()
    if not answered:
        return None, None, f"stopped after {timeout:.0f} s of wall time"
    if result is None:
        return None, None, f"the process died (exit status {proc.exitcode}; a negative one is " \
                           "a signal: 9 is the out-of-memory killer, 11 a segfault)"
    if result[0] == "error":
        return None, None, result[1][:240]
    return result[1], result[2], None


# ---- the report -------------------------------------------------------------------------------

def _fmt_time(s):
    return f"{s * 1e3:8.1f} ms" if s < 1 else f"{s:8.2f} s "


def _fmt_mem(b):
    if b is None:
        return "        -"
    return f"{b / 2**20:7.1f} MB"


def slope(a, b):
    (n1, t1), (n2, t2) = a, b
    if t1 <= 0 or t2 <= 0:
        return float("nan")
    return math.log(t2 / t1) / math.log(n2 / n1)


def run_family(name, sizes, stages, budget):
    """Measure and print one family's table (cells appear as they are measured)."""
    print(f"\n== {name}  (sizes {', '.join(str(n) for n in sizes)})")
    print(f"  {'stage':<11}" + "".join(f"{'n=' + str(n):>24}" for n in sizes) + "   exponents")
    rows = {}
    for stage in stages:
        print(f"  {stage:<11}", end="", flush=True)
        points, peaks, notes = [], [], []
        for n in sizes:
            if stage == "compile" and n > XLA_MAX_DEPTH:
                print(f"{'refused':>24}", end="")
                notes.append(f"n={n}: beyond the jax backend's limit of {XLA_MAX_DEPTH} dependent "
                             "operations (XLA's compiler segfaults on deeper chains), which "
                             "raises a CompileError after tracing: not measured")
                break
            if points:
                n0, t0 = points[-1]
                k = max(1.0, slope(points[-2], points[-1])) if len(points) > 1 else 1.0
                predicted = t0 * (n / n0) ** k
                if predicted > budget:
                    print(f"{'skipped':>24}", end="")
                    notes.append(f"n={n}: predicted {predicted:.0f} s > budget {budget:.0f} s")
                    break
            seconds, peak, error = measure(stage, name, n, timeout=max(6 * budget, 60))
            if error is not None:
                print(f"{'error':>24}", end="")
                notes.append(f"n={n}: {error}")
                break
            points.append((n, seconds))
            peaks.append(peak)
            print(f"{_fmt_time(seconds)} {_fmt_mem(peak)}".rjust(24), end="", flush=True)
        exps = [slope(a, b) for a, b in zip(points, points[1:])]
        missing = len(sizes) - len(points) - (1 if notes else 0)
        print(" " * 24 * missing + "   " + " ".join(f"{e:4.2f}" for e in exps))
        for note in notes:
            print(f"  {'':<11}  {note}")
        rows[stage] = {"sizes": [n for n, _ in points], "seconds": [t for _, t in points],
                       "peak_bytes": peaks, "exponents": exps, "notes": notes}
        sys.stdout.flush()
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a tenth of every size")
    ap.add_argument("--budget", type=float, default=None,
                    help="skip a size predicted to take longer (seconds; 20, --quick 5)")
    ap.add_argument("--family", nargs="*", choices=sorted(FAMILIES), default=None)
    ap.add_argument("--stage", nargs="*", choices=list(STAGES), default=None)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args(argv)
    budget = args.budget if args.budget is not None else (5.0 if args.quick else 20.0)
    families = args.family or list(FAMILIES)
    stages = args.stage or list(STAGES)
    print(f"relayish scaling: CPU time and peak memory per stage "
          f"({'quick' if args.quick else 'full'} run, budget {budget:.0f} s per measurement)")
    start = time.perf_counter()
    report = {}
    for name in families:
        sizes = FAMILIES[name][2 if args.quick else 1]
        report[name] = run_family(name, sizes, stages, budget)
    print(f"\ntotal wall time {time.perf_counter() - start:.0f} s; peak RSS of this process "
          f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MB")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(report, f, indent=1)


if __name__ == "__main__":
    main()
