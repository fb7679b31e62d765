"""The binary TreeLSTM of Tai et al. (examples/treelstm.py): value and gradient w.r.t. all
parameters, per tree, on the relayish interpreter against PyTorch eager, HIPS autograd and jax.

    python benchmarks/treelstm.py [--trees 20] [--rounds 3] [--seed 0] [--quick] [--per-gate]

Embedding 300, hidden 150, vocabulary 1000, 5 classes, random binary trees of 5-40 leaves,
float32. Every implementation computes the same loss (cross-entropy of the root's h under a
linear classifier) with the same ops: one embedding row per leaf, one gate matmul per cell.

* relayish: ONE gradient program (rl.value_and_grad of @main, which recurses over the tree, an
  ADT argument) evaluated per tree by the interpreter; the trees are converted to relayish
  values before timing (as a data loader would).
* PyTorch eager on the CPU (the `bench` extra, torch==2.13.0), loss.backward() per tree.
* hand-written numpy: the forward and backward pass written out by hand in Python + numpy, the
  same ops as relayish's gradient program, with the weight gradients' outer products batched as
  one matrix product per weight (as the interpreter defers them): the floor of running the model
  op by op from Python, what the interpreter's own overhead is measured against.
* HIPS autograd and jax eager: value_and_grad of examples/treelstm.reference_loss (jax eager:
  a few trees only, it dispatches every op through jax's machinery).
* jax.jit per tree shape: the tree's structure is static, its words an array argument; the
  first call's time (compile) and the steady time are printed per shape.
* relayish jax, one program: rl.compile(rl.value_and_grad(@main), backend="jax",
  capacity={"nodes": N}) with N the data set's largest node count rounded up to a power of two:
  ONE trace + XLA compilation for every tree (the recursion over the tree is a loop over a node
  table, relayish/backend/jax/dynamic_loops.py); the trees are encoded as node tables before
  timing; its compile time for the whole data set is printed, and its steady time per tree is
  timed with the others.
* --per-gate: also the model written one matmul per gate (examples/treelstm.py GATES_TEXT: 3
  matmuls at a leaf, 10 at a node), on relayish as written, on relayish after
  rl.passes.merge_matmul (stacked weights again: 1 matmul at a leaf, 2 at a node), and in
  PyTorch as written; same numbers (to_gate_params), so the same loss and gradients.

Before timing, all gradients are checked against relayish's in float64 (assert). The timed
competitors take turns in one process, two ways: by *epochs* (each runs the data set, tree after
tree, as a training loop calls it; the rounds alternate the libraries) and *tree by tree* (every
call follows another library's work: caches cold, and jax's CPU worker threads parked, which
costs relayish's loop ~30 thread wake-ups a call, notes/jax-backend.md). One process pinned to
ONE core (below, before
numpy/jax/torch start their thread pools: XLA:CPU runs independent steps on a second thread
even with --xla_cpu_multi_thread_eigen=false, which CPU time would charge to relayish and
jax.jit as work while it mostly waits), each library with one thread
(OMP/OPENBLAS/MKL_NUM_THREADS=1), which also keeps the figures stable on a shared machine.
Parameters are jax arrays for the jax-based competitors, as a training loop holds them (numpy
parameters would be copied to the device on every call: 2.6 MB here). Times are CPU time of
the process (time.process_time, equal to wall time on one core when the machine is quiet),
best round of --rounds, as ms per tree, with the ratio against PyTorch (> 1: slower).
"""
import os

if __name__ == "__main__" and hasattr(os, "sched_setaffinity"):
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})
for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ[_var] = "1"
os.environ.setdefault("XLA_FLAGS", "--xla_cpu_multi_thread_eigen=false "
                      "intra_op_parallelism_threads=1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import relayish as rl  # noqa: E402
from timing import interleaved_best, print_against  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), os.pardir, "examples"))
from treelstm import (CLASSES, PARAMS, VOCAB, init_params, random_tree,  # noqa: E402
                      reference_loss, to_gate_params, to_value, treelstm_gates_module,
                      treelstm_module)
