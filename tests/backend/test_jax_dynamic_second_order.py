"""Loops whose references hold references (issue 26, "its gradients, of any order"), on the
jax backend: the tail-loop rule takes types of tensors, tuples and references to such values
at any depth (dynamic_rule._loop_type), and a reference made in an iteration may hold
references made in the loop (a pool's content with a slot column: dynamic_rows.Pool.store /
load). A user loop making `ref((x, ref(x)))` compiles as ONE loop, value and gradient equal to
the interpreter's at several trip counts; reverse over reverse through a loop (the vjp of a
gradient's loop) is still a CompileError naming it, raised at the first trace (it no longer
unrolls until the trace's bounds)."""
import os
import sys

import numpy as np
import pytest

import relayish as rl
from relayish.errors import CompileError

sys.path.insert(0, os.path.join(os.path.dirname(__file__), os.pardir, os.pardir, "benchmarks"))
from dynamic import loop_module  # noqa: E402

PAIRS = """
def @walk(%x: Tensor[(3), float64], %b: ref((Tensor[(3), float64], ref(Tensor[(3), float64]))))
    -> ref((Tensor[(3), float64], ref(Tensor[(3), float64]))) {
  if (sum(%x * %x) > 0.01f64) {
    let %p = !%b;
    let %a = ref(!%p.1 + %x);
    let %c = ref((%p.0 * 0.5f64 + %x, %a));
    @walk(%x * 0.5f64, %c)
  } else { %b }
}
def @main(%x: Tensor[(3), float64]) -> float64 {
  let %r = ref(zeros_like(%x));
  let %b = @walk(%x, ref((%x, %r)));
  let %p = !%b;
  sum(%p.0 * %p.0 + !%p.1 * 2f64)
}
"""

# 0, 1, 2 and many trips (halving x until |x|^2 <= 0.01)
INPUTS = [np.full(3, 0.01), np.full(3, 0.1), np.array([0.2, 0.15, -0.1]),
          np.array([1.0, -2.0, 0.5]), np.array([10.0, 3.0, 1.0])]


def _trips(x):
    n = 0
    while np.sum(x * x) > 0.01:
        x, n = x * 0.5, n + 1
    return n


def test_a_loop_making_references_that_hold_references_is_one_loop_value_and_gradient():
    assert [_trips(x) for x in INPUTS] == [0, 1, 2, 5, 7]
    mod = rl.infer_type(rl.parse(PAIRS))
    for prog in (mod, rl.grad(mod)):
        run = rl.compile(prog, backend="jax")
        for x in INPUTS:
            np.testing.assert_allclose(np.asarray(run(x)), rl.evaluate(prog, x), rtol=1e-9,
                                       atol=1e-12)
        assert run.trace_count == 1 + run.growths
    assert "@walk: a while loop" in rl.compile(mod, backend="jax").explain()


def test_reverse_over_reverse_through_the_loop_is_a_compile_error_naming_it():
    # the vjp of the gradient differentiates the gradient's loop again: its forward loop
    # compiles (adjoint references holding (x, %rx) pairs are pool slots holding slots), but
    # the program stores a reference made after the loop in one of them, and the first
    # gradient's backward chain would have to record rows itself; rl.hessian takes forward
    # over reverse for such programs (test_jax_dynamic_tail.py)
    from relayish.ad.api import hvp_reverse
    f = loop_module(4, "float64", summed=True)
    run = rl.compile(hvp_reverse(f), backend="jax")
    with pytest.raises(CompileError, match=r"@loop\w*_ad\w*_ad\w*: a reference made outside "
                                           r"its loop(.|\n)*reverse over reverse(.|\n)*A second "
                                           r"derivative taken forward over reverse does "
                                           r"\(rl.hessian, rl.hvp, rl.derivative\(f, 2\)\)"):
        run(np.full(4, 0.05), np.ones(4))
