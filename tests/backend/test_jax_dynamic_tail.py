"""The traced-condition loop of issue 17 (`while |x| > eps`, shape B of
relayish/backend/jax/dynamic_tail.py): forward AND reverse-AD output, each ONE compilation for
every input, whatever its trip count. Gradients are checked against the interpreter and against
jax.grad of the same loop unrolled for that input's trip count (a masked lax.scan: jax.grad
cannot differentiate lax.while_loop), for trip counts 0, 1 and many, float32 and float64; a loop
carrying two tensors, one whose step uses a vector weight and one whose step uses a matrix
weight (the weight's gradient is a deferred sum of the backward loop). What still does not
compile as a loop is a CompileError naming the function; a run past the step capacity an
EvaluationError.
(benchmarks/dynamic.py defines the loop module, so the benchmark and the tests cannot drift.)"""
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import relayish as rl
from relayish.errors import CompileError, EvaluationError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "benchmarks"))
from dynamic import HALVING_TEXT, loop_module, loop_step_jax, rk4_module  # noqa: E402

EPS = 0.001


def _trips(step, cond, *xs):
    """The loop's trip count for these inputs, run by jax in their dtype (XLA's sin, as the
    compiled program's): the oracle unrolls exactly that many steps."""
    def body(state):
        n, vals = state
        out = step(*vals)
        return n + 1, out if isinstance(out, tuple) else (out,)
    with jax.enable_x64(any(np.asarray(x).dtype == np.float64 for x in xs)):
        n, _ = jax.lax.while_loop(lambda s: cond(*s[1]), body,
                                  (0, tuple(map(jnp.asarray, xs))))
        return int(n)


MAX_TRIPS = 64     # more than any input here runs (the references assert it)


def _unrolled_reference(step, cond, loss, n_state, argnums):
    """jax.value_and_grad of `loss(final, initial, weights)` where `final` is the loop state
    after exactly the trip count's steps (`step(*state, *weights)` while `cond(*state)`), with
    the trip count as aux: the oracle is the loop unrolled, as a lax.scan of MAX_TRIPS steps
    whose steps past the trip count keep the state (jax.grad cannot differentiate
    lax.while_loop). Jitted: one compilation for every trip count, where a Python loop
    unrolled per count compiles each count anew, or each primitive when run eagerly."""
    def tupled(out):
        return out if isinstance(out, tuple) else (out,)

    def f(*args):
        state, weights = args[:n_state], args[n_state:]
        trips, _ = jax.lax.while_loop(
            lambda c: cond(*c[1]), lambda c: (c[0] + 1, tupled(step(*c[1], *weights))),
            (0, tuple(jax.lax.stop_gradient(a) for a in state)))

        def body(s, k):
            new = tupled(step(*s, *weights))
            return tuple(jnp.where(k < trips, a, b) for a, b in zip(new, s)), None
        final, _ = jax.lax.scan(body, tuple(state), jnp.arange(MAX_TRIPS))
        return loss(final, state, weights), trips
    return jax.jit(jax.value_and_grad(f, argnums=argnums, has_aux=True))


def _reference(function, *args, x64=True):
    """(trip count, (value, gradients)) of an _unrolled_reference."""
    with jax.enable_x64(x64):
        (value, trips), grads = function(*map(jnp.asarray, args))
    assert int(trips) <= MAX_TRIPS
    return int(trips), (value, grads)


def _close(got, expected, rtol):
    got, expected = jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(expected)
    assert len(got) == len(expected)
    for g, e in zip(got, expected):
        assert np.shape(g) == np.shape(e)
        np.testing.assert_allclose(np.asarray(g), np.asarray(e), rtol=rtol, atol=rtol * 1e-3)


# ---- one tensor: x <- 0.7 x + 0.05 sin x while |x|^2 > eps --------------------------------------

def test_traced_condition_loop_forward_is_one_compilation():
    mod = loop_module(8, "float64")
    run = rl.compile(mod, backend="jax")
    rng = np.random.default_rng(5)
    for scale in (1e-3, 0.02, 0.5, 1.0, 30.0, 1e4):          # 0 to about 35 iterations
        x = rng.normal(size=8) * scale
        np.testing.assert_allclose(run(x), rl.evaluate(mod, x), rtol=1e-12)
    assert run.trace_count == 1 + run.growths


def _loop_inputs(dtype):
    # trip counts 0, 1, 2 and many (up to about 40), one compilation for all of them
    rng = np.random.default_rng(7)
    xs = [np.full(8, 0.005), np.full(8, 0.0135), np.full(8, 0.016)]
    xs += [rng.normal(size=8) * s for s in (0.3, 2.0, 40.0, 1e4)]
    return [x.astype(dtype) for x in xs]