from models import torch_treelstm  # noqa: E402

ALL = tuple(range(len(PARAMS)))


# ---- the competitors: each is make(params, trees) -> run(k) giving (loss, grads) for tree k ----

def relayish_jax_runner(params, trees, dtype, capacity=None):
    """The gradient program compiled ONCE for the jax backend (a loop over a node table):
    run(k) gives (loss, grads) for tree k; `run.compile_s` is the first call's CPU time."""
    import jax
    from relayish.backend.jax.dynamic_tables import bucket
    mod = treelstm_module(dtype=dtype)
    vg = rl.value_and_grad(mod, argnums=ALL)
    if capacity is None:
        capacity = bucket(max(2 * leaves(t) - 1 for t, _ in trees))
    compiled = rl.compile(vg, backend="jax", capacity={"nodes": capacity})
    # the trees as node tables before timing, as a data loader would (and as the interpreter
    # column converts them to relayish values first)
    spec = compiled.node_tables()[PARAMS.index("bo") + 1]
    values = [(spec.encode(to_value(mod, t), capacity), np.int32(y)) for t, y in trees]
    ps = [jax.device_put(p) for p in params]

    def run(k):
        v, g = compiled(*ps, *values[k])
        jax.block_until_ready(g)
        return v, g
    t0 = time.process_time()
    run(0)
    run.compile_s = time.process_time() - t0
    run.traces = lambda: compiled.trace_count
    return run


def relayish_runner(params, trees, dtype, model="stacked"):
    """model: "stacked" (TEXT), "gates" (GATES_TEXT as written) or "gates+merge" (GATES_TEXT
    after rl.passes.merge_matmul); gradients are returned in the stacked parameters' shapes."""
    if model == "stacked":
        mod, ps, regroup = treelstm_module(dtype=dtype), params, list
    else:
        mod, ps, regroup = treelstm_gates_module(dtype=dtype), to_gate_params(params), stack_gates
        if model == "gates+merge":
            mod = rl.passes.merge_matmul(mod)
    vg = rl.value_and_grad(mod, argnums=tuple(range(len(ps))))
    values = [(to_value(mod, t), np.int32(y)) for t, y in trees]
    rl.evaluate(vg, *ps, *values[0])        # compiles the program once

    def run(k):
        v, g = rl.evaluate(vg, *ps, *values[k])
        return v, regroup(g)
    return run


def stack_gates(g):
    """Per-gate gradients (GATE_PARAMS order) as the stacked parameters' (PARAMS order)."""
    g = [np.asarray(x) for x in g]
    U = np.concatenate([np.concatenate([ul, ur], axis=1) for ul, ur in zip(g[7:12], g[12:17])])
    return [g[0], np.concatenate(g[1:4]), np.concatenate(g[4:7]), U, np.concatenate(g[17:22]),
            g[22], g[23]]


def torch_gates_runner(params, trees):
    """PyTorch on the per-gate model as written (one matmul per gate and per child)."""
    import torch
    torch.set_num_threads(1)
    ps = [torch.tensor(p, requires_grad=True) for p in to_gate_params(params)]
    E, Wl, bl, Ul, Ur, bn, (Wo, bo) = ps[0], ps[1:4], ps[4:7], ps[7:12], ps[12:17], ps[17:22], \
        ps[22:]

    def cell(t):
        if not isinstance(t, tuple):
            x = E[t]
            i, o, u = (W @ x + b for W, b in zip(Wl, bl))
            c = torch.sigmoid(i) * torch.tanh(u)
            return torch.sigmoid(o) * torch.tanh(c), c
        (hl, cl), (hr, cr) = cell(t[0]), cell(t[1])
        i, fl, fr, o, u = (L @ hl + R @ hr + b for L, R, b in zip(Ul, Ur, bn))
        c = torch.sigmoid(i) * torch.tanh(u) + torch.sigmoid(fl) * cl + torch.sigmoid(fr) * cr
        return torch.sigmoid(o) * torch.tanh(c), c

    def run(k):
        tree, y = trees[k]
        for p in ps:
            p.grad = None
        loss = -torch.log_softmax(Wo @ cell(tree)[0] + bo, 0)[y]
        loss.backward()
        return loss.detach().numpy(), stack_gates([p.grad.numpy() for p in ps])
    return run


