"""Programs beyond trees on the jax backend's dynamic path (issue 17, "Measure"): an RNN over
variable-length sequences and a traced-condition loop, each ONE compilation, against the
interpreter, PyTorch eager and jax.jit.

    python benchmarks/dynamic.py [--seqs 100] [--timed 10] [--batch 10] [--rounds 3] [--quick]

* The RNN: an Elman cell over a sequence of word indices, written as a right fold over the list
  (`@rnn(xs) = match xs { Step(w, rest) => cell(@rnn(rest), w), Last(w) => cell(0, w) }`), a
  classifier's cross-entropy on the final state; value_and_grad w.r.t. all 6 parameters.
  Embedding 64, hidden 128, vocabulary 1000, 5 classes, float32, --seqs sequences of 5-100
  words. The sequence type has no empty sequence; a fold with an empty base case (`Nil => h0`,
  which writes no backpropagator) is the same one loop, its Nil row skipped by the backward
  loop (tests/backend/test_jax_dynamic_rnn.py, test_rnn_with_an_empty_base_case_*).
  - relayish jax, one program: rl.compile(vg, backend="jax", capacity={"nodes": 128}); its
    first call (trace + XLA) is the compile time of the whole data set; sequences passed as
    node tables encoded before timing (as a data loader would).
  - relayish interpreter: the same value_and_grad program, one call per sequence.
  - PyTorch eager CPU (the `bench` extra, torch==2.13.0): the same loop, loss.backward().
  - rl.vmap (--batch B): the same program batched over B sequences of different lengths per
    call, timed over the whole data set after the interleaved rounds (per sequence).
  - jax.jit per length: jax.value_and_grad of a Python loop over the words, jitted; one
    compilation per distinct length. Its compile time is measured for a few lengths and summed
    over the data set's distinct lengths (fitted linearly in the length).
* The traced-condition loop: `@loop(x) = if sum(x * x) > eps { @loop(step(x)) } else { x }` over
  a float32[256] vector, 0-40 iterations depending on the input; relayish jax (one while loop)
  against jax.jit of jax.lax.while_loop written by hand. Its gradient (value_and_grad of
  sum(@loop(x))): relayish jax, one program for every trip count (reverse AD's output compiled
  as a while loop recording rows and a backward loop over them), against jax.value_and_grad of
  the loop for the input's trip count (jax.grad cannot differentiate lax.while_loop), jitted
  once per trip count, unrolled in Python and as lax.fori_loop; compile counts and times.

Times: one thread (XLA, BLAS and torch), CPU time of the process, the competitors interleaved
sequence by sequence, best of --rounds; ms per item and ratios. Values and gradients are
checked between the implementations before timing.
"""
import os

if __name__ == "__main__":      # one thread everywhere, before numpy/jax/torch are imported
    for var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ[var] = "1"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") +
                               " --xla_cpu_multi_thread_eigen=false"
                               " intra_op_parallelism_threads=1").strip()

import argparse  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import relayish as rl  # noqa: E402
from timing import interleaved_best, print_against  # noqa: E402

RNN_TEXT = """
type Seq {{ Last(int32), Step(int32, Seq) }}

def @rnn(%E: Tensor[({V}, {D}), {F}], %W: Tensor[({H}, {H}), {F}], %U: Tensor[({H}, {D}), {F}],
         %b: Tensor[({H}), {F}], %xs: Seq) -> Tensor[({H}), {F}] {{
  match (%xs) {{
    Last(%w) => tanh(matmul(%U, take(%E, %w, axis=0)) + %b),
    Step(%w, %rest) => {{
      let %h = @rnn(%E, %W, %U, %b, %rest);
      tanh(matmul(%W, %h) + matmul(%U, take(%E, %w, axis=0)) + %b)
    }}
  }}
}}

def @main(%E: Tensor[({V}, {D}), {F}], %W: Tensor[({H}, {H}), {F}], %U: Tensor[({H}, {D}), {F}],
          %b: Tensor[({H}), {F}], %Wo: Tensor[({K}, {H}), {F}], %bo: Tensor[({K}), {F}],
          %xs: Seq, %y: int32) -> {F} {{
  let %h = @rnn(%E, %W, %U, %b, %xs);
  -take(log_softmax(matmul(%Wo, %h) + %bo), %y)
}}
"""

LOOP_TEXT = """
def @loop(%x: Tensor[({N}), {F}], %eps: {F}) -> Tensor[({N}), {F}] {{
  if (sum(%x * %x) > %eps) {{ @loop(%x * 0.7{s} + sin(%x) * 0.05{s}, %eps) }} else {{ %x }}
}}
def @main(%x: Tensor[({N}), {F}]) -> {R} {{ {body} }}
"""


def rnn_module(vocab, embed, hidden, classes, dtype="float32"):
    """The parsed, type-checked RNN module (@rnn, @main, type Seq)."""
    return rl.infer_type(rl.parse(RNN_TEXT.format(V=vocab, D=embed, H=hidden, K=classes,
                                                  F=dtype)))


