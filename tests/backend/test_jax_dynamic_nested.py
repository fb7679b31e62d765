"""Loops inside loops and loops under traced ifs on the jax backend (issue 26, priority 1):
a traced-condition tail loop (relayish/backend/jax/dynamic_tail.py) whose call sits in another
loop's body, under a traced if, or in a fold's clause is a nested lax.while_loop; the body of a
loop is traced as a function of its own, so a gradient's loop (one that records rows for a
backward pass) inside a plain loop's body compiles too -- the shape of GradBench's saddle and
particle values (gradient descent whose every step differentiates through an inner descent).
Each program is compiled once and checked against the interpreter to 1e-9 on inputs with
different trip counts, inner and outer. Run-time checks (a loop past its step capacity) inside
a nested loop or a branch reach the host as EvaluationErrors naming the inner function.

The gradient of each (a loop recording rows inside another one that records rows, under a
traced if, or in a fold's clause) compiles too: the inner loop is replayed in the backward pass
(relayish/backend/jax/dynamic_nest.py); one compilation for every trip count, equal to the
interpreter's gradient to 1e-9."""
import os
import sys

import numpy as np
import pytest

import relayish as rl
from relayish.errors import CompileError, EvaluationError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "benchmarks"))
from dynamic import NESTED_TEXT  # noqa: E402

# Newton's method for z^3 + z = a inside gradient descent on x (a step size from the root);
# benchmarks/dynamic.py times the same program, so the two cannot drift
NEWTON = NESTED_TEXT

NEWTON_INPUTS = [np.array([0.01, 0.0, 0.02]), np.array([0.6, 0.3, 0.2]),
                 np.array([1.0, 2.0, -0.5])]


def _outer_trips(x):
    """How many outer iterations the interpreter takes (the inputs cover 0, few and many)."""
    k, x = 0, np.asarray(x, float)
    while True:
        a = float(np.sum(x * x))
        z = 0.0
        for _ in range(50):
            f = z ** 3 + z - a
            if abs(f) <= 1e-12:
                break
            z -= f / (3 * z * z + 1)
        if not (k < 40 and z > 0.1):
            return k
        x, k = x - 0.3 * z * x, k + 1


def test_a_newton_solve_inside_a_gradient_loop_is_one_compilation():
    mod = rl.parse(NEWTON)
    run = rl.compile(mod, backend="jax")
    trips = [_outer_trips(x) for x in NEWTON_INPUTS]
    assert trips == [0, 13, 16]
    for x in NEWTON_INPUTS:
        np.testing.assert_allclose(run(x), rl.evaluate(mod, x), rtol=1e-9)
    assert run.trace_count == 1


def _close(got, expected):
    got, expected = np.asarray(got), np.asarray(expected)
    assert got.shape == expected.shape
    np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)


def test_the_gradient_of_a_newton_solve_inside_a_gradient_loop_is_one_compilation():
    # 0, 13 and 16 outer iterations, each running Newton to convergence (its own trip count):
    # one program (a capacity above the outer trips: no doubling of the rows)
    mod = rl.value_and_grad(rl.parse(NEWTON))
    run = rl.compile(mod, backend="jax", capacity={"steps": 32})
    for x in NEWTON_INPUTS:
        (value, grad), (v, g) = run(x), rl.evaluate(mod, x)
        _close(value, v)
        _close(grad, g)
    assert run.trace_count == 1
    # and it is the derivative: central differences along a direction, at the 13-trip input
    x, d, h = NEWTON_INPUTS[1], np.array([0.3, -0.2, 0.5]), 1e-6
    f = rl.compile(rl.parse(NEWTON), backend="jax")
    slope = (f(x + h * d) - f(x - h * d)) / (2 * h)
    np.testing.assert_allclose(np.dot(run(x)[1], d), slope, rtol=1e-6)


@pytest.mark.slow
def test_a_nested_gradients_rows_grow_by_themselves():
    # without a capacity the outer loop's rows start at 16 and double for the 16-trip input
    mod = rl.grad(rl.parse(NEWTON))
    run = rl.compile(mod, backend="jax")
    for x in NEWTON_INPUTS:
        _close(run(x), rl.evaluate(mod, x))
    assert run.growths == 1 and run.trace_count == 2