def torch_runner(params, trees):
    import torch
    torch.set_num_threads(1)
    ps, step = torch_treelstm(params)

    def run(k):
        loss = step(*trees[k])
        return loss.detach().numpy(), [p.grad.numpy() for p in ps]
    return run


def numpy_runner(params, trees):
    """The hand-written numpy floor (module docstring)."""
    E, Wl, bl, U, bn, Wo, bo = params
    hidden = U.shape[1] // 2

    def sigmoid(z):
        return np.tanh(z * 0.5) * 0.5 + 0.5

    def value_and_grad(tree, y):
        dE, dbl, dbn = np.zeros_like(E), np.zeros_like(bl), np.zeros_like(bn)
        leaf_g, leaf_x, node_g, node_x, tape = [], [], [], [], []

        def cell(t):                      # -> h, c and the (zero) gradient buffers of h and c
            gh, gc = np.zeros(hidden, E.dtype), np.zeros(hidden, E.dtype)
            if not isinstance(t, tuple):
                x = E[t]
                i, o, u = np.split(Wl @ x + bl, 3)
                si, so, tu = sigmoid(i), sigmoid(o), np.tanh(u)
                c = si * tu
                tc = np.tanh(c)
                tape.append((t, x, si, so, tu, tc, gh, gc))
                return so * tc, c, gh, gc
            hl, cl, ghl, gcl = cell(t[0])
            hr, cr, ghr, gcr = cell(t[1])
            x = np.concatenate((hl, hr))
            i, fl, fr, o, u = np.split(U @ x + bn, 5)
            si, sfl, sfr, so, tu = sigmoid(i), sigmoid(fl), sigmoid(fr), sigmoid(o), np.tanh(u)
            c = si * tu + sfl * cl + sfr * cr
            tc = np.tanh(c)
            tape.append((None, x, si, so, tu, tc, gh, gc, cl, cr, sfl, sfr, ghl, gcl, ghr, gcr))
            return so * tc, c, gh, gc

        h, _, gh, _ = cell(tree)
        z = Wo @ h + bo
        m = z.max()
        logp = z - (m + np.log(np.exp(z - m).sum()))
        gz = np.exp(logp)
        gz[y] -= 1
        gh += gz @ Wo
        for t, x, si, so, tu, tc, gh, gc, *node in reversed(tape):
            gc = gc + gh * so * (1 - tc * tc)
            gi, gu = gc * tu * si * (1 - si), gc * si * (1 - tu * tu)
            go = gh * tc * so * (1 - so)
            if t is not None:
                g = np.concatenate((gi, go, gu))
                dbl += g
                leaf_g.append(g)
                leaf_x.append(x)
                dE[t] += g @ Wl
            else:
                cl, cr, sfl, sfr, ghl, gcl, ghr, gcr = node
                gfl, gfr = gc * cl * sfl * (1 - sfl), gc * cr * sfr * (1 - sfr)
                g = np.concatenate((gi, gfl, gfr, go, gu))
                dbn += g
                node_g.append(g)
                node_x.append(x)
                gcl += gc * sfl
                gcr += gc * sfr
                gx = g @ U
                ghl += gx[:hidden]
                ghr += gx[hidden:]

        def outer_sum(gs, xs, like):
            return np.dot(np.stack(gs, axis=1), np.stack(xs)) if gs else np.zeros_like(like)
        return -logp[y], [dE, outer_sum(leaf_g, leaf_x, Wl), dbl, outer_sum(node_g, node_x, U),
                          dbn, np.outer(gz, h), gz]

    def run(k):
        return value_and_grad(*trees[k])
    return run