def loop_module(n, dtype="float32", summed=False):
    """The traced-condition loop: x <- 0.7 x + 0.05 sin(x) while |x|^2 > 0.001; @main returns
    the final x, or its sum (a scalar to differentiate) when `summed`."""
    suffix = {"float32": "f", "float64": "f64"}[dtype]
    call = f"@loop(%x, 0.001{suffix})"
    result, body = (dtype, f"sum({call})") if summed else (f"Tensor[({n}), {dtype}]", call)
    return rl.infer_type(rl.parse(LOOP_TEXT.format(N=n, F=dtype, s=suffix, R=result,
                                                   body=body)))


def loop_step_jax(x):
    """The step of LOOP_TEXT's @loop in jax (the loop section and tests/backend/
    test_jax_dynamic_tail.py unroll it per trip count)."""
    import jax.numpy as jnp
    return x * 0.7 + jnp.sin(x) * 0.05


def rnn_params(rng, vocab, embed, hidden, classes, dtype="float32"):
    """(E, W, U, b, Wo, bo), scaled so the state neither saturates nor vanishes."""
    shapes = [(vocab, embed), (hidden, hidden), (hidden, embed), (hidden,), (classes, hidden),
              (classes,)]
    return tuple((rng.normal(size=s) / np.sqrt(s[-1] if len(s) == 2 else 1) *
                  (0.5 if len(s) == 2 else 0.1)).astype(dtype) for s in shapes)


def to_seq(mod, words):
    """A non-empty list of word indices as a relayish Seq value (first word outermost)."""
    last, step = mod.get_constructor("Last"), mod.get_constructor("Step")
    value = rl.ConstructorValue(last, [np.int32(words[-1])])
    for w in reversed(words[:-1]):
        value = rl.ConstructorValue(step, [np.int32(w), value])
    return value


def rnn_loss_jax(params, words, y):
    """The same loss as @main in jax, a Python loop over the words from the last to the first
    (the fold's order: the innermost call is the last word)."""
    import jax.numpy as jnp
    E, W, U, b, Wo, bo = params
    h = jnp.tanh(U @ E[words[-1]] + b)
    for w in reversed(words[:-1]):
        h = jnp.tanh(W @ h + U @ E[w] + b)
    logits = Wo @ h + bo
    return -(logits - jnp.log(jnp.sum(jnp.exp(logits - jnp.max(logits)))) - jnp.max(logits))[y]


# ---- the RNN's competitors: each is make(params, data) -> run(k) giving (loss, grads) ----------

ALL = tuple(range(6))


def relayish_jax_runner(mod, params, data, capacity):
    """The value_and_grad program compiled ONCE (a loop over a node table); `run.compile_s` is
    the first call's CPU time (trace + XLA), the compile time of the whole data set."""
    import jax
    compiled = rl.compile(rl.value_and_grad(mod, argnums=ALL), backend="jax",
                          capacity={"nodes": capacity})
    spec = compiled.node_tables()[len(params)]
    values = [(spec.encode(to_seq(mod, words), capacity), np.int32(y)) for words, y in data]

    def run(k):
        return jax.block_until_ready(compiled(*params, *values[k]))
    t0, w0 = time.process_time(), time.perf_counter()
    run(0)
    run.compile_s, run.compile_wall_s = time.process_time() - t0, time.perf_counter() - w0
    run.traces = lambda: compiled.trace_count
    return run


def batched_runner(mod, params, data, capacity, batch):
    """rl.vmap of the same value_and_grad over `batch` sequences of different lengths per call
    (their node tables stacked at one capacity; the loop runs to the longest, shorter ones'
    rows masked): run(k) gives the gradients of batch k; `run.compile_s` as above."""
    import jax
    vg = rl.vmap(rl.value_and_grad(mod, argnums=ALL), in_axes=(None,) * len(params) + (0, 0))
    compiled = rl.compile(vg, backend="jax", capacity={"nodes": capacity})
    batches = [([to_seq(mod, words) for words, _ in data[i:i + batch]],
                np.array([y for _, y in data[i:i + batch]], np.int32))
               for i in range(0, len(data) - batch + 1, batch)]

    def run(k):
        return jax.block_until_ready(compiled(*params, *batches[k]))
    t0 = time.process_time()
    run(0)
    run.compile_s = time.process_time() - t0
    run.batches = len(batches)
    return run


def interpreter_runner(mod, params, data):
    vg = rl.value_and_grad(mod, argnums=ALL)
    values = [(to_seq(mod, words), np.int32(y)) for words, y in data]
    rl.evaluate(vg, *params, *values[0])        # prepares the program once

    def run(k):
        return rl.evaluate(vg, *params, *values[k])
    return run


def torch_runner(params, data):
    import torch
    torch.set_num_threads(1)
    ps = [torch.tensor(p, requires_grad=True) for p in params]

    def run(k):
        words, y = data[k]
        E, W, U, b, Wo, bo = ps
        h = torch.tanh(U @ E[words[-1]] + b)
        for w in reversed(words[:-1]):
            h = torch.tanh(W @ h + U @ E[w] + b)
        loss = -torch.log_softmax(Wo @ h + bo, 0)[y]
        for p in ps:
            p.grad = None
        loss.backward()
        return loss.item(), [p.grad.numpy() for p in ps]
    return run


