"""Reverse mode on hypothesis-generated programs (tests/strategies.py): tensors, tuples, closures,
lets, ifs, refs, the prelude's ADTs and globals. The gradient passes the finite-difference check,
prints and re-parses, type-checks, and can be differentiated again."""
import numpy as np
from hypothesis import given, settings

import relayish as rl
from adcheck import check_fd, direction
from strategies import differentiable_programs


@settings(max_examples=20, deadline=None)
@given(differentiable_programs())
def test_gradient_matches_finite_differences(prog):
    mod, args = prog
    check_fd(mod, list(args), rtol=1e-5, atol=1e-6)


@settings(max_examples=15, deadline=None)
@given(differentiable_programs(max_depth=2))
def test_gradient_prints_parses_and_typechecks(prog):
    g = rl.gradient(prog.mod)
    again = rl.parse(rl.astext(g))
    rl.assert_structural_equal(again, g)
    rl.infer_type(again)
    a = rl.evaluate(g, *prog.args)
    b = rl.evaluate(again, *prog.args)
    assert np.allclose(np.asarray(a[0]), np.asarray(b[0]))


@settings(max_examples=15, deadline=None)
@given(differentiable_programs(max_depth=2))
def test_second_order_matches_finite_differences(prog):
    """x -> <grad f(x), d> is differentiated again and checked against finite differences."""
    mod, args = prog
    rng = np.random.default_rng(1)
    ds = [direction(a, rng) for a in args]
    g = rl.gradient(mod)
    # the directional derivative as a relayish program: sum_i <grad_i, d_i> over float leaves
    g["grad_main"] = g["main"]
    params = [rl.var(f"y{i}", type=t) for i, t in enumerate(prog.param_types)]
    total = None
    grads = rl.TupleGetItem(rl.GlobalVar("grad_main")(*params), 1)
    for i, (t, d) in enumerate(zip(prog.param_types, ds)):
        if isinstance(t, rl.TensorType):
            term = rl.sum(rl.TupleGetItem(grads, i) * rl.const(np.asarray(d)))
            total = term if total is None else total + term
    if total is None:
        return
    g["main"] = rl.Function(params, total)
    check_fd(g, list(args), rtol=1e-4, atol=1e-5)