# a loop in each branch of a traced if (and a check of its capacity in each)
BRANCHES = """
def @shrink(%x: Tensor[(3), float64]) -> Tensor[(3), float64] {
  if (sum(%x * %x) > 0.001f64) { @shrink(%x * 0.7f64 + sin(%x) * 0.05f64) } else { %x }
}
def @grow(%x: Tensor[(3), float64], %n: int32) -> Tensor[(3), float64] {
  if (sum(%x * %x) < 100f64) { @grow(%x * 1.5f64 + 0.1f64, %n + 1) } else { %x * cast(%n, dtype="float64") }
}
def @main(%x: Tensor[(3), float64]) -> float64 {
  if (sum(%x) > 0f64) { sum(@shrink(%x)) } else { sum(@grow(%x, 0)) }
}
"""


def test_loops_under_a_traced_if_are_one_compilation():
    mod = rl.parse(BRANCHES)
    run = rl.compile(mod, backend="jax")
    for x in ([0.5, 0.2, 0.1], [30.0, -1.0, 2.0], [-0.5, 0.2, 0.1], [-30.0, 40.0, -20.0]):
        x = np.array(x)
        np.testing.assert_allclose(run(x), rl.evaluate(mod, x), rtol=1e-9)
    assert run.trace_count == 1


def test_the_gradient_of_loops_under_a_traced_if_is_one_compilation():
    mod = rl.grad(rl.parse(BRANCHES))
    run = rl.compile(mod, backend="jax", capacity={"steps": 64})
    for x in ([0.5, 0.2, 0.1], [30.0, -1.0, 2.0], [-0.5, 0.2, 0.1], [-30.0, 40.0, -20.0],
              [1e-3, 0.0, 1e-3]):
        x = np.array(x)
        _close(run(x), rl.evaluate(mod, x))
    assert run.trace_count == 1


def test_a_nested_loop_past_its_capacity_is_an_evaluation_error_naming_it():
    # the check of @grow's capacity is raised inside a branch, inside the program's trace:
    # only inputs taking that branch and running past it fail
    run = rl.compile(rl.parse(BRANCHES), backend="jax", capacity={"steps": 6})
    assert np.isfinite(run(np.array([-3.0, 2.0, 0.5])))        # 3 iterations of @grow
    assert np.isfinite(run(np.array([0.1, 0.05, 0.02])))       # 4 of @shrink
    with pytest.raises(EvaluationError, match=r"@grow ran more than 6 iterations"):
        run(np.array([-0.01, 0.0, 0.0]))
    nested = rl.compile(rl.parse(NEWTON), backend="jax", capacity={"steps": 3})
    with pytest.raises(EvaluationError, match=r"@newton ran more than 3 iterations"):
        nested(NEWTON_INPUTS[1])


# GradBench's saddle shape: gradient descent on y whose every step is the gradient (reverse AD,
# through an inner descent loop) of F(y) = f(argmin_x f(x, y), y)
INNER = """
def @argmin(%x: Tensor[(2), float64], %y: Tensor[(2), float64], %k: int32)
    -> Tensor[(2), float64] {
  let %g = 2f64 * %x - %y + 0.1f64 * sin(%x);
  if (logical_and(sum(%g * %g) > 1e-20f64, %k < 1000)) { @argmin(%x - 0.3f64 * %g, %y, %k + 1) }
  else { %x }
}
def @main(%y: Tensor[(2), float64]) -> float64 {
  let %x = @argmin(zeros(shape=[2], dtype="float64"), %y, 0);
  sum(%x * %x) - sum(%x * %y) + 0.5f64 * sum(%y * %y * %y * %y) - sum(%y)
}
"""
OUTER = """
def @descend(%y: Tensor[(2), float64], %k: int32) -> Tensor[(2), float64] {
  let %g = @dF(%y);
  if (logical_and(sum(%g * %g) > 1e-18f64, %k < 200)) { @descend(%y - 0.2f64 * %g, %k + 1) }
  else { %y }
}
def @main(%y: Tensor[(2), float64]) -> Tensor[(2), float64] { @descend(%y, 0) }
"""


def saddle_module():
    """The outer descent calling @dF, the gradient program of INNER's @main."""
    inner = rl.astext(rl.grad(rl.parse(INNER)))
    return rl.parse(inner.replace("@main(", "@dF(") + OUTER)


def test_descent_on_the_gradient_of_an_inner_descent_is_one_compilation():
    mod = saddle_module()
    run = rl.compile(mod, backend="jax")
    for y in ([0.3, -0.2], [1.5, 2.0], [-1.0, 0.05]):
        y = np.array(y)
        got, expected = run(y), rl.evaluate(mod, y)
        np.testing.assert_allclose(got, expected, rtol=1e-9, atol=1e-12)
        # the point it reached: dF(y) = 0 there (F is smooth, so descent converged)
        assert np.max(np.abs(rl.evaluate(rl.grad(rl.parse(INNER)), got))) < 1e-8
    # one trace, and one per doubling of the inner loop's rows (its check of its capacity
    # comes out of the outer loop as a fault the outer loop carries)
    assert run.growths >= 1 and run.trace_count == 1 + run.growths