def jax_jit_runner(params, words):
    """jax.jit of value_and_grad of the Python loop for one length (the words an array
    argument): `run.compile_s` is its first call's CPU time."""
    import jax
    import jax.numpy as jnp
    n = len(words)

    def loss(ps, ws, y):
        return rnn_loss_jax(ps, [ws[i] for i in range(n)], y)
    vg = jax.jit(jax.value_and_grad(loss))
    ws = jnp.asarray(np.array(words, np.int32))

    def run(y):
        return jax.block_until_ready(vg(params, ws, y))
    t0 = time.process_time()
    run(np.int32(0))
    run.compile_s = time.process_time() - t0
    return run


def check(mod, params, data, rtol):
    """Every competitor's loss and gradients agree on a few sequences before timing."""
    import jax
    one = relayish_jax_runner(mod, params, data, 128)
    interp, torch_run = interpreter_runner(mod, params, data), torch_runner(params, data)
    for k in range(len(data)):
        ours = jax.tree_util.tree_leaves(one(k))
        jit_run = jax_jit_runner(params, data[k][0])
        for other in (interp(k), torch_run(k), jit_run(np.int32(data[k][1]))):
            for a, b in zip(ours, jax.tree_util.tree_leaves(other)):
                np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=rtol,
                                           atol=rtol * 0.1)
    print(f"check: relayish jax, interpreter, PyTorch and jax.jit agree on {len(data)} "
          f"sequences (loss and 6 gradients, rtol {rtol})")


def rnn_section(args, rng):
    dims = dict(vocab=1000, embed=64, hidden=128, classes=5)
    mod = rnn_module(**dims)
    params = rnn_params(rng, **dims)
    data = [([int(w) for w in rng.integers(dims["vocab"], size=int(rng.integers(5, 101)))],
             int(rng.integers(dims["classes"]))) for _ in range(args.seqs)]
    check(mod, params, data[:2], 2e-3)
    lengths = [len(words) for words, _ in data]
    print(f"\nRNN value_and_grad: {len(data)} sequences of {min(lengths)}-{max(lengths)} words "
          f"(mean {np.mean(lengths):.1f}, {len(set(lengths))} distinct lengths), embedding 64, "
          f"hidden 128, float32, one thread; CPU ms per sequence, best of {args.rounds} rounds, "
          f"competitors interleaved sequence by sequence")
    one = relayish_jax_runner(mod, params, data, 128)
    timed = data[:args.timed]
    runners = {"relayish jax, one program": one,
               "relayish interpreter (one program)": interpreter_runner(mod, params, timed),
               "PyTorch eager CPU": torch_runner(params, timed)}
    jits, jit_compile = {}, []
    for words, _ in timed:                # jax.jit: one compilation per distinct length
        if len(words) not in jits:
            jits[len(words)] = jax_jit_runner(params, words)
            jit_compile.append((len(words), jits[len(words)].compile_s))
    runners["jax.jit per length (steady)"] = lambda k: jits[len(timed[k][0])](
        np.int32(timed[k][1]))
    best = interleaved_best(runners, len(timed), args.rounds)
    torch_ms = print_against(best, "PyTorch eager CPU")
    # jax.jit's compile time grows with the length (the loop is unrolled): a least-squares line
    # through the measured lengths, summed over the data set's distinct lengths
    ns, secs = np.array([n for n, _ in jit_compile]), np.array([s for _, s in jit_compile])
    slope, intercept = np.polyfit(ns, secs, 1) if len(set(ns)) > 1 else (secs[0] / ns[0], 0.0)
    total = sum(intercept + slope * n for n in set(lengths))
    for n, s in sorted(jit_compile):
        print(f"  jax.jit compile, length {n:3d}: {s:6.2f} s CPU")
    ours = best["relayish jax, one program"]
    if args.batch:
        # the whole data set, each batch interleaved with its sequences one call each
        batched = batched_runner(mod, params, data, 128, args.batch)
        ms, single = float("inf"), float("inf")
        for _ in range(args.rounds):
            spent = [0.0, 0.0]
            for k in range(batched.batches):
                t0 = time.process_time()
                batched(k)
                t1 = time.process_time()
                for i in range(k * args.batch, (k + 1) * args.batch):
                    one(i)
                spent[0] += t1 - t0
                spent[1] += time.process_time() - t1
            ms = min(ms, spent[0] / (batched.batches * args.batch) * 1e3)
            single = min(single, spent[1] / (batched.batches * args.batch) * 1e3)
        print(f"  {'rl.vmap, batches of ' + str(args.batch):38s} {ms:8.2f} ms   "
              f"{ms / single:5.2f}x one per call ({single:.2f} ms on these {len(data)} "
              f"sequences, interleaved batch by batch); compile {batched.compile_s:.1f} s CPU")
    print(f"\nrelayish jax: {one.traces()} trace + XLA compilation for all {len(data)} sequences: "
          f"{one.compile_s:.1f} s CPU ({one.compile_wall_s:.1f} s wall); jax.jit per length: "
          f"about {total:.0f} s CPU for the data set's {len(set(lengths))} distinct lengths "
          f"({intercept:.2f} + {slope * 1e3:.1f} ms x length, fitted on {len(jit_compile)})")
    print(f"relayish jax {ours:.2f} ms per sequence = {torch_ms / ours:.2f}x faster than PyTorch "
          f"eager, {best['relayish interpreter (one program)'] / ours:.1f}x faster than the "
          f"interpreter, {ours / best['jax.jit per length (steady)']:.2f}x the per-length "
          f"jax.jit's steady time")