def autograd_runner(params, trees):
    import autograd
    import autograd.numpy as anp
    vg = autograd.value_and_grad(lambda ps, t, y: reference_loss(anp, ps, t, y))
    ps = tuple(params)

    def run(k):
        return vg(ps, *trees[k])
    return run


def jax_eager_runner(params, trees):
    import jax
    import jax.numpy as jnp
    vg = jax.value_and_grad(lambda ps, t, y: reference_loss(jnp, ps, t, y))
    ps = tuple(jnp.asarray(p) for p in params)

    def run(k):
        v, g = vg(ps, *trees[k])
        return np.asarray(v), [np.asarray(x) for x in g]
    return run


def shape_of(tree, words):
    """The tree's structure (leaves None) and its words in leaf order (appended to `words`)."""
    if isinstance(tree, tuple):
        return (shape_of(tree[0], words), shape_of(tree[1], words))
    words.append(tree)


def jax_jit_for_shape(params, tree):
    """(run, words): a jax.jit value_and_grad specialised to the tree's structure."""
    import jax
    import jax.numpy as jnp
    words = []
    shape = shape_of(tree, words)

    def fill(s, ws, pos):
        if s is None:
            pos[0] += 1
            return ws[pos[0] - 1]
        return (fill(s[0], ws, pos), fill(s[1], ws, pos))

    @jax.jit
    def vg(ps, ws, y):
        return jax.value_and_grad(lambda p: reference_loss(jnp, p, fill(shape, ws, [0]), y))(ps)
    ps = tuple(jnp.asarray(p) for p in params)
    ws = jnp.asarray(np.array(words, dtype=np.int32))

    def run(y):
        v, g = vg(ps, ws, y)
        jax.block_until_ready(g)
        return v, g
    return run


# ---- checks and timing -------------------------------------------------------------------------

def check_float64(rng, trees, per_gate=False):
    """All competitors' values and gradients agree with relayish's in float64 (asserts)."""
    import jax
    params = init_params(rng, dtype="float64")
    with jax.enable_x64(True):
        runners = {"PyTorch": torch_runner(params, trees), "autograd": autograd_runner(params, trees),
                   "hand-written numpy": numpy_runner(params, trees),
                   "jax eager": jax_eager_runner(params, trees)}
        if per_gate:
            runners.update({
                "relayish per-gate": relayish_runner(params, trees, "float64", "gates"),
                "relayish per-gate + merge_matmul": relayish_runner(params, trees, "float64",
                                                                    "gates+merge"),
                "PyTorch per-gate": torch_gates_runner(params, trees)})
        runners["relayish jax, one program"] = relayish_jax_runner(params, trees, "float64")
        ours = relayish_runner(params, trees, "float64")
        for k in range(len(trees)):
            v0, g0 = ours(k)
            for name, run in runners.items():
                v, g = run(k)
                np.testing.assert_allclose(v, v0, rtol=1e-9, err_msg=name)
                for pname, a, b in zip(PARAMS, g, g0):
                    np.testing.assert_allclose(np.asarray(a), b, rtol=1e-7, atol=1e-12,
                                               err_msg=f"{name}: d{pname}")
            jit_run = jax_jit_for_shape(params, trees[k][0])
            v, g = jit_run(trees[k][1])
            np.testing.assert_allclose(np.asarray(v), v0, rtol=1e-9, err_msg="jax.jit")
            for pname, a, b in zip(PARAMS, g, g0):
                np.testing.assert_allclose(np.asarray(a), b, rtol=1e-7, atol=1e-12,
                                           err_msg=f"jax.jit: d{pname}")
    print(f"float64 check: relayish (interpreter and jax, one program), PyTorch, hand-written "
          f"numpy, autograd, jax eager and jax.jit"
          f"{' (and the per-gate models)' if per_gate else ''} agree on {len(trees)} trees "
          "(rtol 1e-7)")