@pytest.mark.parametrize("dtype,rtol", [("float64", 1e-10), ("float32", 2e-4)])
def test_traced_condition_loop_gradient_is_one_compilation_for_every_trip_count(dtype, rtol):
    f = loop_module(8, dtype, summed=True)
    vg = rl.value_and_grad(f)
    run = rl.compile(vg, backend="jax")
    eps = np.dtype(dtype).type(EPS)
    reference = _unrolled_reference(loop_step_jax, lambda v: jnp.sum(v * v) > eps,
                                    lambda final, x, w: jnp.sum(final[0]), 1, 0)
    trips = []
    for x in _loop_inputs(dtype):
        n, expected = _reference(reference, x, x64=dtype == "float64")
        trips.append(n)
        got = run(x)
        _close(got, (expected[0], (expected[1],)), rtol)
        _close(got, rl.evaluate(vg, x), rtol)
    assert trips[:3] == [0, 1, 2] and max(trips) > 30
    assert run.trace_count == 1 + run.growths


def test_the_halving_loop_gradient_is_a_loop_too():
    # the traced-condition loop of test_jax_dynamic.py (HALVE), whose gradient was pinned as
    # a CompileError there: d sum(x / 2^n) / dx = 2^-n for the input's trip count n
    mod = rl.infer_type(rl.parse("""
def @loop(%x: Tensor[(3), float32], %eps: float32) -> Tensor[(3), float32] {
  if (sum(%x * %x) > %eps) { @loop(%x * 0.5f, %eps) } else { %x }
}
def @main(%x: Tensor[(3), float32]) -> float32 { sum(@loop(%x, 0.01f)) }
"""))
    run = rl.compile(rl.grad(mod), backend="jax")
    trips = []
    for scale in (0.001, 0.1, 1.0, 1e6):
        n = _trips(lambda v: v * 0.5, lambda v: jnp.sum(v * v) > 0.01,
                   np.full(3, scale, np.float32))
        trips.append(n)
        np.testing.assert_allclose(run(np.full(3, scale, np.float32)), [2.0 ** -n] * 3)
    assert trips == [0, 1, 5, 25]
    assert run.trace_count == 1 + run.growths


# ---- two tensors, and weights -------------------------------------------------------------------

TWO = """
def @loop(%x: Tensor[(6), float64], %y: Tensor[(6), float64])
    -> (Tensor[(6), float64], Tensor[(6), float64]) {
  if (sum(%x * %x) + sum(%y * %y) > 0.001f64) {
    @loop(%x * 0.7f64 + sin(%y) * 0.05f64, %y * 0.8f64 + %x * 0.1f64)
  } else { (%x, %y) }
}
def @main(%x: Tensor[(6), float64], %y: Tensor[(6), float64]) -> float64 {
  let %r = @loop(%x, %y);
  sum(%r.0 * %r.1) + sum(%r.1)
}
"""


def _two_step(x, y):
    return x * 0.7 + jnp.sin(y) * 0.05, y * 0.8 + x * 0.1


def test_a_loop_carrying_two_tensors_gradient_one_compilation():
    mod = rl.infer_type(rl.parse(TWO))
    vg = rl.value_and_grad(mod, argnums=(0, 1))
    run = rl.compile(vg, backend="jax")
    rng = np.random.default_rng(3)
    trips = []
    reference = _unrolled_reference(
        _two_step, lambda a, b: jnp.sum(a * a) + jnp.sum(b * b) > 0.001,
        lambda final, initial, w: jnp.sum(final[0] * final[1]) + jnp.sum(final[1]), 2, (0, 1))
    for scale in (0.001, 0.3, 5.0, 300.0):
        x, y = rng.normal(size=6) * scale, rng.normal(size=6) * scale
        n, expected = _reference(reference, x, y)
        trips.append(n)
        got = run(x, y)
        _close(got, expected, 1e-10)
        _close(got, rl.evaluate(vg, x, y), 1e-10)
    assert trips[0] == 0 and max(trips) > 20
    assert run.trace_count == 1 + run.growths


WEIGHTED = """
def @loop(%x: Tensor[(5), float64], %w: Tensor[(5), float64], %eps: float64)
    -> Tensor[(5), float64] {
  if (sum(%x * %x) > %eps) { @loop(%x * %w + sin(%x) * 0.05f64, %w, %eps) } else { %x }
}
def @main(%x: Tensor[(5), float64], %w: Tensor[(5), float64]) -> float64 {
  sum(@loop(%x, %w, 0.001f64) * %w)
}
"""