# ---- the traced-condition loop ------------------------------------------------------------------

def loop_section(args, rng):
    import jax
    import jax.numpy as jnp
    n = 256
    mod = loop_module(n)
    run = rl.compile(mod, backend="jax")

    @jax.jit
    def by_hand(x):
        return jax.lax.while_loop(lambda v: jnp.sum(v * v) > 0.001, loop_step_jax, x)

    xs = [(rng.normal(size=n) * scale).astype("float32")
          for scale in np.geomspace(1e-3, 1e3, args.loop_inputs)]
    iterations = [_iterations(x) for x in xs]
    t0 = time.process_time()
    jax.block_until_ready(run(xs[0]))
    ours_compile = time.process_time() - t0
    t0 = time.process_time()
    jax.block_until_ready(by_hand(xs[0]))
    hand_compile = time.process_time() - t0
    for x in xs[:4]:
        np.testing.assert_allclose(run(x), rl.evaluate(mod, x), rtol=1e-5, atol=1e-7)
        np.testing.assert_allclose(run(x), by_hand(x), rtol=1e-5, atol=1e-7)
    fns = {"relayish jax (one while loop)": run, "jax.lax.while_loop by hand": by_hand}
    best = interleaved_best(
        {name: lambda k, fn=fn: jax.block_until_ready(fn(xs[k % len(xs)]))
         for name, fn in fns.items()}, len(xs) * args.loop_repeats, args.rounds)
    print(f"\ntraced-condition loop (x <- 0.7 x + 0.05 sin x while |x|^2 > 0.001), float32[{n}], "
          f"{len(xs)} inputs of {min(iterations)}-{max(iterations)} iterations (mean "
          f"{np.mean(iterations):.1f}); forward, CPU ms per input, best of {args.rounds} rounds; "
          f"{run.trace_count} trace; compile {ours_compile:.2f} s (by hand {hand_compile:.2f} s)")
    hand = best["jax.lax.while_loop by hand"]
    for name, ms in best.items():
        print(f"  {name:38s} {ms:8.4f} ms   {ms / hand:5.2f}x by hand")
    # a call's fixed cost and an iteration's: an input that stops at once and a long one
    short, long = np.full(n, 1e-4, "float32"), np.full(n, 1e30, "float32")
    steps = _iterations(long)
    for name, fn in fns.items():
        t_short, t_long = (min(_per_call(fn, x, 100) for _ in range(args.rounds))
                           for x in (short, long))
        print(f"  {name:38s} {t_short * 1e3:8.4f} ms a call with no iteration, "
              f"{(t_long - t_short) / steps * 1e6:.2f} us an iteration ({steps} iterations)")