def leaves(tree):
    return leaves(tree[0]) + leaves(tree[1]) if isinstance(tree, tuple) else 1


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trees", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true",
                        help="a short run: 4 trees, 2 rounds, 1 tree for jax eager and jax.jit")
    parser.add_argument("--per-gate", action="store_true",
                        help="also time the per-gate model: relayish as written, relayish after "
                             "rl.passes.merge_matmul, PyTorch as written")
    args = parser.parse_args(argv)
    if args.quick:
        args.trees, args.rounds = 4, 2
    rng = np.random.default_rng(args.seed)
    trees = [(random_tree(rng, int(rng.integers(5, 41)), VOCAB), int(rng.integers(CLASSES)))
             for _ in range(args.trees)]
    check_float64(np.random.default_rng(args.seed + 1), trees[:1 if args.quick else 2],
                  args.per_gate)

    params = init_params(rng)
    sizes = [leaves(t) for t, _ in trees]
    print(f"\n{args.trees} trees of {min(sizes)}-{max(sizes)} leaves (mean {np.mean(sizes):.1f}), "
          f"embedding 300, hidden 150, vocabulary 1000, float32, one thread; CPU ms per tree, "
          f"best of {args.rounds} rounds, competitors taking turns by epochs and tree by tree")
    one = relayish_jax_runner(params, trees, "float32")
    runners = {"relayish interpreter (one program)": relayish_runner(params, trees, "float32"),
               "relayish jax, one program": one,
               "PyTorch eager CPU": torch_runner(params, trees),
               "hand-written numpy (the floor)": numpy_runner(params, trees),
               "HIPS autograd": autograd_runner(params, trees)}
    if args.per_gate:
        runners.update({
            "relayish per-gate model": relayish_runner(params, trees, "float32", "gates"),
            "relayish per-gate + merge_matmul": relayish_runner(params, trees, "float32",
                                                                "gates+merge"),
            "PyTorch eager CPU, per-gate model": torch_gates_runner(params, trees)})
    best = interleaved_best(runners, len(trees), args.rounds, epochs=True)
    cold = interleaved_best(runners, len(trees), args.rounds)
    torch_ms = print_against(best, "PyTorch eager CPU", also=cold, also_heading="tree by tree")

    few = trees[:1 if args.quick else 2]
    run = jax_eager_runner(params, few)
    run(0)
    t0 = time.process_time()
    for k in range(len(few)):
        run(k)
    ms = (time.process_time() - t0) / len(few) * 1e3
    print(f"  {'jax eager (' + str(len(few)) + ' trees)':38s} {ms:8.2f} ms   "
          f"{ms / torch_ms:5.2f}x PyTorch")

    jit_ms = []
    for tree, y in trees[:1 if args.quick else 3]:
        t0 = time.process_time()
        run = jax_jit_for_shape(params, tree)
        run(y)
        compile_s = time.process_time() - t0
        steady = min(_timed(run, y) for _ in range(20)) * 1e3
        jit_ms.append((steady, leaves(tree)))
        print(f"  {'jax.jit, ' + str(leaves(tree)) + '-leaf shape':38s} {steady:8.2f} ms   "
              f"{steady / torch_ms:5.2f}x PyTorch   (compile {compile_s:.1f} s for this shape)")
    ours, ours_cold = best["relayish jax, one program"], cold["relayish jax, one program"]
    per_leaf = np.mean([ms / n for ms, n in jit_ms])
    print(f"\nrelayish jax, one program: {one.traces()} trace + XLA compilation for all "
          f"{len(trees)} trees ({one.compile_s:.1f} s CPU), {ours:.2f} ms per tree = "
          f"{torch_ms / ours:.1f}x faster than PyTorch eager CPU by epochs "
          f"({ours_cold:.2f} ms, {cold['PyTorch eager CPU'] / ours_cold:.1f}x tree by tree); "
          f"jax.jit per shape runs "
          f"{per_leaf:.3f} ms per leaf, i.e. {per_leaf * np.mean(sizes):.2f} ms for a mean tree "
          f"({ours / (per_leaf * np.mean(sizes)):.2f}x that) but compiles once per shape")


def _timed(run, y):
    t0 = time.process_time()
    run(y)
    return time.process_time() - t0


if __name__ == "__main__":
    main()