MATRIX = """
def @loop(%x: Tensor[(4), float64], %W: Tensor[(4, 4), float64]) -> Tensor[(4), float64] {
  if (sum(%x * %x) > 0.001f64) { @loop(%x * 0.5f64 + tanh(matmul(%W, %x)) * 0.3f64, %W) }
  else { %x }
}
def @main(%x: Tensor[(4), float64], %W: Tensor[(4, 4), float64]) -> float64 {
  sum(@loop(%x, %W) * %x)
}
"""


@pytest.mark.parametrize("text,step,loss,weight", [
    (WEIGHTED, lambda x, w: x * w + jnp.sin(x) * 0.05, lambda y, x, w: jnp.sum(y * w),
     lambda rng: rng.uniform(0.5, 0.8, size=5)),
    (MATRIX, lambda x, W: x * 0.5 + jnp.tanh(W @ x) * 0.3, lambda y, x, W: jnp.sum(y * x),
     lambda rng: rng.normal(size=(4, 4)) / 4)], ids=["vector", "matrix"])
def test_a_loop_whose_step_uses_a_weight_gradient_for_the_weight_too(text, step, loss, weight):
    mod = rl.infer_type(rl.parse(text))
    vg = rl.value_and_grad(mod, argnums=(0, 1))
    run = rl.compile(vg, backend="jax")
    rng = np.random.default_rng(11)
    w = weight(rng)
    n_x = w.shape[0]
    reference = _unrolled_reference(step, lambda v: jnp.sum(v * v) > 0.001,
                                    lambda final, x0, w0: loss(final[0], x0[0], w0[0]), 1, (0, 1))
    trips = []
    for scale in (0.001, 0.2, 3.0, 100.0):
        x = rng.normal(size=n_x) * scale
        n, expected = _reference(reference, x, w)
        trips.append(n)
        got = run(x, w)
        _close(got, expected, 1e-10)
        _close(got, rl.evaluate(vg, x, w), 1e-10)
    assert trips[0] == 0 and max(trips) > 10
    assert run.trace_count == 1 + run.growths


# ---- capacity and what is not a loop yet ----------------------------------------------------

def test_a_gradient_loop_past_its_step_capacity_is_an_evaluation_error():
    f = loop_module(8, "float64", summed=True)
    run = rl.compile(rl.grad(f), backend="jax", capacity={"steps": 10})
    x = np.full(8, 0.05)                                          # 7 iterations
    np.testing.assert_allclose(run(x), rl.evaluate(rl.grad(f), x), rtol=1e-12)
    with pytest.raises(EvaluationError, match=r"@loop\w* ran more than 10 iterations, the rows "
                                              r"its loop records .*capacity=\{\"steps\""):
        run(np.full(8, 30.0))                                   # 27 iterations
    assert run.trace_count == 1 + run.growths
    # the bound is exact: 7 iterations fit in 7 steps, not in 6
    x = np.full(8, 0.05)
    np.testing.assert_allclose(rl.compile(rl.grad(f), backend="jax", capacity={"steps": 7})(x),
                               rl.evaluate(rl.grad(f), x), rtol=1e-12)
    with pytest.raises(EvaluationError, match=r"ran more than 6 iterations"):
        rl.compile(rl.grad(f), backend="jax", capacity={"steps": 6})(x)


def test_a_loop_passing_references_of_different_origins_is_a_compile_error():
    # the next %r is a reference made in the iteration or the one it was given, chosen by a
    # traced condition: one argument position holds a reference made before the loop in some
    # iterations and one of the loop's pool in others
    mod = rl.infer_type(rl.parse("""
def @loop(%x: Tensor[(3), float64], %r: ref(Tensor[(3), float64])) -> Tensor[(3), float64] {
  if (sum(%x * %x) > 0.01f64) {
    let %s = ref(%x);
    @loop(%x * 0.5f64, if (sum(%x) > 0f64) { %s } else { %r })
  } else { !%r }
}
def @main(%x: Tensor[(3), float64]) -> Tensor[(3), float64] { @loop(%x, ref(%x)) }
"""))
    with pytest.raises(CompileError, match=r"@loop: an iteration of its loop leaves a value "
                       r"chosen by a traced condition \(a reference made before the loop, a "
                       r"reference made in the loop\) as its argument %r for the next "
                       r"iteration"):
        rl.compile(mod, backend="jax")(np.ones(3))


