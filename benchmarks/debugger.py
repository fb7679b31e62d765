"""The stepping debugger's cost (issue 14): the interpreter alone against the same program run
under rl.debug.Debugger with no breakpoint hit.

    python benchmarks/debugger.py [--trees 10] [--repeat 5] [--quick]

Three programs, each timed in this one run (best CPU time of --repeat, after a warm-up):
  1. the TreeLSTM gradient of benchmarks/treelstm.py (rl.value_and_grad of a recursive model
     over an ADT tree; numpy-heavy steps): ms per tree;
  2. the reverse-AD-shaped program of benchmarks/interpreter.py (refs, backpropagator
     closures, tiny ops: the interpreter's per-step machinery dominates): us per node;
  3. non-tail recursion sum_to(800) of benchmarks/interpreter.py: us per level.
For each: rl.evaluate; the Debugger attached with no breakpoint (`restart` then `cont`; the
debugger compiles once, without the buffer-sharing fast paths, and logs reference writes for
step_back); and with a breakpoint whose condition is never true on a line that runs (case 1
and 3: the condition is evaluated by the interpreter at each pass). The goal is at most 3x the
interpreter's time with no breakpoint hit. The debugger's one-time compile (Debugger(...)) is
printed too.
"""
import os
import sys
import time

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"

import argparse  # noqa: E402

import numpy as np  # noqa: E402

import relayish as rl  # noqa: E402
from timing import best_of  # noqa: E402
from interpreter import ad_shaped_program, recursion_program  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "examples"))
from treelstm import init_params, random_tree, to_value, treelstm_module  # noqa: E402


def attached(dbg, args):
    def run():
        dbg.restart(*args)
        dbg.cont()
        assert dbg.finished
        return dbg.result
    return run


def row(name, unit, scale, t_int, t_dbg, t_cond=None):
    line = (f"   interpreter {t_int * scale:9.3f} {unit}   debugger attached {t_dbg * scale:9.3f} "
            f"{unit} ({t_dbg / t_int:4.2f}x)")
    if t_cond is not None:
        line += f"   with an unhit conditional breakpoint {t_cond * scale:9.3f} {unit} " \
                f"({t_cond / t_int:4.2f}x)"
    print(line)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--trees", type=int, default=10)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--quick", action="store_true", help="small sizes, for a smoke test")
    args = ap.parse_args(argv)
    if args.quick:
        args.trees, args.repeat = 2, 1
    print(f"relayish debugger overhead (numpy {np.__version__}, "
          f"Python {sys.version.split()[0]})")

    # 1. the TreeLSTM gradient
    rng = np.random.default_rng(0)
    dims = dict(vocab=100, embed=30, hidden=15) if args.quick else {}
    mod = treelstm_module(**dims)
    params = init_params(rng, **dims)
    vocab = dims.get("vocab", 1000)
    trees = [(to_value(mod, random_tree(rng, int(rng.integers(5, 40)), vocab)), np.int32(1))
             for _ in range(args.trees)]
    vg = rl.value_and_grad(mod, argnums=tuple(range(len(params))))
    rl.evaluate(vg, *params, *trees[0])
    t0 = time.process_time()
    dbg = rl.debug.Debugger(vg, *params, *trees[0])
    t_compile = time.process_time() - t0
    dbg.cont()

    def all_trees(run_one):
        def run():
            for t in trees:
                run_one(t)
        return run
    t_int = best_of(all_trees(lambda t: rl.evaluate(vg, *params, *t)), args.repeat)
    t_dbg = best_of(all_trees(lambda t: attached(dbg, (*params, *t))()), args.repeat)
    text = dbg.text.splitlines()
    cell_line = next(ln for ln in dbg.breakable_lines() if "sigmoid" in text[ln - 1])
    dbg.break_at(line=cell_line, condition=f"{vocab}i32 < 0i32")
    t_cond = best_of(all_trees(lambda t: attached(dbg, (*params, *t))()), args.repeat)
    print(f"1. TreeLSTM value_and_grad, {args.trees} trees "
          f"(the debugger's compile: {t_compile * 1e3:.0f} ms once):")
    n = args.trees
    row("", "ms/tree", 1e3 / n, t_int, t_dbg, t_cond)

    # 2. the reverse-AD shape
    size = 8
    func, _, nodes = ad_shaped_program(100 if args.quick else 500, size)
    a = np.linspace(-1.0, 1.0, size)
    rl.evaluate(func, a)
    dbg = rl.debug.Debugger(func, a)
    t_int = best_of(lambda: rl.evaluate(func, a), args.repeat)
    t_dbg = best_of(attached(dbg, (a,)), args.repeat)
    print(f"2. reverse-AD shape, refs and backpropagator closures ({nodes} nodes):")
    row("", "us/node", 1e6 / nodes, t_int, t_dbg)

    # 3. recursion
    depth = 800
    mod, _ = recursion_program(depth)
    d = np.asarray(depth, "int64")
    rl.evaluate(mod, d)
    dbg = rl.debug.Debugger(mod, d)
    t_int = best_of(lambda: rl.evaluate(mod, d), args.repeat)
    t_dbg = best_of(attached(dbg, (d,)), args.repeat)
    print(f"3. non-tail recursion sum_to({depth}):")
    row("", "us/level", 1e6 / depth, t_int, t_dbg)


if __name__ == "__main__":
    main()