# a loop in a fold's clause: every node of the list runs a traced-condition loop
FOLD = """
type List[a] { Cons(a, List[a]), Nil }
def @shrink(%x: Tensor[(4), float64]) -> Tensor[(4), float64] {
  if (sum(%x * %x) > 0.001f64) { @shrink(%x * 0.7f64 + sin(%x) * 0.05f64) } else { %x }
}
def @read(%W: Tensor[(4, 4), float64], %xs: List[Tensor[(4), float64]]) -> Tensor[(4), float64] {
  match (%xs) {
    Nil => zeros(shape=[4], dtype="float64"),
    Cons(%x, %rest) => { let %h = @read(%W, %rest); @shrink(tanh(matmul(%W, %h) + %x) * 3f64) }
  }
}
def @main(%W: Tensor[(4, 4), float64], %xs: List[Tensor[(4), float64]]) -> float64 {
  sum(@read(%W, %xs))
}
"""


def test_a_loop_in_a_folds_clause_is_one_compilation_for_every_list():
    mod = rl.parse(FOLD)
    run = rl.compile(mod, backend="jax", capacity={"nodes": 16})
    rng = np.random.default_rng(3)
    W = rng.normal(size=(4, 4))
    for n in (0, 3, 9):
        xs = rl.list_value(mod, list(rng.normal(size=(n, 4))))
        np.testing.assert_allclose(run(W, xs), rl.evaluate(mod, W, xs), rtol=1e-9, atol=1e-15)
    assert run.trace_count == 1 and sorted(run.node_tables()) == [1]


def test_the_gradient_of_a_loop_in_a_folds_clause_is_one_compilation_for_every_list():
    # every node's backward step replays its @shrink loop (inside the fold's backward loop)
    mod = rl.parse(FOLD)
    grad = rl.grad(mod, argnums=(0, 1))
    run = rl.compile(grad, backend="jax", capacity={"nodes": 16, "steps": 64})
    rng = np.random.default_rng(4)
    W = rng.normal(size=(4, 4))
    for n in (0, 1, 4, 9):
        xs = rl.list_value(mod, list(rng.normal(size=(n, 4))))
        (gW, gxs), (eW, exs) = run(W, xs), rl.evaluate(grad, W, xs)
        _close(gW, eW)
        assert len(_list(gxs)) == n == len(_list(exs))
        for a, b in zip(_list(gxs), _list(exs)):
            _close(a, b)
    assert run.trace_count == 1


def _list(v):
    """The elements of a List value, in order (a loop)."""
    out = []
    while isinstance(v, rl.ConstructorValue) and v.fields:
        out.append(v.fields[0])
        v = v.fields[1]
    return out


# three loops deep: a descent whose every step runs a descent whose every step runs Newton
THREE = """def @newton(%z: float64, %a: float64, %n: int32) -> float64 {
  let %f = %z * %z * %z + %z - %a;
  if (logical_and(abs(%f) > 1e-12f64, %n < 50)) { @newton(%z - %f / (3f64 * %z * %z + 1f64), %a, %n + 1) } else { %z }
}
def @mid(%y: Tensor[(3), float64], %k: int32) -> Tensor[(3), float64] {
  let %s = @newton(0f64, sum(%y * %y), 0);
  if (logical_and(%k < 5, %s > 0.3f64)) { @mid(%y * (1f64 - 0.2f64 * %s), %k + 1) } else { %y }
}
def @outer(%x: Tensor[(3), float64], %k: int32) -> Tensor[(3), float64] {
  let %y = @mid(%x, 0);
  if (logical_and(%k < 6, sum(%y * %y) > 0.05f64)) { @outer(%x * 0.7f64 + 0.1f64 * sin(%y), %k + 1) } else { %x }
}
def @main(%x: Tensor[(3), float64]) -> float64 { sum(@outer(%x, 0)) }
"""


@pytest.mark.slow
def test_the_gradient_of_three_nested_loops_is_one_compilation():
    # the middle loop's replay replays the innermost one inside its own backward step
    mod = rl.grad(rl.parse(THREE))
    run = rl.compile(mod, backend="jax", capacity={"steps": 16})
    for x in ([0.1, 0.1, 0.0], [0.6, 0.3, 0.2], [1.0, 2.0, -0.5]):
        x = np.array(x)
        _close(run(x), rl.evaluate(mod, x))
    assert run.trace_count == 1