def test_the_loop_gradient_under_vmap_one_trace():
    # inputs of 0, 3, 16 and 25 iterations in one batch: the while loop runs until every
    # example has stopped (jax selects the carry per example), the backward chain per example
    f = loop_module(4, "float64", summed=True)
    g = rl.grad(f)
    run = rl.compile(rl.vmap(g), backend="jax")
    xs = np.array([[0.001] * 4, [0.02] * 4, [1.0] * 4, [30.0] * 4])
    _close(run(xs), np.stack([rl.evaluate(g, x) for x in xs]), 1e-12)
    assert run.trace_count == 1


def test_the_loops_hessian_is_one_compilation_for_every_trip_count():
    # rl.hessian of a program that loops is forward over reverse (the jvp of the gradient's
    # loop is a loop again); checked against jax.hessian of the loop unrolled for the input's
    # trip count (0, 1, 2 and many)
    f = loop_module(4, "float64", summed=True)
    run = rl.compile(rl.hessian(f), backend="jax")
    trips = []
    for x in (np.full(4, 0.01), np.full(4, 0.016), np.full(4, 0.025),
              np.array([0.3, -0.2, 0.5, 0.1]), np.array([3.0, -1.0, 0.2, 2.0])):
        n = _trips(loop_step_jax, lambda v: jnp.sum(v * v) > EPS, x)
        trips.append(n)

        def unrolled(v, n=n):
            for _ in range(n):
                v = loop_step_jax(v)
            return jnp.sum(v)
        with jax.enable_x64(True):
            expected = jax.hessian(unrolled)(jnp.asarray(x))
        _close(run(x), expected, 1e-10)
    assert trips[:3] == [0, 1, 2] and max(trips) > 10
    assert run.trace_count == 1 + run.growths


ACCUMULATE = """
def @loop(%x: Tensor[(3), float64], %acc: ref(Tensor[(3), float64])) -> Tensor[(3), float64] {
  if (sum(%x * %x) > 0.01f64) { %acc := !%acc + sin(%x); @loop(%x * 0.5f64, %acc) } else { %x }
}
def @main(%x: Tensor[(3), float64]) -> float64 {
  let %a = ref(zeros_like(%x)); let %y = @loop(%x, %a); sum(%y + !%a * %x)
}
"""


def test_a_loop_accumulating_into_an_outer_reference_forward_is_a_loop_gradient_not_yet():
    # forward: the reference is passed on unchanged and its tensor content carried. Its
    # gradient writes (value, adjoint reference) pairs to the lifted reference, which the
    # peeled iteration leaves joined with the caller's pair: a CompileError naming @loop_ad
    mod = rl.infer_type(rl.parse(ACCUMULATE))
    run = rl.compile(mod, backend="jax")
    for scale in (0.01, 0.3, 100.0):
        x = np.array([1.0, -2.0, 0.5]) * scale
        np.testing.assert_allclose(run(x), rl.evaluate(mod, x), rtol=1e-12)
    assert run.trace_count == 1 + run.growths
    with pytest.raises(CompileError, match=r"@loop_ad: its loop writes a tuple of 2 holding "
                                           r"references made in the loop to a reference made "
                                           r"before it"):
        rl.compile(rl.grad(mod), backend="jax")(np.ones(3))


def test_the_gradient_of_a_loop_on_a_constant_counter_unrolls_as_before():
    # the condition is a trace-time constant (a counter the caller passes as a constant):
    # each level is unrolled, as before, though the loop's tensor argument is traced
    mod = rl.infer_type(rl.parse("""
def @loop(%x: Tensor[(3), float64], %n: int32) -> Tensor[(3), float64] {
  if (%n > 0) { @loop(sin(%x) * 0.9f64, %n - 1) } else { %x }
}
def @main(%x: Tensor[(3), float64]) -> float64 { sum(@loop(%x, 5)) }
"""))
    g = rl.grad(mod)
    run = rl.compile(g, backend="jax")
    x = np.array([1.0, -2.0, 0.5])
    np.testing.assert_allclose(run(x), rl.evaluate(g, x), rtol=1e-12)
    (entry,) = run._cache.values()
    with jax.enable_x64(True):
        text = str(entry.jitted.trace(*run._flatten_args((x,))[0]).jaxpr)
    assert "while" not in text


# ---- capacity that grows by itself (issue 26) -------------------------------------------------