def loop_grad_section(args, rng):
    """The traced-condition loop's gradient: value_and_grad of sum(@loop(x)), ONE compiled
    program for every trip count, against jax.value_and_grad of the loop for the input's trip
    count (jax.grad cannot differentiate lax.while_loop), jitted once per trip count: unrolled
    in Python, and as lax.fori_loop of that static count."""
    import jax
    import jax.numpy as jnp
    n = 256
    vg = rl.value_and_grad(loop_module(n, summed=True))
    run = rl.compile(vg, backend="jax")

    def per_trips(unroll):
        """{trip count: jitted value_and_grad}, compiled on first use (timed apart)."""
        cache = {}

        def get(k):
            if k not in cache:
                if unroll:
                    def f(x):
                        for _ in range(k):
                            x = loop_step_jax(x)
                        return jnp.sum(x)
                else:
                    def f(x):
                        return jnp.sum(jax.lax.fori_loop(0, k, lambda _, v: loop_step_jax(v), x))
                cache[k] = jax.jit(jax.value_and_grad(f))
            return cache[k]
        return get

    xs = [(rng.normal(size=n) * scale).astype("float32")
          for scale in np.geomspace(1e-3, 1e3, args.loop_inputs)]
    trips = [_trips_f32(x) for x in xs]
    t0 = time.process_time()
    jax.block_until_ready(run(xs[0]))
    ours_compile = time.process_time() - t0
    names = ["relayish jax (one program)", "jax.jit per trip count, unrolled",
             "jax.jit per trip count, fori_loop"]
    getters = [None, per_trips(True), per_trips(False)]
    compile_s = {name: [] for name in names[1:]}
    for name, get in zip(names[1:], getters[1:]):
        for k in sorted(set(trips)):
            t0 = time.process_time()
            jax.block_until_ready(get(k)(xs[trips.index(k)]))
            compile_s[name].append(time.process_time() - t0)
    # checked before timing: the one program against both jax versions and the interpreter
    for x, k in list(zip(xs, trips))[::max(1, len(xs) // 5)]:
        value, grad = run(x)
        for get in getters[1:]:
            v, g = get(k)(x)
            np.testing.assert_allclose(value, v, rtol=1e-4, atol=1e-6)
            np.testing.assert_allclose(grad, g, rtol=1e-4, atol=1e-6)
        _, ev_grad = rl.evaluate(vg, x)
        np.testing.assert_allclose(grad, ev_grad, rtol=1e-4, atol=1e-6)
    def runner(get):
        def one(k):
            x, trip = xs[k % len(xs)], trips[k % len(xs)]
            jax.block_until_ready((run if get is None else get(trip))(x))
        return one
    best = interleaved_best({name: runner(get) for name, get in zip(names, getters)},
                            len(xs) * args.loop_repeats, args.rounds)
    print(f"\ntraced-condition loop, value_and_grad of sum(@loop(x)), float32[{n}], {len(xs)} "
          f"inputs of {min(trips)}-{max(trips)} iterations ({len(set(trips))} distinct); CPU ms "
          f"per input, best of {args.rounds} rounds")
    print(f"  relayish jax: {run.trace_count} trace, compile {ours_compile:.2f} s for every "
          "trip count")
    for name in names[1:]:
        c = compile_s[name]
        print(f"  {name}: {len(c)} compilations, {sum(c):.2f} s in all ({min(c):.2f}-"
              f"{max(c):.2f} s each)")
    ours = best[names[0]]
    for name in names:
        print(f"  {name:38s} {best[name]:8.4f} ms   {best[name] / ours:5.2f}x the one program")
    # a call's fixed cost and an iteration's (forward and backward): no iteration, and many
    short, long = np.full(n, 1e-4, "float32"), np.full(n, 1e30, "float32")
    steps = _trips_f32(long)
    fori = getters[2]
    for name, fns in ((names[0], (run, run)), (names[2], (fori(0), fori(steps)))):
        t_short, t_long = (min(_per_call(fn, x, 100) for _ in range(args.rounds))
                           for fn, x in zip(fns, (short, long)))
        print(f"  {name:38s} {t_short * 1e3:8.4f} ms a call with no iteration, "
              f"{(t_long - t_short) / steps * 1e6:.2f} us an iteration ({steps} iterations)")


# ---- RK4 and a nested loop (issue 26) ---------------------------------------------------------

RK4_TEXT = """
def @f(%x: Tensor[({N}), float64]) -> Tensor[({N}), float64] {{ sin(%x) * 0.5f64 - 0.1f64 * %x }}
def @rk4(%x: Tensor[({N}), float64], %h: float64, %k: int32, %n: int32)
    -> Tensor[({N}), float64] {{
  if (%k < %n) {{
    let %k1 = @f(%x);
    let %k2 = @f(%x + %k1 * (%h * 0.5f64));
    let %k3 = @f(%x + %k2 * (%h * 0.5f64));
    let %k4 = @f(%x + %k3 * %h);
    @rk4(%x + (%k1 + 2f64 * %k2 + 2f64 * %k3 + %k4) * (%h / 6f64), %h, %k + 1, %n)
  }} else {{ %x }}
}}
def @main(%x: Tensor[({N}), float64], %n: int32) -> float64 {{ sum(@rk4(%x, 0.01f64, 0, %n)) }}
"""


def rk4_module(n):
    """RK4 for x' = 0.5 sin x - 0.1 x over float64[n], the step count a traced argument."""
    return rl.parse(RK4_TEXT.format(N=n))


def rk4_jax(x, steps):
    """The same integration in jax, `steps` static (lax.fori_loop, which jax.grad takes)."""
    import jax
    import jax.numpy as jnp

    def f(v):
        return jnp.sin(v) * 0.5 - 0.1 * v

    def step(_, v):
        h = 0.01
        k1 = f(v)
        k2 = f(v + k1 * (h * 0.5))
        k3 = f(v + k2 * (h * 0.5))
        k4 = f(v + k3 * h)
        return v + (k1 + 2 * k2 + 2 * k3 + k4) * (h / 6)
    return jnp.sum(jax.lax.fori_loop(0, steps, step, x))


def rk4_section(args, rng):
    """value_and_grad of the RK4 loop for 10/100/1000 steps: relayish with its capacity grown
    by itself (one program for every step count, a retrace per doubling), with a tight fixed
    capacity, and jax.jit(jax.value_and_grad) of lax.fori_loop per step count."""
    import jax
    n = args.rk4_size
    vg = rl.value_and_grad(rk4_module(n))
    x = rng.normal(size=n)
    auto = rl.compile(vg, backend="jax")
    print(f"\nRK4 (x' = 0.5 sin x - 0.1 x), value_and_grad w.r.t. x, float64[{n}]; CPU ms per "
          f"call, best of {args.rounds} rounds, interleaved; compile = first call (trace + XLA)")
    with jax.enable_x64(True):
        for steps in (10, 100, 1000):
            k = np.int32(steps)
            t0 = time.process_time()
            got = auto(x, k)
            auto_first = time.process_time() - t0
            tight = rl.compile(vg, backend="jax", capacity={"steps": steps + 1})
            t0 = time.process_time()
            tight(x, k)
            tight_compile = time.process_time() - t0
            ref = jax.jit(jax.value_and_grad(lambda v, s=steps: rk4_jax(v, s)))
            t0 = time.process_time()
            jax.block_until_ready(ref(x))
            jax_compile = time.process_time() - t0
            expected = rl.evaluate(vg, x, k)
            np.testing.assert_allclose(got[0], expected[0], rtol=1e-9)
            np.testing.assert_allclose(got[1], expected[1], rtol=1e-9)
            np.testing.assert_allclose(got[1], ref(x)[1], rtol=1e-9)
            best = interleaved_best({
                "relayish jax, capacity grown": lambda _: jax.block_until_ready(auto(x, k)),
                "relayish jax, tight capacity": lambda _: jax.block_until_ready(tight(x, k)),
                "jax.jit, fori_loop per count": lambda _: jax.block_until_ready(ref(x))},
                args.loop_repeats, args.rounds)
            jax_ms = best["jax.jit, fori_loop per count"]
            print(f"  {steps} steps: capacity grown to {auto.row_steps} ({auto.growths} "
                  f"retraces so far, {auto.trace_count} traces); first call {auto_first:.2f} s, "
                  f"tight {tight_compile:.2f} s, jax {jax_compile:.2f} s "
                  f"(tight / jax {tight_compile / jax_compile:.1f}x)")
            for name, ms in best.items():
                print(f"    {name:32s} {ms:8.3f} ms   {ms / jax_ms:5.2f}x jax   "
                      f"{ms / best['relayish jax, tight capacity']:5.2f}x tight")


NESTED_TEXT = """
def @newton(%z: float64, %a: float64, %n: int32) -> float64 {
  let %f = %z * %z * %z + %z - %a;
  if (logical_and(abs(%f) > 1e-12f64, %n < 50)) {
    @newton(%z - %f / (3f64 * %z * %z + 1f64), %a, %n + 1)
  } else { %z }
}
def @outer(%x: Tensor[(3), float64], %k: int32) -> Tensor[(3), float64] {
  let %s = @newton(0f64, sum(%x * %x), 0);
  if (logical_and(%k < 40, %s > 0.1f64)) { @outer(%x - 0.3f64 * %s * %x, %k + 1) } else { %x }
}
def @main(%x: Tensor[(3), float64]) -> float64 { sum(@outer(%x, 0)) }
"""


def nested_section(args, rng):
    """A Newton solve inside an outer descent loop (the value): relayish's nested while loops
    against the same nest written with jax.lax.while_loop, and the interpreter."""
    import jax
    import jax.numpy as jnp
    mod = rl.parse(NESTED_TEXT)
    run = rl.compile(mod, backend="jax")

    def newton(a):
        def body(s):
            z, n = s
            f = z ** 3 + z - a
            return z - f / (3 * z * z + 1), n + 1
        return jax.lax.while_loop(
            lambda s: (jnp.abs(s[0] ** 3 + s[0] - a) > 1e-12) & (s[1] < 50), body,
            (jnp.float64(0), 0))[0]

    def outer(x):
        def cond(s):
            return (s[1] < 40) & (newton(jnp.sum(s[0] * s[0])) > 0.1)

        def body(s):
            v, k = s
            return v - 0.3 * newton(jnp.sum(v * v)) * v, k + 1
        return jnp.sum(jax.lax.while_loop(cond, body, (x, 0))[0])
    with jax.enable_x64(True):
        by_hand = jax.jit(outer)
        xs = [rng.normal(size=3) * s for s in (0.05, 0.5, 1.0, 2.0)]
        t0 = time.process_time()
        run(xs[0])
        ours_compile = time.process_time() - t0
        t0 = time.process_time()
        jax.block_until_ready(by_hand(xs[0]))
        hand_compile = time.process_time() - t0
        for x in xs:
            np.testing.assert_allclose(run(x), rl.evaluate(mod, x), rtol=1e-9)
            np.testing.assert_allclose(run(x), by_hand(x), rtol=1e-9)
        best = interleaved_best({
            "relayish jax (nested while loops)": lambda k: run(xs[k % len(xs)]),
            "jax.lax.while_loop nest by hand": lambda k: jax.block_until_ready(
                by_hand(xs[k % len(xs)]))}, len(xs) * args.loop_repeats, args.rounds)
    hand = best["jax.lax.while_loop nest by hand"]
    print(f"\nNewton solve inside an outer descent (value), float64[3], {len(xs)} inputs; "
          f"{run.trace_count} trace; compile {ours_compile:.2f} s, by hand {hand_compile:.2f} s "
          f"({ours_compile / hand_compile:.1f}x)")
    for name, ms in best.items():
        print(f"  {name:38s} {ms:8.4f} ms   {ms / hand:5.2f}x by hand")

    nested_grad_section(args, xs)


def _nested_trips(x):
    """(outer iterations, the most Newton iterations of one solve) the nest takes from x, in
    numpy (the interpreter's arithmetic)."""
    def newton(a):
        z, n = 0.0, 0
        while abs(z ** 3 + z - a) > 1e-12 and n < 50:
            z, n = z - (z ** 3 + z - a) / (3 * z * z + 1), n + 1
        return z, n
    k, most, x = 0, 0, np.asarray(x, float)
    while True:
        s, n = newton(float(np.sum(x * x)))
        most = max(most, n)
        if not (k < 40 and s > 0.1):
            return k, most
        x, k = x - 0.3 * s * x, k + 1


def nested_jax(x, outer, inner):
    """The nest in jax for static trip counts: lax.scan over the outer iterations taken, each
    a Newton solve as a masked lax.scan of `inner` steps (a converged solve keeps z: jax.grad
    cannot differentiate a while loop)."""
    import jax
    import jax.numpy as jnp

    def newton(a):
        def step(z, _):
            f = z ** 3 + z - a
            return jnp.where(jnp.abs(f) > 1e-12, z - f / (3 * z * z + 1), z), None
        return jax.lax.scan(step, jnp.zeros((), x.dtype), None, length=inner)[0]

    def step(v, _):
        return v - 0.3 * newton(jnp.sum(v * v)) * v, None
    return jnp.sum(jax.lax.scan(step, x, None, length=outer)[0])


def nested_grad_section(args, xs):
    """value_and_grad of the nest: one relayish program for every trip count (the inner solve
    replayed in the backward pass), against jax.jit(jax.value_and_grad) of lax.scan at the
    trip counts each input takes (one compilation per pair of counts)."""
    import jax
    vg = rl.value_and_grad(rl.parse(NESTED_TEXT))
    run = rl.compile(vg, backend="jax")
    trips = [_nested_trips(x) for x in xs]
    tight = rl.compile(vg, backend="jax", capacity={"steps": max(t[0] for t in trips) + 1})
    with jax.enable_x64(True):
        t0 = time.process_time()
        run(xs[0])
        ours_compile = time.process_time() - t0
        t0 = time.process_time()
        tight(xs[0])
        tight_compile = time.process_time() - t0
        refs, compiles = {}, []
        for x, k in zip(xs, trips):
            if k not in refs:
                refs[k] = jax.jit(jax.value_and_grad(lambda v, k=k: nested_jax(v, *k)))
                t0 = time.process_time()
                jax.block_until_ready(refs[k](x))
                compiles.append(time.process_time() - t0)
        for x, k in zip(xs, trips):
            got, expected = run(x), rl.evaluate(vg, x)
            np.testing.assert_allclose(got[0], expected[0], rtol=1e-9)
            np.testing.assert_allclose(got[1], expected[1], rtol=1e-9, atol=1e-15)
            np.testing.assert_allclose(got[1], refs[k](x)[1], rtol=1e-9, atol=1e-15)
        best = interleaved_best({
            "relayish jax (one program)": lambda i: run(xs[i % len(xs)]),
            "relayish jax, tight capacity": lambda i: tight(xs[i % len(xs)]),
            "jax.jit per trip counts, lax.scan": lambda i: jax.block_until_ready(
                refs[trips[i % len(xs)]](xs[i % len(xs)]))}, len(xs) * args.loop_repeats,
            args.rounds)
    hand = best["jax.jit per trip counts, lax.scan"]
    print(f"\nits value_and_grad, {len(xs)} inputs of {min(t[0] for t in trips)}-"
          f"{max(t[0] for t in trips)} outer iterations of up to {max(t[1] for t in trips)} "
          f"Newton steps; relayish {run.trace_count} traces ({run.growths} capacity doublings), "
          f"first call {ours_compile:.2f} s (tight capacity {tight_compile:.2f} s, one trace); "
          f"jax {len(compiles)} compilations, {min(compiles):.2f}-{max(compiles):.2f} s each, "
          f"{sum(compiles):.2f} s in all (tight / jax's sum {tight_compile / sum(compiles):.1f}x)")
    for name, ms in best.items():
        print(f"  {name:38s} {ms:8.4f} ms   {ms / hand:5.2f}x jax")


HALVING_TEXT = """
def @f(%x: Tensor[(2), float64]) -> float64 { sum((%x - 1f64) * (%x - 1f64) * (%x * %x + 1f64)) }
def @descend(%x: Tensor[(2), float64], %s: float64, %k: int32) -> Tensor[(2), float64] {
  let %g = 2f64 * (%x - 1f64) * (%x * %x + 1f64) + 2f64 * %x * (%x - 1f64) * (%x - 1f64);
  let %y = %x - %s * %g;
  if (logical_and(%k < 60, sum(%g * %g) > 1e-16f64)) {
    if (@f(%y) < @f(%x)) { @descend(%y, %s, %k + 1) } else { @descend(%x, %s * 0.5f64, %k + 1) }
  } else { %x }
}
def @main(%x: Tensor[(2), float64]) -> float64 { sum(@descend(%x, 1f64, 0) * %x) }
"""


def halving_jax(x, trips):
    """The step-halving descent in jax for a static trip count (lax.fori_loop: jax.grad
    cannot differentiate a while loop)."""
    import jax
    import jax.numpy as jnp

    def f(v):
        return jnp.sum((v - 1) ** 2 * (v * v + 1))

    def step(_, state):
        v, s = state
        g = 2 * (v - 1) * (v * v + 1) + 2 * v * (v - 1) ** 2
        y = v - s * g
        better = f(y) < f(v)
        return jnp.where(better, y, v), jnp.where(better, s, s * 0.5)
    end, _ = jax.lax.fori_loop(0, trips, step, (x, jnp.float64(1)))
    return jnp.sum(end * x)


def _halving_trips(x):
    """The descent's trip count for x (the interpreter's arithmetic, in numpy)."""
    def f(v):
        return np.sum((v - 1) ** 2 * (v * v + 1))
    k, s = 0, 1.0
    while True:
        g = 2 * (x - 1) * (x * x + 1) + 2 * x * (x - 1) ** 2
        if not (k < 60 and np.sum(g * g) > 1e-16):
            return k
        y = x - s * g
        x, s, k = (y, s, k + 1) if f(y) < f(x) else (x, s * 0.5, k + 1)


def halving_section(args, rng):
    """The step-halving descent (keeps x when a step fails): value_and_grad, one relayish
    program for every input, against jax.jit(jax.value_and_grad) of lax.fori_loop per trip
    count, and the interpreter (values to 1e-9)."""
    import jax
    vg = rl.value_and_grad(rl.parse(HALVING_TEXT))
    run = rl.compile(vg, backend="jax")
    xs = [rng.normal(size=2) * s for s in (0.5, 1.0, 2.0, 4.0, 8.0)]
    trips = [_halving_trips(x) for x in xs]
    with jax.enable_x64(True):
        t0 = time.process_time()
        run(xs[-1])
        ours_compile = time.process_time() - t0
        refs, compiles = {}, []
        for x, k in zip(xs, trips):
            if k not in refs:
                refs[k] = jax.jit(jax.value_and_grad(lambda v, k=k: halving_jax(v, k)))
                t0 = time.process_time()
                jax.block_until_ready(refs[k](x))
                compiles.append(time.process_time() - t0)
        for x, k in zip(xs, trips):
            got, expected = run(x), rl.evaluate(vg, x)
            np.testing.assert_allclose(got[0], expected[0], rtol=1e-9)
            np.testing.assert_allclose(got[1], expected[1], rtol=1e-9)
            np.testing.assert_allclose(got[1], refs[k](x)[1], rtol=1e-9)
        best = interleaved_best({
            "relayish jax (one program)": lambda i: run(xs[i % len(xs)]),
            "jax.jit per trip count, fori_loop": lambda i: jax.block_until_ready(
                refs[trips[i % len(xs)]](xs[i % len(xs)]))}, len(xs) * args.loop_repeats,
            args.rounds)
    hand = best["jax.jit per trip count, fori_loop"]
    print(f"\nstep-halving descent (keeps x when a step fails), value_and_grad, float64[2], "
          f"{len(xs)} inputs of {min(trips)}-{max(trips)} iterations; relayish {run.trace_count} "
          f"traces ({run.growths} capacity doublings), first call {ours_compile:.2f} s; jax "
          f"{len(compiles)} compilations, {min(compiles):.2f}-{max(compiles):.2f} s each")
    for name, ms in best.items():
        print(f"  {name:38s} {ms:8.4f} ms   {ms / hand:5.2f}x jax")


def _trips_f32(x):
    """The loop's trip count for x, run in float32 by XLA (the compiled programs' arithmetic:
    a float64 count can differ by one at the boundary)."""
    import jax
    import jax.numpy as jnp
    n, _ = jax.lax.while_loop(lambda s: jnp.sum(s[1] * s[1]) > 0.001,
                              lambda s: (s[0] + 1, loop_step_jax(s[1])), (0, jnp.asarray(x)))
    return int(n)


def _iterations(x):
    k, v = 0, x.astype("float64")
    while np.sum(v * v) > 0.001:
        v, k = v * 0.7 + np.sin(v) * 0.05, k + 1
    return k


def _per_call(fn, x, calls):
    import jax
    t0 = time.process_time()
    for _ in range(calls):
        jax.block_until_ready(fn(x))
    return (time.process_time() - t0) / calls


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seqs", type=int, default=100)
    parser.add_argument("--timed", type=int, default=10,
                        help="sequences timed in the interleaved rounds (jax.jit compiles each "
                             "distinct length among them)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--batch", type=int, default=10,
                        help="also time rl.vmap over batches of this many sequences (0: not)")
    parser.add_argument("--loop-inputs", type=int, default=20)
    parser.add_argument("--loop-repeats", type=int, default=20)
    parser.add_argument("--rk4-size", type=int, default=1000)
    parser.add_argument("--sections", default="rnn,loop,loop_grad,rk4,nested,halving",
                        help="comma-separated: rnn, loop, loop_grad, rk4, nested, halving")
    parser.add_argument("--quick", action="store_true",
                        help="a short run: 20 sequences, 3 timed, 2 rounds")
    args = parser.parse_args(argv)
    if args.quick:
        args.seqs, args.timed, args.rounds, args.loop_repeats = 20, 3, 2, 5
    rng = np.random.default_rng(args.seed)
    sections = {"rnn": rnn_section, "loop": loop_section, "loop_grad": loop_grad_section,
                "rk4": rk4_section, "nested": nested_section, "halving": halving_section}
    for name in args.sections.split(","):
        sections[name](args, rng)


if __name__ == "__main__":
    main()