def test_a_loops_rows_grow_by_doubling_and_explain_counts_the_retraces():
    # RK4 of benchmarks/dynamic.py: the rows start at 16 (a 10-step run fits), a 40-step run
    # doubles them twice (two retraces, counted), a shorter run after it needs none; an
    # explicit capacity stays fixed (the EvaluationError of the test above)
    vg = rl.value_and_grad(rk4_module(4))
    run = rl.compile(vg, backend="jax")
    x = np.linspace(-1.0, 1.0, 4)
    for steps, growths in ((10, 0), (40, 2), (3, 2), (64, 3)):
        got, expected = run(x, np.int32(steps)), rl.evaluate(vg, x, np.int32(steps))
        _close(got, expected, 1e-10)
        assert (run.growths, run.trace_count) == (growths, 1 + growths)
    assert run.row_steps == 128
    assert "3 time(s); each doubled them and traced again (now 128 steps" in run.explain()
    fixed = rl.compile(vg, backend="jax", capacity={"steps": 16})
    with pytest.raises(EvaluationError, match=r"ran more than 16 iterations"):
        fixed(x, np.int32(40))
    assert fixed.growths == 0


def _primitives(jaxpr, counts):
    """How many equations of each primitive a jaxpr holds, its sub-jaxprs' (loop bodies,
    branches) included: a loop, not a recursion."""
    from jax.extend import core as jcore
    stack = [jaxpr]
    while stack:
        j = stack.pop()
        for e in j.eqns:
            counts[e.primitive.name] = counts.get(e.primitive.name, 0) + 1
            for v in e.params.values():
                for sub in (v if isinstance(v, (tuple, list)) else [v]):
                    if isinstance(sub, jcore.ClosedJaxpr):
                        stack.append(sub.jaxpr)
                    elif isinstance(sub, jcore.Jaxpr):
                        stack.append(sub)
    return counts


def test_the_peeled_iterations_backward_step_reads_its_slots_at_once():
    # the backward pass of the peeled first iteration (the family's row -1) runs after the
    # backward loop on the pool's last row: its slots are read into cells in one gather and
    # written back after it, as a backward step does; before, each of its 30-odd reads of the
    # pool was a dynamic slice of a table just updated, and XLA copied the whole table per
    # update (RK4's gradient at 100 steps: 3.2x jax.jit's run time, now 1.0x)
    vg = rl.value_and_grad(rk4_module(3))
    run = rl.compile(vg, backend="jax", capacity={"steps": 6})
    x, steps = np.linspace(-1.0, 1.0, 3), np.int32(4)
    _close(run(x, steps), rl.evaluate(vg, x, steps), 1e-10)
    _close(run(x, np.int32(0)), rl.evaluate(vg, x, np.int32(0)), 1e-10)
    (entry,) = run._cache.values()
    with jax.enable_x64(True):
        counts = _primitives(entry.jitted.trace(x, steps).jaxpr.jaxpr, {})
    assert counts["while"] == 2
    assert counts["dynamic_slice"] <= 10, counts


# ---- state-keeping iterations (issue 26) -------------------------------------------------------

@pytest.mark.parametrize("keep", ["two calls", "a joined argument"])
def test_a_descent_that_keeps_x_when_a_step_fails_has_a_compiled_gradient(keep):
    # the step-halving descent of benchmarks/dynamic.py: an iteration whose step fails passes
    # its (x, %rx) on, so the loop's %rx is the caller's reference in some iterations and one
    # made in the loop in others (the caller's is adopted as a slot of the loop's pool); x is
    # also used after the loop, so the caller's adjoint gets a sum from both sides
    text = HALVING_TEXT
    if keep == "a joined argument":
        text = text.replace(
            "if (@f(%y) < @f(%x)) { @descend(%y, %s, %k + 1) } else { @descend(%x, %s * 0.5f64, "
            "%k + 1) }",
            "let %ok = @f(%y) < @f(%x); "
            "@descend(if (%ok) { %y } else { %x }, if (%ok) { %s } else { %s * 0.5f64 }, %k + 1)")
        assert text != HALVING_TEXT
    vg = rl.value_and_grad(rl.parse(text))
    # rows for 64 steps (the default 16 would double twice on the first input: two more
    # traces of the loop, 3 s each; the growth is the test above's)
    run = rl.compile(vg, backend="jax", capacity={"steps": 64})
    rng = np.random.default_rng(11)
    for x in [np.array([3.0, -2.0]), np.array([1.0, 1.0])] + [rng.normal(size=2) * 4
                                                             for _ in range(3)]:
        _close(run(x), rl.evaluate(vg, x), 1e-9)
    assert run.trace_count == 1 and run.growths == 0
